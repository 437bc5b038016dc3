"""Bytes each ``--level`` reads of a Hub repo: the full-size Kimi-K2.6 MXFP4 layout (sparse,
562 GB declared) served by the test Hub (``tests/hubserver.py``) on 127.0.0.1.

Usage: ``python benchmarks/hub_bytes.py DIR`` (DIR: where the sparse layout is written, or was
written by an earlier run; it costs about 30 MB of disk). Prints, per level, the shard bytes
and other bytes the server sent, the ranged requests and the time; ``docs/hub.md`` quotes it.
The ``scales`` level sends about 32 GB over loopback: minutes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hubserver import HubServer, Repo

from mxformats.testing.sparse import write_full_size_layout
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.runner import validate


def main(folder: Path) -> None:
    if not (folder / "config.json").exists():
        write_full_size_layout(folder)
    declared = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    repos = {"test/k26-mxfp4": Repo({"main": folder}, hash_lfs=False)}
    with HubServer(repos) as server:
        os.environ["HF_ENDPOINT"] = server.endpoint
        for level in Level:
            server.reset()
            start = time.perf_counter()
            report = validate("hf://test/k26-mxfp4", Options(level=level))
            seconds = time.perf_counter() - start
            shard = server.bytes_sent()
            other = sum(server.sent.values()) - shard
            requests = sum(1 for _, path, _ in server.log if "/resolve/" in path)
            print(f"{level.value}: shard bytes {shard:,} ({shard / declared:.4%} of "
                  f"{declared:,}), other files {other:,}, {requests} ranged requests, "
                  f"{seconds:.1f} s" + (f"; stopped: {report.fatal}" if report.fatal else ""))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
