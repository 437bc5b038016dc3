#!/usr/bin/env python3
"""PTX instructions per element of every Triton kernel, compiled for sm_90 without a GPU.

The cost model of a kernel we cannot time here: each launch the public functions make is
recorded (not run) on the CPU with the GPU tile sizes, compiled by Triton's NVIDIA backend for
sm_90 (no GPU or driver needed), and its PTX is read back. The kernels hold no loop: a program
handles one tile, every thread the same number of elements. So the steady-state cost per
element is the number of PTX instructions on the **fast path** (the shortest path through the
kernel's control-flow graph from entry to ``ret``: a tile of finite values, where a branch for
rare blocks is not taken) divided by the elements each thread handles
(``tile elements / (num_warps * 32)``). The table also gives every instruction of the kernel
(``all``, both sides of every branch) per element.

Each row also gives the bytes the launch moves per element (every tensor it is handed, read or
written once) and what that allows on an H200: the instructions per element its HBM feeds
(``bytes/element x`` :data:`H200_INSTRUCTIONS_PER_S` ``/`` :data:`H200_HBM_BYTES_PER_S`) and
the share of the HBM roofline the fast path can reach (1 when the kernel is memory-bound).
Issue 29 holds every kernel of reproduction and the scan to :data:`BUDGET` instructions per
element (about 2.5 bytes per element); the table marks each over it.

    python benchmarks/ptx_cost.py                # the table (Markdown), about a minute
    python benchmarks/ptx_cost.py --json out.json
    python benchmarks/ptx_cost.py --only mx      # cases whose name contains "mx"
    python benchmarks/ptx_cost.py --only "quantize_mx e2m1" --check   # CI: <= 35 for MXFP4
    python benchmarks/ptx_cost.py --budget 16    # the line rows are marked against

Instructions are PTX, not SASS: ``ptxas`` may still merge or split some, but the count
follows the work the kernel asks for. Exit status 1 when a kernel does not compile or holds a
loop (its per-element cost would be meaningless), when no case was measured, and with
``--check`` when no MXFP4 quantizer case was among them (a check that checked nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The issue-16 target for the MXFP4 quantizer (E2M1 from bfloat16), per element.
MXFP4_TARGET = 35.0
#: Issue 29's line for the kernels reproduction and the full scan run, per element.
BUDGET = 16.0
#: H200 HBM3e bandwidth (NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s).
H200_HBM_BYTES_PER_S = 4.8e12
#: Simple 32-bit instructions per second across an H200: 132 SMs x 4 schedulers x 32 lanes x
#: 1.98 GHz boost (NVIDIA H100/H200 SXM: one warp instruction per scheduler per clock).
H200_INSTRUCTIONS_PER_S = 132 * 4 * 32 * 1.98e9

#: The cases ``validate --device`` never launches (the source weights are BF16, the consumers
#: decode to float32 for the statistics, reproduction holds no MX E4M3 or E4M3FNUZ producer):
#: kept for the kernels' own users, and not held to :data:`BUDGET`.
OFF_THE_VALIDATOR_PATH = frozenset({
    "quantize_mx e2m1 ocp from float32", "quantize_mx e4m3fn ocp from bfloat16",
    "quantize_mx e2m1 triton-round-up from float16", "dequantize_mx e2m1 ocp to bfloat16",
    "dequantize_mx e4m3fn ocp to bfloat16", "dequantize_mx e2m1 quark-hip-bf16 to bfloat16",
    "quantize_fp8 e4m3fnuz dynamic-fnuz from bfloat16",
    "dequantize_fp8_block deepseek to bfloat16",
    "dequantize_nvfp4 vllm-modelopt packed to bfloat16",
})
#: The cases whose E4M3FN encoding is the hardware conversion on sm_89 and later
#: (``mxformats.kernels.triton.int4.hardware_e4m3``), measured a second time with the integer
#: encoder that the interpreter and older GPUs run (those rows are off the sm_90 path).
INTEGER_ENCODER_TWINS = (
    "quantize_fp8 e4m3fn static from bfloat16", "quantize_fp8_block deepseek from bfloat16",
    "quantize_fp8_block compressed-tensors from bfloat16", "quantize_nvfp4 modelopt from bfloat16",
)
INTEGER_ENCODER = ", integer E4M3 encoder (interpreter, before sm_89)"

_LABEL = re.compile(r"^\s*(\$?[\w$]+):\s*$")
_BRANCH = re.compile(r"^\s*(@!?%\w+\s+)?bra(?:\.uni)?\s+(\$?[\w$]+)\s*;")
_INSTRUCTION = re.compile(r"^\s*(@!?%\w+\s+)?[a-z][\w.]*")


@dataclass(frozen=True)
class Cost:
    """One kernel specialisation's PTX cost."""

    name: str            # what the public call computes
    kernel: str          # the Triton kernel's name
    elements_per_thread: float
    fast_path: int       # PTX instructions on the shortest entry-to-ret path
    total: int           # every PTX instruction of the kernel
    per_element: float   # fast_path / elements_per_thread
    total_per_element: float
    bytes_per_element: float  # every tensor of the launch, once, per element
    hbm_share: float     # the share of the H200's HBM roofline the fast path can reach
    validator: bool = True  # launched by ``validate --device`` on an sm_90 GPU


def fed_instructions(bytes_per_element: float) -> float:
    """The instructions per element an H200 issues in the time its HBM moves
    ``bytes_per_element``: above it a kernel is compute-bound."""
    return bytes_per_element * H200_INSTRUCTIONS_PER_S / H200_HBM_BYTES_PER_S


def hbm_share(per_element: float, bytes_per_element: float) -> float:
    """The share of the H200's HBM bandwidth a kernel issuing ``per_element`` instructions per
    element can use: 1 at or under :func:`fed_instructions`, their ratio above it."""
    fed = fed_instructions(bytes_per_element)
    return 1.0 if per_element <= fed else fed / per_element


def _blocks(ptx: str) -> tuple[list[list[str]], dict[str, int]]:
    """The kernel body's basic blocks (instruction lines) and the block each label starts."""
    body = ptx[ptx.index("{", ptx.index(".entry")) + 1:ptx.rindex("}")]
    blocks: list[list[str]] = [[]]
    labels: dict[str, int] = {}
    for line in body.splitlines():
        line = line.split("//")[0].rstrip()
        label = _LABEL.match(line)
        if label:
            if blocks[-1]:
                blocks.append([])
            labels[label.group(1)] = len(blocks) - 1
        elif _INSTRUCTION.match(line) and not line.lstrip().startswith("."):
            blocks[-1].append(line.strip())
            if _BRANCH.match(line) or line.strip().startswith("ret"):
                blocks.append([])
    return blocks, labels


def path_costs(ptx: str) -> tuple[int, int]:
    """``(fast path, total)`` instruction counts of one kernel's PTX.

    Raises ``ValueError`` on a loop (a branch to an earlier block)."""
    blocks, labels = _blocks(ptx)
    best: dict[int, int] = {0: 0}
    exits: list[int] = []
    for index, block in enumerate(blocks):  # blocks in order: a DAG has only forward edges
        if index not in best:
            continue
        cost = best[index] + len(block)
        last = block[-1] if block else ""
        branch = _BRANCH.match(last)
        successors = []
        if branch:
            target = labels[branch.group(2)]
            if target <= index:
                raise ValueError(f"a loop (branch back to {branch.group(2)})")
            successors.append(target)
            if branch.group(1):  # conditional: it may fall through
                successors.append(index + 1)
        elif last.startswith("ret"):
            exits.append(cost)
        else:
            successors.append(index + 1)
        for successor in successors:
            if successor < len(blocks):
                best[successor] = min(best.get(successor, cost), cost)
            else:
                exits.append(cost)
    return min(exits), sum(len(block) for block in blocks)


# -- recording the launches ------------------------------------------------------------------


@dataclass
class Launch:
    """One recorded launch: enough to compile it and to know its tile."""

    name: str
    kernel: Any
    signature: dict[str, str]
    attributes: dict[tuple[int], list[list[Any]]]
    constants: dict[str, Any]
    programs: int
    elements: int
    nbytes: int  # of every tensor the launch is handed
    validator: bool = True


def _signature(kernel: Any, args: tuple[Any, ...]) -> tuple[dict[str, str],
                                                             dict[tuple[int], list[list[Any]]]]:
    """The launch's argument types, and the divisibility by 16 that Triton's launcher would
    specialise on (pointers and integers; it lets the compiler vectorise)."""
    import torch

    types_ = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
              torch.float64: "fp64", torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32",
              torch.uint32: "u32", torch.int64: "i64", torch.int16: "i16"}
    names = [p.name for p in kernel.params if not p.is_constexpr]
    signature, attributes = {}, {}
    for name, value in zip(names, args, strict=True):
        tensor = isinstance(value, torch.Tensor)
        signature[name] = "*" + types_[value.dtype] if tensor \
            else "i32" if -2**31 <= value < 2**31 else "i64"
        if (value.data_ptr() if tensor else value) % 16 == 0:
            attributes[(kernel.arg_names.index(name),)] = [["tt.divisibility", 16]]
    return signature, attributes


def record_launches(only: str = "") -> list[Launch]:
    """Call every public Triton function once per case with the GPU tile sizes and record
    (never run) the launches they make."""
    import torch

    from mxformats.kernels.mx_plan import FloatLayout
    from mxformats.kernels.triton import fp8, fp8_block, int4, mx, nvfp4, scan

    recorded: list[Launch] = []
    current: list[tuple[str, int]] = [("", 0)]

    def record(kernel: Any, grid: tuple[int, ...], t: Any, *args: Any, **meta: Any) -> None:
        if hardware_off[0] and "HARDWARE" not in meta:
            return  # a twin's other launches are the row's own, measured once
        programs = 1
        for size in grid:
            programs *= int(size)
        name, elements = current[0]
        nbytes = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        recorded.append(Launch(name, kernel, *_signature(kernel, args), dict(meta), programs,
                               elements, nbytes,
                               name not in OFF_THE_VALIDATOR_PATH and not hardware_off[0]))

    # sm_90 has the E4M3 conversions (sm_89+): the answer a GPU there gives, but for the twins.
    hardware_off = [False]

    def sm90_hardware_e4m3(t: Any, layout: FloatLayout) -> bool:
        return layout == int4.E4M3FN_LAYOUT and not hardware_off[0]

    # The launchers are replaced by the recorder and the tile choices told "not the
    # interpreter", for the duration of the calls.
    gpu_like = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))
    mx_tile = mx._tile
    patches = {(int4, "launch"): record, (fp8, "launch"): record,
               (fp8_block, "launch"): record, (mx, "_launch"): record,
               (nvfp4, "launch"): record, (nvfp4, "tile_kind"): lambda t: "gpu",
               (fp8, "hardware_e4m3"): sm90_hardware_e4m3,
               (fp8_block, "hardware_e4m3"): sm90_hardware_e4m3,
               (nvfp4, "hardware_e4m3"): sm90_hardware_e4m3,
               (scan, "launch"): record, (scan, "on_interpreter"): lambda t: False,
               (int4, "on_interpreter"): lambda t: False,
               (fp8_block, "ELEMENTS_INTERPRETER"): fp8_block.ELEMENTS_GPU,
               (mx, "_tile"): lambda t, count, block_size: mx_tile(gpu_like, count, block_size)}
    saved = {key: getattr(*key) for key in patches}
    try:
        for (module, attribute), value in patches.items():
            setattr(module, attribute, value)
        cases = list(_cases(torch, fp8, fp8_block, int4, mx, nvfp4, scan))
        for name, elements, call in cases:
            if only and only not in name:
                continue
            current[0] = (name, elements)
            call()
        hardware_off[0] = True
        for name, elements, call in cases:
            if name in INTEGER_ENCODER_TWINS and (not only or only in name):
                current[0] = (name + INTEGER_ENCODER, elements)
                call()
    finally:
        for (module, attribute), value in saved.items():
            setattr(module, attribute, value)
    return recorded


def _cases(torch: Any, fp8: Any, fp8_block: Any, int4: Any, mx: Any, nvfp4: Any,
           scan: Any) -> Iterator[tuple[str, int, Callable[[], Any]]]:
    """``(name, elements processed, call)`` for each case: whole tiles (128 x 7168). The
    ``validate --device`` path's own calls (dequantized to float32 for the statistics, the
    INT4 packer, the full scan's passes) are among them."""
    rows, cols = 128, 7168
    elements = rows * cols
    x = {name: torch.zeros(rows, cols, dtype=getattr(torch, name))
         for name in ("float32", "bfloat16", "float16")}
    for profile, elem, dtype in (("ocp", "e2m1", "bfloat16"), ("quark", "e2m1", "bfloat16"),
                                 ("ocp", "e2m1", "float32"), ("ocp", "e4m3fn", "bfloat16"),
                                 ("triton-round-up", "e2m1", "float16")):
        yield (f"quantize_mx {elem} {profile} from {dtype}", elements,
               lambda p=profile, e=elem, d=dtype: mx.quantize_mx(x[d], e, profile=p))
    codes4 = torch.zeros(rows, cols // 2, dtype=torch.uint8)
    codes8 = torch.zeros(rows, cols, dtype=torch.uint8)
    scales = torch.full((rows, cols // 32), 127, dtype=torch.uint8)
    for profile, elem, dtype in (("ocp", "e2m1", torch.bfloat16), ("ocp", "e4m3fn", torch.bfloat16),
                                 ("quark-hip-bf16", "e2m1", torch.bfloat16)):
        codes = codes4 if elem == "e2m1" else codes8
        yield (f"dequantize_mx {elem} {profile} to {str(dtype)[6:]}", elements,
               lambda c=codes, p=profile, e=elem, d=dtype:
               mx.dequantize_mx(c, scales, e, profile=p, dtype=d))
    for profile in ("compressed-tensors", "quark"):
        yield (f"quantize_int4 {profile} from bfloat16", elements,
               lambda p=profile: int4.quantize_int4(x["bfloat16"], profile=p))
    yield ("quantize_fp8 e4m3fn static from bfloat16", elements,
           lambda: fp8.quantize_fp8(x["bfloat16"], "e4m3fn", profile="static"))
    yield ("quantize_fp8 e4m3fnuz dynamic-fnuz from bfloat16", elements,
           lambda: fp8.quantize_fp8(x["bfloat16"], "e4m3fnuz", profile="dynamic-fnuz"))
    for profile in ("deepseek", "compressed-tensors"):
        yield (f"quantize_fp8_block {profile} from bfloat16", elements,
               lambda p=profile: fp8_block.quantize_fp8_block(x["bfloat16"], profile=p))
    yield ("dequantize_fp8_block deepseek to bfloat16", elements,
           lambda: fp8_block.dequantize_fp8_block(codes8, torch.ones(1, cols // 128),
                                                  profile="deepseek", dtype=torch.bfloat16))
    for profile in ("modelopt", "compressed-tensors"):
        yield (f"quantize_nvfp4 {profile} from bfloat16", elements,
               lambda p=profile: nvfp4.quantize_nvfp4(x["bfloat16"], profile=p))
    yield ("dequantize_nvfp4 vllm-modelopt packed to bfloat16", elements,
           lambda: nvfp4.dequantize_nvfp4(codes4, torch.zeros(rows, cols // 16, dtype=torch.uint8),
                                          torch.ones(()), profile="vllm-modelopt", packed=True,
                                          dtype=torch.bfloat16))
    # validate --source --device: each consumer to float32, the INT4 stages, the W4A8 decode
    yield ("dequantize_mx e2m1 quark-hip-bf16 to float32", elements,
           lambda: mx.dequantize_mx(codes4, scales, "e2m1", profile="quark-hip-bf16"))
    codes16 = torch.zeros(rows, cols, dtype=torch.uint8)
    for profile in ("vllm-modelopt", "vllm-compressed-tensors"):
        yield (f"dequantize_nvfp4 {profile} to float32", elements,
               lambda p=profile: nvfp4.dequantize_nvfp4(
                   codes16, torch.zeros(rows, cols // 16, dtype=torch.uint8), torch.ones(()),
                   profile=p))
    yield ("dequantize_fp8_block deepseek to float32", elements,
           lambda: fp8_block.dequantize_fp8_block(codes8, torch.ones(1, cols // 128),
                                                  profile="deepseek"))
    q = torch.zeros(rows, cols, dtype=torch.int8)
    yield ("pack_int4 compressed-tensors", elements,
           lambda: int4.pack_int4(q, layout="compressed-tensors"))
    yield ("dequantize_int4 compressed-tensors to float32", elements,
           lambda: int4.dequantize_int4(q, torch.ones(rows, cols // 32, dtype=torch.bfloat16),
                                        profile="compressed-tensors"))
    yield ("dequantize_w4a8 vllm to float32", elements,
           lambda: fp8.dequantize_w4a8(torch.zeros(rows, cols // 8, dtype=torch.int32),
                                       torch.ones(()), torch.ones(rows)))
    # validate --level full --device: the scan's passes over packed codes and FP8 bytes
    device = scan.DeviceScan(torch.device("cpu"))
    packed = np.zeros((rows, cols // 2), dtype=np.uint8)
    yield ("scan nibble peaks, MXFP4 blocks", elements,
           lambda: device.nibble_peaks(packed, 16, True, np.uint8(0),
                                       np.empty((rows, cols // 32), np.uint8),
                                       np.zeros(256, np.int64), False))
    yield ("scan tile peaks, FP8 128x128", elements,
           lambda: device.tile_peaks(np.zeros((rows, cols), np.uint8), np.uint8(0x7F), 128,
                                     128, np.empty((1, cols // 128), np.uint8)))


def compile_cost(launch: Launch) -> Cost:
    """Compile one recorded launch for sm_90 and count its PTX."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = launch.kernel
    full = {**launch.signature, **dict.fromkeys(launch.constants, "constexpr")}
    order = {name: full[name] for name in kernel.arg_names if name in full}
    compiled = triton.compile(ASTSource(kernel, order, launch.constants, launch.attributes),
                              target=GPUTarget("cuda", 90, 32),
                              options={"enable_fp_fusion": False})
    fast, total = path_costs(compiled.asm["ptx"])
    threads = compiled.metadata.num_warps * 32
    per_thread = launch.elements / launch.programs / threads
    per_element = fast / per_thread
    moved = launch.nbytes / launch.elements
    return Cost(launch.name, kernel.fn.__name__, per_thread, fast, total,
                round(per_element, 1), round(total / per_thread, 1), round(moved, 3),
                round(hbm_share(per_element, moved), 3), launch.validator)


def table(costs: list[Cost], budget: float = BUDGET) -> str:
    """The Markdown table of ``costs``, each fast path marked against ``budget``."""
    lines = ["| call | kernel | elements / thread | PTX / element (fast path) "
             f"| PTX / element (all) | bytes / element | H200 HBM feeds | share of HBM roofline "
             f"| <= {budget:g} | validate --device |",
             "|---|---|---:|---:|---:|---:|---:|---:|:---:|:---:|"]
    for cost in costs:
        mark = "yes" if cost.per_element <= budget else "**over**"
        lines.append(f"| {cost.name} | `{cost.kernel}` | {cost.elements_per_thread:g} | "
                     f"{cost.per_element:.1f} | {cost.total_per_element:.1f} | "
                     f"{cost.bytes_per_element:.3g} | "
                     f"{fed_instructions(cost.bytes_per_element):.1f} | "
                     f"{cost.hbm_share:.0%} | {mark} | {'yes' if cost.validator else 'no'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="cases whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the costs here")
    parser.add_argument("--budget", type=float, default=BUDGET,
                        help="PTX instructions per element each fast path is marked against "
                             f"(default {BUDGET:g}, issue 29's line)")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when the MXFP4 quantizer (E2M1 from bfloat16) costs more "
                             f"than {MXFP4_TARGET:g} PTX instructions per element (CI)")
    args = parser.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    failures = 0
    costs = []
    for launch in record_launches(args.only):
        try:
            costs.append(compile_cost(launch))
        except Exception as error:  # reported, and the exit status says so
            failures += 1
            message = str(error).strip().splitlines()[-1:] or [type(error).__name__]
            print(f"{launch.name} ({launch.kernel.fn.__name__}): {message[0][-500:]}",
                  file=sys.stderr)
    print(table(costs, args.budget))
    over_budget = [c for c in costs if c.per_element > args.budget]
    on_path = [c for c in costs if c.validator]
    print(f"\n{len(costs) - len(over_budget)} of {len(costs)} kernels at or under "
          f"{args.budget:g} PTX instructions per element on their fast path; of the "
          f"{len(on_path)} that validate --device launches on sm_90, "
          f"{sum(c.per_element <= args.budget for c in on_path)}")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in costs], indent=1) + "\n")
    mxfp4 = [c for c in costs if c.name.startswith("quantize_mx e2m1 ")
             and c.name.endswith(" from bfloat16")]
    over = [c for c in mxfp4 if c.per_element > MXFP4_TARGET]
    if args.check:
        for cost in over:
            print(f"{cost.name}: {cost.per_element:.1f} PTX instructions per element "
                  f"(target <= {MXFP4_TARGET:g})", file=sys.stderr)
        if not mxfp4:
            print("--check: no MXFP4 quantizer (quantize_mx e2m1 ... from bfloat16) was "
                  "measured", file=sys.stderr)
    return 1 if failures or not costs or (args.check and (over or not mxfp4)) else 0


if __name__ == "__main__":
    sys.exit(main())
