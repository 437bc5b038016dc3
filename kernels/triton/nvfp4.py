"""Triton NVFP4 kernels: ``quantize_nvfp4`` and ``dequantize_nvfp4``, byte-identical to
:mod:`mxformats.schemes.nvfp4` (same names and arguments, torch tensors in and out).

The profile's choices come from its record through :mod:`mxformats.kernels.nvfp4_plan`, whose
module docstring lists the arithmetic. The tensor maximum is a two-pass reduction of ``|x|``'s
float32 bits as integers (a NaN is larger than every other pattern, so it propagates as in
``torch.amax``): pass 1 stores one partial maximum per program, pass 2 takes the maximum of up
to :data:`REDUCE_BLOCK` partials per program, repeated until one is left. An integer maximum has
one answer whatever the order, so the bytes do not depend on the launch grid. A caller's
``global_amax`` skips pass 1 and 2. The quantize kernel computes the global scale from that
maximum in every program (program 0 stores it), then the block scales and the codes; every
float operation is one correctly rounded float32 operation (divisions are ``tl.math.div_rn``,
kernels are launched with ``enable_fp_fusion=False``), bfloat16 and float16 roundings are done
on the bits (``round_to_kind``), and the E4M3 and E2M1 casts are integer arithmetic
(:mod:`._codec`). NaN or ±Inf anywhere in the input is refused with ValueError, as the
reference refuses it: each program raises a flag when a block maximum is not finite.
Spec: ``spec/nvfp4.md``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch
import triton
import triton.language as tl

from mxformats.schemes import nvfp4 as reference

from .. import nvfp4_plan as plans
from ..mx_plan import as_record, require_tensor
from ._codec import decode_to_float32
from ._e2m1 import E2M1_SIX_BITS, e2m1_magnitude_code
from .fp8 import _encode_float32, _flat_offsets
from .int4 import (
    E4M3FN_LAYOUT,
    FLOAT_KINDS,
    INF_BITS,
    KERNELS,
    OUTPUT_KINDS,
    as_torch_dtype,
    element_offsets,
    hardware_e4m3,
    launch,
    magnitude_bits,
    on_interpreter,
    raise_flag,
    round_and_store_canonical_nan,
    round_to_kind,
    rows_view,
    widen_to_float32,
)

__all__ = ["SUPPORTED", "dequantize_nvfp4", "quantize_nvfp4"]

SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_nvfp4": tuple(("e2m1", name) for name, record in reference.PRODUCERS.items()
                            if plans.quantize_claims(record)),
    "dequantize_nvfp4": tuple(("e2m1", name) for name, record in reference.CONSUMERS.items()
                              if plans.dequantize_claims(record)),
}

#: Elements per program of pass 1, and 16-element blocks per program of the quantize and
#: dequantize kernels: on a GPU 4096 elements (32 per thread: fewer PTX instructions per
#: element than 1024, benchmarks/ptx_cost.py), under the interpreter 32K (milliseconds per
#: program).
AMAX_ELEMENTS = {"gpu": 4096, "interpreter": 1 << 15}
BLOCKS = {"gpu": 256, "interpreter": 2048}
#: Partial maxima per program of pass 2.
REDUCE_BLOCK = 4096

_NUMPY_DTYPES = {torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
                 torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}
_KIND_OF = {np.dtype(np.float32): 0, np.dtype(ml_dtypes.bfloat16): 1, np.dtype(np.float16): 2}
#: The E2M1 code of 6.0, its largest magnitude.
_SIX_CODE = tl.constexpr(reference.E2M1.max_code)


def _numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The numpy dtype of a torch dtype (``object`` where numpy has none), for the plan's
    checks."""
    try:
        return _NUMPY_DTYPES.get(dtype) or np.dtype(str(dtype).removeprefix("torch."))
    except TypeError:
        return np.dtype(object)


def tile_kind(t: torch.Tensor) -> str:
    """The key of :data:`AMAX_ELEMENTS` and :data:`BLOCKS` for tensors like ``t``."""
    return "interpreter" if on_interpreter(t) else "gpu"


@triton.jit
def _amax_partial_kernel(x_ptr: tl.tensor, partial_ptr: tl.tensor, numel: tl.tensor,
                         n: tl.tensor, stride_r: tl.tensor, stride_c: tl.tensor,
                         KIND: tl.constexpr, BLOCK: tl.constexpr,
                         CONTIGUOUS: tl.constexpr) -> None:
    """Pass 1: the largest ``|x|`` bits among this program's ``BLOCK`` elements."""
    _, offset, mask = _flat_offsets(tl.program_id(0), numel, n, stride_r, stride_c, BLOCK,
                                    CONTIGUOUS)
    x = tl.load(x_ptr + offset, mask=mask, other=0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.max(magnitude_bits(x, KIND), 0))


@triton.jit
def _max_partials_kernel(partial_ptr: tl.tensor, out_ptr: tl.tensor, count: tl.tensor,
                         BLOCK: tl.constexpr) -> None:
    """Pass 2: the largest of this program's ``BLOCK`` partial maxima."""
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.load(partial_ptr + index, mask=index < count, other=0)
    tl.store(out_ptr + tl.program_id(0), tl.max(bits, 0))


@triton.jit
def _global_scale(amax: tl.tensor, ARITH_KIND: tl.constexpr, INVERSE: tl.constexpr,
                  SIX_M: tl.constexpr, AMAX_FLOOR: tl.constexpr, HAS_NONFINITE: tl.constexpr,
                  NONFINITE: tl.constexpr) -> tl.tensor:
    """The stored global scale for tensor maximum ``amax`` (float32, a value of the input
    dtype): ``amax / 6M`` or torch's ``6M / amax`` (a reciprocal, then a multiply), each
    operation rounded to the arithmetic dtype."""
    if INVERSE:
        reciprocal = round_to_kind(tl.math.div_rn(1.0, tl.maximum(amax, AMAX_FLOOR)), ARITH_KIND)
        stored = round_to_kind(reciprocal * SIX_M, ARITH_KIND)
    else:
        stored = round_to_kind(tl.math.div_rn(amax, SIX_M), ARITH_KIND)
    if HAS_NONFINITE:
        stored = tl.where((stored != stored) | (tl.abs(stored) == float("inf")), NONFINITE,
                          stored)
    return stored


@triton.jit
def _e2m1_code(q: tl.tensor, NAN_CODE: tl.constexpr) -> tl.tensor:
    """The E2M1 code of float32 ``q``: the nearest of 0, 0.5, 1, 1.5, 2, 3, 4, 6, ties to the
    even code, saturating at 6 (±Inf too); the sign bit iff ``q < 0`` (-0.0 is code 0, a
    negative that rounds to 0 code 8); ``NAN_CODE`` for NaN.

    The magnitude is :func:`~._e2m1.e2m1_magnitude_code` of ``|q|`` clamped to 6.0 on the bits,
    where ±Inf and NaN land too."""
    a = tl.minimum(q.to(tl.int32, bitcast=True) & 0x7FFFFFFF, E2M1_SIX_BITS)
    code = e2m1_magnitude_code(a, False) | tl.where(q < 0, 8, 0)
    if NAN_CODE != _SIX_CODE:  # a NaN's bits are clamped to 6.0's, whose code it then has
        code = tl.where(q != q, NAN_CODE, code)
    return code


@triton.jit
def _e2m1_to_float32(code: tl.tensor) -> tl.tensor:
    """E2M1 codes (int32, 0..15) as float32, on the bits: exponent field ``e``, mantissa ``m``;
    ``(1 + m / 2) 2**(e - 1)`` for ``e > 0``, ``m / 2`` for ``e = 0``."""
    field = (code >> 1) & 3
    mantissa = code & 1
    normal = ((field + 126) << 23) | (mantissa << 22)
    magnitude = tl.where(field > 0, normal, mantissa * 0x3F000000)
    return (magnitude | ((code & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _quantize_nvfp4_kernel(
    x_ptr: tl.tensor, amax_ptr: tl.tensor, codes_ptr: tl.tensor, scales_ptr: tl.tensor,
    global_ptr: tl.tensor, bad_ptr: tl.tensor, blocks: tl.tensor, blocks_per_row: tl.tensor,
    stride_r: tl.tensor, stride_c: tl.tensor,
    KIND: tl.constexpr, ARITH_KIND: tl.constexpr, INVERSE: tl.constexpr, SIX_M: tl.constexpr,
    AMAX_FLOOR: tl.constexpr, HAS_NONFINITE: tl.constexpr, NONFINITE: tl.constexpr,
    SCALE_FLOOR: tl.constexpr, SCALE_CLAMP: tl.constexpr, ZERO_BLOCK_SCALE: tl.constexpr,
    ZERO_BLOCK_BYTE: tl.constexpr, ZERO_AFTER_CAST: tl.constexpr, NAN_SCALE_BYTE: tl.constexpr,
    ELEMENT_NAN_CODE: tl.constexpr, BLOCKS_PER_PROGRAM: tl.constexpr, HARDWARE: tl.constexpr,
    UNIT_STRIDE: tl.constexpr,
) -> None:
    """One program: ``BLOCKS_PER_PROGRAM`` blocks of 16 consecutive elements of a row."""
    block = tl.program_id(0).to(tl.int64) * BLOCKS_PER_PROGRAM + tl.arange(0, BLOCKS_PER_PROGRAM)
    inside = block < blocks
    row, col = block // blocks_per_row, (block % blocks_per_row) * 16
    j = tl.arange(0, 16)
    mask = inside[:, None]
    x = tl.load(x_ptr + element_offsets(row[:, None], col[:, None] + j[None, :], stride_r,
                                        stride_c, UNIT_STRIDE), mask=mask, other=0.0)
    wide = widen_to_float32(x, KIND)
    block_bits = tl.max(magnitude_bits(x, KIND), 1)
    raise_flag(bad_ptr, (block_bits >= INF_BITS)[:, None])
    block_max = block_bits.to(tl.float32, bitcast=True)

    stored = _global_scale(tl.load(amax_ptr).to(tl.float32, bitcast=True), ARITH_KIND, INVERSE,
                           SIX_M, AMAX_FLOOR, HAS_NONFINITE, NONFINITE)
    if INVERSE:
        scale = round_to_kind(tl.math.div_rn(block_max, 6.0), ARITH_KIND) * stored
    else:
        scale = tl.math.div_rn(block_max, 6.0 * stored)
    if not ZERO_AFTER_CAST:
        scale = tl.where(scale == 0.0, ZERO_BLOCK_SCALE, scale)
    nan = scale != scale
    clamped = tl.minimum(tl.maximum(scale, SCALE_FLOOR), SCALE_CLAMP)
    scale_byte = _encode_float32(tl.where(nan, 0.0, clamped), 3, 7, 0x80, 0x7E, True, HARDWARE)
    if ZERO_AFTER_CAST:
        scale_byte = tl.where(scale_byte == 0, ZERO_BLOCK_BYTE, scale_byte)
    scale_byte = tl.where(nan, NAN_SCALE_BYTE, scale_byte)
    value = decode_to_float32(scale_byte, 4, 3, 7, 2)  # NaN for the NaN byte

    divisor = tl.math.div_rn(value, stored) if INVERSE else value * stored
    quotient = tl.math.div_rn(wide, divisor[:, None])
    codes = _e2m1_code(quotient, ELEMENT_NAN_CODE)
    tl.store(codes_ptr + block[:, None] * 16 + j[None, :], codes.to(tl.uint8), mask=mask)
    tl.store(scales_ptr + block, scale_byte.to(tl.uint8), mask=inside)
    if tl.program_id(0) == 0:
        tl.store(global_ptr, stored)


def _reduce_amax(x2d: torch.Tensor, kind: int) -> torch.Tensor:
    """The largest ``|x|`` of ``x2d`` as float32 bits in an int32 tensor of one element
    (passes 1 and 2)."""
    numel, n = x2d.numel(), x2d.shape[1]
    block = min(AMAX_ELEMENTS[tile_kind(x2d)], triton.next_power_of_2(numel))
    partial = torch.empty(triton.cdiv(numel, block), dtype=torch.int32, device=x2d.device)
    launch(_amax_partial_kernel, (partial.numel(),), x2d, x2d, partial, numel, n, x2d.stride(0),
           x2d.stride(1), KIND=kind, BLOCK=block, CONTIGUOUS=x2d.is_contiguous())
    while partial.numel() > 1:
        reduced = torch.empty(triton.cdiv(partial.numel(), REDUCE_BLOCK), dtype=torch.int32,
                              device=x2d.device)
        launch(_max_partials_kernel, (reduced.numel(),), x2d, partial, reduced, partial.numel(),
               BLOCK=min(REDUCE_BLOCK, triton.next_power_of_2(partial.numel())))
        partial = reduced
    return partial


def quantize_nvfp4(x: torch.Tensor, *, axis: int = -1, profile: str = "modelopt",
                   global_amax: float | None = None) -> reference.NVFP4Array:
    """Quantize ``x`` to NVFP4 along ``axis`` exactly as
    ``mxformats.schemes.nvfp4.quantize_nvfp4`` with the same profile does.

    ``x``: a float16, bfloat16 or float32 tensor, any shape and strides, its length along
    ``axis`` a positive multiple of 16. ``global_amax``: the tensor maximum the global scale
    is computed from (default ``max|x|``, the two-pass reduction), rounded to ``x``'s dtype.
    Returns the reference's :class:`~mxformats.schemes.nvfp4.NVFP4Array` (unpacks as ``codes,
    scales, global_scale``), its tensors on ``x``'s device: uint8 E2M1 codes one per element
    (``x``'s shape), uint8 E4M3FN block scales (``axis`` divided by 16), both contiguous, and
    the float32 global scale the profile's checkpoint stores (shape ``()`` or ``(1,)``).
    Raises what the reference raises (ValueError for NaN/±Inf in ``x``)."""
    x = require_tensor(x, "quantize_nvfp4", KERNELS)
    dtype = _numpy_dtype(x.dtype)
    ax = plans.check_quantize_args(tuple(x.shape), dtype, axis, profile)
    plan = plans.quantize_plan(profile, dtype)
    given = plans.check_global_amax(global_amax, dtype)
    kind = FLOAT_KINDS[x.dtype]
    x2d, moved_shape = rows_view(x, ax)
    rows, n = x2d.shape
    if given is None and rows == 0:
        raise ValueError("quantize_nvfp4: the maximum of an empty tensor is undefined")
    if given is None:
        amax = _reduce_amax(x2d, kind)
    else:
        amax = torch.tensor([np.float32(given).view(np.int32)], device=x.device)
    codes = torch.empty((rows, n), dtype=torch.uint8, device=x.device)
    scales = torch.empty((rows, n // 16), dtype=torch.uint8, device=x.device)
    global_scale = torch.empty(plan.global_shape, dtype=torch.float32, device=x.device)
    bad = torch.zeros(1, dtype=torch.int32, device=x.device)
    blocks = rows * (n // 16)
    per_program = min(BLOCKS[tile_kind(x)], triton.next_power_of_2(max(blocks, 1)))
    launch(_quantize_nvfp4_kernel, (max(1, triton.cdiv(blocks, per_program)),), x, x2d, amax,
           codes, scales, global_scale, bad, blocks, n // 16, x2d.stride(0), x2d.stride(1),
           KIND=kind, ARITH_KIND=_KIND_OF[plan.arithmetic], INVERSE=plan.inverse_global,
           SIX_M=plan.six_m, AMAX_FLOOR=plan.amax_floor,
           HAS_NONFINITE=plan.has_nonfinite_global, NONFINITE=plan.nonfinite_global,
           SCALE_FLOOR=plan.scale_floor, SCALE_CLAMP=plan.scale_clamp,
           ZERO_BLOCK_SCALE=plan.zero_block_scale,
           ZERO_BLOCK_BYTE=int(reference.E4M3FN.encode(np.float64(plan.zero_block_scale))),
           ZERO_AFTER_CAST=plan.zero_after_cast, NAN_SCALE_BYTE=plan.nan_scale_byte,
           ELEMENT_NAN_CODE=plan.element_nan_code, BLOCKS_PER_PROGRAM=per_program,
           HARDWARE=hardware_e4m3(x, E4M3FN_LAYOUT), UNIT_STRIDE=x2d.stride(1) == 1)
    if bad.item():
        raise ValueError(f"quantize_nvfp4(profile={profile!r}): the input holds NaN or ±Inf, "
                         "which both producers turn into NaN scales or fallbacks "
                         "(implementation-defined); refused")

    def back(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(*moved_shape[:-1], t.shape[-1]).movedim(-1, ax).contiguous()

    return as_record(reference.NVFP4Array, back(codes), back(scales), global_scale, plan.profile,
                     ax)


# -- dequantize -------------------------------------------------------------------------------


@triton.jit
def _dequantize_nvfp4_kernel(
    codes_ptr: tl.tensor, scales_ptr: tl.tensor, global_ptr: tl.tensor, out_ptr: tl.tensor,
    bad_ptr: tl.tensor, blocks: tl.tensor,
    GLOBAL_OP: tl.constexpr, PACKED: tl.constexpr, OUT_KIND: tl.constexpr,
    BLOCKS_PER_PROGRAM: tl.constexpr,
) -> None:
    """One program: ``BLOCKS_PER_PROGRAM`` blocks of 16 (rows of the contiguous codes, the
    quantized axis last; packed: element 2k in the low nibble of byte k)."""
    block = tl.program_id(0).to(tl.int64) * BLOCKS_PER_PROGRAM + tl.arange(0, BLOCKS_PER_PROGRAM)
    inside = block < blocks
    j = tl.arange(0, 16)
    element = block[:, None] * 16 + j[None, :]
    mask = inside[:, None]
    if PACKED:
        byte = tl.load(codes_ptr + element // 2, mask=mask, other=0).to(tl.int32)
        code = (byte >> ((j[None, :] & 1) * 4)) & 0xF
    else:
        code = tl.load(codes_ptr + element, mask=mask, other=0).to(tl.int32)
        raise_flag(bad_ptr, code > 0xF)
    e2m1 = _e2m1_to_float32(code)
    scale = decode_to_float32(tl.load(scales_ptr + block, mask=inside, other=0).to(tl.int32),
                              4, 3, 7, 2)
    stored = tl.load(global_ptr)
    # e2m1 x scale is exact (at most 6 significant bits): each line rounds once to float32.
    if GLOBAL_OP == 0:
        value = (e2m1 * scale[:, None]) * stored
    elif GLOBAL_OP == 1:
        value = (e2m1 * scale[:, None]) * tl.math.div_rn(1.0, stored)
    else:
        value = e2m1 * tl.math.div_rn(scale, stored)[:, None]
    round_and_store_canonical_nan(out_ptr + element, value, mask, OUT_KIND)


def _integer_codes(t: torch.Tensor, packed: bool) -> torch.Tensor:
    """Codes (or packed bytes) as uint8, checked as the reference checks them; uint8 codes
    above 15 are found by the kernel."""
    limit = 0xFF if packed else 0xF
    if t.dtype != torch.uint8 and t.numel() and (int(t.min()) < 0 or int(t.max()) > limit):
        if packed:
            raise ValueError("packed fp4 codes are bytes (0..255) and non-negative")
        raise ValueError("codes must be 4-bit E2M1 codes (0..15)")
    return t.to(torch.uint8)


def dequantize_nvfp4(codes: torch.Tensor, scales: torch.Tensor | None = None,
                     global_scale: torch.Tensor | None = None, *, axis: int = -1,
                     profile: str | None = None, packed: bool = False,
                     dtype: Any = torch.float32) -> torch.Tensor:
    """Decode NVFP4 weights exactly as ``mxformats.schemes.nvfp4.dequantize_nvfp4`` with the
    consumer ``profile`` does, then round once to ``dtype`` (float32, bfloat16, float16,
    float64; torch or numpy).

    ``codes``: integer E2M1 codes one per element, or two per byte (element 2k low) with
    ``packed=True``; ``scales``: uint8 E4M3FN bytes, one per 16 along ``axis``;
    ``global_scale``: the stored global scale (one value, read as float32). Returns a
    contiguous tensor of the unpacked codes' shape. Raises what the reference raises."""
    if scales is None or global_scale is None:
        raise ValueError("dequantize_nvfp4 needs scales and global_scale")
    c = require_tensor(codes, "dequantize_nvfp4", KERNELS)
    s = require_tensor(scales, "dequantize_nvfp4", KERNELS)
    g = require_tensor(global_scale, "dequantize_nvfp4", KERNELS)
    ax, plan = plans.check_dequantize_args(
        tuple(c.shape), _numpy_dtype(c.dtype), tuple(s.shape), _numpy_dtype(s.dtype), g.numel(),
        axis=axis, profile=profile, packed=packed)
    out_dtype = as_torch_dtype(dtype)
    c = _integer_codes(c, packed)
    moved = c.movedim(ax, -1)
    n = moved.shape[-1] * (2 if packed else 1)
    rows = moved.numel() // max(moved.shape[-1], 1)
    out = torch.empty((rows, n), dtype=out_dtype, device=c.device)
    bad = torch.zeros(1, dtype=torch.int32, device=c.device)
    blocks = rows * (n // 16)
    if blocks:
        per_program = min(BLOCKS[tile_kind(c)], triton.next_power_of_2(blocks))
        launch(_dequantize_nvfp4_kernel, (triton.cdiv(blocks, per_program),), c,
               moved.contiguous(), s.movedim(ax, -1).contiguous(),
               g.to(device=c.device, dtype=torch.float32).reshape(1), out, bad, blocks,
               GLOBAL_OP=plan.global_op, PACKED=packed, OUT_KIND=OUTPUT_KINDS[out_dtype],
               BLOCKS_PER_PROGRAM=per_program)
    if bad.item():
        raise ValueError("codes must be 4-bit E2M1 codes (0..15)")
    return out.reshape(*moved.shape[:-1], n).movedim(-1, ax).contiguous()
