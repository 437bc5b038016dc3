"""Triton INT4 kernels: symmetric group quantization, the INT4 word packings, dequantization.

Byte-identical to the numpy reference :mod:`mxformats.schemes.int4` (same names and arguments, torch
tensors in and out). Spec: ``spec/int4-schemes.md`` (the producers' and consumers' arithmetic)
and ``spec/int4-layouts.md`` (the nibble layouts).

- :func:`quantize_int4`: profiles ``compressed-tensors`` (``s = dtype(amax / 7.5)``, ``q =
  round_half_even(dtype(x / s))``: true divisions in float32 rounded to the input dtype, the
  way torch computes a bfloat16 or float16 division) and ``quark`` (``s`` in the input dtype,
  ``max``-ed with 2^-23, then ``float32(x) * (1 / s)``).
- :func:`pack_int4` / :func:`unpack_int4`: the three layouts of
  :data:`mxformats.schemes.int4.LAYOUTS`.
- :func:`dequantize_int4`: consumers ``compressed-tensors`` (``q × s`` rounded to the scale's
  dtype) and ``quark`` (``q × s`` in float32), then rounded once to ``dtype``.

GPU arithmetic equals the interpreter's: every division is ``tl.math.div_rn``, rounding to
bfloat16 is done on the bits (round to nearest even, see :func:`round_to_bfloat16`) because the
interpreter's own float32 -> bfloat16 cast truncates, NaN/Inf inputs are found explicitly (the
quantizers refuse them, like the reference) and kernels are compiled without FMA contraction.
NaN *outputs* of :func:`dequantize_int4` (a NaN scale, or Inf × 0) are a NaN whose sign and
payload are implementation-defined, as for every consumer (``spec/mx.md`` §6).

Float64 inputs and scales are not supported (``NotImplementedError``): no producer writes them
and Triton's float64 arithmetic differs between the interpreter and the GPUs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from mxformats.formats import E4M3FN
from mxformats.schemes import int4 as reference

from .. import calls
from ..calls import as_record, require_kernel_float, require_tensor
from ..int4_plan import (
    as_int8,
    check_axis,
    check_group_scales,
    check_int4_call,
    dequantize_claims,
    dequantize_plan,
    quantize_claims,
    quantize_plan,
    require_int32_words,
)
from ..mx_plan import F32_INF_BITS, FloatLayout

__all__ = ["SUPPORTED", "dequantize_int4", "pack_int4", "quantize_int4", "unpack_int4"]

SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_int4": tuple(("int4", name) for name, record in reference.PRODUCERS.items()
                           if quantize_claims(record)),
    "dequantize_int4": tuple(("int4", name) for name, record in reference.CONSUMERS.items()
                             if dequantize_claims(record)),
    "pack_int4": tuple(("int4", layout) for layout in reference.LAYOUTS),
    "unpack_int4": tuple(("int4", layout) for layout in reference.LAYOUTS),
}

#: The float dtypes the kernels take and return, and the code the kernels switch on.
FLOAT_KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
#: Output dtypes of the dequantizers: the input kinds plus float64 (an exact widening).
OUTPUT_KINDS = {**FLOAT_KINDS, torch.float64: 3}
#: This backend's name in the shared argument checks' messages.
KERNELS = "Triton"
#: ``torch.finfo(dtype).eps``: compressed-tensors' scale for an all-zero group.
_MACHINE_EPS = {kind: float(torch.finfo(dtype).eps) for dtype, kind in FLOAT_KINDS.items()}
#: E4M3FN's bit layout, the one :func:`hardware_e4m3` can answer yes for.
E4M3FN_LAYOUT = FloatLayout.of_format(E4M3FN)
#: Elements per program: about 1 ms per program under the interpreter, so big tiles there.
TILE_GPU, TILE_INTERPRETER = 4096, 1 << 16


# -- launching --------------------------------------------------------------------------------


def on_interpreter(t: torch.Tensor) -> bool:
    """Whether kernels on ``t`` run in the Triton interpreter (a CPU tensor)."""
    return t.device.type == "cpu"


def hardware_e4m3(t: torch.Tensor, layout: FloatLayout) -> bool:
    """Whether kernels on ``t``'s device encode float32 to ``layout`` with the hardware
    conversion (Triton's ``.to(tl.float8e4nv)``, compiled to ``cvt.rn.satfinite.e4m3x2.f32``):
    only for E4M3FN.

    That instruction needs sm_89 or later (PTX ISA, "cvt": the ``.e4m3x2`` destination
    "requires sm_89 or higher"); ``.rn`` rounds to the nearest value, ties to even, subnormals
    included, and ``.satfinite`` makes NaN the NaN code and a value beyond ±448, ±Inf included,
    ±448: the bit-arithmetic encoder's results wherever the kernels use it (a finite value,
    saturating; a NaN's code is replaced after). So CUDA devices of compute capability 8.9 and
    later take it; the interpreter, older GPUs and ROCm (whose FP8 conversions are not these
    instructions) keep the integer encoder. ``tests/kernels`` holds both equal to the reference
    and to each other on a GPU.
    """
    return (layout == E4M3FN_LAYOUT and t.device.type == "cuda" and torch.version.hip is None
            and torch.cuda.get_device_capability(t.device) >= (8, 9))


def tile_elements(t: torch.Tensor) -> int:
    return TILE_INTERPRETER if on_interpreter(t) else TILE_GPU


def launch(kernel: Any, grid: tuple[int, ...], t: torch.Tensor, *args: Any, **meta: Any) -> None:
    """Run ``kernel[grid](*args, **meta)`` without FMA contraction.

    On the interpreter numpy's floating-point warnings are silenced: NaN and Inf lanes are
    handled explicitly in the kernels (and masked lanes compute garbage that is never stored).
    """
    if on_interpreter(t):
        with np.errstate(all="ignore"):
            kernel[grid](*args, enable_fp_fusion=False, **meta)
    else:
        with torch.cuda.device(t.device):
            kernel[grid](*args, enable_fp_fusion=False, **meta)


def host_tensor(a: np.ndarray) -> torch.Tensor:
    """A host array as a CPU tensor with the same bytes and shape (bfloat16 as torch's; a
    read-only file mapping copied, since torch takes writable memory; a 0-d array stays
    0-d)."""
    host = np.ascontiguousarray(a).reshape(a.shape)
    if not host.flags.writeable:
        host = host.copy()
    if host.dtype.name == "bfloat16":
        return torch.from_numpy(host.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(host)


def as_torch_dtype(dtype: object) -> torch.dtype:
    """A torch dtype from a torch dtype, a numpy dtype-like or a name (TypeError otherwise)."""
    return calls.as_torch_dtype(dtype, KERNELS)


def kernel_float(dtype: torch.dtype, what: str) -> int:
    """The kernel's code (:data:`FLOAT_KINDS`) for a float input dtype; float64 is
    NotImplementedError, the rest TypeError (the reference's error for non-float input)."""
    return require_kernel_float(dtype, what, FLOAT_KINDS, KERNELS)


def rows_view(t: torch.Tensor, axis: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """``t`` with ``axis`` moved last, as a 2-D ``(rows, n)`` tensor (a view when strides
    allow, so transposed and sliced inputs are read in place) and the moved shape."""
    moved = t.movedim(axis, -1)
    return moved.reshape(-1, moved.shape[-1]), tuple(moved.shape)


# -- shared arithmetic ------------------------------------------------------------------------


@triton.jit
def round_to_bfloat16(v: tl.tensor) -> tl.tensor:
    """float32 ``v`` rounded to the nearest bfloat16 (ties to even), as float32; NaN stays NaN.

    Done on the bits: the interpreter's float32 -> bfloat16 cast truncates, a GPU's rounds.
    """
    bits = v.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, rounded.to(tl.float32, bitcast=True))


@triton.jit
def element_offsets(row: tl.tensor, col: tl.tensor, stride_r: tl.tensor, stride_c: tl.tensor,
                    UNIT_STRIDE: tl.constexpr) -> tl.tensor:
    """Storage offsets of elements ``(row, col)`` of a strided 2-D view. ``UNIT_STRIDE`` (the
    host saw ``stride_c == 1``) tells the compiler that adjacent columns are adjacent bytes,
    so a thread's neighbouring elements are one vector load and a reduction along a row stays
    in the thread (``benchmarks/ptx_cost.py``, ``pack_int4``: 51.3 -> 9.3 PTX per element)."""
    return row * stride_r + (col if UNIT_STRIDE else col * stride_c)


@triton.jit
def widen_to_float32(x: tl.tensor, KIND: tl.constexpr) -> tl.tensor:
    """``x`` of the dtype of ``KIND`` as float32 (exact); bfloat16 through its bits, because
    the interpreter's bfloat16 -> float32 cast gets subnormals wrong."""
    if KIND == 1:
        wide = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        wide = x.to(tl.float32)
    return wide


#: The float32 bits of +Inf: a magnitude's bits at or above it are Inf or NaN.
INF_BITS = tl.constexpr(F32_INF_BITS)


@triton.jit
def magnitude_bits(x: tl.tensor, KIND: tl.constexpr) -> tl.tensor:
    """``|x|``'s float32 bits as int32: their integer order is the order of the magnitudes,
    and every NaN is above +Inf (so a maximum propagates NaN, and one compare with
    :data:`INF_BITS` finds a non-finite value among many)."""
    return widen_to_float32(x, KIND).to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def round_to_kind(v: tl.tensor, KIND: tl.constexpr) -> tl.tensor:
    """float32 ``v`` rounded once (nearest even) to the dtype of ``KIND`` (FLOAT_KINDS /
    OUTPUT_KINDS), returned as float32 (float64 for kind 3, an exact widening)."""
    if KIND == 1:
        out = round_to_bfloat16(v)
    elif KIND == 2:
        out = v.to(tl.float16).to(tl.float32)
    elif KIND == 3:
        out = v.to(tl.float64)
    else:
        out = v
    return out


@triton.jit
def store_kind(ptr: tl.tensor, v: tl.tensor, mask: tl.tensor, KIND: tl.constexpr) -> None:
    """Store ``v``, already rounded to the dtype of ``KIND``, into ``ptr`` (an exact cast)."""
    if KIND == 1:  # through the bits, like widen_to_float32
        high = (v.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16)
        tl.store(ptr, high.to(tl.bfloat16, bitcast=True), mask=mask)
    elif KIND == 2:
        tl.store(ptr, v.to(tl.float16), mask=mask)
    else:
        tl.store(ptr, v, mask=mask)


@triton.jit
def round_and_store_canonical_nan(ptr: tl.tensor, v: tl.tensor, mask: tl.tensor,
                                  KIND: tl.constexpr) -> None:
    """float32 ``v`` rounded once (nearest even) to the dtype of ``KIND`` (OUTPUT_KINDS) and
    stored into ``ptr``, every NaN the canonical quiet NaN the reference decoders write
    (``mxformats.arith.canonical_nan``: float32 0x7FC00000, bfloat16 0x7FC0, float16 0x7E00,
    float64 0x7FF8000000000000). Chosen on the integer bits after the last float operation,
    whose own NaN is the GPU's 0x7FFFFFFF (0x7FFF from a float32 -> float16 conversion) or,
    under the interpreter, x86's (a NaN operand's sign and payload, 0xFFC00000 for Inf * 0).
    bfloat16 is rounded on the bits (as :func:`round_to_bfloat16`), where one NaN test serves
    both the rounding and the canonical NaN."""
    nan = v != v
    if KIND == 1:
        bits = v.to(tl.int32, bitcast=True)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        half = tl.where(nan, 0x7FC0, rounded).to(tl.uint16)
        tl.store(ptr, half.to(tl.bfloat16, bitcast=True), mask=mask)
    elif KIND == 2:
        half = v.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.int32)
        half = tl.where(nan, 0x7E00, half).to(tl.uint16)
        tl.store(ptr, half.to(tl.float16, bitcast=True), mask=mask)
    elif KIND == 3:
        wide = tl.where(nan, 0x7FF8000000000000, v.to(tl.float64).to(tl.int64, bitcast=True))
        tl.store(ptr, wide.to(tl.float64, bitcast=True), mask=mask)
    else:
        bits = tl.where(nan, 0x7FC00000, v.to(tl.int32, bitcast=True))
        tl.store(ptr, bits.to(tl.float32, bitcast=True), mask=mask)


@triton.jit
def round_half_even_int4(v: tl.tensor) -> tl.tensor:
    """``clamp(round_half_even(v), -8, 7)`` for float32 ``v`` as int32 (clamping first is the
    same because the bounds are integers; adding 1.5 × 2^23 rounds to an integer, ties even)."""
    clamped = tl.minimum(tl.maximum(v, -8.0), 7.0)
    return ((clamped + 12582912.0) - 12582912.0).to(tl.int32)


@triton.jit
def raise_flag(flag_ptr: tl.tensor, bad: tl.tensor) -> None:
    """Set the int32 at ``flag_ptr`` to 1 if any entry of the 2-D ``bad`` is set: one atomic,
    and only then (an atomic from every program on one address would serialise them)."""
    if tl.max(tl.max(bad.to(tl.int32), 1), 0) > 0:
        tl.atomic_max(flag_ptr, 1)


# -- quantize ---------------------------------------------------------------------------------


@triton.jit
def _group_tile(pid: tl.tensor, rows: tl.tensor, groups_per_row: tl.tensor, GROUP: tl.constexpr,
                GROUP_PAD: tl.constexpr, BLOCK_G: tl.constexpr) -> tuple[Any, Any, Any, Any]:
    """The groups of program ``pid``: (row, group in row, element in group, element mask)."""
    gid = pid.to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)
    row = gid // groups_per_row
    group = gid % groups_per_row
    j = tl.arange(0, GROUP_PAD)
    mask = (row < rows)[:, None] & (j < GROUP)[None, :]
    return row, group, j, mask


@triton.jit
def _quantize_int4_kernel(x_ptr: tl.tensor, q_ptr: tl.tensor, s_ptr: tl.tensor,
                          bad_ptr: tl.tensor, rows: tl.tensor, groups_per_row: tl.tensor,
                          stride_r: tl.tensor, stride_c: tl.tensor, GROUP: tl.constexpr,
                          GROUP_PAD: tl.constexpr, BLOCK_G: tl.constexpr, KIND: tl.constexpr,
                          EPS: tl.constexpr, RECIPROCAL: tl.constexpr,
                          UNIT_STRIDE: tl.constexpr) -> None:
    row, group, j, mask = _group_tile(tl.program_id(0), rows, groups_per_row, GROUP, GROUP_PAD,
                                      BLOCK_G)
    col = group[:, None] * GROUP + j[None, :]
    x = tl.load(x_ptr + element_offsets(row[:, None], col, stride_r, stride_c, UNIT_STRIDE),
                mask=mask, other=0.0)
    xf = widen_to_float32(x, KIND)
    # A group holding NaN or ±Inf has a maximum at or above INF_BITS: flagged, its scale and
    # codes never returned (the call raises).
    amax_bits = tl.max(magnitude_bits(x, KIND), 1)
    raise_flag(bad_ptr, (amax_bits >= INF_BITS)[:, None])
    amax = amax_bits.to(tl.float32, bitcast=True)
    scale = round_to_kind(tl.math.div_rn(amax, 7.5), KIND)
    if RECIPROCAL:
        scale = tl.maximum(scale, EPS)
        product = xf * tl.math.div_rn(1.0, scale)[:, None]
        q = round_half_even_int4(product)
    else:
        scale = tl.where(scale == 0.0, EPS, scale)
        quotient = round_to_kind(tl.math.div_rn(xf, scale[:, None]), KIND)
        q = round_half_even_int4(quotient)
    n = groups_per_row * GROUP
    tl.store(q_ptr + row[:, None] * n + col, q.to(tl.int8), mask=mask)
    group_ok = row < rows
    if RECIPROCAL:
        tl.store(s_ptr + row * groups_per_row + group, scale, mask=group_ok)
    else:
        store_kind(s_ptr + row * groups_per_row + group, scale, group_ok, KIND)


def _group_meta(x: torch.Tensor, group: int, groups: int) -> dict[str, int]:
    """Tile constants for ``groups`` groups of ``group`` elements (no bigger than needed)."""
    pad = triton.next_power_of_2(group)
    block = min(max(1, tile_elements(x) // pad), triton.next_power_of_2(groups))
    return {"GROUP": group, "GROUP_PAD": pad, "BLOCK_G": block}


def quantize_int4(
    x: torch.Tensor, *, group_size: int | None = 32, axis: int = -1,
    profile: str = "compressed-tensors",
) -> reference.Int4Array:
    """Symmetric INT4 quantization, byte-identical to :func:`mxformats.quantize_int4`.

    ``x``: a float32, bfloat16 or float16 tensor of any shape and strides; ``group_size``
    elements per scale along ``axis`` (None: one scale per slice). Returns the reference's
    :class:`~mxformats.schemes.int4.Int4Array` (unpacks as ``q, scales``):
    ``q`` int8 in [-8, 7] of ``x``'s shape, ``scales`` of ``x``'s shape with ``axis`` divided
    by ``group_size``, in ``x``'s dtype (compressed-tensors) or float32 (quark). Both may be
    views with ``axis`` moved back in place. Raises as the reference: ValueError for an unknown
    profile, NaN/±Inf or a length that is not a positive multiple of ``group_size``.
    Spec: ``int4-schemes.md``.
    """
    check_int4_call("quantize_int4", profile, group_size, SUPPORTED["quantize_int4"], KERNELS)
    x = require_tensor(x, "quantize_int4", KERNELS)
    kind = kernel_float(x.dtype, "quantize_int4")
    if x.ndim == 0:
        x = x.reshape(1)
    ax = check_axis(x.ndim, axis)
    x2d, moved_shape = rows_view(x, ax)
    rows, n = x2d.shape
    group = n if group_size is None else group_size
    if n == 0 or n % group:
        raise ValueError(f"the quantized axis has length {n}, not a positive multiple of "
                         f"group_size {group}: neither producer defines it")
    plan = quantize_plan(profile, KERNELS)
    groups_per_row = n // group
    q = torch.empty((rows, n), dtype=torch.int8, device=x.device)
    scales = torch.empty((rows, groups_per_row), device=x.device,
                         dtype=torch.float32 if plan.reciprocal else x.dtype)
    bad = torch.zeros(1, dtype=torch.int32, device=x.device)
    meta = _group_meta(x, group, rows * groups_per_row)
    grid = (triton.cdiv(rows * groups_per_row, meta["BLOCK_G"]),)
    if rows:
        eps = _MACHINE_EPS[kind] if plan.eps is None else plan.eps
        launch(_quantize_int4_kernel, grid, x, x2d, q, scales, bad, rows, groups_per_row,
               x2d.stride(0), x2d.stride(1), KIND=kind, EPS=eps,
               RECIPROCAL=plan.reciprocal, UNIT_STRIDE=x2d.stride(1) == 1, **meta)
    if bad.item():
        raise ValueError(f"quantize_int4(profile={profile!r}): the input holds NaN or ±Inf; "
                         "NaN and ±Inf are implementation-defined for this producer (NaN "
                         "scales, undefined float→int casts) and are refused")
    scale_shape = (*moved_shape[:-1], groups_per_row)
    return as_record(reference.Int4Array, q.reshape(moved_shape).movedim(-1, ax),
                     scales.reshape(scale_shape).movedim(-1, ax), group_size, ax, profile)


# -- dequantize -------------------------------------------------------------------------------


@triton.jit
def _dequantize_int4_kernel(q_ptr: tl.tensor, s_ptr: tl.tensor, out_ptr: tl.tensor,
                            bad_ptr: tl.tensor, rows: tl.tensor, groups_per_row: tl.tensor,
                            stride_qr: tl.tensor, stride_qc: tl.tensor, stride_sr: tl.tensor,
                            stride_sc: tl.tensor,
                            GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_G: tl.constexpr,
                            SCALE_KIND: tl.constexpr, OUT_KIND: tl.constexpr,
                            FLOAT32_PRODUCT: tl.constexpr, UNIT_STRIDE: tl.constexpr) -> None:
    row, group, j, mask = _group_tile(tl.program_id(0), rows, groups_per_row, GROUP, GROUP_PAD,
                                      BLOCK_G)
    col = group[:, None] * GROUP + j[None, :]
    q = tl.load(q_ptr + element_offsets(row[:, None], col, stride_qr, stride_qc, UNIT_STRIDE),
                mask=mask, other=0)
    raise_flag(bad_ptr, (q < -8) | (q > 7))
    s = tl.load(s_ptr + row * stride_sr + group * stride_sc, mask=row < rows, other=0.0)
    product = q.to(tl.float32) * widen_to_float32(s, SCALE_KIND)[:, None]
    if not FLOAT32_PRODUCT:
        product = round_to_kind(product, SCALE_KIND)
    out = round_to_kind(product, OUT_KIND)
    n = groups_per_row * GROUP
    store_kind(out_ptr + row[:, None] * n + col, out, mask, OUT_KIND)


def dequantize_int4(
    q: torch.Tensor, scales: torch.Tensor, *, group_size: int | None = 32, axis: int = -1,
    profile: str = "compressed-tensors", dtype: object = torch.float32,
) -> torch.Tensor:
    """``q × scale`` as the consumer ``profile`` computes it, then rounded once to ``dtype``;
    byte-identical to :func:`mxformats.dequantize_int4` (NaN outputs: any NaN).

    ``q``: an integer tensor in [-8, 7]; ``scales``: float32, bfloat16 or float16 with ``axis``
    of length ``n / group_size``; ``dtype``: float32, bfloat16, float16 or float64 (torch, numpy
    or a name). Returns a contiguous tensor of ``q``'s shape. Raises as the reference.
    Spec: ``int4-schemes.md``, "Dequantization".
    """
    check_int4_call("dequantize_int4", profile, group_size, SUPPORTED["dequantize_int4"],
                    KERNELS)
    values = as_int8(q, "dequantize_int4", ValueError, KERNELS)
    s = require_tensor(scales, "scales", KERNELS)
    scale_kind = kernel_float(s.dtype, "dequantize_int4 scales")
    out_dtype = as_torch_dtype(dtype)
    ax, n, size = check_group_scales(values, s, group_size, axis)
    q2d, moved_shape = rows_view(values, ax)
    s2d, _ = rows_view(s, ax)
    rows = q2d.shape[0]
    out = torch.empty((rows, n), dtype=out_dtype, device=values.device)
    bad = torch.zeros(1, dtype=torch.int32, device=values.device)
    if rows and n:
        groups_per_row = n // size
        meta = _group_meta(values, size, rows * groups_per_row)
        grid = (triton.cdiv(rows * groups_per_row, meta["BLOCK_G"]),)
        launch(_dequantize_int4_kernel, grid, values, q2d, s2d, out, bad, rows, groups_per_row,
               q2d.stride(0), q2d.stride(1), s2d.stride(0), s2d.stride(1),
               SCALE_KIND=scale_kind, OUT_KIND=OUTPUT_KINDS[out_dtype],
               FLOAT32_PRODUCT=dequantize_plan(profile).float32_product,
               UNIT_STRIDE=q2d.stride(1) == 1, **meta)
    if bad.item():
        raise ValueError("dequantize_int4: values must lie in [-8, 7]")
    return out.reshape(moved_shape).movedim(-1, ax).contiguous()


# -- packing ----------------------------------------------------------------------------------


def nibble_shifts(layout: str) -> int:
    """The nibble each of the 8 elements of a word goes to, as 8 nibbles of one int:
    nibble k holds the position of element k (the inverse of ``NIBBLE_ORDER``)."""
    code = 0
    for position, element in enumerate(reference.NIBBLE_ORDER[layout]):
        code |= position << (4 * element)
    return code


@triton.jit
def _word_tile(pid: tl.tensor, rows: tl.tensor, words: tl.tensor,
               BLOCK_W: tl.constexpr) -> tuple[Any, Any, Any, Any]:
    """The words of program ``pid``: (row, word in row, element in word, word mask)."""
    wid = pid.to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    row = wid // words
    word = wid % words
    return row, word, tl.arange(0, 8), row < rows


@triton.jit
def _pack_int4_kernel(q_ptr: tl.tensor, out_ptr: tl.tensor, bad_ptr: tl.tensor,
                      rows: tl.tensor, n: tl.tensor, words: tl.tensor, stride_r: tl.tensor,
                      stride_c: tl.tensor, SHIFTS: tl.constexpr, OFFSET: tl.constexpr,
                      BLOCK_W: tl.constexpr, UNIT_STRIDE: tl.constexpr) -> None:
    row, word, k, word_ok = _word_tile(tl.program_id(0), rows, words, BLOCK_W)
    col = word[:, None] * 8 + k[None, :]
    mask = word_ok[:, None] & (col < n)
    q = tl.load(q_ptr + element_offsets(row[:, None], col, stride_r, stride_c, UNIT_STRIDE),
                mask=mask, other=-OFFSET)
    q = q.to(tl.int32)
    raise_flag(bad_ptr, ((q + 8) & -16) != 0)
    nibble = ((q + OFFSET) & 0xF).to(tl.uint32)
    shift = ((SHIFTS >> (4 * k)) & 0xF) * 4
    packed = tl.sum(nibble << shift[None, :].to(tl.uint32), 1)
    tl.store(out_ptr + row * words + word, packed.to(tl.int32, bitcast=True), mask=word_ok)


def pack_int4(
    q: torch.Tensor, *, layout: str = "compressed-tensors", axis: int = -1
) -> torch.Tensor:
    """Pack integers in [-8, 7] eight per int32 word along ``axis`` in ``layout``;
    byte-identical to :func:`mxformats.pack_int4` (``ceil(n / 8)`` words, padding
    nibbles 0x0). Returns a contiguous int32 tensor. Spec: ``int4-layouts.md``."""
    reference.check_layout(layout)
    t = as_int8(q, "pack_int4", TypeError, KERNELS)
    ax = check_axis(t.ndim, axis)
    q2d, moved_shape = rows_view(t, ax)
    rows, n = q2d.shape
    words = -(-n // 8)
    out = torch.empty((rows, words), dtype=torch.int32, device=t.device)
    bad = torch.zeros(1, dtype=torch.int32, device=t.device)
    if rows and words:
        block = min(max(1, tile_elements(t) // 8), triton.next_power_of_2(rows * words))
        launch(_pack_int4_kernel, (triton.cdiv(rows * words, block),), t, q2d, out, bad, rows, n,
               words, q2d.stride(0), q2d.stride(1), SHIFTS=nibble_shifts(layout),
               OFFSET=reference.NIBBLE_OFFSET[layout], BLOCK_W=block,
               UNIT_STRIDE=q2d.stride(1) == 1)
    if bad.item():
        raise ValueError("pack_int4: values must lie in [-8, 7]")
    return out.reshape(*moved_shape[:-1], words).movedim(-1, ax).contiguous()


@triton.jit
def unpack_words(packed: tl.tensor, SHIFTS: tl.constexpr, OFFSET: tl.constexpr) -> tl.tensor:
    """int32 words ``[B]`` to their 8 values ``[B, 8]`` (int32 in [-8, 7]), element ``k`` of a
    word from the nibble ``SHIFTS`` names for it (:func:`nibble_shifts`), less ``OFFSET``."""
    k = tl.arange(0, 8)
    shift = ((SHIFTS >> (4 * k)) & 0xF) * 4
    tl.static_assert(OFFSET == 0 or OFFSET == 8, "the layouts' offsets are 0 and 8")
    # (nibble - OFFSET) mod 16 is the nibble XOR OFFSET; its two's-complement value is that
    # nibble moved to the top of the word and shifted back arithmetically
    flipped = packed.to(tl.int32, bitcast=True)
    if OFFSET == 8:
        flipped = flipped ^ -0x77777778  # 0x88888888 as int32: every nibble's top bit
    value = (flipped[:, None] << (28 - shift)[None, :]) >> 28
    return value


@triton.jit
def _unpack_int4_kernel(w_ptr: tl.tensor, out_ptr: tl.tensor, rows: tl.tensor, size: tl.tensor,
                        words: tl.tensor, stride_r: tl.tensor, stride_c: tl.tensor,
                        SHIFTS: tl.constexpr, OFFSET: tl.constexpr,
                        BLOCK_W: tl.constexpr, UNIT_STRIDE: tl.constexpr) -> None:
    row, word, k, word_ok = _word_tile(tl.program_id(0), rows, words, BLOCK_W)
    packed = tl.load(w_ptr + element_offsets(row, word, stride_r, stride_c, UNIT_STRIDE),
                     mask=word_ok, other=0)
    col = word[:, None] * 8 + k[None, :]
    tl.store(out_ptr + row[:, None] * size + col, unpack_words(packed, SHIFTS, OFFSET).to(tl.int8),
             mask=word_ok[:, None] & (col < size))


def unpack_int4(
    packed: torch.Tensor, *, layout: str = "compressed-tensors", axis: int = -1,
    size: int | None = None,
) -> torch.Tensor:
    """Inverse of :func:`pack_int4`, byte-identical to :func:`mxformats.unpack_int4`:
    int32 (or uint32) words to int8 in [-8, 7]; ``size`` (default ``8 × words``) trims the
    padding of the last word. Returns a contiguous tensor. Spec: ``int4-layouts.md``."""
    reference.check_layout(layout)
    t = require_int32_words(packed, "unpack_int4", KERNELS)
    ax = check_axis(t.ndim, axis)
    w2d, moved_shape = rows_view(t.view(torch.int32), ax)
    rows, words = w2d.shape
    n = 8 * words if size is None else size
    if not 8 * (words - 1) < n <= 8 * words and not (words == 0 and n == 0):
        raise ValueError(f"size {n} does not fit {words} words of 8 nibbles")
    out = torch.empty((rows, n), dtype=torch.int8, device=t.device)
    if rows and words:
        block = min(max(1, tile_elements(t) // 8), triton.next_power_of_2(rows * words))
        launch(_unpack_int4_kernel, (triton.cdiv(rows * words, block),), t, w2d, out, rows, n,
               words, w2d.stride(0), w2d.stride(1), SHIFTS=nibble_shifts(layout),
               OFFSET=reference.NIBBLE_OFFSET[layout], BLOCK_W=block,
               UNIT_STRIDE=w2d.stride(1) == 1)
    return out.reshape(*moved_shape[:-1], n).movedim(-1, ax).contiguous()

