#!/usr/bin/env python3
"""Instructions per element of the HIP kernels, counted on their CPU build by valgrind.

No GPU here, and no AMD toolchain that reports a dynamic count: so each case calls a HIP front
end (:mod:`mxformats.kernels.hip`) on CPU tensors of realistic data (seeded normal bfloat16
weights, codes and scales of every value), records the requests it sends the CPU driver, and
replays each into the unsanitised -O2 build of that driver (g++, the same kernel sources over
the CPU runtime ``hip_cpu.h``: :func:`mxformats.kernels.hip._build.cpu_driver` with
``sanitized=False``) under valgrind's callgrind. Only the instructions of functions in
namespace ``mxf`` count: the kernels with every helper inlined into them, not the CPU runtime
(fibers, barriers, wave shuffles, the stacks it clears), the driver's I/O or the process
start. A case runs at two sizes, ``N`` and ``2N`` elements; the difference of the two counts
over ``N`` is the cost per element of the path that data takes, per-launch set-up cancelled.

The figure is x86-64 instructions, not GPU ones: it follows the work each kernel asks for per
element (an integer long division, a 64-bit product, a branch), which is what the plans
change, so before/after figures compare; it is not a GPU cost model (``benchmarks/ptx_cost.py``
is that, for the Triton kernels).

    python benchmarks/hip_cost.py                 # the table (Markdown), a few minutes
    python benchmarks/hip_cost.py --only nvfp4    # cases whose name contains "nvfp4"
    python benchmarks/hip_cost.py --json out.json

Needs g++ and valgrind (callgrind_annotate). Exit status 1 when no case was measured or a
replay failed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Rows of the smaller run; the larger has twice as many. Columns per row.
ROWS, COLS = 8, 2048

#: A callgrind_annotate row: the count, its share, ``file:function [object]``.
_ROW = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+[^:]*:(.*)$")
#: A function of the kernels' namespace (a return type may come first).
_KERNEL_FUNCTION = re.compile(r"^(?:[\w ]+ )?mxf::")


@dataclass(frozen=True)
class Request:
    """One recorded call of the CPU driver: the header line and the inputs' bytes."""

    op: str
    header: str
    payload: bytes


@dataclass(frozen=True)
class Cost:
    name: str
    ops: str
    per_element: float


class _Recorder:
    """An executor that runs each request on the real (sanitised) driver, so the front end
    gets true outputs, and keeps a copy of it."""

    def __init__(self, executor: Any) -> None:
        self._executor = executor
        self.requests: list[Request] = []

    def run(self, op: str, params: Sequence[int], inputs: Sequence[Any],
            outputs: Sequence[Any]) -> None:
        from mxformats.kernels.hip._device import byte_view, request_header

        in_bytes = [byte_view(t.contiguous()).numpy().tobytes() for t in inputs]
        out_sizes = [t.numel() * t.element_size() for t in outputs]
        header = request_header(op, params, [len(b) for b in in_bytes], out_sizes)
        self.requests.append(Request(op, header, b"".join(in_bytes)))
        self._executor.run(op, params, inputs, outputs)


def record(call: Callable[[], Any]) -> list[Request]:
    """The driver requests ``call`` makes (every HIP front end's executor replaced)."""
    from mxformats.kernels import hip
    from mxformats.kernels.hip import _launch

    real = _launch._executor
    recorder = _Recorder(real(__import__("torch").device("cpu")))
    modules = [getattr(hip, name) for name in ("mx", "nvfp4", "int4", "fp8", "fp8_block")]
    saved = [module._executor for module in modules]
    try:
        for module in modules:
            module._executor = lambda device: recorder
        call()
    finally:
        for module, executor in zip(modules, saved, strict=True):
            module._executor = executor
    return recorder.requests


def instructions(executable: Path, requests: list[Request]) -> int:
    """Instructions valgrind counts in namespace ``mxf`` while the driver serves ``requests``
    (then end of input)."""
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "callgrind.out"
        stdin = b"".join(r.header.encode() + r.payload for r in requests)
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                               str(executable)], input=stdin, capture_output=True, check=False)
        replies = done.stdout.count(b"ok\n")
        if replies < len(requests):
            raise RuntimeError(f"the driver answered {replies} of {len(requests)} requests:\n"
                               f"{done.stderr.decode(errors='replace')[-2000:]}")
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                                    str(out)], capture_output=True, text=True, check=True).stdout
    total = 0
    for line in annotated.splitlines():
        row = _ROW.match(line)
        if row and _KERNEL_FUNCTION.match(row.group(2)):
            total += int(row.group(1).replace(",", ""))
    if total == 0:
        raise RuntimeError("valgrind counted no instruction in the kernels")
    return total


def _cases(torch: Any, hip: Any, rows: int) -> Iterator[tuple[str, Callable[[], Any]]]:
    """``(name, call)`` for each case, ``rows`` x :data:`COLS` elements: the calls
    ``validate --device`` makes on the HIP kernels' side (BF16 sources, decodes to float32)."""
    generator = torch.Generator().manual_seed(0)
    shape = (rows, COLS)
    x = torch.randn(shape, generator=generator).to(torch.bfloat16)

    def uint8(low: int, high: int, *size: int) -> Any:
        return torch.randint(low, high, size, generator=generator, dtype=torch.uint8)

    for profile, elem in (("ocp", "e2m1"), ("quark", "e2m1"), ("ocp", "e4m3fn")):
        yield (f"quantize_mx {elem} {profile} from bfloat16",
               lambda p=profile, e=elem: hip.quantize_mx(x, e, profile=p))
    mx_scales = uint8(117, 137, rows, COLS // 32)
    for profile in ("ocp", "quark-hip-bf16"):
        yield (f"dequantize_mx e2m1 {profile} to float32",
               lambda p=profile: hip.dequantize_mx(uint8(0, 255, rows, COLS // 2), mx_scales,
                                                   "e2m1", profile=p))
    for profile in ("modelopt", "compressed-tensors"):
        yield (f"quantize_nvfp4 {profile} from bfloat16",
               lambda p=profile: hip.quantize_nvfp4(x, profile=p))
    nvfp4_scales = uint8(0x20, 0x60, rows, COLS // 16)
    for profile in ("vllm-modelopt", "vllm-compressed-tensors"):
        yield (f"dequantize_nvfp4 {profile} to float32",
               lambda p=profile: hip.dequantize_nvfp4(uint8(0, 16, *shape), nvfp4_scales,
                                                      torch.tensor(0.5), profile=p))
    q = torch.randint(-8, 8, shape, generator=generator, dtype=torch.int8)
    yield ("dequantize_int4 compressed-tensors to float32",
           lambda: hip.dequantize_int4(q, torch.rand(rows, COLS // 32, generator=generator)
                                       .to(torch.bfloat16), profile="compressed-tensors"))
    yield ("dequantize_w4a8 vllm to float32",
           lambda: hip.dequantize_w4a8(
               torch.randint(-2**31, 2**31 - 1, (rows, COLS // 8), generator=generator,
                             dtype=torch.int32), torch.tensor(0.01), torch.rand(rows)))
    yield ("quantize_fp8 e4m3fn static from bfloat16",
           lambda: hip.quantize_fp8(x, "e4m3fn", profile="static"))
    yield ("quantize_fp8 e4m3fnuz dynamic-fnuz from bfloat16",
           lambda: hip.quantize_fp8(x, "e4m3fnuz", profile="dynamic-fnuz"))
    for profile in ("deepseek", "compressed-tensors"):
        yield (f"quantize_fp8_block {profile} from bfloat16",
               lambda p=profile: hip.quantize_fp8_block(x, profile=p))
    yield ("dequantize_fp8_block deepseek to float32",
           lambda: hip.dequantize_fp8_block(uint8(0, 0x7E, *shape),
                                            torch.rand(1, COLS // 128, generator=generator),
                                            profile="deepseek"))


def measure(only: str | None = None) -> list[Cost]:
    """Instructions per element of every case whose name contains ``only``."""
    import torch

    from mxformats.kernels import hip
    from mxformats.kernels.hip._build import cpu_driver

    executable = cpu_driver(sanitized=False)
    costs = []
    small = dict(_cases(torch, hip, ROWS))
    large = dict(_cases(torch, hip, 2 * ROWS))
    for name, call in small.items():
        if only is not None and only not in name:
            continue
        requests = record(call)
        total = instructions(executable, requests)
        doubled = instructions(executable, record(large[name]))
        ops = ", ".join(sorted({r.op for r in requests}))
        costs.append(Cost(name, ops, round((doubled - total) / (ROWS * COLS), 1)))
        print(f"{name}: {costs[-1].per_element}", file=sys.stderr, flush=True)
    return costs


def table(costs: list[Cost]) -> str:
    lines = ["| call | driver operations | x86-64 kernel instructions / element |",
             "|---|---|---:|"]
    lines += [f"| {c.name} | `{c.ops}` | {c.per_element:.1f} |" for c in costs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only the cases whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    costs = measure(args.only)
    if not costs:
        print("hip_cost: no case measured", file=sys.stderr)
        return 1
    print(table(costs))
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in costs], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
