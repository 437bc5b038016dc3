"""Checkpoints for the validator benchmarks (issue 4, item 5 "Scale and speed").

Not part of the default test run (``testpaths`` is ``tests``); run with
``pytest benchmarks --benchmark-only`` (see README.md). Both checkpoints are session-scoped, so
writing them is never part of a measurement.

- :func:`full_size_layout`: the full-size Kimi-K2.6 MXFP4 layout (61 layers × 384 routed
  experts, 64 shards, about 139k tensors, about 590 GB declared) with real safetensors headers
  and **sparse** data: every shard is truncated to its declared size, so it costs no disk and
  only ``--level structure`` (which reads headers, never data) makes sense on it.
- :func:`scan_checkpoint`: real, valid Quark MXFP4 checkpoints of about 200 MB written by
  :func:`mxformats.testing.make_kimi_checkpoint` with larger dims (:data:`SCANS`), for the
  ``full`` scan.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from mxformats.testing.sparse import write_full_size_layout

#: make_kimi_checkpoint arguments of the scan checkpoints. ``many-tensors``: small modules
#: (1024 × 1024 experts, 0.5 MB packed each; ~212 MB of shards, ~35 s to write), so per-tensor
#: overheads show. ``kimi-dims``: Kimi-K2.6's expert and hidden sizes (7168 × 2048 experts,
#: 7.3 MB packed each; ~232 MB, ~47 s and ~2.7 GB of RAM to write), the real tensor sizes.
SCANS: dict[str, dict[str, Any]] = {
    "many-tensors": {
        "layers": 4, "experts": 32, "hidden": 1024, "moe_intermediate": 1024, "q_lora": 256,
        "kv_lora": 256, "heads": 8, "qk_nope": 64, "qk_rope": 32, "v_head": 64, "vocab": 4096,
        "shards": 4,
    },
    "kimi-dims": {
        "layers": 2, "experts": 4, "hidden": 7168, "moe_intermediate": 2048,
        "intermediate": 2048, "vocab": 640, "shards": 2,
    },
}

@pytest.fixture(scope="session")
def full_size_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_full_size_layout(tmp_path_factory.mktemp("kimi-k26-sparse"))


@pytest.fixture(scope="session", params=list(SCANS))
def scan_checkpoint(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    from mxformats.testing import bf16_twin_path, make_kimi_checkpoint

    root = tmp_path_factory.mktemp(f"scan-{request.param}")
    path = make_kimi_checkpoint(root / "kimi-mxfp4", "quark-mxfp4", **SCANS[request.param])
    shutil.rmtree(bf16_twin_path(path))  # the BF16 source is not scanned
    nbytes = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    yield {"name": request.param, "path": path, "bytes": nbytes}
    shutil.rmtree(root)
