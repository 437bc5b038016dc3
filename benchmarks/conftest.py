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
- :func:`repro_checkpoint`: a Quark MXFP4 checkpoint at Kimi-K2's expert and hidden sizes with
  its BF16 source, ``MXF_BENCH_REPRO_GB`` GB of MXFP4 shards (default 0.25; issue 18's
  acceptance run uses 2), for ``--source`` reproduction.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mxformats.testing.sparse import LAYOUTS, write_full_size_layout

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


@pytest.fixture(scope="session", params=list(LAYOUTS))
def full_size_layout_of(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The full-size layout in each format of :data:`~mxformats.testing.sparse.LAYOUTS`
    (Quark MXFP4, DeepSeek FP8 block, ModelOpt NVFP4), with ``fmt`` added."""
    fmt: str = request.param
    return {"fmt": fmt, **write_full_size_layout(tmp_path_factory.mktemp(f"sparse-{fmt}"),
                                                 fmt=fmt)}


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


#: Bytes of MXFP4 shards one Kimi-dims routed expert adds (gate, up, down: 7168 × 2048 each,
#: E2M1 codes plus E8M0 scales); its BF16 source is 3.8 times that.
_EXPERT_MXFP4_BYTES = 3 * (7168 * 2048 // 2 + 7168 * 2048 // 32)
#: Routed experts per MoE layer of :func:`repro_checkpoint` (plus one shared).
_REPRO_EXPERTS = 7


@pytest.fixture(scope="session")
def repro_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A Quark MXFP4 checkpoint of ``MXF_BENCH_REPRO_GB`` GB (default 0.25) at Kimi-K2's
    expert sizes, with its BF16 twin: ``path``, ``source``, and the shard ``bytes`` of each.
    Written one shard at a time (2 GB: about 9.6 GB of disk, 10 minutes on a quiet 2-core
    machine), into a temporary folder removed afterwards, or kept in ``MXF_BENCH_REPRO_DIR``
    and reused from there by later sessions (a folder per size)."""
    from mxformats.testing import bf16_twin_path, make_kimi_checkpoint

    gigabytes = float(os.environ.get("MXF_BENCH_REPRO_GB", "0.25"))
    moe_layers = max(1, math.ceil(gigabytes * 1e9 / (_EXPERT_MXFP4_BYTES * (_REPRO_EXPERTS + 1))))
    keep = os.environ.get("MXF_BENCH_REPRO_DIR")
    root = (Path(keep) / f"repro-{gigabytes:g}gb" if keep
            else tmp_path_factory.mktemp("repro"))
    path = root / "kimi-mxfp4"
    if not (root / "complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        make_kimi_checkpoint(
            path, "quark-mxfp4", layers=moe_layers + 1, experts=_REPRO_EXPERTS, hidden=7168,
            moe_intermediate=2048, intermediate=2048, vocab=640, shards=max(2, moe_layers))
        (root / "complete").touch()
    source = bf16_twin_path(path)

    def shard_bytes(folder: Path) -> int:
        return sum(p.stat().st_size for p in folder.glob("*.safetensors"))

    yield {"path": path, "source": source, "bytes": shard_bytes(path),
           "source_bytes": shard_bytes(source)}
    if not keep:
        shutil.rmtree(root)
