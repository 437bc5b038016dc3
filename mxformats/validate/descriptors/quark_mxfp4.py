"""AMD Quark MXFP4: OCP MX E2M1 codes (``weight`` U8 ``[O, I/2]``) with one E8M0 scale byte per
32 elements (``weight_scale`` U8 ``[O, I/32]``). Reproduced by ``quantize_mx(profile="quark")``
(tests/data/producers/README.md has the measured rule). vLLM loader: ``quark_ocp_mx``
(``vllm/model_executor/layers/quantization/quark/schemes/quark_ocp_mx.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats import fast
from mxformats.fast.passes import COMPILED, OnePass
from mxformats.formats import E2M1

from ..model import CheckpointFormat
from ..stats import e8m0_findings, mx_bound, mx_scale_mode, packed_code_findings
from .base import EnginePath, TensorSpec, cdiv
from .quark import QuarkDescriptor, global_spec, want

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

    from ..findings import Finding
    from ..model import Checkpoint, CodeStats, Module

_SOURCE = ("vllm-project/vllm vllm/model_executor/layers/quantization/quark/schemes/"
           "quark_ocp_mx.py (QuarkOCP_MX) @ fb33ec8cf0a73c82af00a2128dee4ad058d16e9b")
_SGLANG = "sgl-project/sglang python/sglang/srt/layers/quantization/quark/schemes/"
#: SGLang shuffles the MoE weights for its FP4 kernels only on gfx95 with AITER
#: (``_is_shuffle_moe_mxfp4 = _use_aiter and _is_gfx95``); the dense Linears run AITER's
#: ``gemm_afp4wfp4``
_SGLANG_GFX95 = (f"{_SGLANG}quark_w4a4_mxfp4_moe.py:49 (QuarkW4A4MXFp4MoE), "
                 "quark_w4a4_mxfp4.py:960 (QuarkW4A4MXFP4.apply_weights) @ sglang==0.5.23")
#: ``create_moe_runner`` raises "Quark MXFP4 MoE currently requires the AITER runner" for any
#: other MoE runner, and the AITER GEMMs are defined only ``if _is_hip``
_SGLANG_AITER_ONLY = (f"{_SGLANG}quark_w4a4_mxfp4_moe.py:1062 (create_moe_runner), "
                      "quark_w4a4_mxfp4.py:162 @ sglang==0.5.23")

#: The OCP E8M0 scale: 2^(byte - 127), byte 0xFF NaN.
E8M0 = ml_dtypes.float8_e8m0fnu

__all__ = ["DESCRIPTOR", "QUARK_MX_MODES"]

#: Quark MXFP4 ``scale_calculation_mode`` values the ``quark`` profile reproduces. amd-quark 0.13
#: ``quark/torch/quantization/observer/observer.py`` (``PerBlockMXObserver.get_scale``) takes
#: ``even_round`` for None and "even"; "floor" and "ceil" are other scale rules that no profile
#: here reproduces byte for byte.
QUARK_MX_MODES = (None, "even")


class QuarkMXFP4(QuarkDescriptor):
    format = CheckpointFormat.QUARK_MXFP4
    detail = "AMD Quark MXFP4 (OCP MX, E8M0 scales)"
    numeric = True
    scale_params = ("weight_scale",)
    profile = "quark"
    quantizer = staticmethod(fast.quantize_mx)
    scheme = "mx"
    error_threshold = 0.15

    def matches_weight(self, weight: Any) -> bool:
        return (isinstance(weight, dict) and weight.get("dtype") == "fp4"
                and weight.get("scale_format") == "e8m0")

    def weight_problems(self, qc: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        w = global_spec(qc, "weight")
        for k, v in (("qscheme", "per_group"), ("group_size", 32), ("is_dynamic", False)):
            want(out, w, k, v, "weight")
        inp = global_spec(qc, "input_tensors")
        if inp is not None and not (
            (inp.get("dtype") == "fp4" and inp.get("is_dynamic") is True)
            or (inp.get("dtype") == "fp8_e4m3" and inp.get("is_dynamic") is False)
        ):
            out.append("input_tensors must be dynamic fp4 (vLLM raises on static MXFP4 input)")
        return out

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        return {
            "weight": (("U8",), ((out, inp // 2),)),
            "weight_scale": (("U8",), ((out, cdiv(inp, 32)),)),
        }

    tp_multiple = 32

    engine_paths = (
        EnginePath("vllm", "native", "MXFP4 on gfx950 runs AITER kernels (VLLM_ROCM_USE_AITER=1)",
                   _SOURCE, archs=("gfx950",)),
        EnginePath("vllm", "emulated", "MXFP4 on {target} ({arch}) is emulated: vLLM's Quark "
                   "OCP_MX scheme dequantizes to BF16 (native kernels: gfx950)", _SOURCE),
        EnginePath("sglang", "unsupported", "SGLang's Quark MXFP4 MoE needs the AITER runner "
                   "(ROCm): on {target} create_moe_runner raises NotImplementedError",
                   _SGLANG_AITER_ONLY, archs=("cuda",)),
        EnginePath("sglang", "native", "MXFP4 on {target}: AITER FP4 GEMMs and the AITER MoE "
                   "runner on preshuffled weights (SGLANG_USE_AITER=1)", _SGLANG_GFX95,
                   archs=("gfx950",)),
        EnginePath("sglang", "emulated", "MXFP4 on {target} ({arch}): no FP4 instructions; "
                   "SGLang skips the gfx95 FP4 weight shuffle and AITER's Triton kernels "
                   "upcast the FP4 operands", _SGLANG_GFX95, archs=("gfx942",)),
    )

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        yield from e8m0_findings(module.tensors["weight_scale"], arrays["weight_scale"])

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        return packed_code_findings(ckpt, module, arrays, stats, "mx-fp4", self.weight_param,
                                    mx_bound(ckpt))

    def unclaimed(self, ckpt: Checkpoint) -> str:
        mode = mx_scale_mode(ckpt)
        if mode not in QUARK_MX_MODES:
            return (f"scale_calculation_mode {mode!r} is not reproduced (profile "
                    f"{self.profile!r} is Quark's 'even')")
        return ""

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        mx = self.quantizer(w, profile=self.profile)
        return {"weight": mx.codes, "weight_scale": mx.scales}

    def reproduce_in_one_pass(self, module: str, w: NDArray[Any],
                              arrays: dict[str, NDArray[Any]], passes: OnePass = COMPILED
                              ) -> Moments | None:
        """The compiled MXFP4 pass (:func:`mxformats.fast.reproduce.reproduce_mxfp4`)."""
        if self.profile is None or not all(p in arrays for p in ("weight", "weight_scale")):
            return None
        return passes.reproduce_mxfp4(w, arrays["weight"], arrays["weight_scale"],
                                      self.profile, self.consumer)

    def block_scales(self, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], float]:
        """The E8M0 block scales (2^(byte - 127), 0xFF NaN) and 6 (E2M1's largest value)."""
        return np.asarray(arrays["weight_scale"]).view(np.uint8).view(E8M0), E2M1.max

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        """As Quark's producer pairs (``quark-hip-bf16``: vLLM's emulation path calls Quark's
        ``dq_mxfp4``, :mod:`mxformats.pairing`)."""
        d = fast.dequantize_mx(arrays["weight"], arrays["weight_scale"],
                               profile=self.consumer)
        return d


DESCRIPTOR = QuarkMXFP4()
