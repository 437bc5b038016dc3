"""Arithmetic as the producers compute it: one dtype, one rounding, torch's rules on the CPU.

The leaf every scheme (:mod:`mxformats.schemes`) builds on. It knows the float dtypes a
checkpoint can hold and how torch rounds one operation on them, nothing about any format:

- :data:`BF16`: the one bfloat16 dtype (``ml_dtypes.bfloat16``) every module uses.
- :func:`as_float_array`: an input as a numpy array in its own float dtype (torch tensors too).
- :func:`arithmetic_dtype`, :func:`divide_in`, :func:`multiply_in`: one torch operation on
  tensors of a dtype (computed in torch's CPU "opmath" dtype, rounded once to the dtype;
  ``aten/src/ATen/OpMathType.h``, pytorch v2.9.0).
- :func:`round_once`, :func:`round_to`, :func:`round_half_even`: rounding exact values.
- :func:`canonical_nan`: every NaN of a decoder's output as the canonical quiet NaN.
- :func:`require_finite`: the producers' refusal of NaN and ±Inf inputs.
- :func:`check_axis`: the quantized axis of an array, as every scheme checks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.containers import tensor_to_numpy

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "BF16",
    "FLOAT_DTYPES",
    "arithmetic_dtype",
    "as_array",
    "as_float_array",
    "canonical_nan",
    "check_axis",
    "divide_in",
    "multiply_in",
    "require_finite",
    "round_half_even",
    "round_once",
    "round_to",
]

#: bfloat16 as numpy sees it (``ml_dtypes.bfloat16``): the one definition in the package.
BF16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
#: The input dtypes the producers take (torch float types a checkpoint can hold).
FLOAT_DTYPES = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64))


def as_array(x: object) -> NDArray[Any]:
    """``x`` as a numpy array in its own dtype: a torch tensor through
    :func:`mxformats.containers.tensor_to_numpy` (bfloat16 becomes ``ml_dtypes.bfloat16``
    holding the same bits), anything else through ``np.asarray``."""
    tensor = tensor_to_numpy(x)
    return np.asarray(x) if tensor is None else tensor


def as_float_array(x: object, what: str = "input") -> NDArray[Any]:
    """``x`` as a numpy array **in its own float dtype** (bfloat16 stays bfloat16).

    Accepts numpy float16/bfloat16/float32/float64 arrays, torch tensors of those dtypes
    (a torch bfloat16 tensor becomes an ``ml_dtypes.bfloat16`` array holding the same bits)
    and Python floats or sequences (float64). Anything else raises TypeError.
    """
    arr = as_array(x)
    if arr.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{what}: dtype {arr.dtype} is not one of float16, bfloat16, float32, float64"
        )
    return arr


def check_axis(ndim: int, axis: int) -> int:
    """``axis`` of an ``ndim``-d array in ``[0, ndim)``; ValueError when out of range."""
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-d array")
    return axis % ndim


def arithmetic_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype torch computes a ``dtype`` operation in on CPU: float32 for float16, bfloat16
    and float32 ("opmath"), float64 for float64. One such operation on exact inputs followed
    by rounding to ``dtype`` is the correctly rounded result (the 2p+2 rule: 24 ≥ 2·11+2)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def divide_in(a: ArrayLike, b: ArrayLike, dtype: np.dtype[Any]) -> NDArray[Any]:
    """``a / b`` as torch computes it for tensors of ``dtype``: in the arithmetic dtype, rounded
    once to ``dtype`` (bfloat16 ``W / s`` is ``bf16(W / s)``)."""
    op = arithmetic_dtype(dtype)
    quotient: NDArray[Any] = np.asarray(a, dtype=op) / np.asarray(b, dtype=op)
    return quotient.astype(dtype)


def multiply_in(a: ArrayLike, b: ArrayLike, dtype: np.dtype[Any]) -> NDArray[Any]:
    """``a * b`` as torch computes it for tensors of ``dtype`` (as :func:`divide_in`)."""
    op = arithmetic_dtype(dtype)
    product: NDArray[Any] = np.asarray(a, dtype=op) * np.asarray(b, dtype=op)
    return product.astype(dtype)


def round_half_even(v: NDArray[Any]) -> NDArray[Any]:
    """``torch.round``: to the nearest integer, ties to even (numpy's ``rint``)."""
    rounded: NDArray[Any] = np.rint(v)
    return rounded


def round_once(v: NDArray[np.float64], dtype: DTypeLike) -> NDArray[Any]:
    """Round exact float64 values once (nearest-even) to ``dtype``.

    float16, float32 and float64 are numpy's own correctly rounded casts. bfloat16 goes through
    float32 rounded *to odd* (truncate, then set the last bit if inexact), which makes the
    second rounding exact: no double rounding.
    """
    out = np.dtype(dtype)
    if out != BF16:
        direct: NDArray[Any] = v.astype(out)
        return direct
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = v.astype(np.float32)
        wide = nearest.astype(np.float64)
        overshoot = np.abs(wide) > np.abs(v)
        truncated = np.where(overshoot, np.nextafter(nearest, np.float32(0)), nearest)
        inexact = (truncated.astype(np.float64) != v) & ~np.isnan(v)
    bits = truncated.view(np.uint32) | inexact.astype(np.uint32)
    result: NDArray[Any] = bits.view(np.float32).astype(BF16)
    return result


def round_to(v: NDArray[np.float64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """Round exact values once into ``dtype`` (nearest-even, overflow to Inf), back as float64.

    bfloat16 goes through float32: every value rounded here (an element of at most four
    significant bits times a power of two >= 2**-127) is exact in float32 or beyond its range.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == BF16:
            return v.astype(np.float32).astype(BF16).astype(np.float64)
        return v.astype(dtype).astype(np.float64)


def canonical_nan(
    out: NDArray[Any], where: NDArray[np.bool_] | None = None
) -> NDArray[Any]:
    """``out`` with every NaN (or every element ``where`` is set) the canonical quiet NaN of its
    float type, sign clear: float32 0x7FC00000, bfloat16 0x7FC0, float16 0x7E00, float64
    0x7FF8000000000000 (a new array; ``out`` is not changed).

    The decoders' NaN outputs go through it because the bits hardware gives a NaN are not one
    thing: x86 returns the first NaN operand, or the negative default NaN 0xFFC00000 for
    ``Inf · 0``, and which operand is first differs between numpy's vector loop and its scalar
    tail; NVIDIA GPUs return 0x7FFFFFFF. Spec: spec/mx.md §6, spec/fp8-block.md, spec/nvfp4.md.
    """
    dtype = np.dtype(out.dtype)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    width, mbits = 8 * dtype.itemsize, int(ml_dtypes.finfo(dtype).nmant)
    canonical = ((1 << (width - 1)) - 1) ^ ((1 << (mbits - 1)) - 1)
    nan = np.isnan(out) if where is None else where
    bits = np.array(out).view(uint)
    bits[nan] = canonical
    result: NDArray[Any] = bits.view(dtype)
    return result


def require_finite(x: NDArray[Any], where: str) -> None:
    """Raise ValueError for NaN/±Inf: implementation-defined inputs (spec: int4-schemes.md)."""
    finite = np.isfinite(x.astype(np.float32) if x.dtype == BF16 else x)
    if not np.all(finite):
        bad = x[~finite].flat[0]
        raise ValueError(
            f"{where}: the input holds {bad!r}; NaN and ±Inf are implementation-defined for this "
            "producer (NaN scales, undefined float→int casts) and are refused"
        )
