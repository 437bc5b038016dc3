"""Run the CPU benchmarks (test_cpu_bench.py) and print the report table of docs/benchmarks.md.

    python benchmarks/cpu.py                      # 64M elements, about a minute
    python benchmarks/cpu.py --validator          # also the validator's full scan (+30 s)
    python benchmarks/cpu.py --elements 4194304   # a quick run on 4M elements

Each implementation's time is the median of its rounds (pytest-benchmark). GB/s counts 4 bytes
per element (the float32 consumed or produced); "% of copy" is
that rate over ``np.copyto``'s on the same array in the same run. The issue 8 targets are
checked with a 10 % noise margin. ``--json`` keeps pytest-benchmark's raw results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOISE_MARGIN = 0.9
PACKAGES = ("numpy", "ml_dtypes", "torch", "torchao", "compressed-tensors", "amd-quark",
            "pytest-benchmark")


@dataclass(frozen=True)
class Row:
    op: str
    impl: str
    ours: bool
    median_s: float
    elements: int
    #: the input's bytes when they are not 4 an element (the bfloat16 reproduction rows)
    input_bytes: int | None = None

    @property
    def gb_per_s(self) -> float:
        return (self.input_bytes or 4 * self.elements) / self.median_s / 1e9


@dataclass(frozen=True)
class Target:
    """An issue 8 acceptance line: ``ours`` at least ``factor`` × ``peer``'s speed, or (peer
    None) at least ``factor`` of the copy rate."""

    op: str
    ours: str
    peer: str | None
    factor: float


TARGETS = (
    Target("MXFP4 quantize", "mxformats.fast (ocp)", "ml_dtypes astype float4_e2m1fn "
           "(elementwise)", 3.0),
    Target("MXFP4 quantize", "mxformats.fast (quark)", "ml_dtypes astype float4_e2m1fn "
           "(elementwise)", 3.0),
    Target("MXFP4 quantize", "mxformats.fast (ocp)", "torchao to_mx FLOOR (eager)", 7.0),
    Target("MXFP4 quantize", "mxformats.fast (quark)", "torchao to_mx FLOOR (eager)", 7.0),
    Target("MXFP4 dequantize", "mxformats.fast (ocp)", None, 0.20),
    Target("INT4 dequantize (bfloat16 scales)", "mxformats.fast dequantize_int4", None, 0.20),
    Target("INT4 pack (compressed-tensors)", "mxformats.fast pack_int4",
           "compressed-tensors pack_to_int32", 1.0),
)


def run_pytest(elements: int, validator: bool, json_path: Path) -> None:
    selection = [str(HERE / "test_cpu_bench.py")]
    if validator:
        selection += [str(HERE / "test_validate_bench.py"), "-k",
                      "not test_validate_bench or (full_scan_throughput and kimi-dims and 1)"]
    env = {**os.environ, "MXF_BENCH_ELEMENTS": str(elements)}
    command = [sys.executable, "-m", "pytest", *selection, "--benchmark-only", "-q",
               "-p", "no:cacheprovider", f"--benchmark-json={json_path}",
               "--benchmark-columns=median,min,max,rounds"]
    subprocess.run(command, check=True, env=env, cwd=HERE.parent)


def load(json_path: Path) -> tuple[list[Row], float | None, dict[str, Any]]:
    raw = json.loads(json_path.read_text())
    rows: list[Row] = []
    scan = None
    for bench in raw["benchmarks"]:
        info = bench["extra_info"]
        if "op" in info:
            rows.append(Row(info["op"], info["impl"], info["ours"], bench["stats"]["median"],
                            info["elements"], info.get("bytes")))
        elif "gb_per_s_per_worker" in info:
            scan = float(info["gb_per_s_per_worker"])
    return rows, scan, raw.get("machine_info", {})


def versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(rows: list[Row], scan: float | None, elements: int) -> str:
    copy = next(r for r in rows if r.op == "memory copy")
    lines = [
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{versions()}. {elements:,} float32 elements; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} "
        "UTC.",
        "",
        "| operation | implementation | median (ms) | GB/s | % of copy | mxformats.fast speed-up |",
        "|---|---|---:|---:|---:|---|",
    ]
    for op in dict.fromkeys(r.op for r in rows):
        group = [r for r in rows if r.op == op]
        ours = [r for r in group if r.ours]
        for r in group:
            speedup = "" if r.ours else ", ".join(
                f"{r.median_s / o.median_s:.1f}×" + (f" ({o.impl})" if len(ours) > 1 else "")
                for o in ours)
            name = f"**{r.impl}**" if r.ours else r.impl
            lines.append(f"| {op} | {name} | {r.median_s * 1e3:.1f} | {r.gb_per_s:.2f} | "
                         f"{100 * r.gb_per_s / copy.gb_per_s:.0f} % | {speedup} |")
    if scan is not None:
        lines.append(f"| validator `--level full` scan (kimi-dims, 1 worker) | mxformats "
                     f"validate | | {scan:.2f} per core | | |")
    lines += ["", "| issue 8 target | measured | met (10 % margin) |", "|---|---|---|"]
    for t in TARGETS:
        mine = next(r for r in rows if r.op == t.op and r.impl == t.ours)
        if t.peer is None:
            value = mine.gb_per_s / copy.gb_per_s
            text = f"{t.op}, {t.ours}: ≥ {t.factor:.0%} of copy"
            measured = f"{value:.0%}"
        else:
            peer = next(r for r in rows if r.op == t.op and r.impl == t.peer)
            value = peer.median_s / mine.median_s
            text = f"{t.op}, {t.ours} ≥ {t.factor:g}× {t.peer}"
            measured = f"{value:.1f}×"
        met = "yes" if value >= NOISE_MARGIN * t.factor else "**no**"
        lines.append(f"| {text} | {measured} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=1 << 26,
                        help="float32 elements per array (a multiple of 4096; default 2**26)")
    parser.add_argument("--validator", action="store_true",
                        help="also measure the validator's full scan (writes a 232 MB checkpoint)")
    parser.add_argument("--json", type=Path, help="keep pytest-benchmark's JSON here")
    parser.add_argument("--markdown", type=Path, help="write the tables here too")
    args = parser.parse_args(argv)
    if args.elements <= 0 or args.elements % 4096:
        parser.error("--elements must be a positive multiple of 4096")
    with tempfile.TemporaryDirectory() as tmp:
        json_path = args.json or Path(tmp) / "bench.json"
        run_pytest(args.elements, args.validator, json_path)
        rows, scan, _ = load(json_path)
    text = report(rows, scan, args.elements)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
