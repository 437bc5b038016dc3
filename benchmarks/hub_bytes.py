"""Bytes, requests and wall time each ``--level`` costs on a Hub repo: the Kimi-K2.6 MXFP4
layout (sparse: full-size headers, data as holes) served by the test Hub
(``tests/hubserver.py``) on 127.0.0.1, as it is or at a real round trip.

Usage: ``python benchmarks/hub_bytes.py DIR [--layers N] [--delay S] [--cdn]
[--levels structure,scales] [--connections N]``. DIR: where the sparse layout is written, or
was written by an earlier run with the same ``--layers`` (full size: 61 layers, about 30 MB
of disk). ``--delay S`` makes every answer wait S seconds (0.05: a transatlantic round trip)
and ``--cdn`` redirects every LFS read's resolve to the CDN stand-in, as the Hub does.
Prints per level the shard bytes and other bytes the server sent, the requests (to the Hub
and to the CDN, redirects among them) and the wall time; ``docs/hub.md`` quotes it. The
``scales`` level of the full-size layout sends about 32 GB over loopback: minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hubserver import HubServer, Repo

from mxformats.testing.sparse import FULL_SIZE_SHARDS, KIMI_K26_TEXT, write_full_size_layout
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.runner import validate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--layers", type=int, default=KIMI_K26_TEXT["num_hidden_layers"])
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--cdn", action="store_true")
    parser.add_argument("--levels", default=",".join(level.value for level in Level))
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    folder: Path = args.folder
    if not (folder / "config.json").exists():
        text = {**KIMI_K26_TEXT, "num_hidden_layers": args.layers}
        shards = max(1, FULL_SIZE_SHARDS * args.layers // KIMI_K26_TEXT["num_hidden_layers"])
        write_full_size_layout(folder, shards=shards, text=text)
    declared = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    repos = {"test/k26-mxfp4": Repo({"main": folder}, hash_lfs=False)}
    with HubServer(repos) as server:
        server.delay, server.cdn = args.delay, args.cdn
        os.environ["HF_ENDPOINT"] = server.endpoint
        print(f"{args.layers} layers, {declared:,} bytes declared; delay {args.delay} s, "
              f"CDN redirects {'on' if args.cdn else 'off'}, {args.connections} connections")
        for level in map(Level, args.levels.split(",")):
            server.reset()
            start = time.perf_counter()
            report = validate("hf://test/k26-mxfp4", Options(
                level=level, workers=args.workers, hub_connections=args.connections))
            seconds = time.perf_counter() - start
            shard = server.bytes_sent()
            other = sum(server.sent.values()) - shard
            hub = sum(1 for _, path, _ in server.log if "/resolve/" in path)
            redirects = sum(1 for e in server.events if e[2] == 302)
            print(f"{level.value}: shard bytes {shard:,} ({shard / declared:.4%}), other files "
                  f"{other:,}, requests {hub + len(server.cdn_log):,} (Hub {hub:,}, of which "
                  f"{redirects:,} redirects; CDN {len(server.cdn_log):,}), {seconds:.1f} s"
                  + (f"; stopped: {report.fatal}" if report.fatal else ""), flush=True)


if __name__ == "__main__":
    main()
