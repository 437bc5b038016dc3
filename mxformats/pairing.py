"""Which consumer reads what each producer writes: the default consumer of every producer.

``dequantize_mx(quantize_mx(x, profile=P))`` decodes with ``default_consumer("mx", P)`` unless a
consumer is named, so one profile name makes a round trip; ``spec/profiles.md`` prints this
table (generated) and ``mxformats inspect`` and ``docs/which-format.md`` name the consumer of a
checkpoint's producer from it.

The default consumer of a producer is the decoder its checkpoints meet in the engine that loads
them, or the producer library's own dequantizer where no engine reads them:

- ``quark`` (MX): vLLM 0.33 dequantizes Quark OCP-MX weights in its emulation path
  (``vllm/model_executor/layers/quantization/utils/mxfp4_utils.py``, ``_dequant_mxfp4``), which
  calls Quark's ``quark.torch.kernel.mx.dq_mxfp4``; amd-quark 0.13 runs its HIP kernel unless
  ``QUARK_MXFP4_IMPL=triton``, and a BF16 model dequantizes to bfloat16: ``quark-hip-bf16``.
- ``quark-triton``: the same call under ``QUARK_MXFP4_IMPL=triton``: ``quark-triton``.
- ``compressed-tensors`` (MX and INT4): compressed-tensors' own ``decompress``.
- ``triton-round-up``/``triton-round-down``: triton_kernels' ``upcast_from_mxfp``: ``triton``.
- ``quark`` (W4A8): vLLM's ``QuarkW4A8Fp8MoEMethod``; (INT4) Quark's own dequantizer.
- FP8 block (every producer): vLLM's ``scaled_dequantize``, ``vllm``.
- NVFP4: vLLM's scheme for each producer's checkpoints: ``modelopt`` -> ``vllm-modelopt``
  (``ModelOptNvFp4LinearMethod``), ``compressed-tensors`` -> ``vllm-compressed-tensors``
  (``CompressedTensorsW4A4Fp4``); the consumers' records in :mod:`mxformats.schemes.nvfp4` cite
  the vLLM code.
- the other MX producers (``ocp``, torchao, microxcaling, vLLM's activation quantizer): the
  exact decoder of the spec, ``ocp`` (torchao's ``to_dtype`` multiplies by the exact
  ``2**(b - 127)`` in float32: torchao 0.18.0 ``torchao/prototype/mx_formats/mx_tensor.py``,
  ``get_fp_scale``).
"""

from __future__ import annotations

from mxformats.registry import get_profile_info, profiles

__all__ = ["DEFAULT_CONSUMERS", "consumer_for", "default_consumer", "scheme_defaults"]

#: (scheme, producer profile) -> consumer profile of the same scheme. A producer that is not
#: listed has its scheme's consumer (``SCHEME_CONSUMER``).
DEFAULT_CONSUMERS: dict[tuple[str, str], str] = {
    ("mx", "quark"): "quark-hip-bf16",
    ("mx", "quark-triton"): "quark-triton",
    ("mx", "compressed-tensors"): "compressed-tensors",
    ("mx", "triton-round-up"): "triton",
    ("mx", "triton-round-down"): "triton",
    ("int4", "compressed-tensors"): "compressed-tensors",
    ("int4", "quark"): "quark",
    ("w4a8", "quark"): "vllm",
    ("nvfp4", "modelopt"): "vllm-modelopt",
    ("nvfp4", "compressed-tensors"): "vllm-compressed-tensors",
}

#: The consumer of a scheme's unlisted producers: MX's exact decoder of the spec; for FP8
#: block, vLLM's ``scaled_dequantize`` reads every producer's checkpoints.
SCHEME_CONSUMER = {"mx": "ocp", "fp8-block": "vllm"}


def scheme_defaults(scheme: str) -> dict[str, str]:
    """The listed producers of ``scheme`` -> their default consumers (a scheme reads its own
    rows of :data:`DEFAULT_CONSUMERS` with this)."""
    return {p: c for (s, p), c in DEFAULT_CONSUMERS.items() if s == scheme}


def default_consumer(scheme: str, producer: str) -> str:
    """The consumer that decodes what ``producer`` writes (ValueError for an unknown producer,
    or a scheme without an exact decoder and no entry in :data:`DEFAULT_CONSUMERS`)."""
    get_profile_info(scheme, "producer", producer)
    try:
        return DEFAULT_CONSUMERS.get((scheme, producer)) or SCHEME_CONSUMER[scheme]
    except KeyError:
        raise ValueError(f"{scheme} producer {producer!r} has no default consumer") from None


def consumer_for(scheme: str, profile: str) -> str:
    """The consumer profile ``profile`` names: itself when it is a consumer of ``scheme``, the
    producer's :func:`default_consumer` when it is a producer. ValueError lists both kinds."""
    names = {(p.kind, p.name) for p in profiles() if p.scheme == scheme}
    if ("consumer", profile) in names:
        return profile
    if ("producer", profile) in names:
        return default_consumer(scheme, profile)
    raise ValueError(
        f"unknown {scheme} profile {profile!r}; consumers: "
        f"{', '.join(sorted(n for k, n in names if k == 'consumer'))}; producers (decoded by "
        f"their default consumer): {', '.join(sorted(n for k, n in names if k == 'producer'))}"
    )


def render_markdown() -> str:
    """The table as ``spec/profiles.md`` prints it: one row per producer profile."""
    lines = ["| scheme | producer | default consumer |", "|---|---|---|"]
    for p in profiles():
        if p.kind != "producer" or (p.scheme not in SCHEME_CONSUMER
                                    and (p.scheme, p.name) not in DEFAULT_CONSUMERS):
            continue
        lines.append(f"| {p.scheme} | `{p.name}` | `{default_consumer(p.scheme, p.name)}` |")
    return "\n".join(lines) + "\n"
