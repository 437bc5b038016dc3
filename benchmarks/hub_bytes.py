"""Bytes, requests and wall time each ``--level`` costs on a Hub repo: the Kimi-K2.6 MXFP4
layout (sparse: full-size headers, data as holes) served by the test Hub
(``tests/hubserver.py``, in a process of its own) on 127.0.0.1, as it is or at a real round
trip.

Usage: ``python benchmarks/hub_bytes.py DIR [--layers N] [--delay S] [--cdn]
[--levels structure,scales] [--connections N]``. DIR: where the sparse layout is written, or
was written by an earlier run with the same ``--layers`` (full size: 61 layers, about 30 MB
of disk). ``--delay S`` makes every answer wait S seconds (0.05: a transatlantic round trip)
and ``--cdn`` redirects every LFS read's resolve to the CDN stand-in, as the Hub does.
Prints per level the shard bytes and other bytes the server sent, the requests (to the Hub
and to the CDN, redirects among them), the wall time and the CPU time of the validator's
process and of the server's (which the real Hub does not take from this machine);
``docs/hub.md`` quotes it. The ``scales`` level of the full-size layout sends about 32 GB over
loopback: minutes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from multiprocessing.connection import Connection
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
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(child, folder, args.delay, args.cdn),
                                     daemon=True)
    server.start()
    os.environ["HF_ENDPOINT"] = parent.recv()
    print(f"{args.layers} layers, {declared:,} bytes declared; delay {args.delay} s, "
          f"CDN redirects {'on' if args.cdn else 'off'}, {args.connections} connections")
    for level in map(Level, args.levels.split(",")):
        parent.send("reset")
        parent.recv()
        start, cpu = time.perf_counter(), time.process_time()
        report = validate("hf://test/k26-mxfp4", Options(
            level=level, workers=args.workers, hub_connections=args.connections))
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        parent.send("stats")
        shard, other, hub, redirects, cdn, server_cpu = parent.recv()
        print(f"{level.value}: shard bytes {shard:,} ({shard / declared:.4%}), other files "
              f"{other:,}, requests {hub + cdn:,} (Hub {hub:,}, of which {redirects:,} "
              f"redirects; CDN {cdn:,}), {seconds:.1f} s; CPU: validator {cpu:.1f} s, "
              f"test Hub {server_cpu:.1f} s"
              + (f"; stopped: {report.fatal}" if report.fatal else ""), flush=True)
    parent.send("stop")
    server.join(timeout=30)


def _serve(conn: Connection, folder: Path, delay: float, cdn: bool) -> None:
    """The test Hub in its own process (its threads do not share the validator's interpreter
    lock, as the Hub's servers do not share its CPU), answering ``reset``, ``stats`` and
    ``stop`` on ``conn``."""
    repos = {"test/k26-mxfp4": Repo({"main": folder}, hash_lfs=False)}
    with HubServer(repos) as server:
        server.delay, server.cdn = delay, cdn
        conn.send(server.endpoint)
        cpu = time.process_time()
        while (command := conn.recv()) != "stop":
            if command == "reset":
                server.reset()
                cpu = time.process_time()
                conn.send(None)
                continue
            shard = server.bytes_sent()
            hub = sum(1 for _, path, _ in server.log if "/resolve/" in path)
            redirects = sum(1 for e in server.events if e[2] == 302)
            conn.send((shard, sum(server.sent.values()) - shard, hub, redirects,
                       len(server.cdn_log), time.process_time() - cpu))

if __name__ == "__main__":
    main()
