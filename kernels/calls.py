"""The argument checks every kernel front end shares: the error for a profile a backend does
not claim, output dtypes, and the float dtypes the kernels take.

``kernels`` names the backend (``"Triton"``, ``"HIP"``) in messages that are the backend's
own. The MX counterpart is :mod:`mxformats.kernels.mx_plan`, whose
:func:`~mxformats.kernels.mx_plan.require_tensor` and dtype naming this module reuses.

torch only: nothing here imports a backend.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .mx_plan import as_record, float_dtype_name, require_tensor

__all__ = [
    "OUTPUT_DTYPES", "as_record", "as_torch_dtype", "require_kernel_float", "require_tensor",
    "unclaimed",
]

#: The output dtypes of the dequantizers, by name: the kernels' inputs plus float64.
OUTPUT_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float64": torch.float64,
}
#: Float dtypes in the order the messages list them.
_FLOAT_ORDER = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def unclaimed(function: str, fmt: str, profile: str, kernels: str) -> NotImplementedError:
    """The error for a registered profile the backend ``kernels`` does not claim."""
    return NotImplementedError(f"{function}: profile {profile!r} ({fmt}) is not implemented by "
                               f"the {kernels} kernels")


def as_torch_dtype(dtype: object, kernels: str) -> torch.dtype:
    """A torch dtype from a torch dtype (returned as is), a numpy dtype-like
    (``ml_dtypes.bfloat16`` included) or a name of :data:`OUTPUT_DTYPES`; TypeError for
    anything else."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        name = float_dtype_name(dtype)
    except TypeError as err:
        raise TypeError(f"not a float dtype: {dtype!r}") from err
    if name not in OUTPUT_DTYPES:
        raise TypeError(f"the {kernels} kernels write {', '.join(OUTPUT_DTYPES)}, not {name}")
    return OUTPUT_DTYPES[name]


def require_kernel_float(dtype: torch.dtype, what: str, kinds: Mapping[torch.dtype, int],
                         kernels: str) -> int:
    """The kernel's code (``kinds[dtype]``) for a float input dtype. float64 outside ``kinds``
    is NotImplementedError (the reference takes it, the kernels do not); any other dtype outside
    ``kinds`` TypeError (the reference's error for non-float input)."""
    if dtype in kinds:
        return kinds[dtype]
    if dtype == torch.float64:
        raise NotImplementedError(f"{what}: the {kernels} kernels take float32, bfloat16 or "
                                  "float16, not float64 (use the numpy reference)")
    names = ", ".join(str(d).removeprefix("torch.") for d in _FLOAT_ORDER if d in kinds)
    raise TypeError(f"{what}: dtype {dtype} is not one of {names}")


