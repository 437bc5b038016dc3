"""A quantization config no descriptor recognises: the run stops with FORMAT_UNSUPPORTED and
says what it saw."""

from __future__ import annotations

from ..model import CheckpointFormat
from .base import Configs, Descriptor

__all__ = ["UNSUPPORTED", "Unsupported"]


class Unsupported(Descriptor):
    format = CheckpointFormat.UNSUPPORTED
    needs_exclude_entries = False

    def detect(self, configs: Configs) -> str | None:
        return None

    @staticmethod
    def why(configs: Configs) -> str:
        qc = configs.quant_config if configs.quant_config is not None else \
            configs.hf_quant_config or {}
        method = qc.get("quant_method")
        if method == "quark":
            g = qc.get("global_quant_config")
            w = g.get("weight") if isinstance(g, dict) else None
            if isinstance(w, list):
                dtypes = [s.get("dtype") if isinstance(s, dict) else None for s in w]
                return f"Quark two-stage weight {dtypes} is not verified"
            if isinstance(w, dict):
                return (f"Quark weight dtype {w.get('dtype')!r} / scale "
                        f"{w.get('scale_format')!r} is not verified by mxformats validate")
            return "Quark config without a global_quant_config.weight"
        if method == "compressed-tensors":
            return f"compressed-tensors format {qc.get('format')!r} is not verified"
        quantization = qc.get("quantization")
        algo = quantization.get("quant_algo") if isinstance(quantization, dict) else \
            qc.get("quant_algo")
        if algo is not None:
            return f"ModelOpt quant_algo {algo!r} is not verified by mxformats validate"
        return f"quant_method {method!r} is not verified by mxformats validate"


UNSUPPORTED = Unsupported()
