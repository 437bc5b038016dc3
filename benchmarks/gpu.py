#!/usr/bin/env python3
"""GPU check and benchmark for the kernels (issues 5 and 16): one command, one report, one
short window (``--budget-s 420``: seven minutes of an H200, machine start not included).

On a GPU (``python benchmarks/gpu.py --budget-s 420``, writing under ``$OUT``) it

0. plans the run: collects the GPU-sized test selection (:data:`GPU_TESTS`) and adds up the
   per-test estimates (:data:`TEST_SECONDS`) and the fixed steps; ``--dry-run`` fails when
   the plan does not fit the budget;
a. runs the bit-exactness tests on the device (``pytest tests/kernels --device cuda`` with the
   GPU-sized selection; the measured duration of every test goes into the report);
b. measures device-to-device copy bandwidth (``dst.copy_(src)``, bytes read + written);
c. times every kernel variant every backend on the device claims (each function × format ×
   profile in its ``SUPPORTED``; the backends are ``tests/kernels/backends.py``'s) at
   8192×7168 bfloat16, reporting GB/s (bytes read + written, every pass counted) and % of the
   copy bandwidth; the HIP kernels built for NVIDIA follow while the budget lasts
   (:data:`TIMED_IF_TIME_REMAINS`);
c2. measures ``mxformats validate --source --device`` per module: a synthetic BF16 module of
   each reproduced format (its checkpoint tensors written by the format's descriptor on the
   host) through the descriptor's one pass on the device
   (:class:`mxformats.kernels.triton.reproduce.DevicePasses`: host-to-device copies,
   re-quantize, compare, dequantize, the statistics), as GB/s of BF16 source, beside the
   host-to-device bandwidth of the same bytes from pinned memory and the device copy, both
   measured in this run;
d. if time remains, times the peers when importable: torchao ``to_mx`` under
   ``torch.compile`` and Quark's Triton MXFP4 ``downcast_to_mxfp`` / ``upcast_from_mxfp``;
e. writes ``results.json`` and ``results.md`` under ``--out`` (default ``$OUT``).

It runs from a checkout without installing mxformats (the checkout's ``mxformats`` and
``kernels/`` are imported as ``mxformats`` and ``mxformats.kernels``, in this process and in
the pytest subprocess), records the versions and checks the version-dependent behaviour it
knows (torch <= 2.11 casts to E4M3FN do not saturate: 1000 becomes NaN, later versions give
448), can install peer wheels from a folder (``--wheels DIR``: ``pip install --no-deps`` into
a temporary target), and keeps to a time budget (``--budget-s``, default 420 s: what is left
when it runs out is reported as skipped). ``--dry-run`` checks the plan against the budget and
runs everything else on the CPU (the Triton interpreter) at small sizes, to know the script
works before a GPU is at hand.

Exit status: 0 when the tests passed (no byte mismatch) and every check and kernel ran; 1
otherwise, or when a dry run's plan does not fit the budget (the report is written either
way).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ((8192, 7168),)
DRY_RUN_SHAPES = ((64, 256),)
#: A module reproduced: one Kimi K2 routed expert's gate projection, [2048, 7168].
REPRODUCTION_SHAPES = ((2048, 7168),)
#: The kernel tests a dry run runs (the full module takes minutes on the interpreter).
DRY_RUN_TESTS = "test_backend_imports or test_e4m3fn_to_fnuz_exhaustive"
#: The GPU-sized selection of ``pytest tests/kernels --device cuda``: the shared module on the
#: Triton kernels (the HIP kernels built with nvcc are timed, and tested by ``--backends``
#: runs of their own), without what the GPU adds nothing to (the scale tables are checked
#: against the scale rules in numpy, and so is the E2M1 fast path's range, ``fast_k_limit``;
#: the refusals are the front ends' argument checks on the host, before any launch; the CPU
#: builds and PTX compiles live in other files),
#: and with the ragged-last-block cases at one length and dtype per profile; with the E4M3FN
#: encoder's two forms (the hardware conversion and the integer encoder) held equal.
GPU_TESTS = ("tests/kernels/test_kernels.py", "tests/kernels/test_triton_e4m3.py", "-k",
             "not hip- and not scale_table and not fast_k_limit and not refuses"
             " and (not ragged_last_block or bfloat16-48])")
#: Estimated seconds per collected test case on the GPU machine, by test function (the rest:
#: :data:`DEFAULT_TEST_SECONDS`). On a GPU the kernels take microseconds; the time is the
#: numpy reference and the harness on the host (every 16-bit pattern through the reference,
#: 50 Hypothesis examples per test), so these are the CPU reference's costs rounded up. They
#: are estimates until a GPU run measures them: ``results.json`` records every test's duration
#: (``tests.durations``), from which this table is to be corrected.
TEST_SECONDS = {
    "test_quantize_mx_harness": 4.0, "test_dequantize_mx_harness": 1.5,
    "test_quantize_mx_finite_sweep": 8.0, "test_quantize_mx_ragged_last_block": 0.3,
    "test_quantize_fp8_exhaustive": 1.5, "test_dequantize_int4_exhaustive": 1.5,
    "test_quantize_int4_harness": 8.0, "test_quantize_mx_shapes": 4.0,
    "test_dequantize_mx_shapes": 4.0, "test_quantize_int4_shapes": 4.0,
    "test_dequantize_int4_shapes": 4.0, "test_quantize_fp8_shapes": 1.5,
    "test_quantize_fp8_block_exhaustive": 1.5, "test_quantize_fp8_block_checkpoint_shapes": 2.0,
    "test_fp8_block_shapes": 1.5, "test_dequantize_fp8_block_exhaustive": 1.0,
    "test_quantize_nvfp4_exhaustive": 2.0, "test_nvfp4_shapes": 2.0,
    "test_quantize_nvfp4_checkpoint_shapes": 2.0, "test_dequantize_nvfp4_exhaustive": 2.0,
    "test_nvfp4_global_amax_is_the_same_whatever_the_grid": 2.0,
    "test_hardware_conversion_equals_integer_encoder": 6.0,
}
DEFAULT_TEST_SECONDS = 0.5
#: Fixed steps of a GPU run (seconds): interpreter start and imports, the version checks, pytest
#: start-up, the copy bandwidth.
FIXED_SECONDS = {"start-up, imports, checks": 20.0, "pytest start-up and collection": 15.0,
                 "copy bandwidth": 5.0, "reproduction (7 formats)": 25.0}
#: Seconds per timed kernel claim: a warm-up call (the tests before compiled the same Triton
#: specialisations into Triton's cache, so mostly a cache hit), at least 5 and at most 0.5 s
#: of timed calls at 8192x7168, and making the inputs.
SECONDS_PER_CLAIM = 1.0
#: Backends whose claims are timed only while the budget lasts, after the planned claims (and
#: before the peers), so the plan does not count them: the HIP sources built by nvcc for an
#: NVIDIA GPU are a portability build, tested by the shared module on the CPU and by
#: ``--backends hip-nvidia`` runs of their own; their speed on an H200 says nothing about AMD.
TIMED_IF_TIME_REMAINS = frozenset({"hip-nvidia"})
#: The machine the issue describes; other versions are reported, not refused.
EXPECTED_GPU_VERSIONS = {"torch": "2.11", "triton": "3.6"}

#: Imports ``mxformats`` and ``mxformats.kernels`` from the checkout in ``$MXFORMATS_ROOT``
#: (the shim tests/mutants/run.py uses too). Executed in this process and written as
#: ``sitecustomize.py`` for the pytest subprocess.
CHECKOUT_IMPORTS = (ROOT / "tests" / "checkout_imports.py").read_text()


@dataclass
class Report:
    """Everything the run found; written as JSON and Markdown."""

    dry_run: bool
    device: str
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    tests: dict[str, Any] = field(default_factory=dict)
    copy: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    host_copy: list[dict[str, Any]] = field(default_factory=list)
    reproduction: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def failed(self) -> list[str]:
        """What makes the run fail: tests, checks, kernels that raised."""
        bad = [f"check {c['name']}" for c in self.checks if not c["ok"]]
        if self.dry_run and not self.plan.get("fits", False):
            bad.append(f"plan: {self.plan.get('seconds')} s estimated for a budget of "
                       f"{self.plan.get('budget_s')} s")
        if self.tests.get("status") not in ("passed", "not requested"):
            bad.append(f"tests {self.tests.get('status')}")
        bad += [f"kernel {k['name']} {k['shape']}" for k in self.kernels
                if k.get("error") and k["backend"] != "peer"]
        bad += [f"reproduction {r['format']} {r['shape']}: {r.get('error') or 'declined'}"
                for r in self.reproduction if r.get("error") or r.get("answered") is False]
        return bad


# -- environment ------------------------------------------------------------------------------


def import_from_checkout(extra_paths: list[str]) -> None:
    os.environ["MXFORMATS_ROOT"] = str(ROOT)
    exec(compile(CHECKOUT_IMPORTS, "<checkout imports>", "exec"), {})
    sys.path[:0] = [*extra_paths, str(ROOT)]


def install_wheels(folder: Path, report: Report) -> list[str]:
    """``pip install --no-deps`` every wheel in ``folder`` into a temporary target."""
    wheels = sorted(str(p) for p in folder.glob("*.whl"))
    if not wheels:
        report.notes.append(f"--wheels {folder}: no wheels there")
        return []
    target = tempfile.mkdtemp(prefix="mxformats-gpu-wheels-")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--quiet", "--target", target, *wheels],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        report.notes.append(f"pip install of {len(wheels)} wheels failed: "
                            f"{done.stderr.strip()[-500:]}")
        return []
    report.notes.append(f"installed {len(wheels)} wheels (--no-deps) into {target}")
    return [target]


def versions(device: str) -> dict[str, str]:
    import torch

    found = {"python": platform.python_version(), "platform": platform.platform(),
             "torch": torch.__version__, "cuda": str(torch.version.cuda),
             "hip": str(torch.version.hip)}
    for name, dist in (("triton", "triton"), ("numpy", "numpy"), ("ml_dtypes", "ml_dtypes"),
                       ("torchao", "torchao"), ("amd-quark", "amd-quark"),
                       ("pytest", "pytest"), ("hypothesis", "hypothesis")):
        try:
            found[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["device name"] = (torch.cuda.get_device_name() if device == "cuda"
                            else platform.processor() or "cpu")
    return found


def version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_versions(report: Report) -> None:
    if report.dry_run:
        return
    for name, expected in EXPECTED_GPU_VERSIONS.items():
        got = report.versions.get(name, "")
        if not got.startswith(expected):
            report.notes.append(f"{name} {got}: the issue's GPU machine has {expected}")


def check_e4m3fn_saturation(report: Report) -> None:
    """torch <= 2.11 casts to float8_e4m3fn do not saturate (1000 -> NaN, 0x7F); later ones
    give 448 (0x7E). Gated on the version: it decides what torch-based peers produce."""
    import torch

    x = torch.tensor([1000.0, -1000.0], device=report.device)
    got = [int(b) for b in x.to(torch.float8_e4m3fn).view(torch.uint8).cpu()]
    saturating = version_tuple(torch.__version__) > (2, 11)
    expected = [0x7E, 0xFE] if saturating else [0x7F, 0xFF]
    report.checks.append({
        "name": "torch float32 -> float8_e4m3fn of ±1000",
        "expected": f"{'saturates to ±448' if saturating else 'NaN (no saturation)'} "
                    f"for torch {torch.__version__}",
        "got": " ".join(f"{b:#04x}" for b in got), "ok": got == expected})


# -- (a) the kernel tests ---------------------------------------------------------------------


def _test_env(extra_paths: list[str]) -> dict[str, str]:
    """The pytest subprocess's environment: ``mxformats`` from this checkout."""
    shim = Path(tempfile.mkdtemp(prefix="mxformats-gpu-shim-"))
    (shim / "sitecustomize.py").write_text(CHECKOUT_IMPORTS)
    return dict(os.environ, MXFORMATS_ROOT=str(ROOT), PYTHONPATH=os.pathsep.join(
        [str(shim), str(ROOT), *extra_paths, os.environ.get("PYTHONPATH", "")]))


def plan_run(report: Report, extra_paths: list[str], claims: int, budget: float) -> None:
    """Step 0: the GPU run's time plan, from the GPU-sized selection as collected for
    ``--device cuda`` (on any machine) and the estimates (:data:`TEST_SECONDS`)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               *GPU_TESTS, "--device", "cuda"]
    env = {k: v for k, v in _test_env(extra_paths).items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    per_function: dict[str, int] = {}
    for line in done.stdout.splitlines():
        if "::" in line:
            function = line.split("::")[-1].split("[")[0]
            per_function[function] = per_function.get(function, 0) + 1
    if done.returncode or not per_function:
        report.plan = {"fits": False, "error": (done.stdout + done.stderr)[-1500:]}
        return
    steps = dict(FIXED_SECONDS)
    for function, count in sorted(per_function.items()):
        steps[f"{function} x {count}"] = count * TEST_SECONDS.get(function, DEFAULT_TEST_SECONDS)
    steps[f"timing {claims} kernel claims at 8192x7168"] = claims * SECONDS_PER_CLAIM
    total = sum(steps.values())
    report.plan = {"selection": " ".join(GPU_TESTS), "tests": sum(per_function.values()),
                   "steps": {k: round(v, 1) for k, v in steps.items()},
                   "seconds": round(total), "budget_s": budget, "fits": total <= budget}


def run_tests(report: Report, out: Path, extra_paths: list[str], timeout: float) -> None:
    missing = [m for m in ("pytest", "hypothesis", "ml_dtypes", "numpy")
               if importlib.util.find_spec(m) is None]
    if missing:
        report.tests = {"status": "not run", "why": f"missing {', '.join(missing)} (pass their "
                        "wheels with --wheels)"}
        return
    junit = out / "kernel-tests.xml"
    selection = ["tests/kernels/test_kernels.py", "-k", DRY_RUN_TESTS] if report.dry_run \
        else list(GPU_TESTS)
    command = [sys.executable, "-m", "pytest", *selection, "--device", report.device, "-q",
               "-p", "no:cacheprovider", f"--junitxml={junit}"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, env=_test_env(extra_paths), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        report.tests = {"status": f"timed out after {timeout:.0f} s", "command": command}
        return
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    durations: dict[str, float] = {}
    if junit.exists():
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {k: int(suite.get(k, 0)) for k in counts} if suite is not None else counts
        for case in suite.iter("testcase") if suite is not None else ():
            durations[case.get("name", "")] = round(float(case.get("time", 0.0)), 3)
    (out / "kernel-tests.log").write_text(done.stdout + done.stderr)
    report.tests = {
        "status": "passed" if done.returncode == 0 else f"failed (pytest exit {done.returncode})",
        "command": " ".join(command), "seconds": round(time.perf_counter() - start, 1),
        **counts, "tail": (done.stdout + done.stderr).strip().splitlines()[-15:],
        "durations": durations}


# -- timing -----------------------------------------------------------------------------------


def wall_seconds(call: Callable[[], object], dry_run: bool) -> float:
    """Median wall seconds of ``call()`` (which returns when its result is on the host),
    after a warm-up call; one call in a dry run."""
    if not dry_run:
        call()
    runs = []
    for _ in range(1 if dry_run else 3):
        begin = time.perf_counter()
        call()
        runs.append(time.perf_counter() - begin)
    return statistics.median(runs)


def seconds_per_call(call: Callable[[], object], device: str, dry_run: bool) -> float:
    """Median seconds of ``call()`` after a warm-up call (compilation), CUDA events on a GPU;
    a dry run times one call (the interpreter compiles nothing)."""
    import torch

    if device != "cuda":
        return wall_seconds(call, dry_run)
    if not dry_run:
        call()
    torch.cuda.synchronize()
    runs = []
    deadline = time.perf_counter() + 0.5
    while len(runs) < 5 or (len(runs) < 50 and time.perf_counter() < deadline):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        call()
        end.record()
        end.synchronize()
        runs.append(begin.elapsed_time(end) / 1000)
    return statistics.median(runs)


def measure_copy(report: Report, shapes: tuple[tuple[int, int], ...]) -> None:
    import torch

    for rows, cols in shapes:
        src = torch.randn(rows, cols, device=report.device).to(torch.bfloat16)
        dst = torch.empty_like(src)
        t = seconds_per_call(lambda: dst.copy_(src), report.device, report.dry_run)  # noqa: B023
        moved = 2 * src.numel() * src.element_size()
        report.copy.append({"shape": [rows, cols], "bytes": moved, "ms": t * 1e3,
                            "gbps": moved / t / 1e9})


# -- (c2) reproduction on the device ----------------------------------------------------------

#: The descriptors whose one pass ``--device`` runs (module, attribute), one per reproduced
#: format and profile.
REPRODUCED = (("quark_mxfp4", "MXFP4 quark"), ("nvfp4_modelopt", "NVFP4 modelopt"),
              ("nvfp4_ct", "NVFP4 compressed-tensors"),
              ("fp8_block_deepseek", "FP8 block deepseek"),
              ("fp8_block_ct", "FP8 block compressed-tensors"), ("ct_int4", "INT4 group 32"),
              ("quark_w4a8", "W4A8 quark"))


def measure_reproduction(report: Report, shapes: tuple[tuple[int, int], ...],
                         deadline: float) -> None:
    """Step c2 (module docstring): per shape, the host-to-device bandwidth of the BF16 source
    from pinned memory, then each format's one pass on the device (the report's row says
    whether the device answered: a None would mean the numpy path ran). The device copy's
    GB/s is the first one :func:`measure_copy` measured."""
    import ml_dtypes
    import numpy as np
    import torch

    from mxformats.kernels.triton.reproduce import DevicePasses

    passes = DevicePasses(torch.device(report.device))
    copy = report.copy[0]["gbps"] if report.copy else None
    for rows, cols in shapes:
        rng = np.random.default_rng(rows * cols)
        w = rng.standard_normal((rows, cols), dtype=np.float32).astype(ml_dtypes.bfloat16)
        source_bytes = w.nbytes
        pinned = torch.from_numpy(w.view(np.uint16))
        if report.device == "cuda":
            pinned = pinned.pin_memory()

        def upload(host: Any = pinned) -> object:
            return host.to(report.device, non_blocking=True).sum().item()

        h2d = source_bytes / wall_seconds(upload, report.dry_run) / 1e9
        report.host_copy.append({"shape": [rows, cols], "bytes": source_bytes, "gbps": h2d})
        for module, label in REPRODUCED:
            row: dict[str, Any] = {"format": label, "shape": [rows, cols]}
            report.reproduction.append(row)
            if time.perf_counter() > deadline:
                row["skipped"] = "time budget spent"
                continue
            try:
                descriptor = importlib.import_module(
                    f"mxformats.validate.descriptors.{module}").DESCRIPTOR
                arrays = descriptor.produce(w)
                row["answered"] = descriptor.reproduce_in_one_pass(
                    "module", w, arrays, passes) is not None
                seconds = wall_seconds(
                    lambda d=descriptor, a=arrays, x=w: d.reproduce_in_one_pass(  # type: ignore[misc]
                        "module", x, a, passes), report.dry_run)
            except Exception as exc:  # reported, and the run fails
                row["error"] = f"{type(exc).__name__}: {exc}"
                continue
            gbps = source_bytes / seconds / 1e9
            row.update(ms=seconds * 1e3, gbps=gbps, of_host_to_device=gbps / h2d,
                       of_device_copy=None if copy is None else gbps / copy)


# -- (c) the kernels --------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One timed call: ``prepare(rows, cols, device)`` makes the inputs and returns the call
    and the bytes it reads plus writes (every pass counted)."""

    name: str
    backend: str
    function: str
    prepare: Callable[[int, int, str], tuple[Callable[[], object], int]]


def _kernel_call(fn: Callable[..., Any], function: str, fmt: str, profile: str
                 ) -> Callable[[int, int, str], tuple[Callable[[], object], int]]:
    """Inputs of ``function`` (bfloat16 sources, random codes of the right shapes) and its
    traffic for a ``rows × cols`` matrix."""
    import torch

    from mxformats.formats import get_format
    from mxformats.schemes.mx.consumers import CONSUMERS
    from mxformats.schemes.mx.producers import PRODUCERS

    def prepare(rows: int, cols: int, device: str) -> tuple[Callable[[], object], int]:
        n = rows * cols
        bf16 = torch.bfloat16

        def source() -> torch.Tensor:
            return torch.randn(rows, cols, device=device).to(bf16)

        def integers(low: int, high: int, shape: tuple[int, ...], dtype: Any) -> torch.Tensor:
            return torch.randint(low, high, shape, device=device).to(dtype)

        if function == "quantize_mx":
            elem = get_format(fmt)
            takes = [d.name for d in PRODUCERS[profile].dtypes]  # bfloat16 where it takes it
            x = source() if "bfloat16" in takes else source().to(getattr(torch, takes[0]))
            return (lambda: fn(x, elem, profile=profile)), \
                n * x.element_size() + n * elem.bits // 8 + n // 32
        if function == "dequantize_mx":
            elem = get_format(fmt)
            codes = integers(0, 256, (rows, cols * elem.bits // 8), torch.uint8)
            scales = integers(120, 135, (rows, cols // 32), torch.uint8)
            own = [d.name for d in CONSUMERS[profile].dtypes]  # bfloat16 where it computes so
            out = bf16 if "bfloat16" in own else getattr(torch, own[0])
            return (lambda: fn(codes, scales, elem, profile=profile, dtype=out),
                    codes.numel() + scales.numel() + n * out.itemsize)
        if function == "quantize_int4":
            x = source()
            scale_bytes = 2 if profile == "compressed-tensors" else 4
            return (lambda: fn(x, profile=profile)), 2 * n + n + n // 32 * scale_bytes
        if function == "pack_int4":
            q = integers(-8, 8, (rows, cols), torch.int8)
            return (lambda: fn(q, layout=profile)), n + n // 2
        if function == "unpack_int4":
            words = integers(-(2**31), 2**31 - 1, (rows, cols // 8), torch.int32)
            return (lambda: fn(words, layout=profile)), n // 2 + n
        if function == "dequantize_int4":
            q = integers(-8, 8, (rows, cols), torch.int8)
            scales = torch.rand(rows, cols // 32, device=device).to(bf16)
            return (lambda: fn(q, scales, profile=profile, dtype=bf16)), n + n // 16 + 2 * n
        if function == "quantize_fp8":
            x, elem = source(), get_format(fmt)
            return (lambda: fn(x, elem, profile=profile)), 2 * (2 * n) + n  # amax pass, cast
        if function == "quantize_fp8_block":
            x = source()
            return (lambda: fn(x, profile=profile)), 2 * n + n
        if function == "dequantize_fp8_block":
            codes = integers(0, 256, (rows, cols), torch.uint8)
            scales = torch.rand(-(-rows // 128), -(-cols // 128), device=device)
            return (lambda: fn(codes, scales, profile=profile, dtype=bf16)), n + 2 * n
        if function == "quantize_nvfp4":
            x = source()
            return (lambda: fn(x, profile=profile)), 2 * n + 2 * n + n + n // 16  # amax pass
        if function == "dequantize_nvfp4":
            codes = integers(0, 256, (rows, cols // 2), torch.uint8)
            scales = integers(0, 0x7F, (rows, cols // 16), torch.uint8)
            stored = torch.tensor(0.01, device=device)
            return (lambda: fn(codes, scales, stored, profile=profile, packed=True, dtype=bf16),
                    n // 2 + n // 16 + 2 * n)
        if function == "e4m3fn_to_fnuz":
            codes = integers(0, 256, (rows, cols), torch.uint8)
            scale = torch.tensor(0.5, device=device)
            return (lambda: fn(codes, scale)), 2 * n
        if function == "dequantize_w4a8":
            words = integers(-(2**31), 2**31 - 1, (rows, cols // 8), torch.int32)
            s1 = torch.tensor(0.01, device=device)
            s2 = torch.rand(rows, device=device)
            return (lambda: fn(words, s1, s2, dtype=bf16)), n // 2 + 4 * rows + 2 * n
        raise KeyError(function)

    return prepare


def kernel_variants(device: str, wanted: set[str] | None, report: Report) -> list[Variant]:
    """Every claim of every backend on ``device`` (tests/kernels/backends.py)."""
    spec = importlib.util.spec_from_file_location("kernel_backends",
                                                  ROOT / "tests/kernels/backends.py")
    assert spec is not None and spec.loader is not None
    backends = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = backends  # dataclasses look their module up there
    spec.loader.exec_module(backends)
    found = []
    for backend in backends.backends_for(device):
        if wanted is not None and backend.name not in wanted:
            continue
        try:
            module = backend.load()
        except Exception as err:  # reported: a backend that does not load is a finding
            report.notes.append(f"backend {backend.name} does not load: {err}")
            continue
        for function, claims in module.SUPPORTED.items():
            for fmt, profile in claims:
                found.append(Variant(f"{function} {fmt} {profile}", backend.name, function,
                                     _kernel_call(getattr(module, function), function, fmt,
                                                  profile)))
    return found


def peer_variants(device: str, dry_run: bool, report: Report) -> list[Variant]:
    """torchao ``to_mx`` (``torch.compile`` on a GPU; eager in a dry run) and Quark's Triton
    MXFP4 path, when importable."""
    import torch

    found = []
    try:
        from torchao.prototype.mx_formats.mx_tensor import to_mx
    except Exception as err:  # optional peer; the reason is reported
        report.notes.append(f"torchao to_mx not importable: {type(err).__name__}: {err}")
    else:
        compiled = to_mx if dry_run else torch.compile(to_mx)
        mode = "eager (dry run)" if dry_run else "torch.compile"
        for label, elem_dtype, bits in (("mxfp4", torch.float4_e2m1fn_x2, 4),
                                        ("mxfp8", torch.float8_e4m3fn, 8)):
            def prepare(rows: int, cols: int, dev: str, elem_dtype: Any = elem_dtype,
                        bits: int = bits) -> tuple[Callable[[], object], int]:
                x = torch.randn(rows, cols, device=dev).to(torch.bfloat16)
                n = rows * cols
                return (lambda: compiled(x, elem_dtype, 32)), 2 * n + n * bits // 8 + n // 32
            found.append(Variant(f"torchao to_mx {label} ({mode})", "peer", "to_mx", prepare))
    try:
        from quark.torch.kernel.mx import triton as quark_mx
    except Exception as err:  # optional peer; the reason is reported
        report.notes.append(f"Quark's Triton MX kernels not importable: {type(err).__name__}: "
                            f"{err}")
    else:
        def quark_down(rows: int, cols: int, dev: str) -> tuple[Callable[[], object], int]:
            x = torch.randn(rows, cols, device=dev).to(torch.bfloat16)
            n = rows * cols
            return (lambda: quark_mx.downcast_to_mxfp(
                x, torch.uint8, axis=-1,
                DEQUANT_SCALE_ROUNDING_MODE=quark_mx.DequantScaleRoundingMode.EVEN),
                2 * n + n // 2 + n // 32)

        def quark_up(rows: int, cols: int, dev: str) -> tuple[Callable[[], object], int]:
            codes = torch.randint(0, 256, (rows, cols // 2), device=dev).to(torch.uint8)
            scales = torch.randint(120, 135, (rows, cols // 32), device=dev).to(torch.uint8)
            return (lambda: quark_mx.upcast_from_mxfp(codes, scales, torch.bfloat16, axis=-1),
                    rows * cols // 2 + rows * cols // 32 + 2 * rows * cols)

        found.append(Variant("quark downcast_to_mxfp mxfp4 (Triton)", "peer", "quantize_mx",
                             quark_down))
        found.append(Variant("quark upcast_from_mxfp mxfp4 (Triton)", "peer", "dequantize_mx",
                             quark_up))
    return found


def time_variants(report: Report, variants: list[Variant], shapes: tuple[tuple[int, int], ...],
                  deadline: float) -> None:
    import torch

    copy_gbps = {tuple(c["shape"]): c["gbps"] for c in report.copy}
    for shape in shapes:
        for variant in variants:
            row: dict[str, Any] = {"name": variant.name, "backend": variant.backend,
                                   "function": variant.function, "shape": list(shape)}
            report.kernels.append(row)
            if time.perf_counter() > deadline:
                row["skipped"] = "time budget spent"
                continue
            try:
                call, moved = variant.prepare(*shape, report.device)
                t = seconds_per_call(call, report.device, report.dry_run)
            except Exception as err:  # reported per variant; the run goes on
                row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
                continue
            finally:
                if report.device == "cuda":
                    torch.cuda.empty_cache()
            row.update(ms=t * 1e3, bytes=moved, gbps=moved / t / 1e9,
                       pct_copy=100 * moved / t / 1e9 / copy_gbps[shape])


# -- (e) the report ---------------------------------------------------------------------------


def markdown(report: Report) -> str:
    where = "dry run, CPU interpreter" if report.dry_run else report.versions.get("device name")
    lines = [f"# Kernel check and benchmark ({where})", "", "| version | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report.versions.items()]
    lines += ["", "## Checks", "", "| check | expected | got | ok |", "|---|---|---|---|"]
    lines += [f"| {c['name']} | {c['expected']} | {c['got']} | {'yes' if c['ok'] else 'NO'} |"
              for c in report.checks]
    plan = report.plan
    lines += ["", "## Plan (estimates)", "",
              f"{plan.get('seconds')} s estimated for a budget of {plan.get('budget_s')} s: "
              f"{'fits' if plan.get('fits') else '**does not fit**'}. Selection: "
              f"`{plan.get('selection')}`.", "", "| step | s |", "|---|---|"]
    lines += [f"| {step} | {seconds} |" for step, seconds in plan.get("steps", {}).items()]
    t = report.tests
    lines += ["", "## Kernel tests", "", f"- status: **{t.get('status')}**"]
    lines += [f"- {k}: {t[k]}" for k in ("command", "tests", "failures", "errors", "skipped",
                                          "seconds", "why") if k in t]
    lines += ["", "## Copy bandwidth", "", "| shape | GB/s |", "|---|---|"]
    lines += [f"| {c['shape'][0]}×{c['shape'][1]} bf16 | {c['gbps']:.3g} |" for c in report.copy]
    lines += ["", "## Kernels", "",
              "GB/s: bytes read + written (every pass) / median time; % of the copy bandwidth "
              "at the same shape.", "",
              "| backend | kernel | shape | ms | GB/s | % copy |", "|---|---|---|---|---|---|"]
    for k in report.kernels:
        shape = f"{k['shape'][0]}×{k['shape'][1]}"
        if "gbps" in k:
            cells = f"{k['ms']:.3g} | {k['gbps']:.3g} | {k['pct_copy']:.0f} %"
        else:
            cells = f"{k.get('error') or k.get('skipped')} | | "
        lines.append(f"| {k['backend']} | {k['name']} | {shape} | {cells} |")
    lines += ["", "## Reproduction on the device (`validate --source --device`)", "",
              "GB/s of BF16 source through one module's pass (host-to-device copies, "
              "re-quantize, compare, dequantize, statistics), and its ratio to the "
              "host-to-device bandwidth of the same bytes from pinned memory and to the device "
              "copy, both measured in this run.", ""]
    lines += [f"- host to device, {h['shape'][0]}×{h['shape'][1]} bf16: {h['gbps']:.3g} GB/s"
              for h in report.host_copy]
    lines += ["", "| format | shape | ms | GB/s | × host-to-device | × device copy |",
              "|---|---|---|---|---|---|"]
    for r in report.reproduction:
        shape = f"{r['shape'][0]}×{r['shape'][1]}"
        if "gbps" in r and r.get("answered"):
            to_copy = r.get("of_device_copy")
            cells = (f"{r['ms']:.3g} | {r['gbps']:.3g} | {r['of_host_to_device']:.2f} | "
                     f"{'' if to_copy is None else f'{to_copy:.3f}'}")
        else:
            cells = f"{r.get('error') or r.get('skipped') or 'declined'} | | | "
        lines.append(f"| {r['format']} | {shape} | {cells} |")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    lines += ["", f"Finished in {report.seconds:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-results")),
                        help="folder for results.json, results.md and the test log "
                             "(default: $OUT, else gpu-results)")
    parser.add_argument("--wheels", type=Path, help="peer wheels to install (--no-deps)")
    parser.add_argument("--dry-run", action="store_true",
                        help="on the CPU (Triton interpreter) at small sizes")
    parser.add_argument("--backends", help="comma-separated backend names (default: all)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the tests")
    parser.add_argument("--no-peers", action="store_true", help="do not time torchao and Quark")
    parser.add_argument("--budget-s", "--budget", dest="budget", type=float, default=420.0,
                        help="seconds for the whole run (default 420)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    report = Report(dry_run=args.dry_run, device=device)
    args.out.mkdir(parents=True, exist_ok=True)
    extra = install_wheels(args.wheels, report) if args.wheels else []
    import_from_checkout(extra)
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --dry-run on a machine without a GPU")
    report.versions = versions(device)
    check_versions(report)
    check_e4m3fn_saturation(report)
    wanted = set(args.backends.split(",")) if args.backends else None
    gpu_claims = kernel_variants("cuda", wanted, report)
    planned = [v for v in gpu_claims if v.backend not in TIMED_IF_TIME_REMAINS]
    gpu_claims = planned + [v for v in gpu_claims if v.backend in TIMED_IF_TIME_REMAINS]
    plan_run(report, extra, len(planned), args.budget)
    print(f"plan: {report.plan.get('seconds')} s estimated for a budget of {args.budget:g} s "
          f"({report.plan.get('tests')} tests)")
    if args.skip_tests:
        report.tests = {"status": "not requested"}
    else:
        # What the tests may take: the budget less the time spent and the timing still to do.
        left = args.budget - (time.perf_counter() - start) \
            - len(planned) * SECONDS_PER_CLAIM - FIXED_SECONDS["copy bandwidth"]
        run_tests(report, args.out, extra, timeout=max(30.0, left))
    shapes = DRY_RUN_SHAPES if args.dry_run else SHAPES
    measure_copy(report, shapes)
    measure_reproduction(report, DRY_RUN_SHAPES if args.dry_run else REPRODUCTION_SHAPES,
                         deadline=start + args.budget)
    variants = gpu_claims if device == "cuda" else kernel_variants(device, wanted, report)
    if not args.no_peers:  # last: they run only while the budget lasts
        variants += peer_variants(device, args.dry_run, report)
    time_variants(report, variants, shapes, deadline=start + args.budget)
    report.seconds = time.perf_counter() - start
    (args.out / "results.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    (args.out / "results.md").write_text(markdown(report))
    failed = report.failed()
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'} in "
          f"{report.seconds:.0f} s")
    for what in failed:
        print(f"FAILED: {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
