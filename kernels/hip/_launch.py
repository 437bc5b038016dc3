"""What every HIP front end shares: the executor for a tensor's device (the CPU driver, the
NVIDIA build, ROCm), the kernels' dtype numbers and the backend's name in messages."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from mxformats.schemes import fp8_block as fp8_block_reference

from .. import mx_plan as plans
from ._device import CpuDriver, Executor, SharedLibrary

#: The kernels' dtype numbers (mxf::Dtype in mx_numerics.h).
_DTYPE_IDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.float64: 3}
#: The dtypes the kernels read as data to quantize.
_INPUT_IDS = {dtype: i for dtype, i in _DTYPE_IDS.items() if dtype != torch.float64}
#: The constants of E2M1 rounding by one float32 addition, in mxf::E2m1Addition's order.
E2M1_ADDITION = (plans.E2M1_ONE_BITS, plans.E2M1_SIX_BITS, plans.E2M1_ADDEND_OFFSET,
                 plans.E2M1_HALF_STEP_BELOW_ADDEND)
#: This backend's name in the shared argument checks' messages.
KERNELS = "HIP"


@functools.cache
def _cpu_driver() -> CpuDriver:
    return CpuDriver()


@functools.cache
def _nvidia_library(arch: str) -> SharedLibrary:
    from ._build import nvidia_library

    return SharedLibrary(nvidia_library(arch))


@functools.cache
def rocm_library() -> SharedLibrary:
    """The kernels built for this machine's AMD GPU (``_build.rocm_library``), loaded."""
    from ._build import rocm_library as build

    return SharedLibrary(build())


def _executor(device: torch.device) -> Executor:
    """The CPU driver for CPU tensors; the GPU build for CUDA tensors (ROCm or NVIDIA)."""
    if device.type == "cpu":
        return _cpu_driver()
    if device.type == "cuda" and torch.version.hip:
        return rocm_library()
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return _nvidia_library(f"sm_{major}{minor}")
    raise NotImplementedError(f"the HIP kernels run on cpu and cuda tensors, not {device.type}")


@functools.lru_cache(maxsize=64)
def _table_on(plan: Any, device: torch.device) -> torch.Tensor:
    """A plan's scale table as an int32 tensor on ``device`` (plans are cached singletons)."""
    return torch.from_numpy(np.ascontiguousarray(plan.scale_table).reshape(-1)).to(device)


#: The half-factor table a plan without ``product`` passes (the kernel does not read it).
_NO_HALF_FACTORS = np.zeros(256, dtype=np.float32)


@functools.lru_cache(maxsize=64)
def _half_factors_on(plan: plans.DequantizePlan, device: torch.device) -> torch.Tensor:
    """An MX dequantize plan's 256 float32 half factors on ``device`` (zeros where the plan has
    none: :attr:`~mxformats.kernels.mx_plan.DequantizePlan.product` is false)."""
    factors = _NO_HALF_FACTORS if plan.half_factors is None else plan.half_factors
    return torch.from_numpy(np.ascontiguousarray(factors, dtype=np.float32)).to(device)


def _f32_bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The numpy dtype of a torch dtype (``ml_dtypes`` bfloat16; numpy's TypeError for one it
    lacks)."""
    name = plans.float_dtype_name(dtype)
    return fp8_block_reference.BF16 if name == "bfloat16" else np.dtype(name)


#: The kernels' dtype numbers by numpy dtype name.
_NUMPY_DTYPE_IDS = {str(dtype).removeprefix("torch."): i for dtype, i in _DTYPE_IDS.items()}

