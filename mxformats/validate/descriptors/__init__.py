"""One descriptor per checkpoint format; :data:`DESCRIPTORS` lists them in detection order.

Adding a format means adding a module here that defines ``DESCRIPTOR`` (a
:class:`~.base.Descriptor`) and listing it below: the shared checks (``layout``, ``numbers``,
``reproduce``) iterate over descriptors and never name a format.
"""

from __future__ import annotations

from . import (
    bf16,
    ct_int4,
    ct_mixed,
    fp8_block_ct,
    fp8_block_deepseek,
    fp8_block_modelopt,
    nvfp4_ct,
    nvfp4_modelopt,
    quark_mxfp4,
    quark_w4a8,
)
from .base import Configs, Descriptor
from .unsupported import UNSUPPORTED, Unsupported

__all__ = ["DESCRIPTORS", "UNSUPPORTED", "Configs", "Descriptor", "by_format", "detect"]

#: Every format the validator verifies, in detection order.
DESCRIPTORS: tuple[Descriptor, ...] = (
    bf16.DESCRIPTOR,
    quark_mxfp4.DESCRIPTOR,
    quark_w4a8.DESCRIPTOR,
    ct_int4.DESCRIPTOR,
    nvfp4_ct.DESCRIPTOR,
    fp8_block_ct.DESCRIPTOR,
    ct_mixed.DESCRIPTOR,
    nvfp4_modelopt.DESCRIPTOR,
    fp8_block_modelopt.DESCRIPTOR,
    fp8_block_deepseek.DESCRIPTOR,
)


def detect(configs: Configs) -> tuple[Descriptor, str]:
    """The descriptor the configs declare and the report's detail line; :data:`UNSUPPORTED`
    with what was seen when none does."""
    for descriptor in DESCRIPTORS:
        detail = descriptor.detect(configs)
        if detail is not None:
            return descriptor, detail
    return UNSUPPORTED, Unsupported.why(configs)


def by_format(value: str) -> Descriptor:
    """The descriptor whose format value is ``value`` (:data:`UNSUPPORTED` when none)."""
    return next((d for d in DESCRIPTORS if d.format.value == value), UNSUPPORTED)
