"""One descriptor per checkpoint format; :data:`DESCRIPTORS` lists them in detection order.

Adding a format means adding a module here that defines ``DESCRIPTOR`` (a
:class:`~.base.Descriptor`) and listing it below: the shared checks (``layout``, ``numbers``,
``reproduce``) iterate over descriptors and never name a format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import (
    bf16,
    ct_int4,
    ct_mixed,
    fp8_block_ct,
    fp8_block_deepseek,
    fp8_block_modelopt,
    modelopt_mixed,
    nvfp4_ct,
    nvfp4_modelopt,
    quark_mxfp4,
    quark_w4a8,
)
from .base import Configs, Descriptor
from .unsupported import UNSUPPORTED, Unsupported

__all__ = ["DESCRIPTORS", "UNSUPPORTED", "Configs", "Descriptor", "by_format", "detect",
           "profile_for"]

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
    modelopt_mixed.DESCRIPTOR,
    fp8_block_deepseek.DESCRIPTOR,
)


def detect(configs: Configs) -> tuple[Descriptor, str]:
    """The descriptor the configs declare and the report's detail line; :data:`UNSUPPORTED`
    with what was seen when none does."""
    for descriptor in DESCRIPTORS:
        detail = descriptor.detect(configs)
        if detail is not None:
            return descriptor.for_configs(configs), detail
    return UNSUPPORTED, Unsupported.why(configs)


def profile_for(config: Mapping[str, Any],
                hf_quant_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a checkpoint's configs declare, in words: ``format`` (its descriptor's name),
    ``detail``, ``producer_profile`` (the reference profile ``--source`` reproduces its bytes
    with; None when there is none) and ``tp_multiple`` (what a tensor-parallel partition must
    be a multiple of). ``config``: config.json (the top-level ``quantization_config`` wins over
    ``text_config``'s, as in vLLM); ``hf_quant_config``: ModelOpt's hf_quant_config.json.

    >>> profile_for({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
    ...     "weight_block_size": [128, 128], "activation_scheme": "dynamic"}})["producer_profile"]
    'deepseek'
    >>> profile_for({})["format"]
    'bf16'
    """
    top = config.get("quantization_config")
    text = config.get("text_config")
    nested = text.get("quantization_config") if isinstance(text, Mapping) else None
    qc = top if isinstance(top, Mapping) else nested if isinstance(nested, Mapping) else None
    descriptor, detail = detect(Configs(qc, hf_quant_config))
    return {"format": descriptor.format.value, "detail": detail,
            "producer_profile": descriptor.profile, "tp_multiple": descriptor.tp_multiple}


def by_format(value: str) -> Descriptor:
    """The descriptor whose format value is ``value`` (:data:`UNSUPPORTED` when none)."""
    return next((d for d in DESCRIPTORS if d.format.value == value), UNSUPPORTED)
