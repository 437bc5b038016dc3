"""The profile registry: every profile is listed, described, and reachable by its API."""

from __future__ import annotations

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
