"""Triton FP8 kernels: per-tensor casts, the E4M3FN -> E4M3FNUZ normalisation, W4A8 dequant.

Byte-identical to the numpy reference (same names and arguments, torch tensors in and out):

- :func:`quantize_fp8` (:func:`mxformats.schemes.fp8.quantize_fp8`): profile ``static`` (Quark;
  E4M3FN, E4M3FNUZ, E5M2): ``s = float32(amax) / fmt.max``, ``codes = fmt(clamp(dtype(x / s),
  ±fmt.max))``, the quotient rounded to the input dtype first; the vLLM profiles
  ``vllm-fnuz``, ``dynamic-fn`` and ``dynamic-fnuz``: ``codes = fmt(clamp(float32(x) * (1 /
  s), ±M))`` with a NaN product becoming +M.
- :func:`e4m3fn_to_fnuz` (:func:`mxformats.conversions.e4m3fn_to_fnuz`): vLLM's MI300
  normalisation, the same bits with 0x80 (-0, the FNUZ NaN) made 0x00 and the scale doubled.
- :func:`dequantize_w4a8` (:func:`mxformats.schemes.w4a8.dequantize_w4a8`): Quark W4A8 weights,
  ``q × float32(s2 × s1)`` as vLLM folds the two scales.

Spec: ``spec/w4a8.md`` and ``spec/e4m3fnuz.md``. The per-tensor amax is a two-pass reduction
(partial maxima per program, then their max) with NaN handled explicitly: ``static`` refuses
NaN/±Inf like the reference (a NaN counts as +Inf in the maximum, and an infinite maximum
raises ValueError), the vLLM profiles skip NaN as ``fmaxf`` does. FP8 encoding is integer
arithmetic on the bits (:mod:`mxformats.kernels.triton._codec`); divisions are
``tl.math.div_rn``. NaN outputs of :func:`dequantize_w4a8` are a NaN whose sign and payload
are implementation-defined (``spec/mx.md`` §6).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mxformats.formats import E4M3FN, Format
from mxformats.schemes import fp8 as reference
from mxformats.schemes.int4 import NIBBLE_OFFSET

from ..calls import require_tensor
from ..fp8_plan import check_fnuz_args, check_fp8_args, quantize_claims
from ..int4_plan import check_w4a8_args
from ..mx_plan import FloatLayout
from ._codec import decode_float, encode_float
from .int4 import (
    KERNELS,
    OUTPUT_KINDS,
    as_torch_dtype,
    element_offsets,
    hardware_e4m3,
    kernel_float,
    launch,
    nibble_shifts,
    round_to_kind,
    rows_view,
    store_kind,
    tile_elements,
    unpack_words,
    widen_to_float32,
)

__all__ = ["SUPPORTED", "dequantize_w4a8", "e4m3fn_to_fnuz", "quantize_fp8"]

SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_fp8": tuple((fmt.name, name) for name, record in reference.PRODUCERS.items()
                          if quantize_claims(record) for fmt in record.formats),
    "e4m3fn_to_fnuz": (("e4m3fn", "vllm"),),
    "dequantize_w4a8": (("w4a8", "vllm"),),
}

# -- quantize_fp8 -----------------------------------------------------------------------------


@triton.jit
def _flat_offsets(pid: tl.tensor, numel: tl.tensor, n: tl.tensor, stride_r: tl.tensor,
                  stride_c: tl.tensor, BLOCK: tl.constexpr,
                  CONTIGUOUS: tl.constexpr) -> tuple[tl.tensor, tl.tensor, tl.tensor]:
    """Element indices of program ``pid`` in a ``(rows, n)`` view: (flat index, storage
    offset, mask). A contiguous view skips the per-element division."""
    index = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    offset = index if CONTIGUOUS else (index // n) * stride_r + (index % n) * stride_c
    return index, offset, index < numel


@triton.jit
def _amax_kernel(x_ptr: tl.tensor, partial_ptr: tl.tensor, numel: tl.tensor, n: tl.tensor,
                 stride_r: tl.tensor, stride_c: tl.tensor, KIND: tl.constexpr,
                 NAN_AS: tl.constexpr, BLOCK: tl.constexpr, CONTIGUOUS: tl.constexpr) -> None:
    """``max |x|`` over this program's elements, a NaN counting as ``NAN_AS``."""
    _, offset, mask = _flat_offsets(tl.program_id(0), numel, n, stride_r, stride_c, BLOCK,
                                          CONTIGUOUS)
    xf = widen_to_float32(tl.load(x_ptr + offset, mask=mask, other=0.0), KIND)
    magnitude = tl.where(xf != xf, NAN_AS, tl.abs(xf))
    tl.store(partial_ptr + tl.program_id(0), tl.max(magnitude, 0))


@triton.jit
def _encode_float32(v: tl.tensor, MBITS: tl.constexpr, BIAS: tl.constexpr,
                    SIGN_BIT: tl.constexpr, MAX_CODE: tl.constexpr,
                    NEGATIVE_ZERO: tl.constexpr, HARDWARE: tl.constexpr) -> tl.tensor:
    """Float32 ``v`` to the FP8 code (nearest even, subnormals kept, saturating; a NaN's code
    is the caller's to set). ``HARDWARE`` (E4M3FN only, :func:`.int4.hardware_e4m3`): one
    ``cvt.rn.satfinite.e4m3x2.f32`` per two elements instead of the integer encoder."""
    if HARDWARE:
        code = v.to(tl.float8e4nv, fp_downcast_rounding="rtne").to(tl.uint8, bitcast=True)
        return code.to(tl.int32)
    sign, s, exp, is_inf, is_nan = decode_float(v.to(tl.int32, bitcast=True), 8, 23, 127, 1)
    return encode_float(sign, s, exp, is_inf, is_nan, MBITS, BIAS, SIGN_BIT, MAX_CODE, True,
                        MAX_CODE, 0, NEGATIVE_ZERO, False)


@triton.jit
def _cast_fp8_kernel(x_ptr: tl.tensor, amax_ptr: tl.tensor, codes_ptr: tl.tensor,
                     scale_ptr: tl.tensor, numel: tl.tensor, n: tl.tensor, stride_r: tl.tensor,
                     stride_c: tl.tensor, KIND: tl.constexpr, LIMIT: tl.constexpr,
                     DIVIDE: tl.constexpr, ZERO_SCALE: tl.constexpr, MBITS: tl.constexpr,
                     BIAS: tl.constexpr, SIGN_BIT: tl.constexpr, MAX_CODE: tl.constexpr,
                     NEGATIVE_ZERO: tl.constexpr, HARDWARE: tl.constexpr,
                     BLOCK: tl.constexpr, CONTIGUOUS: tl.constexpr) -> None:
    index, offset, mask = _flat_offsets(tl.program_id(0), numel, n, stride_r, stride_c, BLOCK,
                                          CONTIGUOUS)
    xf = widen_to_float32(tl.load(x_ptr + offset, mask=mask, other=0.0), KIND)
    scale = tl.math.div_rn(tl.load(amax_ptr), LIMIT)
    if DIVIDE:
        scale = tl.where(scale == 0.0, ZERO_SCALE, scale)
        value = round_to_kind(tl.math.div_rn(xf, scale), KIND)
        value = tl.minimum(tl.maximum(value, -LIMIT), LIMIT)
    else:
        product = xf * tl.math.div_rn(1.0, scale)
        value = tl.where(product != product, LIMIT,
                         tl.minimum(tl.maximum(product, -LIMIT), LIMIT))
    codes = _encode_float32(value, MBITS, BIAS, SIGN_BIT, MAX_CODE, NEGATIVE_ZERO, HARDWARE)
    tl.store(codes_ptr + index, codes.to(tl.uint8), mask=mask)
    if tl.program_id(0) == 0:
        tl.store(scale_ptr, scale)


def quantize_fp8(
    x: torch.Tensor, fmt: Format | str = E4M3FN, *, profile: str = "static"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor FP8, byte-identical to :func:`mxformats.schemes.fp8.quantize_fp8`.

    ``x``: a float32, bfloat16 or float16 tensor of any shape and strides. Returns ``(codes,
    scale)``: uint8 codes of ``x``'s shape (contiguous) and a float32 scale of shape ``()``.
    Raises as the reference: ValueError for an unknown profile, a format the profile does not
    take, or NaN/±Inf with ``static``. Spec: ``w4a8.md``, "FP8 per-tensor".
    """
    element, plan = check_fp8_args(fmt, profile, SUPPORTED["quantize_fp8"], KERNELS)
    x = require_tensor(x, "quantize_fp8", KERNELS)
    kind = kernel_float(x.dtype, "quantize_fp8")
    x2d, _ = rows_view(x.reshape(1) if x.ndim == 0 else x, -1)
    numel, n = x2d.numel(), max(x2d.shape[1], 1)
    block = min(tile_elements(x), triton.next_power_of_2(max(numel, 1)))
    grid = (max(1, triton.cdiv(numel, block)),)
    partial = torch.zeros(grid[0], dtype=torch.float32, device=x.device)
    strides = (x2d.stride(0), x2d.stride(1))
    if numel:
        launch(_amax_kernel, grid, x, x2d, partial, numel, n, *strides, KIND=kind,
               NAN_AS=float("inf") if plan.refuse_non_finite else 0.0, BLOCK=block,
               CONTIGUOUS=x2d.is_contiguous())
    amax = torch.amax(partial).reshape(1)  # no NaN: the programs replaced it
    if plan.refuse_non_finite and bool(torch.isinf(amax).item()):
        raise ValueError(f"quantize_fp8(profile={profile!r}): the input holds NaN or ±Inf; NaN "
                         "and ±Inf are implementation-defined for this producer and are "
                         "refused")
    layout = FloatLayout.of_format(element)
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    scale = torch.empty((), dtype=torch.float32, device=x.device)
    launch(_cast_fp8_kernel, grid, x, x2d, amax, codes, scale, numel, n, *strides, KIND=kind,
           LIMIT=plan.limit, DIVIDE=not plan.reciprocal, ZERO_SCALE=plan.zero_scale,
           MBITS=layout.mbits, BIAS=layout.bias, SIGN_BIT=1 << (layout.bits - 1),
           MAX_CODE=layout.max_code, NEGATIVE_ZERO=layout.specials != 3,
           HARDWARE=hardware_e4m3(x, layout), BLOCK=block,
           CONTIGUOUS=x2d.is_contiguous())
    return codes, scale


# -- e4m3fn_to_fnuz ---------------------------------------------------------------------------


@triton.jit
def _fn_to_fnuz_kernel(codes_ptr: tl.tensor, out_ptr: tl.tensor, numel: tl.tensor,
                       n: tl.tensor, stride_r: tl.tensor, stride_c: tl.tensor,
                       BLOCK: tl.constexpr, CONTIGUOUS: tl.constexpr) -> None:
    index, offset, mask = _flat_offsets(tl.program_id(0), numel, n, stride_r, stride_c, BLOCK,
                                          CONTIGUOUS)
    code = tl.load(codes_ptr + offset, mask=mask, other=0)
    tl.store(out_ptr + index, tl.where(code == 0x80, 0, code).to(tl.uint8), mask=mask)


def e4m3fn_to_fnuz(codes: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's MI300 normalisation, byte-identical to
    :func:`mxformats.conversions.e4m3fn_to_fnuz`: the same bits read as E4M3FNUZ except that
    0x80 (FN -0, the FNUZ NaN) becomes 0x00, and the float32 scale doubled. The FN NaNs
    0x7F/0xFF stay as bits (the finite FNUZ ±240). Returns contiguous tensors.
    Spec: ``e4m3fnuz.md``, "Converting E4M3FN checkpoints"."""
    c, s = check_fnuz_args(codes, scale, KERNELS)
    c2d, _ = rows_view(c.reshape(1) if c.ndim == 0 else c, -1)
    out = torch.empty(c.shape, dtype=torch.uint8, device=c.device)
    numel = c2d.numel()
    if numel:
        block = min(tile_elements(c), triton.next_power_of_2(numel))
        launch(_fn_to_fnuz_kernel, (triton.cdiv(numel, block),), c, c2d, out, numel,
               c2d.shape[1], c2d.stride(0), c2d.stride(1), BLOCK=block,
               CONTIGUOUS=c2d.is_contiguous())
    # Doubling is exact in float32 (overflow gives Inf, as in numpy).
    return out, (s * 2).contiguous()


# -- dequantize_w4a8 --------------------------------------------------------------------------


@triton.jit
def _dequantize_w4a8_kernel(w_ptr: tl.tensor, s1_ptr: tl.tensor, s2_ptr: tl.tensor,
                            out_ptr: tl.tensor, rows: tl.tensor, words: tl.tensor,
                            stride_r: tl.tensor, stride_c: tl.tensor, stride_s2: tl.tensor,
                            SHIFTS: tl.constexpr, OFFSET: tl.constexpr, OUT_KIND: tl.constexpr,
                            BLOCK_W: tl.constexpr, UNIT_STRIDE: tl.constexpr) -> None:
    wid = tl.program_id(0).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    row, word = wid // words, wid % words
    ok = row < rows
    packed = tl.load(w_ptr + element_offsets(row, word, stride_r, stride_c, UNIT_STRIDE),
                     mask=ok, other=0)
    folded = tl.load(s2_ptr + row * stride_s2, mask=ok, other=0.0) * tl.load(s1_ptr)
    product = unpack_words(packed, SHIFTS, OFFSET).to(tl.float32) * folded[:, None]
    col = word[:, None] * 8 + tl.arange(0, 8)[None, :]
    store_kind(out_ptr + row[:, None] * (words * 8) + col, round_to_kind(product, OUT_KIND),
               ok[:, None], OUT_KIND)


def dequantize_w4a8(
    weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor, *,
    dtype: object = torch.float32,
) -> torch.Tensor:
    """Quark W4A8 weights as vLLM dequantizes them, byte-identical to
    :func:`mxformats.schemes.w4a8.dequantize_w4a8` (NaN outputs: any NaN): ``float32(q ×
    float32(s2 × s1))`` rounded once to ``dtype``.

    ``weight``: int32 ``[O, W]`` in the ``quark`` nibble order; ``weight_scale``: one float
    (``s1``); ``weight_scale_2``: ``[O]`` (``s2``), both read as float32. ``dtype``: float32,
    bfloat16, float16 or float64. Returns ``[O, 8 W]``. Spec: ``w4a8.md``, "Dequantization".
    """
    w, s1, s2 = check_w4a8_args(weight, weight_scale, weight_scale_2, KERNELS)
    s1, s2 = s1.to(w.device), s2.to(w.device)
    rows, words = w.shape
    out_dtype = as_torch_dtype(dtype)
    out = torch.empty((rows, 8 * words), dtype=out_dtype, device=w.device)
    if rows and words:
        block = min(max(1, tile_elements(w) // 8), triton.next_power_of_2(rows * words))
        w32 = w.view(torch.int32)
        launch(_dequantize_w4a8_kernel, (triton.cdiv(rows * words, block),), w, w32,
               s1.reshape(1), s2, out, rows, words, w32.stride(0), w32.stride(1), s2.stride(0),
               SHIFTS=nibble_shifts("quark"), OFFSET=NIBBLE_OFFSET["quark"],
               OUT_KIND=OUTPUT_KINDS[out_dtype], BLOCK_W=block, UNIT_STRIDE=w32.stride(1) == 1)
    return out
