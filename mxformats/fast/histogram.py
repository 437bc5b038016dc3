"""How many times each byte value occurs in a tensor: the 256-bin histogram the scale checks
read an E8M0 or E4M3 scale tensor by (``mxformats validate --level scales`` counts every
scale byte of a checkpoint, 5.6 % of a Kimi MXFP4 repository).

:func:`byte_counts` runs the compiled count (:func:`mxformats.fast.compiled.count_bytes`)
where numba imports (:mod:`mxformats.fast.jit`), else ``np.bincount``, which widens
every byte to a 64-bit index first (about ten times slower); the counts are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.fast import jit

if TYPE_CHECKING:
    from numpy.typing import NDArray

#: The counts :func:`byte_counts` made inside :func:`counted_once`, by (address, length) of
#: the bytes counted, each with the bytes (held, so that the address is not reused).
_Memo = dict[tuple[int, int], tuple[Any, Any]]
_COUNTED: ContextVar[_Memo | None] = ContextVar("mxformats_byte_counts", default=None)

__all__ = ["BYTE_VALUES", "byte_counts", "counted_once", "first_byte_in"]

#: Bins of :func:`byte_counts`: one per byte value.
BYTE_VALUES = 256


def byte_counts(a: NDArray[Any]) -> NDArray[np.int64]:
    """``counts[b]``: how many bytes of ``a`` (any dtype of 1-byte items, any shape) are
    ``b``; :data:`BYTE_VALUES` int64 counts. ValueError for wider items."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.dtype.itemsize != 1:
        raise ValueError(f"byte counts of {flat.dtype} items (1-byte items only)")
    data = flat.view(np.uint8)
    memo = _COUNTED.get()
    key = (data.__array_interface__["data"][0], data.size)
    if memo is not None and key in memo:
        return memo[key][1].copy()  # type: ignore[no-any-return]
    kernels = jit.compiled()
    if kernels is None:
        counts = np.bincount(data, minlength=BYTE_VALUES).astype(np.int64)
    else:
        counts = np.zeros(BYTE_VALUES, dtype=np.int64)
        kernels.count_bytes(data, counts)
    if memo is not None:
        memo[key] = (data, counts.copy())
    return counts


@contextmanager
def counted_once() -> Iterator[None]:
    """Inside the block, :func:`byte_counts` of the same bytes (the same memory and length:
    one scale tensor that the scale checks, the decoded magnitude and the report's histogram
    each count) counts them once and answers the others from that count. The caller must not
    write to an array it counts inside the block."""
    token = _COUNTED.set({})
    try:
        yield
    finally:
        _COUNTED.reset(token)


def first_byte_in(a: NDArray[Any], members: NDArray[np.bool_]) -> int:
    """The flat (C-order) index of the first byte of ``a`` (1-byte items) whose value is set in
    ``members`` (:data:`BYTE_VALUES` bools), or -1: compiled where numba imports (it stops at
    that byte), else ``np.argmax`` of the mask; the same index."""
    data = np.ascontiguousarray(a).reshape(-1)
    if data.dtype.itemsize != 1:
        raise ValueError(f"bytes of {data.dtype} items (1-byte items only)")
    data = data.view(np.uint8)
    table = np.ascontiguousarray(members, dtype=np.bool_)
    if table.shape != (BYTE_VALUES,):
        raise ValueError(f"members: {BYTE_VALUES} bools, not shape {table.shape}")
    kernels = jit.compiled()
    if kernels is None:
        mask = table[data]
        return int(np.argmax(mask)) if mask.any() else -1
    return int(kernels.first_byte_in(data, table))
