"""The error statistics of a dequantized weight against its source, reduced on the device to
the bits :mod:`mxformats.fast.moments` defines.

:func:`moments` gives the :class:`~mxformats.fast.moments.Moments` of ``d`` (float32) against
``x`` (bfloat16, float16 or float32) where both live: only the ``len(TERMS) × LANES`` float64
lane totals come back to the host. The definition's order is kept, not approximated: element
``i`` belongs to piece ``i // PIECE`` and lane ``i % LANES``, each (piece, lane) is one chain
of additions in increasing ``i`` from +0.0 (a program holds :data:`PIECES_GPU` pieces × LANES
chains and steps through its pieces together), and the per-piece sums are added in piece
order by a second kernel. Every term is one float64 operation as written, launched without
FMA contraction, so the bits are the compiled pass's and numpy's on every device
(``tests/kernels/test_triton_moments.py`` compares them).
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from mxformats.fast.moments import LANES, PIECE, TERMS, Moments

from .int4 import FLOAT_KINDS, launch, on_interpreter

__all__ = ["moments"]

#: Pieces a program sums at once: two on a GPU (a warp of 32 chains), up to 64 in the
#: interpreter, where every step of the loop costs the same whatever the tile.
PIECES_GPU, PIECES_INTERPRETER = 2, 64
_TERMS = len(TERMS)
_STEPS = PIECE // LANES


@triton.jit
def _piece_sums_kernel(x_ptr: tl.tensor, d_ptr: tl.tensor, shift_ptr: tl.tensor,
                       out_ptr: tl.tensor, n: tl.tensor, pieces: tl.tensor, steps: tl.tensor,
                       KIND: tl.constexpr, PIECES: tl.constexpr, LANES: tl.constexpr,
                       PIECE: tl.constexpr) -> None:
    """Each (piece, lane) chain's seven sums (:data:`~mxformats.fast.moments.TERMS`) into
    ``out`` (float64 ``[pieces, 7, LANES]``); ``shift``: float64 ``[Kx, Kd]``."""
    piece = tl.program_id(0).to(tl.int64) * PIECES + tl.arange(0, PIECES)[:, None]
    lane = tl.arange(0, LANES)[None, :]
    kx = tl.load(shift_ptr)
    kd = tl.load(shift_ptr + 1)
    first = piece * PIECE + lane
    s0 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    s1 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    s2 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    s3 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    s4 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    s5 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    s6 = tl.zeros([PIECES, LANES], dtype=tl.float64)
    for k in range(steps):
        i = first + k * LANES
        m = i < n
        # past n: x = d = 0, so every term is +0.0 (the centred ones by the where)
        raw = tl.load(x_ptr + i, mask=m, other=0)
        if KIND == 1:  # bfloat16 by its bits (widen_to_float32, inlined: a call costs the
            # interpreter more than the step)
            x = (raw.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
                tl.float32, bitcast=True).to(tl.float64)
        else:
            x = raw.to(tl.float64)
        d = tl.load(d_ptr + i, mask=m, other=0.0).to(tl.float64)
        cx = tl.where(m, x - kx, 0.0)
        cd = tl.where(m, d - kd, 0.0)
        e = d - x
        s0 += x * x
        s1 += e * e
        s2 += cx
        s3 += cd
        s4 += cx * cx
        s5 += cd * cd
        s6 += cx * cd
    at = out_ptr + piece * (7 * LANES) + lane
    ok = (piece < pieces) & (lane < LANES)
    tl.store(at, s0, mask=ok)
    tl.store(at + LANES, s1, mask=ok)
    tl.store(at + 2 * LANES, s2, mask=ok)
    tl.store(at + 3 * LANES, s3, mask=ok)
    tl.store(at + 4 * LANES, s4, mask=ok)
    tl.store(at + 5 * LANES, s5, mask=ok)
    tl.store(at + 6 * LANES, s6, mask=ok)


@triton.jit
def _fold_kernel(partial_ptr: tl.tensor, out_ptr: tl.tensor, pieces: tl.tensor,
                 WIDTH: tl.constexpr, TILE: tl.constexpr) -> None:
    """``out[j]`` = the ``WIDTH``-wide rows of ``partial`` added in row (piece) order from
    +0.0, one chain per column."""
    j = tl.arange(0, TILE)
    ok = j < WIDTH
    total = tl.zeros([TILE], dtype=tl.float64)
    for p in range(pieces):
        total += tl.load(partial_ptr + p * WIDTH + j, mask=ok, other=0.0)
    tl.store(out_ptr + j, total, mask=ok)


def lane_totals(d: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The definition's steps 1-3 on the device: float64 ``[len(TERMS), LANES]`` lane
    totals of float32 ``d`` against ``x`` (same number of elements, C order), on their
    device."""
    flat_d, flat_x = d.reshape(-1), x.reshape(-1)
    n = flat_d.numel()
    totals = torch.zeros((_TERMS, LANES), dtype=torch.float64, device=d.device)
    if n == 0:
        return totals
    kind = FLOAT_KINDS[flat_x.dtype]
    shift = torch.stack([flat_x[0].to(torch.float64), flat_d[0].to(torch.float64)])
    pieces = -(-n // PIECE)
    per_program = (min(PIECES_INTERPRETER, triton.next_power_of_2(pieces))
                   if on_interpreter(d) else PIECES_GPU)
    partial = torch.empty((pieces, _TERMS, LANES), dtype=torch.float64, device=d.device)
    launch(_piece_sums_kernel, (triton.cdiv(pieces, per_program),), d, flat_x, flat_d, shift,
           partial, n, pieces, min(_STEPS, -(-n // LANES)), KIND=kind, PIECES=per_program,
           LANES=LANES, PIECE=PIECE, num_warps=1)  # one warp: a chain a thread
    launch(_fold_kernel, (1,), d, partial, totals, pieces, WIDTH=_TERMS * LANES,
           TILE=triton.next_power_of_2(_TERMS * LANES), num_warps=1)
    return totals


def moments(d: torch.Tensor, x: torch.Tensor) -> Moments | None:
    """The :class:`~mxformats.fast.moments.Moments` of float32 ``d`` against ``x`` when
    both are finite, from the device's lane totals; None otherwise (the caller's numpy path
    then says which). A NaN or infinity in either makes the sum of ``(d-x)**2`` NaN or
    infinite, which finite terms never reach; ``x`` varies exactly when the sum of
    ``(x-Kx)**2`` is positive, and alike for ``d``
    (:func:`mxformats.fast.compiled.finish` gives the reasons)."""
    if d.dtype != torch.float32 or x.dtype not in FLOAT_KINDS or d.numel() != x.numel():
        return None
    totals = lane_totals(d, x).cpu().numpy()
    if not np.isfinite(totals[1]).all():
        return None
    return Moments.from_lanes(totals, d.numel(), bool(totals[4].sum() > 0),
                              bool(totals[5].sum() > 0))
