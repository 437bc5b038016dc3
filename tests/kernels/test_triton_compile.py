"""The Triton MX kernels compile for a GPU, without one.

``--device cpu`` runs the kernels in the interpreter, which accepts code a compiled kernel
refuses (a global that is not a constexpr, an unsupported reshape). Here Triton's NVIDIA backend
lowers them to PTX for sm_90 and runs its bundled ``ptxas``: no GPU or driver is needed, but
the interpreter must be off, so this file runs itself in a subprocess without
``TRITON_INTERPRET``. The PTX is checked for the issue-5 arithmetic rule: no floating-point
arithmetic (the kernels work on integer bits; the one float instruction is the exact
int -> float32 conversion that reads an exponent), so no contraction, flushing or approximate
division can differ from the CPU. The exceptions are E2M1's: a dequantizer whose plan measured
the one-product path exact (:attr:`mxformats.kernels.mx_plan.DequantizePlan.product`), and the
quantizer's fast path (one product by ``2**k``, one addition that rounds and, where ties go
away, two exact subtractions: :func:`mxformats.kernels.mx_plan.addition_code`). Their float32
operations must be the correctly rounded ``mul.rn.f32``, ``add.rn.f32`` and ``sub.rn.f32``,
neither flushed nor fused.
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
    ("quantize", "quark-triton", "e2m1", "float32", ""),
    ("dequantize", "triton", "e4m3fn", "float16", "float16"),
    ("dequantize", "compressed-tensors", "e2m1", "bfloat16", "float32"),
]
#: (profile, input dtype) of the FP8 block quantizer, and (profile, scale and output dtype) of
#: its dequantizer: every multiplier, scale dtype and rounding kind.
FP8_BLOCK_CASES = [("quantize", "deepseek", "bfloat16"), ("quantize", "deepgemm", "float32"),
                   ("quantize", "ue8m0", "float16"), ("quantize", "compressed-tensors", "bfloat16"),
                   ("quantize", "deepseek-fnuz", "float32"),
                   ("dequantize", "deepseek", "float32"),
                   ("dequantize", "compressed-tensors", "bfloat16")]
#: (function, profile, input or output dtype) of the NVFP4 kernels: every producer and consumer.
NVFP4_CASES = [("quantize", "modelopt", "bfloat16"), ("quantize", "compressed-tensors", "bfloat16"),
               ("quantize", "compressed-tensors", "float16"), ("quantize", "modelopt", "float32"),
               ("dequantize", "vllm-modelopt", "bfloat16"),
               ("dequantize", "vllm-compressed-tensors", "float32"),
               ("dequantize", "vllm-compressed-tensors-emulation", "float16")]
#: What would make a GPU's bytes differ from the interpreter's where a kernel does float
#: arithmetic: contraction, approximate division or reciprocal, flushed subnormals.
INEXACT_OPS = re.compile(r"\bfma\.rn\.f32|\b(?:div|rcp)\.(?:approx|full)[.a-z0-9]*|\.ftz\b")
#: The dequantizers' canonical NaN, selected on the integer bits (bfloat16 0x7FC0, float16
#: 0x7E00 or float32 0x7FC00000) after the last float operation: it must reach the PTX.
CANONICAL_NAN_SELECT = re.compile(r"\bselp\.b(?:16|32)\s+%\w+, (?:32704|32256|2143289344),")
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
        fn = mx.quantize_kernel(plan)
        source = plan.source.bits * (2 if plan.elem.bits == 4 else 1)  # E2M1: element pairs
        pointers = {"src": f"*i{source}", "codes_out": "*u8", "scales_out": "*u8",
                    "elements": "*i32"}
        signature = {**signature, "pairs": "i32"} if plan.elem.bits == 4 else signature
        constants = {"ROWS": 16, "BLOCKS": 8, **mx.quantize_constants(plan)}
    else:
        dplan = mx_plan.dequantize_plan(profile, get_format(elem), dtype, out, 32)
        fn = mx._dequantize_mx_kernel
        pointers = {"codes": "*u8", "scales": "*u8", "half_factors": "*fp32",
                    "out": "*i32" if dplan.out.bits == 32 else "*i16"}
        constants = {"ROWS": 4, "COLS": 1024, **mx.dequantize_constants(dplan)}
    signature = {**pointers, **signature, **dict.fromkeys(constants, "constexpr")}
    # the kernel's own parameter order
    order = list(fn.arg_names)
    source = ASTSource(fn, {name: signature[name] for name in order}, constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"enable_fp_fusion": False})
    found = FLOAT_OPS.findall(compiled.asm["ptx"])
    if kernel == "dequantize" and dplan.product:
        exact: tuple[str, ...] = ("mul.rn.f32",)  # the product path's one multiply
    elif kernel == "quantize" and plan.elem.bits == 4:
        # the fast path's product and addition, and the ties-away test's two subtractions
        exact = ("mul.rn.f32", "add.rn.f32", "sub.rn.f32")
    else:
        return found
    # correctly rounded (.rn), never flushed or contracted; nothing else
    return [op for op in found if op not in exact] + INEXACT_OPS.findall(compiled.asm["ptx"])


def _inexact_ops_of_calls(module: Any, call: Any, *, canonical_nan: bool = False) -> list[str]:
    """Record (never run) the launches ``call()`` makes through ``module.launch``, compile each
    for sm_90 and return the inexact instructions of all of them; with ``canonical_nan``, a
    note if no launch's PTX selects the canonical NaN's bits."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    launches: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    real_launch = module.launch
    module.launch = lambda kernel, grid, t, *args, **meta: launches.append((kernel, args, meta))
    try:
        call()
    finally:
        module.launch = real_launch
    assert launches
    types = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16",
             torch.uint8: "*u8", torch.int32: "*i32"}
    found: set[str] = set()
    selected = False
    for kernel, args, meta in launches:
        names = [p.name for p in kernel.params if not p.is_constexpr]
        signature = {name: types[a.dtype] if isinstance(a, torch.Tensor) else "i32"
                     for name, a in zip(names, args, strict=True)}
        signature.update(dict.fromkeys(meta, "constexpr"))
        source = ASTSource(kernel, {name: signature[name] for name in kernel.arg_names}, meta)
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options={"enable_fp_fusion": False})
        found.update(INEXACT_OPS.findall(compiled.asm["ptx"]))
        selected = selected or bool(CANONICAL_NAN_SELECT.search(compiled.asm["ptx"]))
    return sorted(found) + ([] if selected or not canonical_nan
                            else ["no select of the canonical NaN's bits"])


def _inexact_ops_fp8_block(case: tuple[str, ...]) -> list[str]:
    """Compile one FP8 block launch (recorded, not run) for sm_90; its inexact instructions,
    and for the dequantizer a note if its PTX does not select the canonical NaN's bits."""
    import torch

    from mxformats.kernels.triton import fp8_block

    function, profile, dtype = case
    if function == "quantize":
        return _inexact_ops_of_calls(fp8_block, lambda: fp8_block.quantize_fp8_block(
            torch.ones(256, 256, dtype=getattr(torch, dtype)), profile=profile))
    return _inexact_ops_of_calls(fp8_block, lambda: fp8_block.dequantize_fp8_block(
        torch.zeros(256, 256, dtype=torch.uint8), torch.ones(2, 2, dtype=getattr(torch, dtype)),
        profile=profile, dtype=getattr(torch, dtype)), canonical_nan=True)


def _inexact_ops_nvfp4(case: tuple[str, ...]) -> list[str]:
    """Compile the NVFP4 launches of one call (passes 1 and 2 and the quantizer, or the
    dequantizer) for sm_90; their inexact instructions."""
    import torch

    from mxformats.kernels.triton import nvfp4

    function, profile, dtype = case
    # the GPU tile sizes: 256 partial maxima, so pass 2 is launched
    saved = nvfp4.tile_kind
    nvfp4.tile_kind = lambda t: "gpu"
    try:
        if function == "quantize":
            return _inexact_ops_of_calls(nvfp4, lambda: nvfp4.quantize_nvfp4(
                torch.ones(1024, 1024, dtype=getattr(torch, dtype)), profile=profile))
        return _inexact_ops_of_calls(nvfp4, lambda: nvfp4.dequantize_nvfp4(
            torch.zeros(256, 128, dtype=torch.uint8), torch.ones(256, 16, dtype=torch.uint8),
            torch.ones(1), profile=profile, packed=True, dtype=getattr(torch, dtype)),
            canonical_nan=True)
    finally:
        nvfp4.tile_kind = saved


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


@pytest.mark.parametrize("case", FP8_BLOCK_CASES, ids=["-".join(c) for c in FP8_BLOCK_CASES])
def test_fp8_block_kernel_compiles_exact(case: tuple[str, ...], compiled: dict[str, Any]) -> None:
    """The FP8 block kernels do float arithmetic (the producers' divisions and products): in
    their PTX no fused multiply-add, approximate division or reciprocal, or flush to zero; the
    dequantizer's canonical NaN survives LLVM (an integer select of its bits)."""
    assert compiled["fp8_block-" + "-".join(case)] == []


@pytest.mark.parametrize("case", NVFP4_CASES, ids=["-".join(c) for c in NVFP4_CASES])
def test_nvfp4_kernels_compile_exact(case: tuple[str, ...], compiled: dict[str, Any]) -> None:
    """The NVFP4 kernels' PTX (the amax passes, the quantizer, the dequantizer): no fused
    multiply-add, approximate division or reciprocal, or flush to zero."""
    assert compiled["nvfp4-" + "-".join(case)] == []


if __name__ == "__main__":
    print(json.dumps({**{"-".join(case): _float_ops(case) for case in CASES},
                      **{"fp8_block-" + "-".join(case): _inexact_ops_fp8_block(case)
                         for case in FP8_BLOCK_CASES},
                      **{"nvfp4-" + "-".join(case): _inexact_ops_nvfp4(case)
                         for case in NVFP4_CASES}}))
