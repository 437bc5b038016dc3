"""A plain BF16 checkpoint (no ``quantization_config``): structure only; a quantized tensor
in it will not load (config.json declares no quantization)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import CheckpointFormat
from .base import Configs, Descriptor

if TYPE_CHECKING:
    from ..model import ExpectedModule

__all__ = ["DESCRIPTOR"]


class BF16(Descriptor):
    format = CheckpointFormat.BF16
    detail = "no quantization_config: plain (BF16) checkpoint"
    needs_exclude_entries = False

    def detect(self, configs: Configs) -> str | None:
        if configs.quant_config is None and configs.hf_quant_config is None:
            return self.detail
        return None

    def unquantizable(self, exp: ExpectedModule) -> str | None:
        return "config.json declares no quantization"


DESCRIPTOR = BF16()
