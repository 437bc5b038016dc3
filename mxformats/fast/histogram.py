"""How many times each byte value occurs in a tensor: the 256-bin histogram the scale checks
read an E8M0 or E4M3 scale tensor by (``mxformats validate --level scales`` counts every
scale byte of a checkpoint, 5.6 % of a Kimi MXFP4 repository).

:func:`byte_counts` runs the compiled count (:func:`mxformats.fast.compiled.count_bytes`)
where numba imports (:mod:`mxformats.fast.jit`), else ``np.bincount``, which widens
every byte to a 64-bit index first (about ten times slower); the counts are the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.fast import jit

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["BYTE_VALUES", "byte_counts", "first_byte_in"]

#: Bins of :func:`byte_counts`: one per byte value.
BYTE_VALUES = 256


def byte_counts(a: NDArray[Any]) -> NDArray[np.int64]:
    """``counts[b]``: how many bytes of ``a`` (any dtype of 1-byte items, any shape) are
    ``b``; :data:`BYTE_VALUES` int64 counts. ValueError for wider items."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.dtype.itemsize != 1:
        raise ValueError(f"byte counts of {flat.dtype} items (1-byte items only)")
    data = flat.view(np.uint8)
    kernels = jit.compiled()
    if kernels is None:
        return np.bincount(data, minlength=BYTE_VALUES).astype(np.int64)
    counts = np.zeros(BYTE_VALUES, dtype=np.int64)
    kernels.count_bytes(data, counts)
    return counts


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
