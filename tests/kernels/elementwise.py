"""One Triton kernel that maps an element function over a flat tensor, for the tests that hold
an encoder (a ``@triton.jit`` function of a value and one compile-time constant) to an oracle
on every input of a set."""

from __future__ import annotations

from typing import Any

import numpy as np
from conftest import requires

torch = requires("torch")
triton = requires("triton")
tl = requires("triton.language")
int4 = requires("mxformats.kernels.triton.int4")


@triton.jit
def _map_kernel(src_ptr: Any, out_ptr: Any, n: Any, FN: tl.constexpr, ARG: tl.constexpr,
                BLOCK: tl.constexpr) -> None:
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    v = tl.load(src_ptr + i, mask=mask, other=0.0)
    tl.store(out_ptr + i, FN(v, ARG).to(tl.uint8), mask=mask)


def map_to_bytes(fn: Any, arg: Any, values: Any, block: int) -> np.ndarray:
    """``fn(v, arg)`` of every element of the 1-D tensor ``values``, as uint8, ``block``
    elements per program, on ``values``' device; returned as a numpy array."""
    out = torch.empty(values.shape, dtype=torch.uint8, device=values.device)
    int4.launch(_map_kernel, (triton.cdiv(values.numel(), block),), values, values, out,
                values.numel(), FN=fn, ARG=arg, BLOCK=block)
    return out.cpu().numpy()
