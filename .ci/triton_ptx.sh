#!/usr/bin/env bash
# Compile the Triton INT4/FP8/FP8-block/NVFP4 kernels for an NVIDIA GPU (sm_90) on a machine without one
# (the FP8 quantizers with each E4M3FN encoder) and
# check the PTX for what would make a GPU's bytes differ from the interpreter's: fused
# multiply-adds (fma.rn.f32), approximate division or reciprocal (div.approx, div.full,
# rcp.approx) and flushed subnormals (.ftz). Every launch the public functions make is
# recorded (not run) for a grid of dtypes, profiles, layouts and strides, and each distinct
# (kernel, signature, constants) is compiled. Run from the repository root; about 35 s cold,
# plus about 30 s for the PTX cost smoke run at the end.
set -euo pipefail
unset TRITON_INTERPRET
python - <<'PY'
import re
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mxformats.formats import get_format
from mxformats.kernels.triton import fp8, fp8_block, int4, nvfp4

TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
         torch.float64: "fp64", torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32",
         torch.uint32: "u32", torch.int64: "i64"}
BAD = re.compile(r"\bfma\.rn\.f32|\b(?:div|rcp)\.(?:approx|full)|\.ftz\b")
launches = {}


def record(kernel, grid, t, *args, **meta):
    names = [p.name for p in kernel.params if not p.is_constexpr]
    signature = {name: ("*" + TYPES[a.dtype] if isinstance(a, torch.Tensor)
                        else "i32" if -2**31 <= a < 2**31 else "i64")
                 for name, a in zip(names, args)}
    key = (kernel.fn.__name__, tuple(signature.items()), tuple(sorted(meta.items())))
    launches[key] = (kernel, signature, meta)


int4.launch = fp8.launch = fp8_block.launch = nvfp4.launch = record
x = {dtype: torch.randn(4, 64).to(dtype) for dtype in (torch.float32, torch.bfloat16, torch.float16)}
q = torch.zeros(4, 64, dtype=torch.int8)
for dtype, value in x.items():
    for profile in int4.SUPPORTED["quantize_int4"]:
        int4.quantize_int4(value, profile=profile[1])
        int4.quantize_int4(value.T, axis=0, profile=profile[1])
        for out in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            int4.dequantize_int4(q, torch.ones(4, 2, dtype=dtype), profile=profile[1], dtype=out)
for _, layout in int4.SUPPORTED["pack_int4"]:
    int4.pack_int4(q, layout=layout)
    int4.unpack_int4(torch.zeros(4, 8, dtype=torch.int32), layout=layout)
for _, profile in fp8_block.SUPPORTED["dequantize_fp8_block"]:
    for scale in (torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bfloat16)):
        for out in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            fp8_block.dequantize_fp8_block(torch.zeros(4, 64, dtype=torch.uint8), scale,
                                           block=(2, 32), profile=profile, dtype=out)


def fp8_encoding_quantizers():
    for value in x.values():
        for fmt, profile in fp8.SUPPORTED["quantize_fp8"]:
            fp8.quantize_fp8(value, get_format(fmt), profile=profile)
            fp8.quantize_fp8(value.T, get_format(fmt), profile=profile)
        for _, profile in fp8_block.SUPPORTED["quantize_fp8_block"]:
            fp8_block.quantize_fp8_block(value, block=(2, 32), profile=profile)
            fp8_block.quantize_fp8_block(value.T, block=(2, 32), profile=profile)
        for _, profile in nvfp4.SUPPORTED["quantize_nvfp4"]:
            nvfp4.quantize_nvfp4(value, profile=profile)
            nvfp4.quantize_nvfp4(value.T, axis=0, profile=profile, global_amax=1.0)


# Both E4M3FN encoders: the integer one (CPU tensors answer no), then the hardware conversion
# an sm_90 GPU takes (int4.hardware_e4m3's answer there).
fp8_encoding_quantizers()
fp8.hardware_e4m3 = fp8_block.hardware_e4m3 = nvfp4.hardware_e4m3 = \
    lambda t, layout: layout == int4.E4M3FN_LAYOUT
fp8_encoding_quantizers()
for _, profile in nvfp4.SUPPORTED["dequantize_nvfp4"]:
    for out in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for packed in (False, True):
            nvfp4.dequantize_nvfp4(torch.zeros(4, 32 if packed else 64, dtype=torch.uint8),
                                   torch.zeros(4, 4, dtype=torch.uint8), torch.ones(()),
                                   profile=profile, packed=packed, dtype=out)
codes = torch.zeros(4, 64, dtype=torch.uint8)
fp8.e4m3fn_to_fnuz(codes, torch.tensor(1.0))
fp8.e4m3fn_to_fnuz(codes.T, torch.tensor(1.0))
for out in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
    fp8.dequantize_w4a8(torch.zeros(4, 8, dtype=torch.int32), torch.tensor(1.0), torch.ones(4),
                        dtype=out)

problems = 0
for (name, _, _), (kernel, signature, meta) in sorted(launches.items(), key=lambda kv: kv[0][0]):
    full = {**signature, **{k: "constexpr" for k in meta}}
    ptx = triton.compile(ASTSource(kernel, full, meta), target=GPUTarget("cuda", 90, 32),
                         options={"enable_fp_fusion": False}).asm["ptx"]
    found = sorted(set(BAD.findall(ptx)))
    if found:
        problems += 1
        print(f"{name} {meta}: {found}")
print(f"triton {triton.__version__}: {len(launches)} kernel specialisations compiled for sm_90, "
      f"{problems} with fma/approximate division/ftz")
sys.exit(1 if problems else 0)
PY
# The PTX cost table (benchmarks/ptx_cost.py) for the MXFP4 kernels: the smoke run of the
# script, and the quantizer (E2M1 from bfloat16) held to <= 35 PTX instructions per element.
python benchmarks/ptx_cost.py --only "_mx e2m1" --check
