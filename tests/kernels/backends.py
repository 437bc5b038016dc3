"""The kernel backends the shared tests in ``test_kernels.py`` run.

A backend is a module with the reference's function names and arguments (``quantize_mx``,
``dequantize_mx``, ``quantize_int4``, ``pack_int4``, ``unpack_int4``, ``dequantize_int4``,
``dequantize_w4a8``, ``quantize_fp8``, ``e4m3fn_to_fnuz``), torch tensors in and out, and a
``SUPPORTED`` mapping that says what it claims::

    SUPPORTED = {
        "quantize_mx": (("e2m1", "ocp"), ("e2m1", "quark"), ("e4m3fn", "ocp"), ...),
        "dequantize_mx": (("e2m1", "ocp"), ("e2m1", "triton")),
        "quantize_int4": (("int4", "compressed-tensors"),),
        ...
    }

Every ``(format, profile)`` pair it claims is tested; every registered profile it does not claim
must raise ``NotImplementedError`` naming the profile. A new backend (HIP on the CPU, HIP on
ROCm) joins by adding a :class:`Backend` to :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Backend:
    """One kernel backend.

    ``module``: the importable module with the kernels. ``devices``: the ``--device`` values it
    runs on (``cpu``: the Triton interpreter, or the HIP sources compiled for the CPU).
    ``requires``: optional modules it needs (a failure under ``CI=true``).
    """

    name: str
    module: str
    devices: tuple[str, ...]
    requires: tuple[str, ...] = ()

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


def _hip_gpu_backends() -> tuple[Backend, ...]:
    """The HIP sources on a GPU: built by hipcc on ROCm PyTorch, else by nvcc where it is
    installed. Neither is collected (so neither is skipped) on a machine without them."""
    try:
        import torch
    except ImportError:
        return ()
    if torch.version.hip:
        return (Backend("hip-rocm", "mxformats.kernels.hip.rocm", ("cuda",), ("torch",)),)
    if shutil.which("nvcc"):
        return (Backend("hip-nvidia", "mxformats.kernels.hip", ("cuda",), ("torch",)),)
    return ()


BACKENDS: tuple[Backend, ...] = (
    Backend("triton", "mxformats.kernels.triton", ("cpu", "cuda"), ("torch", "triton")),
    # The HIP kernels compiled with g++ against kernels/hip/hip_cpu.h, under ASan and UBSan,
    # with waves of 64 lanes (CDNA) and of 32 (RDNA, NVIDIA).
    Backend("hip-cpu", "mxformats.kernels.hip", ("cpu",), ("torch",)),
    Backend("hip-cpu-wave32", "mxformats.kernels.hip.wave32", ("cpu",), ("torch",)),
    *_hip_gpu_backends(),
)


def backends_for(device: str) -> tuple[Backend, ...]:
    return tuple(b for b in BACKENDS if device in b.devices)
