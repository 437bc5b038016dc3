"""compressed-tensors mixed precision (``format: mixed-precision``): several config groups,
each with its own scheme and ``targets``; every module is checked against the scheme of the
group that targets it (INT4 ``pack-quantized``, NVFP4, FP8_BLOCK: the other
compressed-tensors descriptors).

Target matching as vLLM does it (``vllm/model_executor/layers/quantization/compressed_tensors/
utils.py`` ``find_matched_target``): an exact module name first, then a ``re:`` regex
(``re.match``), then a layer class name (``Linear``), each in group order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..model import CheckpointFormat
from . import ct_int4, fp8_block_ct, nvfp4_ct
from .base import Configs, Descriptor, MixedDescriptor
from .compressed_tensors import CompressedTensorsDescriptor, groups, weight_schemes

if TYPE_CHECKING:

    from ..model import Checkpoint

__all__ = ["DESCRIPTOR"]

#: The schemes a group may hold.
MEMBERS: tuple[CompressedTensorsDescriptor, ...] = (
    ct_int4.DESCRIPTOR, nvfp4_ct.DESCRIPTOR, fp8_block_ct.DESCRIPTOR)
#: Layer class names a target may give (every quantizable module here is a Linear).
_CLASSES = ("Linear",)


def member_for(weights: Any) -> CompressedTensorsDescriptor | None:
    """The descriptor whose scheme a group's ``weights`` are (its variant for them,
    :meth:`~.compressed_tensors.CompressedTensorsDescriptor.for_scheme`)."""
    if not isinstance(weights, Mapping):
        return None
    return next((m.for_scheme(weights) for m in MEMBERS if m.matches_scheme(weights)), None)


def _regex(target: str, module: str) -> bool:
    """A ``re:`` target that ``re.match`` finds in ``module`` (an invalid one matches none)."""
    if not target.startswith("re:"):
        return False
    try:
        return re.match(target[3:], module) is not None
    except re.error:
        return False


class CompressedTensorsMixed(MixedDescriptor, CompressedTensorsDescriptor):
    format = CheckpointFormat.CT_MIXED
    detail = "compressed-tensors mixed precision (a scheme per config group)"
    storage = ("mixed-precision",)
    profile = "per group"
    #: both engines read each config group's own ``format`` and pick the group's scheme per
    #: layer (the members' own loaders)
    dispatcher = MappingProxyType({
        "sglang": ("sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/"
                   "compressed_tensors.py:377 (a group's format) @ sglang==0.5.23"),
    })

    def detect(self, configs: Configs) -> str | None:
        found = [member_for(w) for _, w in weight_schemes(configs)]
        if len(found) < 2 or None in found or len({m.format for m in found if m}) < 2:
            return None
        names = sorted({m.format.value for m in found if m is not None})
        return f"{self.detail}: {', '.join(names)}"

    def group_member(self, group: Mapping[str, Any]) -> CompressedTensorsDescriptor | None:
        return member_for(group.get("weights"))

    def for_module(self, ckpt: Checkpoint, module: str) -> Descriptor:
        found: list[tuple[CompressedTensorsDescriptor, list[str]]] = []
        for _, group in groups(ckpt.quant_config):
            targets, member = group.get("targets"), member_for(group.get("weights"))
            if member is not None and isinstance(targets, list):
                found.append((member, [str(t) for t in targets]))
        for matches in (lambda t: t == module, lambda t: _regex(t, module),
                        lambda t: t in _CLASSES):
            for member, targets in found:
                if any(matches(t) for t in targets):
                    return member
        return self


DESCRIPTOR = CompressedTensorsMixed()
