"""FP8 block scaling against the real producer and the DeepGEMM formula, run in torch on the CPU.

* ``compressed-tensors``: compressed-tensors 0.20.1 itself, as llm-compressor 0.14's
  ``model_free_ptq(scheme="FP8_BLOCK")`` drives it: the weight zero-padded to whole tiles
  (``pad_weight_for_block_quant``), the block observer's ``torch.amin``/``torch.amax`` per tile
  (``observers/helpers.py`` ``flatten_for_calibration``, BLOCK), ``calculate_qparams``, then
  ``quantize(weight, scale, zero_point=None, args, dtype=float8_e4m3fn)`` as
  ``NaiveQuantizationCompressor.compress`` calls it (``weight_zero_point`` is never created
  for a symmetric scheme, so no +0 is added and -0.0 stays 0x80).
* ``deepseek``, ``deepgemm``, ``ue8m0``: no installable producer exists; the second oracle is
  DeepGEMM's ``per_block_cast_to_fp8`` written out in torch below, in the old form
  (``x_view * (448.0 / x_amax)``, deepseek-ai/DeepGEMM ``tests/test_core.py@f0314fa``, what the
  DeepSeek-V3 and Kimi-K2-Instruct checkpoints hold) and today's
  (``deep_gemm/utils/math.py@38939a4``: ``x_view * (1.0 / sf)``, ``ceil_to_ue8m0``).
* ``deepseek-fnuz``: the old form followed by vLLM's ``normalize_e4m3fn_to_e4m3fnuz``
  (``vllm/model_executor/layers/quantization/utils/w8a8_utils.py@646ad5a``), written in torch.
* The consumer: vLLM ``scaled_dequantize`` (``quant_utils.py@01693a6``), written in torch.

Each profile meets >= 100,000 random tiles (4 × 8; Gaussian at every exponent, grid values and
ties, random bit patterns with NaN and Inf, sprinkled specials, sparse) in bfloat16, and more in
float32, plus Hypothesis tiles and whole 128 × 128 tiles with ragged edges. Codes are compared
byte for byte, scales bit for bit, except two asserted divergences, both the sign or payload
of a NaN that torch's x86 arithmetic makes (counted by ``check``, never skipped):

* NaN codes. mxformats writes every NaN element as 0x7F, the code CUDA's canonical positive
  NaN gives. torch on x86 keeps the sign of the NaN its arithmetic made: ``Inf * 0`` and
  ``Inf / Inf`` give the negative default NaN, a NaN operand passes on its own sign, and
  compressed-tensors' float32 tile maximum of a NaN tile comes out as a negative NaN from the
  vectorised ``amin``/``amax``, so whole tiles become 0xFF. Where the producer wrote 0xFF, the
  test asserts that mxformats wrote 0x7F there (both NaN) and counts it.
* The bits of a NaN scale. mxformats writes the canonical quiet NaN (0x7FC00000 in float32,
  0x7FC0 in bfloat16); torch's NaN bits depend on the SIMD path. Where they differ, the test
  asserts that both are NaN and counts it.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

torch = requires("torch")
requires("compressed_tensors")

import _producers as P  # noqa: E402

from mxformats import E4M3FN, dequantize_fp8_block, quantize_fp8_block  # noqa: E402
from mxformats.codec import tensor_to_numpy  # noqa: E402

TILE = (4, 8)
RANDOM_TILES = 100_000
TILES_PER_ROW = 100
DG_PROFILES = ("deepseek", "deepgemm", "ue8m0", "deepseek-fnuz")


# -- the producers, in torch -------------------------------------------------------------------


def _padded(t: Any, block: tuple[int, int]) -> Any:
    m, n = t.shape
    rows, cols = -(-m // block[0]) * block[0], -(-n // block[1]) * block[1]
    padded = torch.zeros((rows, cols), dtype=t.dtype)
    padded[:m, :n] = t
    return padded


def ct_fp8_block(x: np.ndarray, block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """compressed-tensors 0.20.1 FP8_BLOCK as llm-compressor's model_free_ptq writes a weight."""
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.quant_scheme import FP8_BLOCK
    from compressed_tensors.quantization.utils import calculate_qparams

    args = FP8_BLOCK["weights"].model_copy(update={"block_structure": list(block)})
    weight = _padded(P.to_torch(x), block)
    rows, cols = weight.shape[0] // block[0], weight.shape[1] // block[1]
    tiles = weight.reshape(rows, block[0], cols, block[1]).transpose(1, 2).flatten(-2, -1)
    lo, hi = torch.amin(tiles, dim=-1), torch.amax(tiles, dim=-1)
    scale, _ = calculate_qparams(lo, hi, args)
    codes = quantize(weight, scale, None, args, dtype=torch.float8_e4m3fn)
    m, n = x.shape
    return P.as_bytes(codes[:m, :n]), P.from_torch(scale)


def _ceil_to_ue8m0(sf: Any) -> Any:
    """DeepGEMM deep_gemm/utils/math.py@38939a4 ``ceil_to_ue8m0``."""
    bits = sf.abs().float().view(torch.int)
    exponent = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
    return (exponent.clamp(1, 254) << 23).view(torch.float)


def deepgemm_fp8_block(x: np.ndarray, block: tuple[int, int], profile: str
                       ) -> tuple[np.ndarray, np.ndarray]:
    """DeepGEMM ``per_block_cast_to_fp8`` with ``gran_k`` = ``block``; the old form for
    ``deepseek``/``deepseek-fnuz``, today's for ``deepgemm``/``ue8m0``."""
    t = P.to_torch(x)
    m, n = t.shape
    padded = _padded(t, block)
    view = padded.view(-1, block[0], padded.size(1) // block[1], block[1])
    amax = view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    if profile in ("deepseek", "deepseek-fnuz"):
        scaled = (view * (448.0 / amax)).to(torch.float8_e4m3fn)
        sf = amax / 448.0
    else:
        sf = amax / 448.0
        sf = _ceil_to_ue8m0(sf) if profile == "ue8m0" else sf
        scaled = (view * (1.0 / sf)).to(torch.float8_e4m3fn)
    codes = scaled.view_as(padded)[:m, :n].contiguous()
    scales = sf.view(view.size(0), view.size(2))
    if profile == "deepseek-fnuz":  # vLLM normalize_e4m3fn_to_e4m3fnuz
        as_int8 = codes.view(torch.int8)
        as_int8[as_int8 == -128] = 0
        codes = as_int8.view(torch.float8_e4m3fnuz)
        scales = scales * 2.0
    return P.as_bytes(codes), P.from_torch(scales)


def produce(x: np.ndarray, block: tuple[int, int], profile: str) -> tuple[np.ndarray, np.ndarray]:
    if profile == "compressed-tensors":
        return ct_fp8_block(x, block)
    return deepgemm_fp8_block(x, block, profile)


def vllm_scaled_dequantize(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int],
                           fnuz: bool, out_dtype: Any) -> np.ndarray:
    """vLLM ``scaled_dequantize``: ``(x_q.to(float32) * group_broadcast(x_s.to(float32)))
    .to(out_dtype)``; the broadcast cropped at ragged edges as DeepSeek-V3 weight_dequant
    masks them."""
    fp8 = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    q = torch.from_numpy(codes.copy()).view(fp8)
    s = P.to_torch(scales).to(torch.float32)
    s = s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[: q.shape[0], : q.shape[1]]
    return P.from_torch((q.to(torch.float32) * s).to(out_dtype))


# -- comparison ----------------------------------------------------------------------------------


def check(x: np.ndarray, block: tuple[int, int], profile: str) -> dict[str, int]:
    """Codes equal byte for byte, scales bit for bit, except the two asserted NaN-sign
    divergences, which are counted: a NaN code the producer wrote as 0xFF (negative NaN) where
    mxformats writes 0x7F, and a NaN scale with other NaN bits than the canonical one."""
    ours = quantize_fp8_block(x, block=block, profile=profile)
    codes, scales = produce(x, block, profile)
    assert ours.scales.dtype == scales.dtype and ours.scales.shape == scales.shape
    negative_nan = (ours.codes == 0x7F) & (codes == 0xFF)
    bad = np.argwhere((ours.codes != codes) & ~negative_nan)
    assert bad.size == 0, [
        (tuple(i), float(x[tuple(i)]), hex(ours.codes[tuple(i)]), hex(codes[tuple(i)]))
        for i in bad[:5]
    ]
    assert P.same_floats(ours.scales, scales), profile
    bits = np.uint16 if scales.dtype.itemsize == 2 else np.uint32
    differ = ours.scales.view(bits) != scales.view(bits)
    assert np.all(P.nan_mask(scales)[differ])  # only NaN payloads/signs may differ
    return {"negative NaN codes": int(negative_nan.sum()), "NaN scale bits": int(differ.sum())}


def tiled(rows: np.ndarray, tile: tuple[int, int], per_row: int) -> np.ndarray:
    """``(n, tile[0] * tile[1])`` rows as an ``[n / per_row · bm, per_row · bn]`` matrix whose
    tiles are the rows."""
    n = rows.shape[0] // per_row * per_row
    t = rows[:n].reshape(n // per_row, per_row, *tile)
    return np.ascontiguousarray(t.transpose(0, 2, 1, 3).reshape(n // per_row * tile[0], -1))


DTYPES = {"bfloat16": (P.BF16, RANDOM_TILES), "float32": (P.F32, RANDOM_TILES // 5)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("profile", ("compressed-tensors", *DG_PROFILES))
def test_random_tiles(profile: str, dtype: str) -> None:
    dt, count = DTYPES[dtype]
    rows = P.random_blocks(count, dt, seed=4100 + len(profile) + len(dtype),
                           grid=P.element_grid(E4M3FN.values), emax=8)
    x = tiled(rows.reshape(count, -1)[:, : TILE[0] * TILE[1]], TILE, TILES_PER_ROW)
    assert x.shape[0] // TILE[0] * (x.shape[1] // TILE[1]) == count
    divergences = check(x, TILE, profile)
    assert set(divergences) == {"negative NaN codes", "NaN scale bits"}
    # NaN tiles exist (random bit patterns, sprinkled NaN), so the NaN rule was exercised.
    assert np.any(quantize_fp8_block(x, block=TILE, profile=profile).codes == 0x7F)


@pytest.mark.parametrize("profile", ("compressed-tensors", *DG_PROFILES))
def test_whole_tiles_with_ragged_edges(profile: str) -> None:
    """Kimi-like shapes at 128 × 128: a 576-row / 96-column style ragged edge, weights about
    N(0, 0.02) with a few rows five times wider, and -0.0 planted."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((200, 232)) * 0.02
    x[rng.integers(0, 200, 4)] *= 5
    x[5, 7] = -0.0
    check(x.astype(P.BF16), (128, 128), profile)


_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.floats(-(2.0**-10), 2.0**-10, width=32),
    st.sampled_from([0.0, -0.0, 448.0, 464.0, -480.0, 2.0**-9, 1e-40, float("nan"),
                     float("-nan"), float("inf"), float("-inf")]),
)


@st.composite
def matrices(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, int]]:
    shape = (draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    block = (draw(st.integers(1, 5)), draw(st.integers(1, 6)))
    values = draw(hnp.arrays(np.float64, shape, elements=_VALUES))
    dtype = draw(st.sampled_from([P.BF16, P.F32]))
    return P.cast(values, dtype), block


@pytest.mark.parametrize("profile", ("compressed-tensors", *DG_PROFILES))
def test_hypothesis(profile: str) -> None:
    @settings(max_examples=80, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=matrices())
    def run(case: tuple[np.ndarray, tuple[int, int]]) -> None:
        check(case[0], case[1], profile)

    run()


@pytest.mark.parametrize("dtype", [P.BF16, P.F32])
@pytest.mark.parametrize("profile", ["deepseek", "deepgemm", "compressed-tensors"])
def test_inf_tile(profile: str, dtype: Any) -> None:
    """A tile with ±Inf and no NaN, measured on the producers' code: scale +Inf, finite
    elements ±0, infinite elements NaN. The producer fixtures' README says a NaN or Inf turns
    the whole tile into 0x7F with a NaN scale; that holds for NaN tiles only (spec/fp8-block.md
    §4 names the disagreement, tests/data/producers/PROVENANCE.md notes it)."""
    x = P.cast(np.array([[1.0, np.inf, -2.0, -np.inf]]), dtype)
    codes, scales = produce(x, (1, 4), profile)
    assert np.isposinf(scales.astype(np.float32)).all()  # not the README's NaN scale
    assert codes[0, 0] == 0x00 and codes[0, 2] == 0x80  # finite elements: +0, -0
    assert codes[0, 1] & 0x7F == 0x7F and codes[0, 3] & 0x7F == 0x7F  # Inf elements: NaN
    assert not np.all(codes == 0x7F)
    check(x, (1, 4), profile)
    assert quantize_fp8_block(x, block=(1, 4), profile=profile).codes.tolist() == [
        [0x00, 0x7F, 0x80, 0x7F]]


@pytest.mark.parametrize("out", ["float32", "bfloat16"])
@pytest.mark.parametrize("profile", ["deepseek", "compressed-tensors", "ue8m0", "deepseek-fnuz"])
def test_consumer_every_code(profile: str, out: str) -> None:
    """Every code × scales of every magnitude (and NaN, Inf, 0) through vLLM's dequantize."""
    rng = np.random.default_rng(5)
    raw = np.concatenate([np.exp2(rng.uniform(-140, 120, 200)) * rng.uniform(1, 2, 200),
                          [0.0, np.inf, np.nan, 1e-4 / 448, 2.0**-126]])
    dtype = P.BF16 if profile == "compressed-tensors" else P.F32
    scales = P.cast(raw, dtype)[None, :]
    codes = np.tile(np.arange(256, dtype=np.uint8)[:, None], (1, scales.shape[1]))
    out_dtype = {"float32": (np.float32, torch.float32),
                 "bfloat16": (ml_dtypes.bfloat16, torch.bfloat16)}[out]
    ours = dequantize_fp8_block(codes, scales, block=(256, 1), profile=profile,
                                dtype=out_dtype[0])
    fnuz = profile.endswith("fnuz")
    theirs = vllm_scaled_dequantize(codes, scales, (256, 1), fnuz, out_dtype[1])
    assert P.same_floats(ours, theirs)


def test_torch_tensors_are_quantized_as_their_numpy_twins() -> None:
    """A torch bfloat16 weight (what a loader holds) gives the bytes of the same bits in numpy,
    through the reference and the fast path."""
    from mxformats import fast

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((130, 260)) * 0.02).astype(P.BF16)
    t = P.to_torch(x)
    for profile in ("deepseek", "compressed-tensors"):
        want = quantize_fp8_block(x, profile=profile)
        for got in (quantize_fp8_block(t, profile=profile),
                    fast.quantize_fp8_block(t, profile=profile)):
            # torch in, torch out (issue 17), with the numpy path's bytes
            assert isinstance(got.codes, type(t)) and isinstance(got.scales, type(t))
            assert tensor_to_numpy(got.codes).tobytes() == want.codes.tobytes()
            assert tensor_to_numpy(got.scales).tobytes() == want.scales.tobytes()
