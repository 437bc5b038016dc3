"""The HIP kernels' own checks, beside the shared ``test_kernels.py`` (which runs them as the
``hip-cpu`` and ``hip-cpu-wave32`` backends, waves of 64 and 32 lanes):

- hipcc compiles them for AMD (gfx90a) with 16-byte vector loads (``.ci/hip.sh`` compiles
  every kernel for gfx90a and gfx940);
- the CPU runtime honours waves of 32 and 64: shuffles of every width, ``__syncthreads``, and a
  barrier no thread can pass aborts instead of hanging;
- the kernels equal the reference at both wave sizes, on ragged last blocks too, and an FP8
  block tile's maximum wherever it lies in the work-group;
- NVFP4 (until the shared module's NVFP4 tests run these kernels too): every 16-bit pattern
  through the quantizer, every code under every scale byte through the dequantizer, and the
  two-pass tensor maximum with the same bytes whatever the number of work-groups;
- AddressSanitizer reports a read past the end of a tensor, and the call fails with its report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

import numpy as np
import pytest
from conftest import requires

import mxformats

torch = requires("torch")
hip = requires("mxformats.kernels.hip")

from mxformats.formats import E4M3FN  # noqa: E402
from mxformats.kernels import mx_plan  # noqa: E402
from mxformats.kernels.hip import _build, _device  # noqa: E402
from mxformats.kernels.hip.mx import _quantize_rules  # noqa: E402
from mxformats.schemes import fp8_block as fp8_block_reference  # noqa: E402
from mxformats.schemes import nvfp4 as nvfp4_reference  # noqa: E402
from mxformats.schemes.mx import pack_fp4  # noqa: E402
from mxformats.testing.cases import float_dtype  # noqa: E402

WAVES = (32, 64)


@pytest.fixture(autouse=True)
def _cpu_device_only(request: pytest.FixtureRequest) -> None:
    """These tests build and run the CPU driver and hipcc: they belong to ``--device cpu``
    (which CI runs); ``--device cuda`` runs the HIP kernels through test_kernels.py."""
    if request.config.getoption("--device") != "cpu":
        pytest.skip("the HIP CPU runtime and the hipcc build are tested with --device cpu")


@pytest.fixture(params=WAVES, ids=lambda w: f"wave{w}")
def wave(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run the CPU runtime with waves of 32, then of 64 lanes."""
    monkeypatch.setenv("MXFORMATS_HIP_WARP_SIZE", str(request.param))
    return int(request.param)


def _bits(t: Any) -> np.ndarray:
    a = mxformats.codec.tensor_to_numpy(t)
    assert a is not None
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


# -- AMD ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", _build.KERNELS)
def test_hipcc_compiles_to_vector_loads(kernel: str, tmp_path: Any) -> None:
    """gfx90a assembly of each kernel moves elements as 16-byte vectors. (The ISA holds
    float multiply-adds anyway: the compiler's own 64-bit integer division uses them.)"""
    assert shutil.which("hipcc"), "hipcc is not installed (apt-get install hipcc libamdhip64-dev)"
    isa = tmp_path / "kernel.s"
    command = _build.amd_compile_command(_build.SOURCE_DIR / kernel, "gfx90a", isa)
    command[command.index("-c")] = "--cuda-device-only"
    done = subprocess.run([*command, "-S"], capture_output=True, text=True, check=False,
                          env={**os.environ, "HIP_PLATFORM": "amd"})
    assert done.returncode == 0, done.stderr
    assert re.search(r"global_(load|store)_dwordx4", isa.read_text())


# -- the CPU runtime ----------------------------------------------------------------------


def _probe(op: str, params: list[int], count: int) -> np.ndarray:
    out = torch.empty(count, dtype=torch.int32)
    _device.CpuDriver().run(op, params, [], [out])
    return out.numpy()


@pytest.mark.parametrize("threads", [64, 128])
def test_runtime_shuffles_and_barrier(wave: int, threads: int) -> None:
    """Each shuffle reads the lane HIP defines, within segments of ``width`` lanes of a wave;
    __syncthreads makes every thread's LDS write visible to every other thread."""
    for width in sorted({wave, 32, 16, 4, 1}):
        got = _probe("probe_wave", [threads, width], threads * 6).reshape(threads, 6)
        tid = np.arange(threads)
        lane = tid % wave
        segment = tid - lane % width
        down = np.where(lane % width + 1 < width, tid + 1, tid)
        # HIP and CUDA: a lane may read an earlier segment, never a later one (its own value).
        xor = np.where((lane ^ 1) < ((lane + width) & ~(width - 1)), tid ^ 1, tid)
        sums = np.array([segment[t] * width + width * (width - 1) // 2 for t in tid])
        expected = np.stack([lane, segment + (lane % width + 3) % width, down, xor,
                             threads - 1 - tid, sums], axis=1)
        np.testing.assert_array_equal(got, expected, err_msg=f"wave {wave}, width {width}")


def test_runtime_aborts_a_barrier_some_thread_never_reaches() -> None:
    with pytest.raises(_device.KernelError, match=r"barrier .* has returned"):
        _probe("probe_divergent_barrier", [64], 64)


def test_sanitizer_reports_an_out_of_bounds_read() -> None:
    """Tell the quantizer the input has two rows where it holds one: ASan stops the read past
    the end of the tensor, and the call fails with the report."""
    call = mx_plan.prepare_quantize(torch.ones(1, 64), "e2m1", block_size=32, axis=-1,
                                     profile="ocp", claims=hip.SUPPORTED["quantize_mx"])
    rules = _quantize_rules(call.plan)
    table = torch.from_numpy(np.ascontiguousarray(call.plan.scale_table).reshape(-1))
    codes = torch.empty(2, 32, dtype=torch.uint8)
    scales = torch.empty(2, 2, dtype=torch.uint8)
    with pytest.raises(_device.KernelError, match="AddressSanitizer: heap-buffer-overflow"):
        _device.CpuDriver().run("quantize_mx", [0, 2, 64, 32, *rules],
                                [call.source, table], [codes, scales])


# -- the kernels at both wave sizes ---------------------------------------------------------


@pytest.mark.parametrize("n", [2, 34, 66, 96, 130])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_ragged_last_block(wave: int, n: int, dtype: str) -> None:
    """Quark defines a short last block: rows whose length is no multiple of 32 (or of a
    lane's 8 elements), at both wave sizes, equal the reference byte for byte."""
    rng = np.random.default_rng(n)
    values = (rng.standard_normal((3, n)) * 2.0 ** rng.integers(-20, 20, (3, 1)))
    x = torch.from_numpy(values.astype(np.float32)).to(getattr(torch, dtype))
    codes, scales = hip.quantize_mx(x, profile="quark")
    expected = mxformats.quantize_mx(x, profile="quark")
    np.testing.assert_array_equal(codes.numpy(), expected.codes)
    np.testing.assert_array_equal(scales.numpy(), expected.scales)


def test_wave_sized_reductions(wave: int) -> None:
    """The kernels whose reductions span a wave: MX blocks broadcast from their first lane
    (many blocks per wave), and the per-tensor FP8 maximum over whole waves and blocks."""
    rng = np.random.default_rng(wave)
    magnitudes = 2.0 ** rng.integers(-30, 30, (37, 16)).repeat(32, 1)  # one per MX block
    x = torch.from_numpy((rng.standard_normal((37, 512)) * magnitudes).astype(np.float32))
    codes, scales = hip.quantize_mx(x, profile="ocp")
    expected = mxformats.quantize_mx(x, profile="ocp")
    np.testing.assert_array_equal(codes.numpy(), expected.codes)
    np.testing.assert_array_equal(scales.numpy(), expected.scales)
    for spot in (0, 31, 32, 63, 64, 4095, x.numel() - 1):  # the maximum in one lane
        y = x.clone().reshape(-1)
        y[spot] = 1e6
        fp8_codes, scale = hip.quantize_fp8(y, E4M3FN)
        expected_codes, expected_scale = mxformats.quantize_fp8(y.numpy(), E4M3FN)
        assert _bits(scale).item() == expected_scale.view(np.uint32).item(), f"max at {spot}"
        np.testing.assert_array_equal(fp8_codes.numpy(), expected_codes)


def test_fp8_block_tile_maximum_over_waves(wave: int) -> None:
    """An FP8 block tile's maximum is reduced over the lanes of each wave, then over the waves
    through LDS, with each thread taking several lanes of a 128 x 128 tile: one large element
    in the first and last lane of a wave, of a work-group's first round of lanes and beyond it,
    at both wave sizes, gives the reference's scale and codes (a 96-column edge tile too)."""
    rng = np.random.default_rng(wave)
    x = torch.from_numpy(rng.standard_normal((128, 224)).astype(np.float32))
    for spot in (0, 7, 8 * 31, 8 * 32, 8 * 63, 8 * 64, 8 * 255, 8 * 256, 127 * 224 + 127,
                 40 * 224 + 200, 127 * 224 + 223):
        y = x.clone().reshape(-1)
        y[spot] = 1e6
        y = y.reshape(x.shape)
        codes, scales = hip.quantize_fp8_block(y, profile="deepseek")
        expected = fp8_block_reference.quantize_fp8_block(y.numpy(), profile="deepseek")
        np.testing.assert_array_equal(_bits(scales), expected.scales.view(np.uint32),
                                      err_msg=f"max at {spot}")
        np.testing.assert_array_equal(codes.numpy(), expected.codes, err_msg=f"max at {spot}")


# -- NVFP4 ----------------------------------------------------------------------------------


def _torch16(values: np.ndarray) -> Any:
    """A numpy array (bfloat16 through its bits) as a CPU torch tensor."""
    if values.dtype.itemsize == 2 and values.dtype != np.float16:
        return torch.from_numpy(np.ascontiguousarray(values).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(values))


def _check_nvfp4(values: np.ndarray, given: Any, profile: str, what: str, **kwargs: Any) -> None:
    """hip.quantize_nvfp4 on ``given`` (``values`` as a tensor) has the reference's bytes, or
    raises its exception class."""
    try:
        expected = nvfp4_reference.quantize_nvfp4(values, profile=profile, **kwargs)
    except ValueError:
        with pytest.raises(ValueError):
            hip.quantize_nvfp4(given, profile=profile, **kwargs)
        return
    codes, scales, global_scale = hip.quantize_nvfp4(given, profile=profile, **kwargs)
    np.testing.assert_array_equal(codes.numpy(), expected.codes, err_msg=f"codes, {what}")
    np.testing.assert_array_equal(scales.numpy(), expected.scales, err_msg=f"scales, {what}")
    np.testing.assert_array_equal(_bits(global_scale), expected.global_scale.view(np.uint32),
                                  err_msg=f"global scale, {what}")


@pytest.mark.parametrize("profile", sorted(nvfp4_reference.PRODUCERS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_nvfp4_quantize_every_pattern(wave: int, profile: str, dtype: str) -> None:
    """Every finite bfloat16 / float16 pattern shuffled into one tensor (small elements under
    large maxima, tiny and zero block scales), with its own maximum and with a caller's
    ``global_amax`` (below it: saturated elements); the top 16K patterns in magnitude order (each block near its maximum:
    every tie); NaN and ±Inf refused as the reference refuses them."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(float_dtype(dtype))
    wide = patterns.astype(np.float32)
    finite = patterns[np.isfinite(wide)]
    finite = finite[:finite.size // 256 * 256]
    shuffled = finite[np.random.default_rng(wave).permutation(finite.size)].reshape(-1, 256)
    ordered = finite[np.argsort(np.abs(finite.astype(np.float32)), kind="stable")]
    top = ordered[-(1 << 14):].reshape(-1, 256)
    for what, values, kwargs in (
            ("shuffled", shuffled, {}),
            # 1120 / 2688 is not 1120 * float32(1 / 2688): an approximate division shows
            ("shuffled, global_amax", shuffled, {"global_amax": 1120.0}),
            ("sorted", top, {}),
            ("NaN", np.concatenate([finite[:32], patterns[np.isnan(wide)][:16]]), {}),
            ("-Inf", np.concatenate([finite[:31], patterns[wide == -np.inf]]), {})):
        _check_nvfp4(values, _torch16(values), profile, f"{profile} {dtype} {what}", **kwargs)


@pytest.mark.parametrize("consumer", sorted(nvfp4_reference.CONSUMERS))
def test_nvfp4_dequantize_every_code_and_scale(wave: int, consumer: str) -> None:
    """All 16 codes under all 256 scale bytes (NaN 0x7F/0xFF, subnormals, ±0) and global
    scales with every special, packed and unpacked, into float32 and bfloat16, byte for byte:
    every NaN output the canonical quiet NaN (spec/nvfp4.md, "Consumers")."""
    codes = np.tile(np.arange(16, dtype=np.uint8), (256, 1))
    scales = np.arange(256, dtype=np.uint8).reshape(256, 1)
    negative_payload_nan = np.uint32(0xFFC12345).view(np.float32)
    for value in (0.0, -0.0, 2.0**-149, 1 / 2688, 2688.0, 3.4028235e38, np.inf, np.nan,
                  negative_payload_nan):
        stored = np.array([value], np.float32)
        for packed in (False, True):
            given = pack_fp4(codes) if packed else codes
            for out in ("float32", "bfloat16"):
                expected = nvfp4_reference.dequantize_nvfp4(
                    given, scales, stored, profile=consumer, packed=packed,
                    dtype=float_dtype(out))
                got = hip.dequantize_nvfp4(torch.from_numpy(given), torch.from_numpy(scales),
                                           torch.from_numpy(stored), profile=consumer,
                                           packed=packed, dtype=getattr(torch, out))
                what = f"{consumer} global {value} packed={packed} to {out}"
                got_bits = _bits(got)
                expected_bits = np.ascontiguousarray(expected).view(got_bits.dtype)
                np.testing.assert_array_equal(got_bits, expected_bits, err_msg=what)


@pytest.mark.parametrize("groups", [1, 3, 1024])
def test_nvfp4_global_amax_is_the_same_whatever_the_grid(wave: int, groups: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 1 of the tensor maximum on 1, 3 or up to 1024 work-groups (each striding over the
    tensor), at both wave sizes: the same bytes as the reference, the maximum in the last
    element, along either axis and through a transposed view; NaN anywhere is still refused."""
    monkeypatch.setattr(hip.nvfp4, "AMAX_GROUPS", groups)
    rng = np.random.default_rng(groups)
    values = (rng.standard_normal((96, 512)) * 2.0 ** rng.integers(-20, 20, (96, 1))).astype(
        np.float32)
    values[95, 511] = 2.0**100
    poisoned = values.copy()
    poisoned[95, 0] = np.nan
    for profile in nvfp4_reference.PRODUCERS:
        what = f"{profile}, {groups} groups"
        for axis in (-1, 0):
            _check_nvfp4(values, torch.from_numpy(values), profile, f"{what} axis {axis}",
                         axis=axis)
        _check_nvfp4(values, torch.from_numpy(values.T.copy()).T, profile, f"{what} view")
        _check_nvfp4(poisoned, torch.from_numpy(poisoned), profile, f"{what} NaN")


def test_a_failed_build_is_not_tried_again_until_its_source_changes(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile that fails raises, and the same call raises the same error again without
    running the compiler (a broken kernel would otherwise be rebuilt for every example of
    every test); once the source changes it is compiled again."""
    log = tmp_path / "compiles.log"
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\n"
                    '[ "$1" = --version ] && { echo fake 1.0; exit 0; }\n'
                    f'echo compile >> {log}; echo "error: broken kernel" >&2; exit 1\n')
    fake.chmod(0o755)
    sources = tmp_path / "src"
    shutil.copytree(_build.SOURCE_DIR, sources, ignore=shutil.ignore_patterns("*.py", "__*"))
    monkeypatch.setattr(_build, "SOURCE_DIR", sources)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv("MXFORMATS_HIP_CACHE", str(tmp_path / "cache"))
    _build._compiler_version.cache_clear()

    def compiles() -> int:
        done = len(log.read_text().split()) if log.exists() else 0
        log.unlink(missing_ok=True)
        return done

    for attempt in range(2):
        with pytest.raises(RuntimeError, match="broken kernel") as raised:
            _build.cpu_driver()
        assert "build failed" in str(raised.value)
        objects = len((*_build.KERNELS, _build.PROBES, _build.DISPATCH, _build.DRIVER))
        assert compiles() == (objects if attempt == 0 else 0)
    kernel = sources / _build.KERNELS[0]
    kernel.write_text(kernel.read_text() + "// changed\n")
    with pytest.raises(RuntimeError, match="broken kernel"):
        _build.cpu_driver()
    assert compiles() == 1  # the changed kernel only: the others still failed as they were


def test_cpu_driver_rebuilds_what_changed(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU driver's cache, object by object, with a stand-in compiler that logs its
    compiles: a second call compiles nothing; a changed kernel recompiles that kernel and the
    link only; a changed header recompiles every object (each object's hash covers them)."""
    sources = tmp_path / "src"
    shutil.copytree(_build.SOURCE_DIR, sources, ignore=shutil.ignore_patterns("*.py", "__*"))
    log = tmp_path / "compiles.log"
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\n"
                    '[ "$1" = --version ] && { echo fake 1.0; exit 0; }\n'
                    'out=""; src=""; prev=""\n'
                    'for a in "$@"; do [ "$prev" = -o ] && out="$a"; '
                    'case "$a" in *.hip|*.cpp) src="$a";; esac; prev="$a"; done\n'
                    f'src="${{src##*/}}"; echo "${{src:-link}}" >> {log}\n'
                    ': > "$out"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(_build, "SOURCE_DIR", sources)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv("MXFORMATS_HIP_CACHE", str(tmp_path / "cache"))
    _build._compiler_version.cache_clear()

    def compiles() -> list[str]:
        done = sorted(log.read_text().split()) if log.exists() else []
        log.unlink(missing_ok=True)
        return done

    objects = sorted((*_build.KERNELS, _build.PROBES, _build.DISPATCH, _build.DRIVER))
    first = _build.cpu_driver()
    assert compiles() == sorted([*objects, "link"])  # every object, then the link
    assert _build.cpu_driver() == first and compiles() == []
    kernel = sources / _build.KERNELS[-1]
    kernel.write_text(kernel.read_text() + "// changed\n")
    second = _build.cpu_driver()
    assert second != first and compiles() == sorted([_build.KERNELS[-1], "link"])
    header = sources / "mx_numerics.h"
    header.write_text(header.read_text() + "// changed\n")
    assert _build.cpu_driver() not in (first, second) and compiles() == sorted([*objects, "link"])
