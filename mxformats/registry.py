"""The registry of profiles: which producer or consumer function each variant reproduces.

A *profile* names one implementation's choices (scale rule, tie rounding, arithmetic dtype,
NaN/Inf/zero-block handling, packing, decoding) so that ``profile="quark"`` means exactly the
bytes AMD Quark 0.13 writes. Spec: ``spec/profiles.md``.

The registry is fed from below: it imports nothing of the package, and each scheme module
(:mod:`mxformats.schemes.mx`, :mod:`mxformats.schemes.int4`, :mod:`mxformats.schemes.fp8`, ...)
calls :func:`register` for its profiles when it is imported. ``import mxformats`` imports every
scheme, so :func:`profiles` (also ``mxformats.profiles()``) lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ProfileInfo", "get_profile_info", "profiles", "register"]

Scheme = Literal["mx", "int4", "fp8", "w4a8", "fp8-block", "nvfp4"]
Kind = Literal["producer", "consumer", "activation"]


@dataclass(frozen=True)
class ProfileInfo:
    """What a profile reproduces.

    Attributes:
        name: the profile name passed as ``profile=`` (unique within a scheme and kind).
        scheme: which API takes it (``mx``: quantize_mx/dequantize_mx; ``int4``; ``fp8``;
            ``w4a8``; ``fp8-block``: quantize_fp8_block/dequantize_fp8_block; ``nvfp4``).
        kind: ``producer`` (writes checkpoints), ``consumer`` (decodes them) or
            ``activation`` (a dynamic activation quantizer).
        library, version, function: the source it reproduces, e.g. ``("amd-quark", "0.13",
            "quark.torch...PerBlockMXObserver")``.
        description: one line.
    """

    name: str
    scheme: Scheme
    kind: Kind
    library: str
    version: str
    function: str
    description: str


_REGISTRY: dict[tuple[str, str, str], ProfileInfo] = {}


def register(info: ProfileInfo) -> ProfileInfo:
    """Add ``info`` to the registry (scheme modules call this at import time)."""
    key = (info.scheme, info.kind, info.name)
    if key in _REGISTRY and _REGISTRY[key] != info:
        raise ValueError(f"profile {key} registered twice with different metadata")
    _REGISTRY[key] = info
    return info


def profiles() -> list[ProfileInfo]:
    """Every profile, sorted by scheme, kind and name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_profile_info(scheme: str, kind: str, name: str) -> ProfileInfo:
    """The registered profile, or ValueError listing the valid names for that scheme/kind."""
    try:
        return _REGISTRY[(scheme, kind, name)]
    except KeyError:
        valid = sorted(n for (s, k, n) in _REGISTRY if s == scheme and k == kind)
        raise ValueError(
            f"unknown {scheme} {kind} profile {name!r}; valid: {', '.join(valid)}"
        ) from None
