"""Triton FP8 block kernels: ``quantize_fp8_block`` and ``dequantize_fp8_block``, byte-identical
to :mod:`mxformats.schemes.fp8_block` (same names and arguments, torch tensors in and out).

One program per ``bm x bn`` tile on a GPU (small tiles several per program), the last tile row
and column masked: partial tiles are padded with +0.0 before the maximum, as DeepGEMM and
compressed-tensors pad them. The tile maximum is
an integer maximum of ``|x|``'s float32 bits, so NaN propagates (``torch.amax``); the scale
and the scaled elements are the producer's float32 operations, each rounded once: divisions
are ``tl.math.div_rn`` (correctly rounded on a GPU, numpy's under the interpreter), no
product is added to anything, and the kernels are launched with ``enable_fp_fusion=False``;
bfloat16 and float16 roundings are done on the bits (``round_to_kind``). The FP8 cast is
integer arithmetic (:func:`.fp8._encode_float32`, saturating, nearest even). The profile's
choices come from its record through :mod:`mxformats.kernels.fp8_block_plan`.
Spec: ``spec/fp8-block.md``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch
import triton
import triton.language as tl

from mxformats import codec
from mxformats.formats import Format
from mxformats.schemes import fp8_block as reference

from .. import fp8_block_plan as plans
from ..mx_plan import as_record, require_tensor
from .fp8 import _encode_float32
from .int4 import (
    FLOAT_KINDS,
    KERNELS,
    OUTPUT_KINDS,
    element_offsets,
    hardware_e4m3,
    launch,
    round_and_store_canonical_nan,
    round_to_kind,
    store_kind,
    widen_to_float32,
)

__all__ = ["SUPPORTED", "dequantize_fp8_block", "quantize_fp8_block"]

SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_fp8_block": tuple((record.code_format.name, name)
                                for name, record in reference.PRODUCERS.items()
                                if plans.quantize_claims(record)),
    "dequantize_fp8_block": tuple((record.code_format.name, name)
                                  for name, record in reference.PRODUCERS.items()),
}

_NUMPY_DTYPES = {torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
                 torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}
# Constants a compiled kernel may read (constexpr globals).
_NAN_CODE = tl.constexpr(reference.NAN_CODE)
_FNUZ_NAN = tl.constexpr(0x80)


@triton.jit
def _tiles(rows: tl.tensor, cols: tl.tensor, grid_rows: tl.tensor, grid_cols: tl.tensor,
           BM: tl.constexpr, BN: tl.constexpr, BM_POW2: tl.constexpr, BN_POW2: tl.constexpr,
           TM: tl.constexpr, TN: tl.constexpr) -> tuple[tl.tensor, ...]:
    """This program's ``TM x TN`` tiles as 4-D ``(tile row, row in tile, tile column, column in
    tile)`` indices: (element offset in a contiguous ``[rows, cols]``, element mask, scale
    offset ``[TM, TN]``, scale mask); edge tiles and padding lanes masked."""
    tile_r = tl.program_id(0) * TM + tl.arange(0, TM)
    tile_c = tl.program_id(1) * TN + tl.arange(0, TN)
    i = tl.arange(0, BM_POW2)[None, :, None, None]
    j = tl.arange(0, BN_POW2)[None, None, None, :]
    row = tile_r[:, None, None, None] * BM + i
    col = tile_c[None, None, :, None] * BN + j
    inside = (i < BM) & (j < BN) & (row < rows) & (col < cols)
    scale_at = tile_r[:, None] * grid_cols + tile_c[None, :]
    scale_inside = (tile_r[:, None] < grid_rows) & (tile_c[None, :] < grid_cols)
    return row.to(tl.int64), col.to(tl.int64), inside, scale_at, scale_inside


@triton.jit
def _ceil_to_ue8m0(scale: tl.tensor) -> tl.tensor:
    """DeepGEMM ``ceil_to_ue8m0`` on float32 bits: ``2**(exponent + (mantissa != 0))`` of
    ``|scale|``, the biased exponent clamped to [1, 254]."""
    bits = scale.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
    return (tl.minimum(tl.maximum(exponent, 1), 254) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _quantize_fp8_block_kernel(
    x_ptr: tl.tensor, codes_ptr: tl.tensor, scales_ptr: tl.tensor, rows: tl.tensor,
    cols: tl.tensor, stride_r: tl.tensor, stride_c: tl.tensor, grid_rows: tl.tensor,
    grid_cols: tl.tensor,
    BM: tl.constexpr, BN: tl.constexpr, BM_POW2: tl.constexpr, BN_POW2: tl.constexpr,
    TM: tl.constexpr, TN: tl.constexpr,
    KIND: tl.constexpr, SCALE_KIND: tl.constexpr, QUOTIENT_KIND: tl.constexpr,
    FMT_MAX: tl.constexpr, HAS_FLOOR: tl.constexpr, FLOOR: tl.constexpr,
    FLOOR_F32: tl.constexpr, POW2: tl.constexpr, HAS_ZERO_SCALE: tl.constexpr,
    ZERO_SCALE: tl.constexpr, MULTIPLIER: tl.constexpr, CLAMP: tl.constexpr,
    MBITS: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr, FNUZ: tl.constexpr,
    HARDWARE: tl.constexpr, UNIT_STRIDE: tl.constexpr,
) -> None:
    """One program: ``TM x TN`` tiles."""
    row, col, inside, scale_at, scale_inside = _tiles(rows, cols, grid_rows, grid_cols, BM, BN,
                                                      BM_POW2, BN_POW2, TM, TN)
    x = tl.load(x_ptr + element_offsets(row, col, stride_r, stride_c, UNIT_STRIDE),
                mask=inside, other=0.0)
    wide = widen_to_float32(x, KIND)
    magnitude = wide.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    # per tile, [TM, TN]; NaN propagates
    amax = tl.max(tl.max(magnitude, 3), 1).to(tl.float32, bitcast=True)

    tile_max = amax  # exact in the scale dtype: it is one of the input's values
    if HAS_FLOOR:
        tile_max = tl.where(amax != amax, amax, tl.maximum(amax, FLOOR))
    scale = round_to_kind(tl.math.div_rn(tile_max, FMT_MAX), SCALE_KIND)
    if POW2:
        scale = _ceil_to_ue8m0(scale)
    if HAS_ZERO_SCALE:
        scale = tl.where(scale == 0.0, ZERO_SCALE, scale)

    if MULTIPLIER == 0:  # torch's 448 / amax: a reciprocal, then a multiply
        floored = tl.where(amax != amax, amax, tl.maximum(amax, FLOOR_F32))
        values = wide * (tl.math.div_rn(1.0, floored) * FMT_MAX)[:, None, :, None]
    elif MULTIPLIER == 1:
        values = wide * tl.math.div_rn(1.0, scale)[:, None, :, None]
    else:
        values = round_to_kind(tl.math.div_rn(wide, scale[:, None, :, None]), QUOTIENT_KIND)
    if CLAMP:  # NaN passes, as torch.clamp
        values = tl.where(values != values, values,
                          tl.minimum(tl.maximum(values, -FMT_MAX), FMT_MAX))
    codes = _encode_float32(values, MBITS, BIAS, 0x80, MAX_CODE, True, HARDWARE)
    codes = tl.where(values != values, _NAN_CODE, codes)
    scale = tl.where(scale != scale, float("nan"), scale)  # the canonical quiet NaN
    if FNUZ:  # vLLM normalize_e4m3fn_to_e4m3fnuz
        codes = tl.where(codes == _FNUZ_NAN, 0, codes)
        scale = scale * 2.0
    tl.store(codes_ptr + row * cols + col, codes.to(tl.uint8), mask=inside)
    store_kind(scales_ptr + scale_at, scale, scale_inside, SCALE_KIND)


@triton.jit
def _dequantize_fp8_block_kernel(
    codes_ptr: tl.tensor, values_ptr: tl.tensor, scales_ptr: tl.tensor, out_ptr: tl.tensor,
    rows: tl.tensor,
    cols: tl.tensor, grid_rows: tl.tensor, grid_cols: tl.tensor,
    BM: tl.constexpr, BN: tl.constexpr, BM_POW2: tl.constexpr, BN_POW2: tl.constexpr,
    TM: tl.constexpr, TN: tl.constexpr,
    SCALE_KIND: tl.constexpr, OUT_KIND: tl.constexpr,
) -> None:
    """One program: ``TM x TN`` tiles; ``float32(code) x float32(scale)`` rounded to float32,
    then to the output dtype (vLLM scaled_dequantize); NaN: the canonical quiet NaN. A code's
    float32 value is read from ``values`` (its 256 values, the reference's decode: a table
    in L1, where the bit arithmetic cost some 30 instructions an element)."""
    row, col, inside, scale_at, scale_inside = _tiles(rows, cols, grid_rows, grid_cols, BM, BN,
                                                      BM_POW2, BN_POW2, TM, TN)
    flat = row * cols + col
    code = tl.load(codes_ptr + flat, mask=inside, other=0).to(tl.int32)
    value = tl.load(values_ptr + code)
    scale = widen_to_float32(tl.load(scales_ptr + scale_at, mask=scale_inside, other=1.0),
                             SCALE_KIND)
    round_and_store_canonical_nan(out_ptr + flat, value * scale[:, None, :, None], inside,
                                  OUT_KIND)


#: Elements per program at most: a GPU program takes one 128 x 128 tile (or several small
#: ones); under the interpreter, where every program costs milliseconds, up to 32K.
ELEMENTS_GPU, ELEMENTS_INTERPRETER = 1 << 14, 1 << 15


def _tiling(t: torch.Tensor, block: tuple[int, int],
            grid: tuple[int, int]) -> tuple[tuple[int, int], dict[str, int]]:
    """The launch grid and tile constants: ``TM x TN`` tiles of ``block`` per program (powers
    of two, within the element budget and the tile grid)."""
    bm, bn = block
    bm_pow2, bn_pow2 = int(triton.next_power_of_2(bm)), int(triton.next_power_of_2(bn))
    budget = ELEMENTS_INTERPRETER if t.device.type == "cpu" else ELEMENTS_GPU
    per_tile = bm_pow2 * bn_pow2
    tn = max(1, min(budget // per_tile, int(triton.next_power_of_2(grid[1]))))
    tm = max(1, min(budget // (per_tile * tn), int(triton.next_power_of_2(grid[0]))))
    launch_grid = (triton.cdiv(grid[0], tm), triton.cdiv(grid[1], tn))
    return launch_grid, {"BM": bm, "BN": bn, "BM_POW2": bm_pow2, "BN_POW2": bn_pow2,
                         "TM": tm, "TN": tn}


def quantize_fp8_block(x: torch.Tensor, *, block: tuple[int, int] = (128, 128),
                       profile: str = "deepseek") -> reference.FP8BlockArray:
    """Quantize a 2-D weight to FP8 with one scale per ``block`` tile exactly as
    ``mxformats.schemes.fp8_block.quantize_fp8_block`` with the same profile does.

    ``x``: a float16, bfloat16 or float32 ``[M, N]`` tensor, any strides. Returns the
    reference's :class:`~mxformats.schemes.fp8_block.FP8BlockArray` (unpacks as ``codes,
    scales``): uint8 ``[M, N]`` and ``[ceil(M / bm), ceil(N / bn)]`` in the profile's scale
    dtype (float32, or the input dtype for compressed-tensors), on ``x``'s device. Raises what
    the reference raises for bad arguments."""
    x = require_tensor(x, "quantize_fp8_block", KERNELS)
    dtype = _NUMPY_DTYPES.get(x.dtype, np.dtype(np.int32))  # int32: refused as not a float
    bm, bn = plans.check_quantize_args(tuple(x.shape), dtype, block, profile)
    plan = plans.quantize_plan(profile, dtype)
    rows, cols = x.shape
    grid = reference.scale_grid((rows, cols), (bm, bn))
    codes = torch.empty((rows, cols), dtype=torch.uint8, device=x.device)
    scale_torch = getattr(torch, plan.scale_dtype.name)
    scales = torch.empty(grid, dtype=scale_torch, device=x.device)
    launch_grid, tiles = _tiling(x, (bm, bn), grid)
    launch(_quantize_fp8_block_kernel, launch_grid, x, x, codes, scales, rows, cols,
           x.stride(0), x.stride(1), *grid, **tiles, KIND=FLOAT_KINDS[x.dtype],
           SCALE_KIND=FLOAT_KINDS[scale_torch],
           QUOTIENT_KIND=FLOAT_KINDS[getattr(torch, plan.quotient_dtype.name)],
           FMT_MAX=plan.fmt_max, HAS_FLOOR=plan.has_floor, FLOOR=plan.amax_floor,
           FLOOR_F32=plan.max_over_amax_floor, POW2=plan.power_of_two_scale,
           HAS_ZERO_SCALE=plan.zero_scale is not None, ZERO_SCALE=plan.zero_scale or 0.0,
           MULTIPLIER=plan.multiplier, CLAMP=plan.clamp_to_max, MBITS=plan.element.mbits,
           BIAS=plan.element.bias, MAX_CODE=plan.element.max_code, FNUZ=plan.fnuz,
           HARDWARE=hardware_e4m3(x, plan.element), UNIT_STRIDE=x.stride(1) == 1)
    return as_record(reference.FP8BlockArray, codes, scales, (bm, bn), plan.profile)


_VALUES: dict[tuple[str, torch.device], torch.Tensor] = {}


def _values(fmt: Format, device: torch.device) -> torch.Tensor:
    """The float32 value of each of ``fmt``'s 256 codes on ``device`` (the reference's decode;
    NaN codes the canonical quiet NaN, which the store writes anyway), made once per device."""
    key = (fmt.name, device)
    if key not in _VALUES:
        values = codec.decode(fmt, np.arange(256, dtype=np.uint8), np.float32)
        _VALUES[key] = torch.from_numpy(np.ascontiguousarray(values, np.float32)).to(device)
    return _VALUES[key]


def dequantize_fp8_block(codes: torch.Tensor, scales: torch.Tensor, *,
                         block: tuple[int, int] = (128, 128), profile: str = "deepseek",
                         dtype: Any = torch.float32) -> torch.Tensor:
    """Decode FP8 block codes exactly as ``mxformats.schemes.fp8_block.dequantize_fp8_block``
    (vLLM ``scaled_dequantize``): ``float32(code) x float32(scale)`` rounded to float32, then
    to ``dtype`` (float32, bfloat16, float16, float64; torch or numpy). ``codes``: uint8
    ``[M, N]``; ``scales``: ``[ceil(M / bm), ceil(N / bn)]`` float32, bfloat16 or float16."""
    record = reference.get_producer(profile)
    bm, bn = reference.check_block(block)
    codes = require_tensor(codes, "dequantize_fp8_block", KERNELS)
    scales = require_tensor(scales, "dequantize_fp8_block", KERNELS)
    if codes.dtype != torch.uint8 or codes.ndim != 2:
        raise ValueError(f"codes must be a 2-D uint8 array, got {codes.dtype} "
                         f"{tuple(codes.shape)}")
    if scales.dtype not in FLOAT_KINDS:
        raise NotImplementedError(f"dequantize_fp8_block ({KERNELS}): scales of {scales.dtype}")
    grid = reference.scale_grid(tuple(codes.shape), (bm, bn))
    if tuple(scales.shape) != grid:
        raise ValueError(f"scales have shape {tuple(scales.shape)}; {tuple(codes.shape)} in "
                         f"tiles of {(bm, bn)} needs {grid}")
    out_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np.dtype(dtype).name)
    if out_dtype not in OUTPUT_KINDS:
        raise NotImplementedError(f"dequantize_fp8_block ({KERNELS}): output {out_dtype}")
    codes, scales = codes.contiguous(), scales.contiguous()
    rows, cols = codes.shape
    out = torch.empty((rows, cols), dtype=out_dtype, device=codes.device)
    if rows and cols:
        launch_grid, tiles = _tiling(codes, (bm, bn), grid)
        launch(_dequantize_fp8_block_kernel, launch_grid, codes, codes,
               _values(record.code_format, codes.device), scales, out, rows, cols, *grid,
               **tiles, SCALE_KIND=FLOAT_KINDS[scales.dtype], OUT_KIND=OUTPUT_KINDS[out_dtype])
    return out
