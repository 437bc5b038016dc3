"""AMD Quark W4A8: an FP8 per-tensor stage then INT4 per-channel (``weight`` I32 ``[O, I/8]``,
``weight_scale`` F32 ``[]``, ``weight_scale_2`` F32 ``[O]``). Reproduced by
``quantize_w4a8(profile="quark")``. vLLM has no Linear scheme for it (only the MoE one), so only
routed experts may be quantized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats import fast
from mxformats.fast.passes import COMPILED, OnePass
from mxformats.schemes.int4 import QMIN

from ..findings import Finding, Level, Severity, declare
from ..model import CheckpointFormat
from ..stats import packed_code_findings, scale_findings, w4a8_scale2_findings
from .base import EnginePath, TensorSpec
from .quark import QuarkDescriptor, global_spec, want

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

    from ..model import Checkpoint, CodeStats, ExpectedModule, Module

_SOURCE = ("vllm-project/vllm vllm/model_executor/layers/quantization/quark/quark_moe.py "
           "(QuarkW4A8Fp8MoEMethod) @ bed874faf610cfd61d52e3e8e4d1b87643fb6c51")
#: SGLang's QuarkConfig has no scheme for the FP8 -> INT4 weight list: ``_get_block_fp8_config``
#: calls ``.get("block_size")`` on the weight spec, a list here (AttributeError), and
#: ``get_moe_scheme`` (MXFP4, MXFP4-W/FP8-A, FP8 W8A8) ends in "Unsupported FusedMoe scheme".
#: ``quark_int4fp8_moe`` quantizes a BF16 checkpoint online; it does not load this one.
_SGLANG = ("sgl-project/sglang python/sglang/srt/layers/quantization/quark/quark.py:438 "
           "(QuarkConfig._get_block_fp8_config), quark.py:1080 (get_moe_scheme) "
           "@ sglang==0.5.23")

__all__ = ["DESCRIPTOR", "PACK_METHOD"]

PACK_METHOD = declare(
    "PACK_METHOD", severity=Severity.WARNING, level=Level.STRUCTURE, group="layout",
    conditions=("another pack_method ('order')", "no pack_method recorded"),
    formats=("quark-w4a8",),
    meaning="A Quark W4A8 config records export.pack_method other than 'reorder': the AITER "
            "kernel reads the reorder nibble order [0,2,4,6,1,3,5,7], and the weights' own order "
            "cannot be told from the codes (the numeric checks cannot see it).",
    fix="Re-export with pack_method='reorder', or validate with --source to check the packing.")


class QuarkW4A8(QuarkDescriptor):
    format = CheckpointFormat.QUARK_W4A8
    detail = "AMD Quark W4A8 (FP8 per-tensor -> INT4 per-channel)"
    numeric = True
    scale_params = ("weight_scale", "weight_scale_2")
    profile = "quark"
    quantizer = staticmethod(fast.quantize_w4a8)
    scheme = "w4a8"
    error_threshold = 0.25
    bf16_linear_why = "Quark W4A8 has no Linear scheme ('No quark compatible scheme')"

    def matches_weight(self, weight: Any) -> bool:
        return isinstance(weight, list) and [
            s.get("dtype") if isinstance(s, dict) else None for s in weight
        ] == ["fp8_e4m3", "int4"]

    def weight_problems(self, qc: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        w = global_spec(qc, "weight")
        if not isinstance(w, list) or len(w) != 2 or not all(isinstance(s, dict) for s in w):
            out.append("weight must be a list of two specs")
        else:
            first: tuple[tuple[str, object], ...] = (("qscheme", "per_tensor"),
                                                     ("is_dynamic", False))
            second: tuple[tuple[str, object], ...] = (("qscheme", "per_channel"),
                                                      ("symmetric", True), ("ch_axis", 0),
                                                      ("is_dynamic", False))
            for k, v in first:
                want(out, w[0], k, v, "weight[0]")
            for k, v in second:
                want(out, w[1], k, v, "weight[1]")
        inp = global_spec(qc, "input_tensors")
        if (
            not isinstance(inp, dict)
            or inp.get("dtype") != "fp8_e4m3"
            or not (inp.get("is_dynamic") is True or inp.get("qscheme") == "per_tensor")
        ):
            out.append("input_tensors must be fp8_e4m3, dynamic or per_tensor (_is_fp8_w4a8)")
        return out

    tp_multiple = 8

    engine_paths = (
        EnginePath("vllm", "unsupported", "Quark W4A8 runs only in QuarkW4A8Fp8MoEMethod, which "
                   "asserts ROCm with AITER fused MoE; {target} is CUDA", _SOURCE,
                   archs=("cuda",)),
        EnginePath("vllm", "native", "Quark W4A8 on {target} needs ROCm vLLM with AITER "
                   "(VLLM_ROCM_USE_AITER=1, fused MoE enabled)", _SOURCE, archs=("rocm",)),
        EnginePath("sglang", "unsupported", "SGLang has no scheme for Quark's FP8 -> INT4 "
                   "weight list on any target: its QuarkConfig fails on the list at load "
                   "('Unsupported FusedMoe scheme' for the experts)", _SGLANG),
    )

    def config_findings(self, ckpt: Checkpoint) -> Iterator[Finding]:
        export = ckpt.quant_config.get("export") if isinstance(ckpt.quant_config, dict) else None
        method = export.get("pack_method") if isinstance(export, dict) else None
        if method != "reorder":
            yield Finding(
                PACK_METHOD,
                f"export.pack_method is {method!r}, not 'reorder': vLLM reads it "
                "(quark/quark.py:277) but QuarkW4A8Fp8MoEMethod (quark/quark_moe.py:1406) "
                "hands the words to AITER's reorder-order kernel unchanged (vllm==0.33.0)",
                file="config.json",
            )

    def unquantizable(self, exp: ExpectedModule) -> str | None:
        if exp.kind != "expert":
            return "Quark W4A8 has no vLLM Linear scheme: only routed experts may be quantized"
        return None

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        return {
            "weight": (("I32",), ((out, inp // 8),)),
            "weight_scale": (("F32",), ((), (1,))),
            "weight_scale_2": (("F32",), ((out,),)),
        }

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        # a zero scale is an error: vLLM asserts "fp8 weight scale cannot be zero"
        # (vllm/model_executor/layers/quantization/quark/quark_moe.py:1507 @ vllm==0.33.0)
        for p in self.scale_params:
            ref, s = module.tensors[p], arrays[p]
            yield from scale_findings(ref, s, zero_severity=Severity.ERROR)
            if p == "weight_scale_2":
                yield from w4a8_scale2_findings(ref, s)

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        return packed_code_findings(ckpt, module, arrays, stats, "int4-row", self.weight_param)

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        r = self.quantizer(w, profile=self.profile)
        return {"weight": r.weight, "weight_scale": r.weight_scale,
                "weight_scale_2": r.weight_scale_2}

    def reproduce_in_one_pass(self, module: str, w: NDArray[Any],
                              arrays: dict[str, NDArray[Any]], passes: OnePass = COMPILED
                              ) -> Moments | None:
        """The compiled W4A8 pass (:func:`mxformats.fast.reproduce_int4.reproduce_w4a8`)."""
        if self.profile is None or not all(p in arrays for p in ("weight", *self.scale_params)):
            return None
        return passes.reproduce_w4a8(w, arrays["weight"], arrays["weight_scale"],
                                     arrays["weight_scale_2"], self.profile, self.consumer)

    def block_scales(self, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], float] | None:
        """The row scales ``weight_scale_2`` and 8 (the INT4 codes span -8..7) times the
        FP8-stage ``weight_scale``: vLLM folds the two into one scale per row
        (:meth:`dequantize`); None without the per-tensor scale (the layout checks report
        it)."""
        s1 = np.asarray(arrays["weight_scale"], np.float64).reshape(-1)
        if not s1.size:
            return None
        return np.asarray(arrays["weight_scale_2"]), float(s1[0]) * -QMIN

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        """vLLM's folded scales: ``dequantize_w4a8`` (its fast path,
        :func:`mxformats.fast.dequantize_w4a8`) is the ``vllm`` consumer, the only one, which
        the pairing table names for ``quark`` (:attr:`consumer`)."""
        d = fast.dequantize_w4a8(arrays["weight"], arrays["weight_scale"],
                                 arrays["weight_scale_2"])
        return d[..., :cols]


DESCRIPTOR = QuarkW4A8()
