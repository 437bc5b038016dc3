"""The machinery every fast path shares: chunk and task sizes, the thread count
(:func:`workers`, :data:`THREADS_VARIABLE`) and the threads that run the chunks
(``_parallel``), and the readers of numpy / torch input as float32 bits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.arith import BF16
from mxformats.containers import tensor_to_numpy

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["BLOCK", "CHUNK_BLOCKS", "CHUNK_ELEMENTS", "TASK_CHUNKS", "THREADS_VARIABLE", "workers"]

#: Blocks of 32 handled per chunk: 2048 blocks = 256 KiB of float32, so a chunk's input and its
#: scratch stay in a core's L2 cache.
CHUNK_BLOCKS = 2048
BLOCK = 32
#: Elements per chunk where there are no blocks (256 KiB of float32).
CHUNK_ELEMENTS = CHUNK_BLOCKS * BLOCK
#: Chunks per task a thread takes (a task allocates its scratch once).
TASK_CHUNKS = 16

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_MAGNITUDE = np.uint32(0x7FFFFFFF)
#: float32 bits below the 12 the E2M1 table reads (sign, 8 exponent bits, 3 mantissa bits).
_E2M1_LOW_BITS = 20
_EXPONENT_SHIFT = 23
_NONFINITE_EXPONENT = 0xFF
#: The environment variable that caps :func:`workers` (e.g. ``1`` in each worker of a process
#: pool, which runs one task per core).
THREADS_VARIABLE = "MXFORMATS_THREADS"


def workers() -> int:
    """Threads a fast path uses when the caller gives no ``threads``: the positive integer in
    :data:`THREADS_VARIABLE` when it is set, else the CPUs this process may run on
    (the validator's pool processes set 1: :mod:`mxformats.validate.executors.local`).
    ValueError for a value that is not a positive integer."""
    given = os.environ.get(THREADS_VARIABLE)
    if given is not None:
        if not given.strip().isdigit() or int(given) < 1:
            raise ValueError(f"{THREADS_VARIABLE} must be a positive integer, got {given!r}")
        return int(given)
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _parallel(count: int, work: Callable[[int, int], None], threads: int | None,
              chunk: int) -> None:
    """Run ``work(start, stop)`` over ``[0, count)`` in tasks of :data:`TASK_CHUNKS` chunks of
    ``chunk`` rows, on up to ``threads`` threads (default :func:`workers`). A thread takes the
    next task when it finishes one, so a core shared with another process does not hold the
    others back."""
    task = chunk * TASK_CHUNKS
    bounds = [*range(0, count, task), count]
    n = max(1, min(threads or workers(), len(bounds) - 1))
    if n == 1:
        work(0, count)
        return
    with ThreadPoolExecutor(n) as pool:
        for done in [pool.submit(work, lo, hi) for lo, hi in pairwise(bounds)]:
            done.result()


def _float_input(x: object) -> NDArray[Any] | None:
    """``x`` as numpy data when it is a numpy array or a torch tensor (same bytes), else None
    (Python floats and lists go to the reference)."""
    tensor = tensor_to_numpy(x)
    if tensor is not None:
        return tensor
    return x if isinstance(x, np.ndarray) else None


def _along_axis(x: object, dtypes: tuple[np.dtype[Any], ...],
                axis: int) -> tuple[NDArray[Any], int] | None:
    """``x`` as numpy data (:func:`_float_input`) and ``axis`` made non-negative, when the
    data is of one of ``dtypes``, not empty, and has that axis (on a little-endian machine);
    None sends the call to the reference."""
    data = _float_input(x)
    if (
        data is None
        or data.dtype not in dtypes
        or data.size == 0
        or not -data.ndim <= axis < data.ndim
    ):
        return None
    return data, axis % data.ndim


def _float32_bits(chunk: NDArray[Any], into: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """The float32 bits of a chunk of float32, bfloat16 or float16 values (exact widening)."""
    if chunk.dtype == _F32:
        return chunk.view(np.uint32)
    if chunk.dtype == BF16:
        np.left_shift(chunk.view(np.uint16), 16, out=into, dtype=np.uint32)
    else:
        np.copyto(into.view(np.float32), chunk)
    return into


def _row_maxima(magnitude: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """The largest of each row of non-negative float32 bits (one flat reduceat loop)."""
    rows, size = magnitude.shape
    flat = magnitude.reshape(-1)
    return np.maximum.reduceat(flat, np.arange(0, rows * size, size))

