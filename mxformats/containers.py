"""torch tensors, ml_dtypes and numpy arrays in; the same kind of container out.

Every public reference and fast function is wrapped by :func:`containers` (one decorator, the
one place this logic lives). Given a torch tensor anywhere in its arguments, the function runs
on numpy copies with the same bytes (:func:`tensor_to_numpy`) and every array
it returns, alone, in a tuple or in a result dataclass (``MXArray``, ``Int4Array``, ...), comes
back as a torch tensor on the device of the first tensor given; given numpy, numpy comes back.

- ``dtype=`` takes a numpy dtype, an ml_dtypes type, a torch dtype or its name
  (``torch.bfloat16``, ``"bfloat16"``, ``ml_dtypes.bfloat16``, ``np.float32``):
  :func:`numpy_dtype`.
- Code arguments (named by the decorator's ``codes``) take the native dtypes as they are: torch
  ``float8_e4m3fn``, ``float8_e4m3fnuz``, ``float8_e5m2``, ``float8_e8m0fnu`` and
  ``float4_e2m1fn_x2`` (two codes a byte, low nibble first, as :func:`mxformats.pack_fp4`), and
  the ml_dtypes float8, float6 and float4 arrays (one code a byte): :func:`native_codes`. A
  native dtype that is not the format being decoded is a TypeError, never a silent reinterpret.

torch is never imported here: a tensor can only exist if the caller imported it, so the test is
``sys.modules`` plus ``isinstance``. Native dtypes: torch 2.13 ``torch/_tensor.py``;
ml_dtypes 0.5 stores float4/float6 codes in the low bits of a byte, as numpy uint8.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.formats import Format

__all__ = ["NATIVE_DTYPES", "containers", "native_codes", "numpy_dtype", "read_formats_with",
           "tensor_to_numpy", "to_torch", "unpack_nibbles"]

P = ParamSpec("P")
R = TypeVar("R")

#: Format name -> its native dtype names in torch, ml_dtypes and safetensors, None where
#: none exists. torch's ``float4_e2m1fn_x2`` holds two E2M1 codes a byte, low nibble first (as
#: :func:`mxformats.pack_fp4`); torch's ``int4``/``uint4`` are shell dtypes without a defined
#: layout, so INT4 has none. safetensors names: the ``Dtype`` enum of safetensors 0.8
#: (huggingface/safetensors, ``safetensors/src/tensor.rs``). :mod:`mxformats.formats` reads its
#: formats' dtypes and names from this table.
NATIVE_DTYPES: dict[str, tuple[str | None, str | None, str | None]] = {
    "e2m1": ("float4_e2m1fn_x2", "float4_e2m1fn", "F4"),
    "e8m0": ("float8_e8m0fnu", "float8_e8m0fnu", "F8_E8M0"),
    "e4m3fn": ("float8_e4m3fn", "float8_e4m3fn", "F8_E4M3"),
    "e4m3fnuz": ("float8_e4m3fnuz", "float8_e4m3fnuz", "F8_E4M3FNUZ"),
    "e5m2": ("float8_e5m2", "float8_e5m2", "F8_E5M2"),
    "e2m3": (None, "float6_e2m3fn", "F6_E2M3"),
    "e3m2": (None, "float6_e3m2fn", "F6_E3M2"),
    "int4": (None, "int4", None),
    "uint4": (None, "uint4", None),
}

#: How the decorator reads a format argument (``elem=E2M1`` or ``elem="e2m1"``): the
#: :class:`~mxformats.formats.Format` type and :func:`~mxformats.formats.get_format`, which
#: :mod:`mxformats.formats` hands down with :func:`read_formats_with` when it is imported.
#: formats sits above this module (it imports the codec, whose functions wear this decorator),
#: so it is never imported from here.
_formats: list[tuple[type[Format], Callable[[object], Format]]] = []


def read_formats_with(format_type: type[Format], lookup: Callable[[object], Format]) -> None:
    """Install the :class:`~mxformats.formats.Format` type and ``lookup``
    (:func:`~mxformats.formats.get_format`) as the decorator's reader of format arguments;
    :mod:`mxformats.formats` calls this once, when it is imported."""
    _formats[:] = [(format_type, lookup)]


def _named_format(where: str | Format, arguments: Mapping[str, Any]) -> Format | None:
    """The format a ``codes`` entry names: ``where`` itself, or the argument named ``where``
    (a Format, or a name :func:`~mxformats.formats.get_format` reads); None for another
    argument (no format to check the codes against)."""
    if not _formats:
        raise RuntimeError("mxformats.formats has not installed its formats (import it first)")
    format_type, get_format = _formats[0]
    named = arguments.get(where) if isinstance(where, str) else where
    if isinstance(named, format_type):
        return named
    return get_format(named) if isinstance(named, str) else None


@functools.cache
def _code_dtypes() -> tuple[dict[str, str], dict[str, str]]:
    """torch dtypes whose byte holds codes (``float4_e2m1fn_x2``: two), and ml_dtypes types
    whose byte holds one code (float4/float6 in the low bits), each -> the format's name."""
    by_torch = {t: fmt for fmt, (t, _, _) in NATIVE_DTYPES.items() if t is not None}
    by_ml = {m: fmt for fmt, (_, m, _) in NATIVE_DTYPES.items() if m is not None}
    return by_torch, by_ml


#: ml_dtypes types with a torch twin of the same bytes (the others go to torch as uint8).
_TORCH_TWINS = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                "float8_e5m2fnuz", "float8_e8m0fnu")


def tensor_to_numpy(x: object) -> NDArray[Any] | None:
    """A torch tensor as a numpy array with the same bytes and dtype, or None if ``x`` is not one.

    bfloat16 and the float8 types become their ``ml_dtypes`` twins; other one-byte types numpy
    lacks (``float4_e2m1fn_x2``) become uint8. torch is never imported here: a tensor can only
    exist if the caller imported torch. The one conversion the package, kernels and harness share
    (also importable from :mod:`mxformats.codec`).
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return None
    t = x.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        as_bf16: NDArray[Any] = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return as_bf16
    if t.dtype.itemsize == 1 and t.dtype not in (torch.uint8, torch.int8, torch.bool):
        twin = getattr(ml_dtypes, str(t.dtype).removeprefix("torch."), np.uint8)
        as_bytes: NDArray[Any] = t.view(torch.uint8).numpy().view(twin)
        return as_bytes
    result: NDArray[Any] = t.numpy()
    return result


def _torch() -> Any:
    return sys.modules.get("torch")


def _is_tensor(x: object) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """``dtype`` as a numpy dtype: a numpy dtype or scalar type, an ml_dtypes type, a torch
    dtype (``torch.bfloat16`` -> ``ml_dtypes.bfloat16``) or a name (``"bfloat16"``,
    ``"torch.float16"``). TypeError names what it could not read."""
    if type(dtype).__module__ == "torch":
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.strip().removeprefix("torch.").removeprefix("np.")
    else:
        try:
            result: np.dtype[Any] = np.dtype(dtype)
            return result
        except TypeError:
            name = str(dtype)
    twin = getattr(ml_dtypes, name, None)
    try:
        return np.dtype(twin if twin is not None else name)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a dtype numpy, ml_dtypes or torch knows") from None


def _is_ml_dtypes(dtype: np.dtype[Any]) -> bool:
    """An ml_dtypes type (numpy files most under kind ``V``, but float8_e5m2 under ``f``)."""
    return dtype.type.__module__.startswith("ml_dtypes")


def _native_format(array: np.ndarray[Any, Any], torch_name: str | None) -> str | None:
    """The format whose codes ``array`` holds natively (by its torch or ml_dtypes dtype)."""
    by_torch, by_ml = _code_dtypes()
    if torch_name is not None:
        return by_torch.get(torch_name)
    return by_ml.get(array.dtype.name) if _is_ml_dtypes(array.dtype) else None


def native_codes(x: object, fmt: Format | None = None, *, unpack_x2: bool = False) -> Any:
    """The uint8 codes a native-dtype tensor or array holds, else ``x`` unchanged.

    torch float8/e8m0 tensors and ml_dtypes float8/float6/float4 arrays give one code a byte;
    a torch ``float4_e2m1fn_x2`` tensor gives its packed bytes, unpacked to one code a byte
    (low nibble first) when ``unpack_x2``. With ``fmt``, a native dtype of another format
    raises TypeError (``float8_e5m2`` codes are not ``e4m3fn`` codes)."""
    torch_name = None
    if _is_tensor(x):
        torch_name = str(x.dtype).removeprefix("torch.")  # type: ignore[attr-defined]
        if torch_name not in _code_dtypes()[0]:
            return x
        array = tensor_to_numpy(x)
    elif isinstance(x, np.ndarray):
        array = x
    else:
        return x
    assert array is not None
    native = _native_format(array, torch_name)
    if native is None:
        return x
    if fmt is not None and native != fmt.name:
        raise TypeError(f"the codes are {torch_name or array.dtype.name} ({native}), not "
                        f"{fmt.name} codes")
    codes = np.ascontiguousarray(array).view(np.uint8)
    if torch_name == "float4_e2m1fn_x2" and unpack_x2:
        return unpack_nibbles(codes, codes.ndim - 1)
    return codes


def unpack_nibbles(packed: NDArray[np.uint8], axis: int) -> NDArray[np.uint8]:
    """Each byte of ``packed`` as two codes along ``axis`` (a checked axis), its low nibble
    first: the layout of torch ``float4_e2m1fn_x2`` (:func:`mxformats.packing.unpack_fp4`
    checks its input and calls this)."""
    moved = np.moveaxis(packed, axis, -1)
    pairs = np.stack([moved & 0xF, moved >> 4], axis=-1)
    unpacked = pairs.reshape(*moved.shape[:-1], 2 * moved.shape[-1])
    return np.ascontiguousarray(np.moveaxis(unpacked, -1, axis))


def _to_numpy(x: Any) -> Any:
    if _is_tensor(x):
        return tensor_to_numpy(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and _first_device([x]):
        return _replace_arrays(x, _is_tensor, tensor_to_numpy)
    if isinstance(x, (tuple, list)) and any(_is_tensor(v) for v in x):
        return type(x)(_to_numpy(v) for v in x)
    return x


def _first_device(values: Any) -> Any:
    for v in values:
        if _is_tensor(v):
            return v.device
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            found = _first_device(getattr(v, f.name) for f in dataclasses.fields(v))
            if found is not None:
                return found
        if isinstance(v, (tuple, list)):
            found = _first_device(v)
            if found is not None:
                return found
    return None


def to_torch(x: Any, device: Any) -> Any:
    """Every numpy array in ``x`` (alone, in a tuple or list, or a dataclass's field) as a
    torch tensor on ``device`` with the same bytes: bfloat16 and the float8 types become their
    torch twins, float4/float6 (no torch twin) stay one code a byte as uint8."""
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        torch = _torch()
        a = np.ascontiguousarray(x)
        if _is_ml_dtypes(a.dtype):  # through its bytes
            raw = torch.from_numpy(a.view(np.int16 if a.dtype.itemsize == 2 else np.uint8).copy())
            name = a.dtype.name
            return (raw.view(getattr(torch, name)) if name in _TORCH_TWINS else raw).to(device)
        return torch.from_numpy(a.copy()).to(device)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _replace_arrays(x, lambda v: isinstance(v, (np.ndarray, np.generic)),
                               lambda v: to_torch(v, device))
    if isinstance(x, tuple):
        return tuple(to_torch(v, device) for v in x)
    if isinstance(x, list):
        return [to_torch(v, device) for v in x]
    return x


def _replace_arrays(obj: Any, which: Callable[[Any], bool], convert: Callable[[Any], Any]
                    ) -> Any:
    """``obj`` (a result dataclass: ``MXArray``, ``Int4Array``, ...) with the fields ``which``
    picks converted; ``obj`` itself when none is (a :class:`Format` stays the same object)."""
    changes = {f.name: convert(getattr(obj, f.name)) for f in dataclasses.fields(obj)
               if f.init and which(getattr(obj, f.name))}
    return dataclasses.replace(obj, **changes) if changes else obj


def containers(
    *, codes: dict[str, str | Format] | None = None, unpack_x2: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a public function so that it takes and returns the caller's containers.

    ``codes``: the parameters that hold codes (native dtypes accepted, :func:`native_codes`),
    each mapped to its format, or to the parameter that names it (``"self"`` for a
    :class:`Format` method, ``"elem"``), so that a native dtype of another format is refused;
    ``unpack_x2``: the function wants one code a byte (a ``float4_e2m1fn_x2`` tensor is
    unpacked). A ``dtype`` parameter accepts every spelling :func:`numpy_dtype` reads."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)
        # Without torch loaded, no dtype= and no code arguments there is nothing to convert.
        converts = bool(codes) or "dtype" in signature.parameters

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if not converts and "torch" not in sys.modules:
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
            device = _first_device(arguments.values()) if "torch" in sys.modules else None
            if arguments.get("dtype") is not None:
                arguments["dtype"] = numpy_dtype(arguments["dtype"])
            for name, where in (codes or {}).items():
                arguments[name] = native_codes(arguments[name], _named_format(where, arguments),
                                               unpack_x2=unpack_x2)
            if device is None:
                return fn(*bound.args, **bound.kwargs)
            for name, value in arguments.items():
                arguments[name] = _to_numpy(value)
            result: R = to_torch(fn(*bound.args, **bound.kwargs), device)
            return result

        return wrapper

    return decorate
