"""``mxformats validate --device``: which device a run's reproduction and full scan use,
checked at startup, and the passes a worker runs there.

``--device cuda`` (ROCm's torch says ``cuda`` too), ``cuda:N``, or ``cpu``: the Triton
kernels of ``mxformats.kernels.triton.reproduce`` on CPU tensors, which Triton runs only in
its interpreter (``TRITON_INTERPRET=1``; how CI tests the path). Without ``--device`` the
compiled CPU passes run (:data:`mxformats.fast.passes.COMPILED`). torch and Triton are imported
only when a device is asked for: ``import mxformats`` never imports them.
"""

from __future__ import annotations

import functools
import importlib
import os
import re

from mxformats.fast.passes import COMPILED, OnePass
from mxformats.fast.scan import ScanPass

__all__ = ["device_problem", "gpu_device", "passes_for", "scan_for", "visible_gpus"]

_SPELLING = re.compile(r"(cuda)(?::(\d{1,4}))?|cpu")


def gpu_device(device: str | None) -> bool:
    """Whether ``--device`` names a GPU (each task then takes one: a local worker its own, a
    Ray task ``num_gpus=1``)."""
    return device is not None and device.startswith("cuda")


def device_problem(device: str | None) -> str | None:
    """Why ``--device`` cannot run here (exit 2 at startup, before any checking), or None."""
    if device is None:
        return None
    spelled = _SPELLING.fullmatch(device)
    if spelled is None:
        return f"--device takes cuda, cuda:N or cpu, not {device!r}"
    try:
        torch = importlib.import_module("torch")
        importlib.import_module("triton")
    except ImportError as err:
        return (f"--device runs the Triton kernels ({err}): pip install "
                "'mxformats[torch,triton]'")
    if spelled.group(1) is None:
        if os.environ.get("TRITON_INTERPRET") != "1":
            return ("--device cpu runs the Triton kernels in Triton's interpreter: set "
                    "TRITON_INTERPRET=1 (slow; without --device the compiled CPU passes run)")
        return None
    count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    index = int(spelled.group(2) or 0)
    if index >= count:
        return f"--device {device}: this machine has {count} CUDA/ROCm device(s)"
    return None


def visible_gpus() -> tuple[str, ...]:
    """The GPU ids the local executor's workers take in turn for ``--device cuda``: the
    entries of this process's ``CUDA_VISIBLE_DEVICES``, else ``0 .. n-1`` for torch's count;
    empty for one GPU (every worker then sees that one)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = tuple(part.strip() for part in listed.split(",") if part.strip())
    else:
        torch = importlib.import_module("torch")
        ids = tuple(str(i) for i in range(int(torch.cuda.device_count())))
    return ids if len(ids) > 1 else ()


@functools.cache
def passes_for(device: str | None) -> OnePass:
    """The one-pass reproductions on ``device`` (None: :data:`~mxformats.fast.passes.COMPILED`),
    made once per process."""
    if device is None:
        return COMPILED
    torch = importlib.import_module("torch")
    module = importlib.import_module("mxformats.kernels.triton.reproduce")
    passes: OnePass = module.DevicePasses(torch.device(device))
    return passes


@functools.cache
def scan_for(device: str | None) -> ScanPass | None:
    """The full scan's pass on ``device`` (``mxformats.kernels.triton.scan.DeviceScan``), made
    once per process; None without a device (the compiled CPU pass)."""
    if device is None:
        return None
    torch = importlib.import_module("torch")
    scan: ScanPass = importlib.import_module("mxformats.kernels.triton.scan").DeviceScan(
        torch.device(device))
    return scan
