"""The profile registry: every profile is listed, described, and reachable by its API."""

from __future__ import annotations

import importlib

import pytest

import mxformats
from mxformats.registry import ProfileInfo, get_profile_info, register

# What issue 3 names; the registry may hold more, never fewer.
REQUIRED = {
    ("mx", "producer"): {
        "ocp", "torchao-floor", "torchao-ceil", "torchao-even", "torchao-rceil",
        "triton-round-up", "triton-round-down", "quark", "quark-triton",
        "compressed-tensors", "microxcaling", "vllm",
    },
    ("mx", "consumer"): {
        "ocp", "quark-hip-fp16", "quark-hip-bf16", "compressed-tensors", "vllm-e8m0-to-f32",
        "triton",
    },
}


def test_every_required_profile_is_registered() -> None:
    listed = mxformats.profiles()
    for (scheme, kind), names in REQUIRED.items():
        have = {p.name for p in listed if p.scheme == scheme and p.kind == kind}
        assert names <= have, (scheme, kind, sorted(names - have))


def test_profiles_are_described_and_sorted() -> None:
    listed = mxformats.profiles()
    assert listed == sorted(listed, key=lambda p: (p.scheme, p.kind, p.name))
    keys = [(p.scheme, p.kind, p.name) for p in listed]
    assert len(keys) == len(set(keys))
    for p in listed:
        assert p.kind in ("producer", "consumer", "activation")
        assert p.library and p.version and p.function, p
        assert p.description and "\n" not in p.description, p


def test_lookup_and_conflicting_registration() -> None:
    info = get_profile_info("mx", "producer", "ocp")
    assert info.name == "ocp"
    with pytest.raises(ValueError, match=r"unknown mx producer profile 'nope'; valid: .*ocp"):
        get_profile_info("mx", "producer", "nope")
    clash = ProfileInfo(info.name, info.scheme, info.kind, "x", "0", "f", "different")
    with pytest.raises(ValueError, match="registered twice"):
        register(clash)
    assert register(info) is info  # re-registering the same metadata is harmless


def test_producer_records_read_their_default_consumer_from_the_pairing_table() -> None:
    """Every producer record on the shared base names the consumer of its own scheme's row of
    ``mxformats.pairing`` (NVFP4's two producers have different consumers; a row read from
    another scheme's table would name MX's or none)."""
    from mxformats.pairing import default_consumer
    from mxformats.schemes import fp8_block, int4, mx, nvfp4, w4a8

    assert {n: r.default_consumer for n, r in mx.PRODUCERS.items() if r.kind == "producer"
            and r.default_consumer != "ocp"} == {
        "quark": "quark-hip-bf16", "quark-triton": "quark-triton",
        "compressed-tensors": "compressed-tensors", "triton-round-up": "triton",
        "triton-round-down": "triton"}
    assert mx.get_producer("torchao-floor").default_consumer == "ocp"
    assert {n: r.default_consumer for n, r in nvfp4.PRODUCERS.items()} == {
        "modelopt": "vllm-modelopt", "compressed-tensors": "vllm-compressed-tensors"}
    assert {r.default_consumer for r in fp8_block.PRODUCERS.values()} == {"vllm"}
    assert {n: r.default_consumer for n, r in int4.PRODUCERS.items()} == {
        "compressed-tensors": "compressed-tensors", "quark": "quark"}
    assert w4a8.get_producer("quark").default_consumer == "vllm"
    for module in (fp8_block, int4, mx, nvfp4, w4a8):
        for name, record in module.PRODUCERS.items():
            if record.kind != "producer":
                continue  # a dynamic activation quantizer writes no checkpoint
            assert record.default_consumer == default_consumer(record.scheme, name)
            assert module.get_consumer(record.default_consumer).info == get_profile_info(
                record.scheme, "consumer", record.default_consumer)


def test_records_register_their_own_entry() -> None:
    """A record's ``info`` is exactly what the registry holds for it."""
    from mxformats.schemes import fp8, fp8_block, int4, mx, nvfp4, w4a8
    from mxformats.schemes.mx.producers import MXActivation

    for module in (fp8_block, int4, nvfp4, w4a8):
        for kind, table in (("producer", module.PRODUCERS), ("consumer", module.CONSUMERS)):
            for name, record in table.items():
                assert record.info == get_profile_info(record.scheme, kind, name)
    kinds = {name: record.kind for name, record in fp8.PRODUCERS.items()}
    assert kinds == {"static": "producer", "vllm-fnuz": "producer",
                     "dynamic-fn": "activation", "dynamic-fnuz": "activation"}
    for name, record in fp8.PRODUCERS.items():
        assert record.info == get_profile_info("fp8", record.kind, name)
        assert record.default_consumer is None  # FP8 per tensor decodes exactly: no consumers
    # MX: one table of producers and activation quantizers (Quark's HIP qdq), one of consumers
    activations = {n for n, r in mx.PRODUCERS.items() if r.kind == "activation"}
    assert activations == {"quark-hip-qdq"}
    assert isinstance(mx.PRODUCERS["quark-hip-qdq"], MXActivation)
    for name, record in mx.PRODUCERS.items():
        assert record.info == get_profile_info("mx", record.kind, name)
        assert mx.get_producer(name) is record
    for name, record in mx.CONSUMERS.items():
        assert record.info == get_profile_info("mx", "consumer", name)
        assert mx.get_consumer(name) is record
    with pytest.raises(ValueError, match=r"unknown mx consumer profile 'quark'; valid: .*ocp"):
        mx.get_consumer("quark")


@pytest.mark.parametrize(("scheme", "old", "new"), [
    ("fp8_block", "FP8BlockProfile", "FP8BlockProducer"),
    ("fp8_block", "PROFILES", "PRODUCERS"),
    ("fp8_block", "get_profile", "get_producer"),
    ("fp8", "Fp8Profile", "Fp8Producer"),
    ("fp8", "FP8_PROFILES", "PRODUCERS"),
    ("fp8", "get_fp8_profile", "get_producer"),
    ("w4a8", "W4A8_PRODUCERS", "PRODUCERS"),
    ("w4a8", "W4A8_CONSUMERS", "CONSUMERS"),
    ("w4a8", "W4A8", "W4A8Array"),
    ("mx", "Producer", "MXProducer"),
    ("mx", "Consumer", "MXConsumer"),
    ("mx.producers", "Producer", "MXProducer"),
    ("mx.consumers", "Consumer", "MXConsumer"),
])
def test_old_record_names_are_deprecated_aliases(scheme: str, old: str, new: str) -> None:
    module = importlib.import_module(f"mxformats.schemes.{scheme}")
    with pytest.warns(DeprecationWarning, match=f"{scheme}.{old} is deprecated; use {new}"):
        assert getattr(module, old) is getattr(module, new)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_the_package_keeps_the_old_array_name() -> None:
    """``mxformats.W4A8`` (public before ``W4A8Array``) still imports, with a warning, and is
    no longer listed in ``mxformats.__all__``."""
    with pytest.warns(DeprecationWarning, match="mxformats.W4A8 is deprecated; use W4A8Array"):
        from mxformats import W4A8
    assert W4A8 is mxformats.W4A8Array
    assert "W4A8" not in mxformats.__all__ and "W4A8Array" in mxformats.__all__
    with pytest.raises(AttributeError, match="no_such_name"):
        mxformats.no_such_name  # noqa: B018
