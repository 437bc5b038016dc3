"""CPU benchmarks of the fast paths (mxformats.fast) side by side with the peers (issue 8).

Every peer runs in this process on the same arrays: ``MXF_BENCH_ELEMENTS`` float32 values
(default 64M = 2**26, a 16384 × 4096 matrix of seeded N(0, 1) values) and what they quantize
to. Each test times one implementation (pytest-benchmark, median of its rounds) and then,
outside the timing, checks its bytes once: ours against the reference (``mxformats.schemes.mx`` /
``int4`` / ``codec``) on a 1M-element slice, a peer against ours on the whole array where the
two are defined to agree (torchao FLOOR and the OCP profile on finite data of normal range,
ml_dtypes and the reference codec on values inside the format's range, ...).

Run through ``python benchmarks/cpu.py`` (the ratios table) or
``pytest benchmarks/test_cpu_bench.py --benchmark-only``. ``extra_info`` of each benchmark:
``op`` (the row of the table), ``impl``, ``ours`` (True for mxformats), ``elements``.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mxformats import fast, quantize_nvfp4
from mxformats.formats import E2M1, E4M3FN
from mxformats.schemes import fp8_block, int4, mx, nvfp4, w4a8

ELEMENTS = int(os.environ.get("MXF_BENCH_ELEMENTS", 1 << 26))
COLUMNS = 4096
#: Elements of the slice the reference checks (the references are slow and use float64).
CHECK_ELEMENTS = 1 << 20
#: Rounds for our functions and the fast peers; the slow peers (about a second a call) get 3.
ROUNDS, SLOW_ROUNDS = 7, 3
FP8_MAX = 448.0


def _peers() -> dict[str, Any]:
    """The peer libraries, imported quietly (torchao warns about its CUDA extensions, Quark
    prints while it loads its C++ kernels)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
        from compressed_tensors.compressors.pack_quantized import helpers as ct_helpers
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
        from compressed_tensors.quantization.lifecycle.forward import dequantize
        from compressed_tensors.quantization.quant_scheme import NVFP4
        from compressed_tensors.quantization.utils import helpers as ct_qparams
        from quark.torch.utils.pack import Pack_4_bits
        from torchao.prototype.mx_formats import mx_tensor

    return {"torch": torch, "to_mx": mx_tensor.to_mx, "to_dtype": mx_tensor.to_dtype,
            "ct_pack": ct_helpers.pack_to_int32, "ct_unpack": ct_helpers.unpack_from_int32,
            "ct_dequantize": dequantize, "ct_args": QuantizationArgs, "quark_pack": Pack_4_bits,
            "ct_nvfp4": NVFP4PackedCompressor, "ct_qparams": ct_qparams,
            "ct_nvfp4_scheme": QuantizationScheme(targets=["Linear"], weights=NVFP4["weights"])}


@pytest.fixture(scope="module")
def peers() -> dict[str, Any]:
    return _peers()


@pytest.fixture(scope="module")
def data(peers: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The arrays every implementation works on, and their torch twins (shared memory)."""
    torch = peers["torch"]
    rng = np.random.default_rng(2026)
    x = rng.standard_normal((ELEMENTS // COLUMNS, COLUMNS), dtype=np.float32)
    mxfp4 = fast.quantize_mx(x)
    fp8_input = np.clip(x * np.float32(64), -FP8_MAX, FP8_MAX)
    q = rng.integers(-8, 8, size=x.shape, dtype=np.int8)
    with np.errstate(over="ignore"):
        int4_scales = (np.abs(x[:, ::32]) / np.float32(7.5)).astype(ml_dtypes.bfloat16)
    x_bf16 = x.astype(ml_dtypes.bfloat16)
    yield {
        "x": x, "x_t": torch.from_numpy(x), "mxfp4": mxfp4,
        "x_bf16": x_bf16, "x_bf16_t": torch.from_numpy(x_bf16.view(np.int16)).view(torch.bfloat16),
        "fp8_input": fp8_input, "fp8_input_t": torch.from_numpy(fp8_input),
        "fp8_codes": fast.encode(E4M3FN, fp8_input),
        "q": q, "q_t": torch.from_numpy(q),
        "words": fast.pack_int4(q), "quark_words": fast.pack_int4(q, layout="quark"),
        "int4_scales": int4_scales,
        "int4_scales_t": torch.from_numpy(int4_scales.view(np.int16)).view(torch.bfloat16),
    }


def run(benchmark: Any, fn: Callable[[], Any], op: str, impl: str, ours: bool,
        slow: bool = False) -> Any:
    """Time ``fn`` and label the result for the report; returns fn's last result."""
    benchmark.group = op
    benchmark.extra_info.update(op=op, impl=impl, ours=ours, elements=ELEMENTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch and torchao warn on some calls; not measured
        return benchmark.pedantic(fn, rounds=SLOW_ROUNDS if slow else ROUNDS, iterations=1,
                                  warmup_rounds=0 if slow else 1)


def same_bits(a: Any, b: Any) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype.itemsize != b.dtype.itemsize:
        return False
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return bool(np.array_equal(a.view(view), b.view(view)))


def head(a: Any) -> Any:
    """The first CHECK_ELEMENTS elements' rows."""
    return a[: max(1, CHECK_ELEMENTS // COLUMNS)]


def torch_bytes(t: Any) -> Any:
    import torch

    return t.contiguous().view(torch.uint8).numpy()


# -- memory copy --------------------------------------------------------------------------------


def test_copy(benchmark: Any, data: dict[str, Any]) -> None:
    """np.copyto into a preallocated float32 array: the 100 % of the "% of copy" column."""
    out = np.empty_like(data["x"])
    run(benchmark, lambda: np.copyto(out, data["x"]), "memory copy", "numpy copyto", True)
    assert same_bits(out, data["x"])


# -- MXFP4 quantize -----------------------------------------------------------------------------


def one_thread(threads: int | None) -> str:
    """The label suffix of a run limited to one thread (the default uses every core)."""
    return "" if threads is None else ", 1 thread"


@pytest.mark.parametrize(("profile", "threads"), [("ocp", None), ("quark", None), ("ocp", 1)])
def test_mxfp4_quantize_fast(benchmark: Any, data: dict[str, Any], profile: str,
                             threads: int | None) -> None:
    result = run(benchmark, lambda: fast.quantize_mx(data["x"], profile=profile, threads=threads),
                 "MXFP4 quantize", f"mxformats.fast ({profile}{one_thread(threads)})", True)
    want = mx.quantize_mx(head(data["x"]), profile=profile)
    assert same_bits(head(result.codes), want.codes) and same_bits(head(result.scales),
                                                                  want.scales)


def test_mxfp4_quantize_torchao(benchmark: Any, data: dict[str, Any],
                                peers: dict[str, Any]) -> None:
    torch = peers["torch"]
    scales, codes = run(benchmark, lambda: peers["to_mx"](data["x_t"], torch.float4_e2m1fn_x2,
                                                          32),
                        "MXFP4 quantize", "torchao to_mx FLOOR (eager)", False, slow=True)
    ours = data["mxfp4"]  # torchao FLOOR = ocp on finite data without tiny blocks
    assert same_bits(torch_bytes(codes), ours.codes)
    assert same_bits(torch_bytes(scales).reshape(ours.scales.shape), ours.scales)


def test_mxfp4_quantize_ml_dtypes(benchmark: Any, data: dict[str, Any]) -> None:
    """The elementwise cast alone (no block scale): a lower bound for any MX quantizer."""
    codes = run(benchmark, lambda: data["x"].astype(ml_dtypes.float4_e2m1fn), "MXFP4 quantize",
                "ml_dtypes astype float4_e2m1fn (elementwise)", False, slow=True)
    assert same_bits(head(codes), E2M1.encode(head(data["x"])))


# -- MXFP4 dequantize ---------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [None, 1])
def test_mxfp4_dequantize_fast(benchmark: Any, data: dict[str, Any], threads: int | None) -> None:
    m = data["mxfp4"]
    out = run(benchmark, lambda: fast.dequantize_mx(m.codes, m.scales, threads=threads),
              "MXFP4 dequantize", f"mxformats.fast (ocp{one_thread(threads)})", True)
    assert same_bits(head(out), mx.dequantize_mx(head(m.codes), head(m.scales)))


def test_mxfp4_dequantize_torchao(benchmark: Any, data: dict[str, Any],
                                  peers: dict[str, Any]) -> None:
    torch = peers["torch"]
    m = data["mxfp4"]
    codes = torch.from_numpy(m.codes)  # to_mx returns the packed bytes as uint8
    scales = torch.from_numpy(m.scales).view(torch.float8_e8m0fnu)
    out = run(benchmark, lambda: peers["to_dtype"](codes, scales, torch.float4_e2m1fn_x2, 32,
                                                   torch.float32),
              "MXFP4 dequantize", "torchao to_dtype (eager)", False, slow=True)
    assert same_bits(out.numpy(), fast.dequantize_mx(m.codes, m.scales))


def test_mxfp4_dequantize_ml_dtypes(benchmark: Any, data: dict[str, Any]) -> None:
    """The elementwise E2M1 -> float32 cast alone (no scale)."""
    codes = data["x"].astype(ml_dtypes.float4_e2m1fn)
    out = run(benchmark, lambda: codes.astype(np.float32), "MXFP4 dequantize",
              "ml_dtypes astype float32 (elementwise)", False, slow=True)
    assert same_bits(head(out), E2M1.decode(head(codes).view(np.uint8)))


# -- FP8 E4M3 -----------------------------------------------------------------------------------


def test_fp8_encode_fast(benchmark: Any, data: dict[str, Any]) -> None:
    out = run(benchmark, lambda: fast.encode(E4M3FN, data["fp8_input"]), "FP8 E4M3FN encode",
              "mxformats.fast encode", True)
    assert same_bits(head(out), E4M3FN.encode(head(data["fp8_input"])))


def test_fp8_encode_ml_dtypes(benchmark: Any, data: dict[str, Any]) -> None:
    out = run(benchmark, lambda: data["fp8_input"].astype(ml_dtypes.float8_e4m3fn),
              "FP8 E4M3FN encode", "ml_dtypes astype float8_e4m3fn", False, slow=True)
    assert same_bits(out, data["fp8_codes"])  # inputs inside +-448: the casts agree


def test_fp8_encode_torch(benchmark: Any, data: dict[str, Any], peers: dict[str, Any]) -> None:
    torch = peers["torch"]
    out = run(benchmark, lambda: data["fp8_input_t"].to(torch.float8_e4m3fn), "FP8 E4M3FN encode",
              f"torch .to(float8_e4m3fn) ({torch.get_num_threads()} threads)", False)
    assert same_bits(torch_bytes(out), data["fp8_codes"])


def test_fp8_decode_fast(benchmark: Any, data: dict[str, Any]) -> None:
    out = run(benchmark, lambda: fast.decode(E4M3FN, data["fp8_codes"]), "FP8 E4M3FN decode",
              "mxformats.fast decode", True)
    assert same_bits(head(out), E4M3FN.decode(head(data["fp8_codes"])))


def test_fp8_decode_ml_dtypes(benchmark: Any, data: dict[str, Any]) -> None:
    codes = data["fp8_codes"].view(ml_dtypes.float8_e4m3fn)
    out = run(benchmark, lambda: codes.astype(np.float32), "FP8 E4M3FN decode",
              "ml_dtypes astype float32", False, slow=True)
    assert same_bits(head(out), E4M3FN.decode(head(data["fp8_codes"])))


def test_fp8_decode_torch(benchmark: Any, data: dict[str, Any], peers: dict[str, Any]) -> None:
    torch = peers["torch"]
    codes = torch.from_numpy(data["fp8_codes"]).view(torch.float8_e4m3fn)
    out = run(benchmark, lambda: codes.to(torch.float32), "FP8 E4M3FN decode",
              f"torch .to(float32) ({torch.get_num_threads()} threads)", False)
    assert same_bits(head(out.numpy()), E4M3FN.decode(head(data["fp8_codes"])))


# -- INT4 ---------------------------------------------------------------------------------------


def test_int4_pack_fast(benchmark: Any, data: dict[str, Any]) -> None:
    out = run(benchmark, lambda: fast.pack_int4(data["q"]), "INT4 pack (compressed-tensors)",
              "mxformats.fast pack_int4", True)
    assert same_bits(head(out), int4.pack_int4(head(data["q"])))


def test_int4_pack_compressed_tensors(benchmark: Any, data: dict[str, Any],
                                      peers: dict[str, Any]) -> None:
    out = run(benchmark, lambda: peers["ct_pack"](data["q_t"], 4), "INT4 pack (compressed-tensors)",
              "compressed-tensors pack_to_int32", False)
    assert same_bits(out.numpy(), data["words"])


def test_int4_unpack_fast(benchmark: Any, data: dict[str, Any]) -> None:
    out = run(benchmark, lambda: fast.unpack_int4(data["words"]),
              "INT4 unpack (compressed-tensors)", "mxformats.fast unpack_int4", True)
    assert same_bits(head(out), int4.unpack_int4(head(data["words"])))


def test_int4_unpack_compressed_tensors(benchmark: Any, data: dict[str, Any],
                                        peers: dict[str, Any]) -> None:
    torch = peers["torch"]
    words = torch.from_numpy(data["words"])
    out = run(benchmark, lambda: peers["ct_unpack"](words, 4, torch.Size(data["q"].shape)),
              "INT4 unpack (compressed-tensors)", "compressed-tensors unpack_from_int32", False)
    assert same_bits(out.numpy(), data["q"])


def test_w4a8_unpack_fast(benchmark: Any, data: dict[str, Any]) -> None:
    out = run(benchmark, lambda: fast.unpack_int4(data["quark_words"], layout="quark"),
              "Quark W4A8 unpack", "mxformats.fast unpack_int4 (quark)", True)
    assert same_bits(head(out), int4.unpack_int4(head(data["quark_words"]), layout="quark"))


def test_w4a8_unpack_quark(benchmark: Any, data: dict[str, Any], peers: dict[str, Any]) -> None:
    torch = peers["torch"]
    packer = peers["quark_pack"]("per_channel", "int4")
    words = torch.from_numpy(data["quark_words"])
    out = run(benchmark, lambda: packer.unpack(words, reorder=True), "Quark W4A8 unpack",
              "quark Pack_4_bits.unpack", False, slow=True)
    assert same_bits(out.numpy(), data["q"])


def _w4a8_scales(rows: int) -> tuple[Any, Any]:
    """A W4A8 ``weight_scale`` (scalar) and ``weight_scale_2`` (per row) for ``rows`` rows."""
    s2 = np.random.default_rng(5).uniform(0.01, 0.1, rows).astype(np.float32)
    return np.float32(0.37).reshape(1), s2


@pytest.mark.parametrize("threads", [None, 1])
def test_w4a8_dequantize_fast(benchmark: Any, data: dict[str, Any], threads: int | None) -> None:
    """vLLM's folded-scale W4A8 dequantization (the Quark W4A8 descriptor's statistics)."""
    words = data["quark_words"]
    s1, s2 = _w4a8_scales(words.shape[0])
    out = run(benchmark, lambda: fast.dequantize_w4a8(words, s1, s2, threads=threads),
              "W4A8 dequantize (vLLM folded scales)",
              f"mxformats.fast dequantize_w4a8{' (1 thread)' if threads else ''}", True)
    rows = head(words).shape[0]
    assert same_bits(head(out), w4a8.dequantize_w4a8(head(words), s1, s2[:rows]))


def test_w4a8_dequantize_reference(benchmark: Any, data: dict[str, Any]) -> None:
    """The same with the reference (``mxformats.schemes.w4a8.dequantize_w4a8``)."""
    words = data["quark_words"]
    s1, s2 = _w4a8_scales(words.shape[0])
    out = run(benchmark, lambda: w4a8.dequantize_w4a8(words, s1, s2),
              "W4A8 dequantize (vLLM folded scales)", "reference dequantize_w4a8", False,
              slow=True)
    assert same_bits(head(out), fast.dequantize_w4a8(head(words), s1, s2[:head(words).shape[0]]))



def test_reproduction_statistics(benchmark: Any, data: dict[str, Any]) -> None:
    """The float64 error statistics ``validate --source`` computes per module in numpy
    (:class:`mxformats.fast.moments.Moments`: shifted sums in 16 lanes, 64 Ki-element pieces)
    of the decoded MXFP4 weight against its bfloat16 source: the part of a module's
    reproduction that follows its quantize and dequantize rows above, where numba is absent.
    Checked against the whole-array float64 sums."""
    from mxformats.fast.moments import Moments

    m = data["mxfp4"]
    d = fast.dequantize_mx(m.codes, m.scales)
    x = data["x_bf16"]
    stats = run(benchmark, lambda: Moments.of(d, x),
                "reproduction statistics (numpy, float64 lanes)", "validate --source", True,
                slow=True)
    assert stats is not None and stats.source_varies and stats.weight_varies
    error = d.astype(np.float64) - x.astype(np.float64)
    assert stats.error_squares == pytest.approx(float(np.sum(error * error)), rel=1e-9)


#: A Kimi-K2 routed expert (2048 × 7168), fewer rows where MXF_BENCH_ELEMENTS is smaller.
EXPERT_SHAPE = (max(1, min(2048, ELEMENTS // 7168)), 7168)


def _best_of(fn: Callable[[], Any], rounds: int = ROUNDS) -> float:
    """The fastest of ``rounds`` calls of ``fn``, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def avx512() -> bool:
    """Whether this CPU has AVX-512F (the compiled pass's bits do not depend on it)."""
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_reproduction_module(benchmark: Any, path: str) -> None:
    """``validate --source``'s work on one Quark MXFP4 module of Kimi-K2 expert size from its
    BF16 source: quantize, compare every byte, dequantize the checkpoint's, error statistics.
    ``compiled``: the one numba pass (:func:`mxformats.fast.reproduce.reproduce_mxfp4`),
    compiled or loaded from numba's cache before timing; ``numpy``: the numpy fast paths and
    :class:`~mxformats.fast.moments.Moments`, as without numba. Beside a copy of the source
    bytes in the same test: ``ratio_to_copy``; ``source_gb_per_s``: BF16 source bytes per
    second on this one core. Both give the same moments bits (checked)."""
    from mxformats.fast import jit
    from mxformats.fast import reproduce as compiled_reproduce
    from mxformats.fast.moments import Moments
    from mxformats.validate.descriptors.quark_mxfp4 import DESCRIPTOR

    if path == "compiled" and jit.compiled() is None:
        pytest.skip(jit.status())
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(EXPERT_SHAPE, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    q = fast.quantize_mx(w, profile="quark")
    consumer = DESCRIPTOR.consumer

    def numpy_path() -> Moments | None:
        ours = fast.quantize_mx(w, profile="quark", threads=1)
        assert ours.codes.tobytes() == q.codes.tobytes()
        d = DESCRIPTOR.dequantize({"weight": q.codes, "weight_scale": q.scales}, w.shape[1])
        return Moments.of(np.asarray(d), w)

    def compiled_path() -> Moments | None:
        return compiled_reproduce.reproduce_mxfp4(w, q.codes, q.scales, "quark", consumer)

    _time_pass(benchmark, w, compiled_path if path == "compiled" else numpy_path, numpy_path,
               f"reproduction of one Kimi expert ({path})", slow=path == "numpy")


def _time_pass(benchmark: Any, w: Any, fn: Callable[[], Any], numpy_path: Callable[[], Any],
               op: str, slow: bool) -> None:
    """Time one module's reproduction ``fn`` on source ``w`` (a first call outside the timing:
    numba's compile or cache load is never timed) beside a copy of ``w``'s bytes, label the
    figures, and check that its moments have ``numpy_path``'s bits."""
    from mxformats.fast import jit

    fn()
    out = np.empty_like(w)
    copy = _best_of(lambda: np.copyto(out, w))
    stats = run(benchmark, fn, op, "validate --source, 1 thread", True, slow=slow)
    seconds = float(benchmark.stats.stats.min)
    benchmark.extra_info.update(
        bytes=w.nbytes, elements=w.size, copy_seconds=copy, ratio_to_copy=seconds / copy,
        source_gb_per_s=w.nbytes / seconds / 1e9, avx512=avx512(), numba=jit.status())
    want = numpy_path()
    assert stats is not None and want is not None
    assert np.array([stats.error_squares, stats.cross]).view(np.uint64).tolist() == \
        np.array([want.error_squares, want.cross]).view(np.uint64).tolist()


@pytest.mark.parametrize("path", ["compiled", "numpy"])
@pytest.mark.parametrize("producer", sorted(nvfp4.PRODUCERS))
def test_reproduction_module_nvfp4(benchmark: Any, producer: str, path: str) -> None:
    """:func:`test_reproduction_module` for one NVFP4 module (ModelOpt or compressed-tensors)
    of Kimi-K2 expert size: ``compiled``, the one numba pass
    (:func:`mxformats.fast.reproduce_nvfp4.reproduce_nvfp4`: quantize with the stored global
    scale, compare, decode as the default consumer, moments, and the module's amax to check
    that global scale); ``numpy``, the numpy fast paths as without numba. Beside a copy of the
    source bytes in the same test; both give the same moments bits (checked)."""
    from mxformats.fast import jit
    from mxformats.fast import reproduce_nvfp4 as compiled_nvfp4
    from mxformats.fast.moments import Moments
    from mxformats.validate.descriptors.nvfp4_ct import DESCRIPTOR as CT
    from mxformats.validate.descriptors.nvfp4_modelopt import DESCRIPTOR as MODELOPT

    if path == "compiled" and jit.compiled(compiled_nvfp4.KERNELS) is None:
        pytest.skip(jit.status())
    desc = {d.profile: d for d in (MODELOPT, CT)}[producer]
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(EXPERT_SHAPE, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    arrays = desc.produce(w)
    packed, scales, stored = (arrays[p] for p in desc.produced_params())

    def numpy_path() -> Moments | None:
        ours = fast.quantize_nvfp4(w, profile=producer, threads=1)
        assert ours.packed().tobytes() == packed.tobytes()
        return Moments.of(np.asarray(desc.dequantize(arrays, w.shape[1])), w)

    def compiled_path() -> Moments | None:
        return compiled_nvfp4.reproduce_nvfp4(w, packed, scales, stored, producer,
                                              desc.consumer)

    _time_pass(benchmark, w, compiled_path if path == "compiled" else numpy_path, numpy_path,
               f"NVFP4 {producer} reproduction of one Kimi expert ({path})", slow=path == "numpy")


@pytest.mark.parametrize("threads", [None, 1])
def test_int4_dequantize_fast(benchmark: Any, data: dict[str, Any], threads: int | None) -> None:
    """compressed-tensors arithmetic with bfloat16 group scales, float32 out."""
    out = run(benchmark, lambda: fast.dequantize_int4(data["q"], data["int4_scales"],
                                                      threads=threads),
              "INT4 dequantize (bfloat16 scales)",
              f"mxformats.fast dequantize_int4{' (1 thread)' if threads else ''}", True)
    want = int4.dequantize_int4(head(data["q"]), head(data["int4_scales"]))
    assert same_bits(head(out), want)


def test_int4_dequantize_compressed_tensors(benchmark: Any, data: dict[str, Any],
                                            peers: dict[str, Any]) -> None:
    """compressed-tensors ``dequantize`` (writes bfloat16: half the bytes of ours)."""
    torch = peers["torch"]
    args = peers["ct_args"](num_bits=4, type="int", strategy="group", group_size=32,
                            symmetric=True)
    out = run(benchmark, lambda: peers["ct_dequantize"](data["q_t"], data["int4_scales_t"],
                                                        args=args),
              "INT4 dequantize (bfloat16 scales)", "compressed-tensors dequantize (bf16 out)",
              False, slow=True)
    assert same_bits(out.to(torch.float32).numpy(),
                     fast.dequantize_int4(data["q"], data["int4_scales"]))


# -- FP8 block quantize (128 × 128 tiles, profile deepseek) ---------------------------------------

FP8_TILE = 128


def test_fp8_block_quantize_fast(benchmark: Any, data: dict[str, Any]) -> None:
    result = run(benchmark, lambda: fast.quantize_fp8_block(data["x"], profile="deepseek"),
                 "FP8 block quantize", "mxformats.fast (deepseek)", True)
    want = fp8_block.quantize_fp8_block(head(data["x"]), profile="deepseek")
    rows = want.codes.shape[0]
    assert same_bits(result.codes[:rows], want.codes)
    assert same_bits(result.scales[: rows // FP8_TILE], want.scales)


def test_fp8_block_quantize_torch(benchmark: Any, data: dict[str, Any],
                                  peers: dict[str, Any]) -> None:
    """DeepGEMM's ``per_block_cast_to_fp8`` (tests/test_core.py@f0314fa), eager torch: the
    float32 amax per tile, ``x * (448 / amax)``, the FP8 cast."""
    torch = peers["torch"]
    x = data["x_t"]

    def cast() -> tuple[Any, Any]:
        view = x.view(-1, FP8_TILE, x.size(1) // FP8_TILE, FP8_TILE)
        amax = view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
        codes = (view * (448.0 / amax)).to(torch.float8_e4m3fn).view_as(x)
        return codes, (amax / 448.0).view(view.size(0), view.size(2))

    codes, scales = run(benchmark, cast, "FP8 block quantize",
                        f"torch per_block_cast_to_fp8 ({torch.get_num_threads()} threads)", False)
    ours = fast.quantize_fp8_block(data["x"], profile="deepseek")
    assert same_bits(torch_bytes(codes), ours.codes) and same_bits(scales.numpy(), ours.scales)


def test_fp8_block_quantize_ml_dtypes(benchmark: Any, data: dict[str, Any]) -> None:
    """The same formula in numpy with ml_dtypes' FP8 cast."""
    x = data["x"]

    def cast() -> tuple[Any, Any]:
        tiles = x.reshape(x.shape[0] // FP8_TILE, FP8_TILE, -1, FP8_TILE)
        amax = np.maximum(np.abs(tiles).max(axis=(1, 3)), np.float32(1e-4))
        factor = (np.float32(1) / amax) * np.float32(448)
        codes = (tiles * factor[:, None, :, None]).astype(ml_dtypes.float8_e4m3fn)
        return codes.reshape(x.shape).view(np.uint8), amax / np.float32(448)

    codes, scales = run(benchmark, cast, "FP8 block quantize",
                        "numpy + ml_dtypes astype float8_e4m3fn", False, slow=True)
    ours = fast.quantize_fp8_block(x, profile="deepseek")
    assert same_bits(codes, ours.codes) and same_bits(scales, ours.scales)
# -- NVFP4 --------------------------------------------------------------------------------------

NVFP4_OP = "NVFP4 quantize (compressed-tensors, bfloat16 in)"


def test_nvfp4_quantize_fast(benchmark: Any, data: dict[str, Any]) -> None:
    x = data["x_bf16"]
    out = run(benchmark, lambda: fast.quantize_nvfp4(x, profile="compressed-tensors"), NVFP4_OP,
              "mxformats.fast quantize_nvfp4", True, slow=True)
    amax = float(np.abs(x.astype(np.float32)).max())  # the whole tensor's global scale
    want = quantize_nvfp4(head(x), profile="compressed-tensors", global_amax=amax)
    assert same_bits(head(out.packed()), want.packed())
    assert same_bits(head(out.scales), want.scales)


def test_nvfp4_quantize_compressed_tensors(benchmark: Any, data: dict[str, Any],
                                           peers: dict[str, Any]) -> None:
    """llm-compressor's weight path: ``generate_gparam`` on the tensor, ``calculate_qparams``
    on the groups' min/max (the observer), ``NVFP4PackedCompressor.compress``."""
    helpers, scheme = peers["ct_qparams"], peers["ct_nvfp4_scheme"]
    t = data["x_bf16_t"]

    def compress() -> Any:
        global_scale = helpers.generate_gparam(t.amin(), t.amax())
        groups = t.unflatten(-1, (-1, 16))
        scale, _ = helpers.calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights,
                                             global_scale=global_scale)
        state = {"weight": t, "weight_scale": scale, "weight_global_scale": global_scale}
        return peers["ct_nvfp4"].compress(state, scheme)

    out = run(benchmark, compress, NVFP4_OP, "compressed-tensors NVFP4PackedCompressor", False,
              slow=True)
    ours = fast.quantize_nvfp4(head(data["x_bf16"]), profile="compressed-tensors",
                               global_amax=float(np.abs(data["x"]).max().astype(ml_dtypes.bfloat16)))
    assert same_bits(head(torch_bytes(out["weight_packed"])), ours.packed())


# -- NVFP4 and FP8 block dequantize -----------------------------------------------------------

NVFP4_DEQUANT_OP = "NVFP4 dequantize (packed, float32 out)"
FP8_BLOCK_DEQUANT_OP = "FP8 block dequantize (128 × 128, float32 out)"


@pytest.fixture(scope="module")
def nvfp4_weight(data: dict[str, Any]) -> Any:
    """``x`` (bfloat16) quantized as llm-compressor writes it (compressed-tensors profile)."""
    return fast.quantize_nvfp4(data["x_bf16"], profile="compressed-tensors")


@pytest.fixture(scope="module")
def fp8_block_weight(data: dict[str, Any]) -> Any:
    """``x`` quantized as DeepSeek/Kimi-K2 ship it (128 × 128 tiles, float32 scales)."""
    return fast.quantize_fp8_block(data["x"], profile="deepseek")


@pytest.mark.parametrize("consumer", ["vllm-compressed-tensors",
                                      "vllm-compressed-tensors-emulation"])
def test_nvfp4_dequantize_fast(benchmark: Any, nvfp4_weight: Any, consumer: str) -> None:
    packed, w = nvfp4_weight.packed(), nvfp4_weight
    out = run(benchmark, lambda: fast.dequantize_nvfp4(packed, w.scales, w.global_scale,
                                                       profile=consumer, packed=True),
              NVFP4_DEQUANT_OP, f"mxformats.fast ({consumer})", True)
    want = nvfp4.dequantize_nvfp4(head(w.codes), head(w.scales), w.global_scale,
                                  profile=consumer)
    assert same_bits(head(out), want)


def test_nvfp4_dequantize_compressed_tensors(benchmark: Any, nvfp4_weight: Any,
                                             peers: dict[str, Any]) -> None:
    """``NVFP4PackedCompressor.decompress``: unpack to bfloat16, ``scale / global`` in
    float32, the product rounded to bfloat16 (half our bytes). Its bytes are the
    ``vllm-compressed-tensors-emulation`` consumer's float32 result rounded to bfloat16."""
    torch = peers["torch"]
    w = nvfp4_weight
    state = {"weight_packed": torch.from_numpy(w.packed()),
             "weight_scale": torch.from_numpy(w.scales).view(torch.float8_e4m3fn),
             "weight_global_scale": torch.from_numpy(w.global_scale)}
    out = run(benchmark, lambda: peers["ct_nvfp4"].decompress(state, peers["ct_nvfp4_scheme"]),
              NVFP4_DEQUANT_OP, "compressed-tensors NVFP4PackedCompressor.decompress (bf16 out)",
              False, slow=True)
    ours = fast.dequantize_nvfp4(w.codes, w.scales, w.global_scale,
                                 profile="vllm-compressed-tensors-emulation")
    assert same_bits(out["weight"].view(torch.int16).numpy(), ours.astype(ml_dtypes.bfloat16))


def test_nvfp4_dequantize_ml_dtypes(benchmark: Any, nvfp4_weight: Any) -> None:
    """The elementwise E2M1 -> float32 cast alone (no scales)."""
    codes = nvfp4_weight.codes.view(ml_dtypes.float4_e2m1fn)
    out = run(benchmark, lambda: codes.astype(np.float32), NVFP4_DEQUANT_OP,
              "ml_dtypes astype float32 (elementwise, no scales)", False, slow=True)
    assert same_bits(head(out), E2M1.decode(head(nvfp4_weight.codes)))


@pytest.mark.parametrize("threads", [None, 1])
def test_fp8_block_dequantize_fast(benchmark: Any, fp8_block_weight: Any,
                                   threads: int | None) -> None:
    w = fp8_block_weight
    out = run(benchmark, lambda: fast.dequantize_fp8_block(w.codes, w.scales, threads=threads),
              FP8_BLOCK_DEQUANT_OP, f"mxformats.fast (deepseek{one_thread(threads)})", True)
    rows = head(w.codes).shape[0]
    want = fp8_block.dequantize_fp8_block(head(w.codes), w.scales[: -(-rows // FP8_TILE)])
    assert same_bits(head(out), want)


def test_fp8_block_dequantize_torch(benchmark: Any, fp8_block_weight: Any,
                                    peers: dict[str, Any]) -> None:
    """The FP8 cast times the broadcast tile scales in eager torch, vLLM ``scaled_dequantize``'s
    arithmetic (``x_q.to(float32) * x_s.to(float32)``, quant_utils.py@01693a6)."""
    torch = peers["torch"]
    codes = torch.from_numpy(fp8_block_weight.codes).view(torch.float8_e4m3fn)
    scales = torch.from_numpy(fp8_block_weight.scales)
    rows, cols = scales.shape

    def dequantize() -> Any:
        tiles = codes.view(rows, FP8_TILE, cols, FP8_TILE).to(torch.float32)
        return (tiles * scales[:, None, :, None]).view(codes.shape)

    out = run(benchmark, dequantize, FP8_BLOCK_DEQUANT_OP,
              f"torch FP8 cast × block scales ({torch.get_num_threads()} threads)", False)
    ours = fast.dequantize_fp8_block(fp8_block_weight.codes, fp8_block_weight.scales)
    assert same_bits(out.numpy(), ours)


def test_fp8_block_dequantize_ml_dtypes(benchmark: Any, fp8_block_weight: Any) -> None:
    """The same product in numpy with ml_dtypes' FP8 cast."""
    codes = fp8_block_weight.codes.view(ml_dtypes.float8_e4m3fn)
    scales = fp8_block_weight.scales
    rows, cols = scales.shape

    def dequantize() -> Any:
        tiles = codes.reshape(rows, FP8_TILE, cols, FP8_TILE).astype(np.float32)
        return (tiles * scales[:, None, :, None]).reshape(codes.shape)

    out = run(benchmark, dequantize, FP8_BLOCK_DEQUANT_OP,
              "numpy + ml_dtypes astype float32 × block scales", False, slow=True)
    assert same_bits(out, fast.dequantize_fp8_block(fp8_block_weight.codes, scales))


# -- reproduction: each descriptor's produce on a BF16 expert weight (issue 18) --------------

#: A Kimi-K2 routed expert's gate_proj / up_proj: [2048, 7168] bfloat16.
EXPERT_SHAPE = (2048, 7168)
#: The Quark MXFP4 rows of one: the last 16 columns cut, so every row ends in a short block.
SHORT_BLOCK_COLUMNS = 7168 - 16


def _reproduced() -> dict[str, Any]:
    """op label -> the descriptor whose ``produce`` the validator's ``--source`` runs."""
    from mxformats.validate.descriptors import (
        ct_int4,
        fp8_block_ct,
        fp8_block_deepseek,
        nvfp4_ct,
        nvfp4_modelopt,
        quark_mxfp4,
        quark_w4a8,
    )

    return {f"reproduce {m.DESCRIPTOR.format.value}": m.DESCRIPTOR
            for m in (quark_mxfp4, quark_w4a8, ct_int4, nvfp4_modelopt, nvfp4_ct,
                      fp8_block_deepseek, fp8_block_ct)}


REPRODUCED = _reproduced()


@pytest.fixture(scope="module")
def expert() -> Any:
    """Seeded N(0, 0.02) values as bfloat16, the dtype the producers read."""
    rng = np.random.default_rng(2018)
    w = rng.standard_normal(EXPERT_SHAPE, dtype=np.float32) * np.float32(0.02)
    return w.astype(ml_dtypes.bfloat16)


def _source(expert: Any, op: str) -> Any:
    """The weight ``op`` reproduces: the expert, with a short last block for Quark MXFP4."""
    if REPRODUCED[op].format.value == "quark-mxfp4":
        return np.ascontiguousarray(expert[:, :SHORT_BLOCK_COLUMNS])
    return expert


def _label(benchmark: Any, w: Any) -> None:
    """GB/s of the bfloat16 source read (cpu.py otherwise counts 4 bytes an element)."""
    benchmark.extra_info.update(bytes=w.nbytes)


@pytest.mark.parametrize("op", REPRODUCED)
def test_reproduce_copy(benchmark: Any, expert: Any, op: str) -> None:
    """The physical floor: np.copyto of the same bfloat16 bytes."""
    w = _source(expert, op)
    out = np.empty_like(w)
    run(benchmark, lambda: np.copyto(out, w), op, "numpy copyto of the bfloat16 source", False)
    _label(benchmark, w)
    assert same_bits(out, w)


@pytest.mark.parametrize("threads", [None, 1])
@pytest.mark.parametrize("op", REPRODUCED)
def test_reproduce_fast(benchmark: Any, expert: Any, monkeypatch: pytest.MonkeyPatch, op: str,
                        threads: int | None) -> None:
    """The descriptor's ``produce`` as the validator runs it (its fast quantizer), on every
    core or pinned to one by ``MXFORMATS_THREADS`` as a process-pool worker is."""
    if threads is not None:
        monkeypatch.setenv(fast.THREADS_VARIABLE, str(threads))
    w = _source(expert, op)
    run(benchmark, lambda: REPRODUCED[op].produce(w), op,
        f"mxformats.fast ({'every core' if threads is None else '1 thread'})", True)
    _label(benchmark, w)


@pytest.mark.parametrize("op", REPRODUCED)
def test_reproduce_reference(benchmark: Any, expert: Any, monkeypatch: pytest.MonkeyPatch,
                             op: str) -> None:
    """The same ``produce`` with the descriptor's fast functions swapped for their references
    (:data:`mxformats.fast.REFERENCES`); the bytes are checked equal once."""
    descriptor = REPRODUCED[op]
    w = _source(expert, op)
    ours = descriptor.produce(w)
    for name in ("quantizer", "packer"):
        function = getattr(type(descriptor), name, None)
        if function is not None:
            monkeypatch.setattr(type(descriptor), name,
                                staticmethod(fast.REFERENCES[function]))
    theirs = run(benchmark, lambda: descriptor.produce(w), op, "reference", False, slow=True)
    _label(benchmark, w)
    assert ours.keys() == theirs.keys()
    assert all(same_bits(ours[k], theirs[k]) and ours[k].dtype == theirs[k].dtype for k in ours)


# -- the compiled INT4 and W4A8 passes, one Kimi expert (issue 27) --------------------------


def _int4_descriptors() -> dict[str, Any]:
    from mxformats.validate.descriptors import ct_int4, quark_w4a8

    return {"ct-int4-g32": ct_int4.VARIANTS[32], "ct-int4-g128": ct_int4.VARIANTS[128],
            "ct-int4-channel": ct_int4.VARIANTS[None], "quark-w4a8": quark_w4a8.DESCRIPTOR}


#: A Kimi-K2 routed expert's gate/up ``[2048, 7168]`` and down ``[7168, 2048]``, fewer rows
#: where MXF_BENCH_ELEMENTS is smaller.
INT4_SHAPES = {"2048x7168": EXPERT_SHAPE,
               "7168x2048": (max(1, min(7168, ELEMENTS // 2048)), 2048)}


@pytest.mark.parametrize("shape", INT4_SHAPES)
@pytest.mark.parametrize("fmt", _int4_descriptors())
@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_reproduction_module_int4(benchmark: Any, path: str, fmt: str, shape: str) -> None:
    """``validate --source``'s work on one compressed-tensors INT4 or Quark W4A8 module of a
    Kimi-K2 expert's size from its BF16 source, as :func:`test_reproduction_module` times it
    for MXFP4: ``compiled``, the one numba pass
    (:meth:`~mxformats.validate.descriptors.base.Descriptor.reproduce_in_one_pass`, compiled or
    loaded from numba's cache before timing); ``numpy``, the descriptor's ``produce`` on one
    thread, the byte comparison, its ``dequantize`` and
    :class:`~mxformats.fast.moments.Moments`, as without numba. ``ratio_to_copy``: beside a
    copy of the source bytes in the same test; both give the same moments bits (checked)."""
    from mxformats.fast import jit
    from mxformats.fast.moments import Moments

    if path == "compiled" and jit.compiled("compiled_int4") is None:
        pytest.skip(jit.status())
    descriptor = _int4_descriptors()[fmt]
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(INT4_SHAPES[shape], dtype=np.float32) * 0.02).astype(
        ml_dtypes.bfloat16)
    arrays = descriptor.produce(w)

    def numpy_path() -> Moments | None:
        with pytest.MonkeyPatch.context() as patch:  # one thread, as a pool worker runs
            patch.setenv(fast.THREADS_VARIABLE, "1")
            ours = descriptor.produce(w)
            assert all(same_bits(ours[k], arrays[k]) for k in ours)
            return Moments.of(np.asarray(descriptor.dequantize(arrays, w.shape[1])), w)

    def compiled_path() -> Moments | None:
        return descriptor.reproduce_in_one_pass("expert", w, arrays)

    _time_pass(benchmark, w, compiled_path if path == "compiled" else numpy_path, numpy_path,
               f"reproduction of one Kimi expert {shape}, {fmt} ({path})", slow=path == "numpy")
