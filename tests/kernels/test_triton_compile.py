"""The Triton MX kernels compile for a GPU, without one.

``--device cpu`` runs the kernels in the interpreter, which accepts code a compiled kernel
refuses (a global that is not a constexpr, an unsupported reshape). Here Triton's NVIDIA backend
lowers them to PTX for sm_90 and runs its bundled ``ptxas``: no GPU or driver is needed, but
the interpreter must be off, so this file runs itself in a subprocess without
``TRITON_INTERPRET``. The PTX is checked for the issue-5 arithmetic rule: no floating-point
arithmetic (the kernels work on integer bits; the one float instruction is the exact
int -> float32 conversion that reads an exponent), so no contraction, flushing or approximate
division can differ from the CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

#: (kernel, profile, element, input or consumer dtype, output dtype)
CASES = [
    ("quantize", "quark", "e2m1", "bfloat16", ""),
    ("quantize", "microxcaling", "e4m3fn", "float32", ""),
    ("quantize", "compressed-tensors", "e2m1", "float32", ""),
    ("dequantize", "triton", "e4m3fn", "float16", "float16"),
    ("dequantize", "compressed-tensors", "e2m1", "bfloat16", "float32"),
]
FLOAT_OPS = re.compile(r"^\s*((?:fma|mul|add|sub|div|rcp|ex2|lg2|max|min)\.[a-z0-9.]*f(?:16|32|64))",
                       re.MULTILINE)


def _float_ops(case: tuple[str, ...]) -> list[str]:
    """Compile one case for sm_90; the floating-point instructions of its PTX."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mxformats.formats import get_format
    from mxformats.kernels import mx_plan as mx_plan
    from mxformats.kernels.triton import mx

    kernel, profile, elem, dtype, out = case
    signature = {"table": "*i32", "rows": "i32", "n": "i32", "blocks_per_row": "i32"}
    if kernel == "quantize":
        plan = mx_plan.quantize_plan(profile, get_format(elem), dtype, 32)
        fn = mx._quantize_mx_kernel
        pointers = {"src": "*i32" if plan.source.bits == 32 else "*i16", "codes_out": "*u8",
                    "scales_out": "*u8", "elements": "*i32"}
        constants = {"ROWS": 16, "BLOCKS": 8, **mx.quantize_constants(plan)}
    else:
        dplan = mx_plan.dequantize_plan(profile, get_format(elem), dtype, out, 32)
        fn = mx._dequantize_mx_kernel
        pointers = {"codes": "*u8", "scales": "*u8",
                    "out": "*i32" if dplan.out.bits == 32 else "*i16"}
        constants = {"ROWS": 4, "COLS": 1024, **mx.dequantize_constants(dplan)}
    signature = {**pointers, **signature, **dict.fromkeys(constants, "constexpr")}
    # the kernel's own parameter order
    order = list(fn.arg_names)
    source = ASTSource(fn, {name: signature[name] for name in order}, constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"enable_fp_fusion": False})
    return FLOAT_OPS.findall(compiled.asm["ptx"])


@pytest.fixture(scope="module")
def compiled(device: str) -> dict[str, Any]:
    from conftest import requires

    requires("triton")
    requires("torch")
    if device != "cpu":
        pytest.skip("--device cuda compiles and runs the kernels in test_kernels.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("case", CASES, ids=["-".join(filter(None, c)) for c in CASES])
def test_mx_kernel_compiles_without_float_arithmetic(case: tuple[str, ...],
                                                     compiled: dict[str, Any]) -> None:
    assert compiled["-".join(case)] == []


if __name__ == "__main__":
    print(json.dumps({"-".join(case): _float_ops(case) for case in CASES}))
