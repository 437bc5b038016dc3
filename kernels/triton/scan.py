"""``mxformats validate --level full --device``: the full scan's pass on a torch device.

:class:`DeviceScan` has the four functions of :mod:`mxformats.fast.compiled_scan`, with the same
arguments (numpy arrays in, outputs written into the numpy arrays given) and the same answers:
the largest code magnitude of each unit of packed 4-bit codes and whether every code equals
the first (:func:`_nibble_peaks_kernel`), the largest masked byte of each tile of byte codes
(:func:`_tile_peaks_kernel`), the checksum :func:`mxformats.fast.scan.checksum` defines
(:func:`_checksum_kernel`: uint64 products and sums, which wrap modulo 2**64 in any order),
and the byte or uint16 counts (``torch.bincount``). Every answer is an integer, so the order
a GPU reduces in cannot change it. Only the peaks, counts, flags and partial sums come back.
:func:`mxformats.fast.scan.on_device` makes the scan use it for a task.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from numpy.typing import NDArray

from .int4 import host_tensor, launch, on_interpreter

__all__ = ["DeviceScan"]

#: Bytes per program: 4096 on a GPU (16 per thread), 1 Mi in the interpreter.
TILE_GPU, TILE_INTERPRETER = 4096, 1 << 20
_MASK64 = (1 << 64) - 1


@triton.jit
def _nibble_peaks_kernel(rows_ptr: tl.tensor, peaks_ptr: tl.tensor, differ_ptr: tl.tensor,
                         units: tl.tensor, unit: tl.tensor, pattern: tl.tensor,
                         SIGN_MAGNITUDE: tl.constexpr, FLIP: tl.constexpr,
                         UNITS: tl.constexpr, WIDTH: tl.constexpr) -> None:
    """``UNITS`` units of ``unit`` bytes (``WIDTH`` its power of two): each unit's largest code
    magnitude into ``peaks``; this program's count of bytes other than ``pattern`` into
    ``differ``."""
    u = tl.program_id(0).to(tl.int64) * UNITS + tl.arange(0, UNITS)
    k = tl.arange(0, WIDTH)
    inside = (u < units)[:, None] & (k < unit)[None, :]
    b = tl.load(rows_ptr + u[:, None] * unit + k[None, :], mask=inside, other=0).to(tl.int32)
    lo = b & 0xF
    hi = b >> 4
    if SIGN_MAGNITUDE:
        lo = lo & 7
        hi = hi & 7
    else:
        lo = lo ^ FLIP
        hi = hi ^ FLIP
        lo = tl.maximum(lo, 8) - tl.minimum(lo, 8)
        hi = tl.maximum(hi, 8) - tl.minimum(hi, 8)
    top = tl.max(tl.where(inside, tl.maximum(lo, hi), 0), axis=1)
    tl.store(peaks_ptr + u, top.to(tl.uint8), mask=u < units)
    other = tl.sum(tl.sum((inside & (b != pattern)).to(tl.int32), axis=1), axis=0)
    tl.store(differ_ptr + tl.program_id(0), other)


@triton.jit
def _tile_peaks_kernel(codes_ptr: tl.tensor, peaks_ptr: tl.tensor, rows: tl.tensor,
                       cols: tl.tensor, grid_cols: tl.tensor, bm: tl.tensor, bn: tl.tensor,
                       MASK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr) -> None:
    """One ``bm`` x ``bn`` tile (``BM`` x ``BN`` its powers of two): the largest ``byte &
    MASK`` over its real elements."""
    t = tl.program_id(0)
    s = tl.program_id(1)
    r = t.to(tl.int64) * bm + tl.arange(0, BM)
    c = s.to(tl.int64) * bn + tl.arange(0, BN)
    inside = ((tl.arange(0, BM) < bm) & (r < rows))[:, None] \
        & ((tl.arange(0, BN) < bn) & (c < cols))[None, :]
    b = tl.load(codes_ptr + r[:, None] * cols + c[None, :], mask=inside, other=0).to(tl.int32)
    top = tl.max(tl.max(b & MASK, axis=1), axis=0)
    tl.store(peaks_ptr + t * grid_cols + s, top.to(tl.uint8))


@triton.jit
def _checksum_kernel(words_ptr: tl.tensor, partial_ptr: tl.tensor, count: tl.tensor,
                     WORDS: tl.constexpr) -> None:
    """This program's sum of ``w_i * (2 i + 1)`` over its ``WORDS`` uint64 words, modulo
    2**64."""
    i = tl.program_id(0).to(tl.int64) * WORDS + tl.arange(0, WORDS)
    w = tl.load(words_ptr + i, mask=i < count, other=0).to(tl.uint64, bitcast=True)
    odd = (2 * i + 1).to(tl.uint64, bitcast=True)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(w * odd, axis=0).to(tl.int64, bitcast=True))


def _power_of_two(n: int) -> int:
    return int(triton.next_power_of_2(max(n, 1)))


class DeviceScan:
    """The full scan's pass on ``device`` (a GPU, or the CPU under ``TRITON_INTERPRET=1``);
    methods as :mod:`mxformats.fast.compiled_scan`'s functions."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def _on_device(self, a: NDArray[Any]) -> torch.Tensor:
        t = host_tensor(a)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _tile(self, t: torch.Tensor) -> int:
        return TILE_INTERPRETER if on_interpreter(t) else TILE_GPU

    def nibble_peaks(self, rows: NDArray[Any], unit: int, sign_magnitude: bool,
                     flip: np.uint8, peaks: NDArray[Any], counts: NDArray[Any],
                     histogram: bool) -> tuple[bool, int]:
        """:func:`mxformats.fast.compiled_scan.nibble_peaks`."""
        data = self._on_device(rows).reshape(-1)
        units = peaks.size
        if units:
            width = _power_of_two(unit)
            per_program = max(1, self._tile(data) // width)
            programs = triton.cdiv(units, per_program)
            out = torch.empty(units, dtype=torch.uint8, device=self.device)
            differ = torch.empty(programs, dtype=torch.int32, device=self.device)
            first = int(rows[0, 0]) & 0xF
            launch(_nibble_peaks_kernel, (programs,), data, data, out, differ, units, unit,
                   first | first << 4, SIGN_MAGNITUDE=bool(sign_magnitude), FLIP=int(flip),
                   UNITS=per_program, WIDTH=width)
            peaks.reshape(-1)[:] = out.cpu().numpy()
            same = not bool(differ.any().item())
        else:
            same = True
        if histogram:
            counts += torch.bincount(data.to(torch.int32), minlength=256).cpu().numpy()
        return same, self._checksum(data)

    def tile_peaks(self, codes: NDArray[Any], mask: np.uint8, bm: int, bn: int,
                   peaks: NDArray[Any]) -> None:
        """:func:`mxformats.fast.compiled_scan.tile_peaks`."""
        rows, cols = codes.shape
        if not peaks.size:
            return
        data = self._on_device(codes)
        out = torch.empty(peaks.shape, dtype=torch.uint8, device=self.device)
        launch(_tile_peaks_kernel, peaks.shape, data, data, out, rows, cols, peaks.shape[1],
               bm, bn, MASK=int(mask), BM=_power_of_two(bm), BN=_power_of_two(bn))
        peaks[:] = out.cpu().numpy()

    def _checksum(self, data: torch.Tensor) -> int:
        """The checksum of flat uint8 ``data`` on the device: zero-padded to whole words."""
        if not data.numel():
            return 0
        pad = -data.numel() % 8
        if pad:
            data = torch.cat([data, torch.zeros(pad, dtype=torch.uint8, device=data.device)])
        words = data.view(torch.int64)
        count = words.numel()
        per_program = min(self._tile(data) // 8, _power_of_two(count))
        programs = triton.cdiv(count, per_program)
        partial = torch.empty(programs, dtype=torch.int64, device=data.device)
        launch(_checksum_kernel, (programs,), data, words, partial, count, WORDS=per_program)
        return sum(int(p) & _MASK64 for p in partial.cpu().tolist()) & _MASK64

    def checksum_words(self, data: NDArray[Any]) -> int:
        """:func:`mxformats.fast.compiled_scan.checksum_words`."""
        return self._checksum(self._on_device(data).reshape(-1))

    def count_words(self, data: NDArray[Any], counts: NDArray[Any]) -> None:
        """:func:`mxformats.fast.compiled_scan.count_words`."""
        words = self._on_device(data.view(np.int16)).to(torch.int32) & 0xFFFF
        counts += torch.bincount(words, minlength=1 << 16).cpu().numpy()
