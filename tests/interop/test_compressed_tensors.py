"""compressed-tensors 0.20.1, run on the CPU, against mxformats' ``compressed-tensors`` profiles:

* MXFP4 (``mxfp4-pack-quantized``): ``calculate_qparams`` (``generate_mx_scales``) and
  ``MXFP4PackedCompressor.compress`` (``quantize`` → ``cast_to_fp4``, ``pack_fp4_to_uint8``,
  ``compress_mx_scale``) vs ``quantize_mx(profile="compressed-tensors")``.
* INT4 (``pack-quantized``, symmetric, group 32, as the kimi-k2-int4-compressed-tensors
  fixture's recipe): ``calculate_qparams`` and ``PackedQuantizationCompressor.compress``
  (``quantize`` in the weight dtype, ``pack_to_int32``) vs ``quantize_int4`` + ``pack_int4``.

The weight observer is llm-compressor's (``torch.amin``/``torch.amax`` per group, see
``_producers._ct_group_min_max``). Inputs are bfloat16 (what the producer sees for a BF16
checkpoint) and float32.

Input classes:

* MXFP4, defined and compared byte for byte: every block without a NaN, ±Inf and huge blocks
  included (scale byte 0x7F: ``compress_mx_scale`` of an infinite scale, x86 int32(inf)).
* MXFP4, pinned two ways, asserted: a block holding a NaN. ``round_to_power_2``
  (mxfp_utils.py) adds 2**20 to the bits of the group's NaN maximum. Which NaN torch hands it
  depends on the SIMD path of ``torch.min``/``torch.max`` in ``calculate_qparams``: the
  canonical 0x7FC00000 (scalar path: a tensor of < 16 groups, or the tail past the last full
  16 groups) makes the exponent +Inf → byte 0x7F and every element 0, as the profile writes;
  the all-ones NaN 0xFFFFFFFF of the vectorised float32 path wraps to 0 → ``log2(0) = -inf``
  → byte 0x00, and the block's other elements are quantized against 2**-127 (they saturate).
  Each NaN block must be one of the two; which one is recorded, never skipped.
* INT4, implementation-defined: NaN/±Inf (mxformats raises ValueError); the producer's NaN or
  Inf scale stays confined to its group (asserted).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import requires
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

requires("torch")
requires("compressed_tensors")

import _producers as P  # noqa: E402

from mxformats import E2M1  # noqa: E402
from mxformats.schemes.int4 import dequantize_int4, pack_int4, quantize_int4, unpack_int4  # noqa: E402
from mxformats.schemes.mx import dequantize_mx, pack_fp4, quantize_mx  # noqa: E402
from mxformats.testing.cases import (  # noqa: E402
    blocks_strategy,
    int4_group_strategy,
    int4_groups,
    mx_blocks,
)

DTYPES = {"float32": P.F32, "bfloat16": P.BF16}
RANDOM_BLOCKS = 100_000
PROFILE = "compressed-tensors"


# -- MXFP4 --------------------------------------------------------------------------------------


def _nan_block_outcome(x_block: np.ndarray, scale: int, codes: np.ndarray) -> str:
    """Which of the two pinned outcomes compressed-tensors wrote for a NaN block (or raise)."""
    nan = P.nan_mask(x_block)
    # A NaN element: cast_to_fp4 of NaN is 0 (times sign(NaN)), +0 or -0 by torch's NaN sign.
    assert np.all(np.isin(codes[nan], (0x0, 0x8))), codes[nan]
    if scale == 0x7F:  # canonical NaN: infinite scale, every element x / inf -> 0
        assert np.all(codes[~nan] == 0), codes
        return "0x7F"
    assert scale == 0x00, hex(scale)
    # All-ones NaN: scale 2**-127; the other elements are x / 2**-127 in the input dtype
    # (cast_to_fp4: clamp to ±6, RNE ladder, times sign(x)), so they saturate unless tiny.
    with np.errstate(over="ignore", invalid="ignore"):
        wide = x_block.astype(np.float64) * 2.0**127
        q = wide.astype(x_block.dtype).astype(np.float64)  # the quotient, in the input dtype
        expected = E2M1.encode(np.clip(np.where(nan, 0.0, q), -6.0, 6.0))
    zero = expected & 0x7 == 0
    expected = np.where(zero, np.where(np.signbit(q) & (q != 0), 0x8, 0x0), expected)
    assert np.array_equal(codes[~nan], expected[~nan]), (codes, expected)
    return "0x00"


def _check_mxfp4(x: np.ndarray, labels: list[str] | None = None) -> dict[str, int]:
    """Byte equality on every block without NaN; each NaN block one of the two pinned outcomes
    (the count of each is returned)."""
    theirs = P.ct_mxfp4(x)
    ours = tuple(quantize_mx(x, E2M1, profile=PROFILE))
    nan_blocks = P.nan_mask(x).reshape(-1, P.BLOCK).any(axis=1)
    keep = ~nan_blocks
    P.assert_mx_equal(
        np.ascontiguousarray(x.reshape(-1, P.BLOCK)[keep]),
        (ours[0].reshape(-1, P.BLOCK // 2)[keep], ours[1].reshape(-1)[keep]),
        (theirs[0].reshape(-1, P.BLOCK // 2)[keep], theirs[1].reshape(-1)[keep]),
        packed=True, who=PROFILE,
        labels=[labels[i] for i in np.flatnonzero(keep)] if labels else None,
    )
    outcomes = {"0x7F": 0, "0x00": 0, "same as mxformats": 0}
    xb = x.reshape(-1, P.BLOCK)
    t_codes = P.unpack_nibbles(theirs[0]).reshape(-1, P.BLOCK)
    o_codes = P.unpack_nibbles(ours[0]).reshape(-1, P.BLOCK)
    t_scales, o_scales = theirs[1].reshape(-1), ours[1].reshape(-1)
    for i in np.flatnonzero(nan_blocks):
        if t_scales[i] == o_scales[i] and np.array_equal(t_codes[i], o_codes[i]):
            outcomes["same as mxformats"] += 1
            continue
        outcomes[_nan_block_outcome(xb[i], int(t_scales[i]), t_codes[i])] += 1
    return outcomes


# The wrapper against sources.md §6 (compressed-tensors columns; the vectors list the byte
# generate_mx_scales computes, the written byte is compress_mx_scale's).
MX_VECTORS = [
    ("6", [4.0, -0.0], 0x7F, [6, 0]),
    ("11", [7.0, 1.0, 0.3, -2.9], 0x80, [6, 1, 0, 0xB]),
    ("12", [6.5, 1.0, 0.76], 0x7F, [7, 2, 2]),
    ("13", [3.5, 1.0, 0.25], 0x7F, [6, 2, 0]),
    ("14", [7.5, 1.0], 0x80, [6, 1]),
    ("15", [1.5, 0.125, 0.1875], 0x7D, [7, 1, 2]),
    ("16", [6.0, 5.0, 0.25, 0.75], 0x7F, [7, 6, 0, 2]),
    ("17", [0.0, -0.0], 0x00, [0, 0]),
    ("20", [2.0**-125, 2.0**-127], 0x00, [6, 2]),
]


@pytest.mark.parametrize(("vector", "head", "scale", "codes"), MX_VECTORS,
                         ids=[f"vector{v[0]}" for v in MX_VECTORS])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_wrapper_reproduces_formats_md_vectors(
    vector: str, head: list[float], scale: int, codes: list[int], dtype: str
) -> None:
    x = np.zeros((1, 32), dtype=np.float64)
    x[0, : len(head)] = head
    x = P.cast(x, DTYPES[dtype])
    got_codes, got_scales = P.ct_mxfp4(x)
    assert int(got_scales[0, 0]) == scale, (vector, hex(int(got_scales[0, 0])))
    assert P.unpack_nibbles(got_codes)[0, : len(codes)].tolist() == codes, vector
    _check_mxfp4(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_nan_inf_huge_vectors(dtype: str) -> None:
    """Vectors 18, 19, 22: ``generate_mx_scales`` computes 255 (the research's 0xFF), then
    ``compress_mx_scale`` writes 127 + int32(floor(log2(inf))) = 0x7F (x86: int32(inf) is
    INT_MIN) and every element is x / inf = 0. A single block takes torch's scalar path."""
    import torch
    from compressed_tensors.quantization.utils.mxfp_utils import generate_mx_scales

    x = np.zeros((3, 32), dtype=np.float64)
    x[0, :2] = [np.nan, 1.0]
    x[1, :2] = [np.inf, 1.0]
    x[2, :2] = [3e38, 1.0]
    x = P.cast(x, DTYPES[dtype])
    amax = torch.max(P.to_torch(x).abs(), dim=-1).values
    assert torch.clamp(generate_mx_scales(amax), 0, 255).tolist() == [255.0, 255.0, 255.0]
    for row in range(3):
        codes, scales = P.ct_mxfp4(x[row : row + 1])
        assert int(scales[0, 0]) == 0x7F
        assert np.all(P.unpack_nibbles(codes)[0, 1:] == 0)
    assert _check_mxfp4(x)["0x00"] == 0


def test_mxfp4_nan_block_outcome_depends_on_torch_simd_path() -> None:
    """The pinned NaN class, both outcomes made to happen: a NaN block among 16 float32 groups
    (vectorised torch.min/max: NaN 0xFFFFFFFF) is written 0x00 with saturated elements; the
    same block alone (scalar path) is written 0x7F with zeros, as mxformats writes it."""
    x = np.zeros((16, 32), dtype=np.float32)
    x[:, 1] = 1.0
    x[0, 0] = np.nan
    codes, scales = P.ct_mxfp4(x)
    assert int(scales[0, 0]) == 0x00
    assert P.unpack_nibbles(codes)[0, :2].tolist() == [0, 7]
    codes, scales = P.ct_mxfp4(x[:1])
    assert int(scales[0, 0]) == 0x7F
    assert P.unpack_nibbles(codes)[0, :2].tolist() == [0, 0]
    ours = quantize_mx(x, E2M1, profile=PROFILE)
    assert int(ours.scales[0, 0]) == 0x7F
    assert _check_mxfp4(x) == {"0x7F": 0, "0x00": 1, "same as mxformats": 0}


@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_boundary_blocks(dtype: str) -> None:
    blocks = mx_blocks(E2M1, dtype=dtype)
    _check_mxfp4(np.ascontiguousarray(blocks.values), list(blocks.labels))


@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_random_blocks(dtype: str) -> None:
    """100,000 random blocks in each dtype (3.2 M values, NaN blocks included)."""
    x = P.random_blocks(RANDOM_BLOCKS, DTYPES[dtype], seed=2000 + len(dtype),
                        grid=P.element_grid(E2M1.values), emax=E2M1.emax)
    outcomes = _check_mxfp4(x)
    assert sum(outcomes.values()) > 1000  # the NaN class is exercised, not avoided


@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_hypothesis(dtype: str) -> None:
    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(blocks_strategy(E2M1, dtype=dtype), min_size=1, max_size=3))
    def run(blocks: list[np.ndarray]) -> None:
        _check_mxfp4(P.stack_blocks(blocks))

    run()


def test_mxfp4_consumer_decompress_every_code_and_scale() -> None:
    """The ``compressed-tensors`` consumer profile = ``MXFP4PackedCompressor.decompress``
    (``decompress_mx_scale``: ``2.0 ** (b - 127)`` in bfloat16, so 0xFF is +Inf and 0 × Inf
    NaN; ``unpack_fp4_from_uint8``; ``dequantize``), for every code under every scale byte."""
    import torch
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import MXFP4

    scheme = QuantizationScheme(targets=["Linear"], weights=MXFP4["weights"])
    logical, scales = P.every_code_and_scale(4)
    packed = pack_fp4(logical)
    out = MXFP4PackedCompressor.decompress(
        {"weight_packed": torch.from_numpy(packed), "weight_scale": torch.from_numpy(scales)},
        scheme)
    theirs = P.from_torch(out["weight"])
    assert theirs.dtype == P.BF16
    ours = dequantize_mx(packed, scales, E2M1, profile=PROFILE, dtype=P.BF16)
    assert P.same_floats(ours, theirs)


# -- INT4 pack-quantized ------------------------------------------------------------------------


def _check_int4(x: np.ndarray, group_size: int = 32) -> None:
    theirs = P.ct_int4(x, group_size)
    q, scales = quantize_int4(x, group_size=group_size, profile=PROFILE)
    packed = pack_int4(q, layout=PROFILE)
    assert scales.dtype == theirs["weight_scale"].dtype, (scales.dtype, theirs["weight_scale"].dtype)
    bits = np.uint16 if scales.dtype.itemsize == 2 else np.uint32
    _assert_equal(x, "weight_scale", scales.view(bits), theirs["weight_scale"].view(bits), group_size)
    _assert_equal(x, "q", q, theirs["q"], group_size)
    assert packed.dtype == np.int32 and packed.shape == theirs["weight_packed"].shape
    _assert_equal(x, "weight_packed", packed, theirs["weight_packed"], group_size)
    assert theirs["weight_shape"].tolist() == list(x.shape)
    assert np.array_equal(unpack_int4(theirs["weight_packed"], layout=PROFILE, size=x.shape[-1]), q)


def _assert_equal(x: np.ndarray, what: str, ours: np.ndarray, theirs: np.ndarray, gs: int) -> None:
    if np.array_equal(ours, theirs):
        return
    idx = tuple(np.argwhere(ours != theirs)[0])
    row = idx[0]
    col = idx[1] * (gs if what == "weight_scale" else 8 if what == "weight_packed" else 1)
    group = x[row, (col // gs) * gs : (col // gs + 1) * gs]
    raise AssertionError(
        f"{what} differs at {idx} ({int((ours != theirs).sum())} entries): mxformats "
        f"{ours[idx]!r}, compressed-tensors {theirs[idx]!r}; group input {P.hexfloats(group)}"
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_consumer_decompress(dtype: str) -> None:
    """The ``compressed-tensors`` INT4 consumer = ``PackedQuantizationCompressor.decompress``
    (``unpack_from_int32``, ``dequantize``: ``q.to(scale.dtype) * scale``)."""
    import torch
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationScheme

    rng = np.random.default_rng(len(dtype))
    q = rng.integers(-8, 8, size=(64, 256)).astype(np.int8)
    scales = P.cast(np.exp2(rng.uniform(-130, 120, size=(64, 8))), DTYPES[dtype])
    scheme = QuantizationScheme(targets=["Linear"], weights=P.ct_int4_args(32))
    out = PackedQuantizationCompressor.decompress(
        {"weight_packed": torch.from_numpy(pack_int4(q, layout=PROFILE)),
         "weight_scale": P.to_torch(scales), "weight_shape": torch.tensor(q.shape)}, scheme)
    theirs = P.from_torch(out["weight"])
    ours = dequantize_int4(q, scales, group_size=32, profile=PROFILE, dtype=theirs.dtype)
    assert P.same_floats(ours, theirs)


INT4_VECTORS = [  # sources.md §6.7
    ("44", [0, 1, 2, 3, 4, 5, 6, 7], 0xFEDCBA98),
    ("45", [-8, -7, -6, -5, -4, -3, -2, -1], 0x76543210),
]


@pytest.mark.parametrize(("vector", "values", "word"), INT4_VECTORS,
                         ids=[f"vector{v[0]}" for v in INT4_VECTORS])
def test_pack_to_int32_reproduces_formats_md_vectors(vector: str, values: list[int], word: int) -> None:
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    got = pack_to_int32(torch.tensor([values], dtype=torch.int8), 4)
    assert int(got[0, 0]) & 0xFFFFFFFF == word
    ours = pack_int4(np.array([values], dtype=np.int8), layout=PROFILE)
    assert int(ours[0, 0]) & 0xFFFFFFFF == word


def test_int4_vector_42_true_division_in_bf16_and_f32() -> None:
    """sources.md §6.7 #42: x = -amax (amax 0.9083542823791504) is stored as -8 (x / s = -7.5
    rounds to even). The group is float32 here (the vector's values are float32)."""
    amax = 0.9083542823791504
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, :3] = [amax, -amax, 0.5 * amax]
    theirs = P.ct_int4(x)
    assert theirs["q"][0, 1] == -8
    _check_int4(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_boundary_groups(dtype: str) -> None:
    groups = int4_groups(dtype=dtype).values
    finite = np.isfinite(groups.astype(np.float32)).all(axis=1)
    _check_int4(np.ascontiguousarray(groups[finite]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_random_groups(dtype: str) -> None:
    """100,000 random groups of 32 in each dtype (a [12500, 256] weight)."""
    dt = DTYPES[dtype]
    grid = np.concatenate([np.arange(8.0), np.arange(8.0) + 0.5])  # k and k + 0.5 (ties)
    x = P.random_blocks(RANDOM_BLOCKS + RANDOM_BLOCKS // 5, dt, seed=3000 + len(dtype),
                        grid=grid, emax=3, specials=False)
    x = x[np.isfinite(x.astype(np.float32)).all(axis=1)][:RANDOM_BLOCKS]
    assert len(x) == RANDOM_BLOCKS
    x = np.ascontiguousarray(x.reshape(-1, 256))
    _check_int4(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_hypothesis(dtype: str) -> None:
    @settings(max_examples=80, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(int4_group_strategy(dtype=dtype), min_size=1, max_size=4))
    def run(groups: list[np.ndarray]) -> None:
        x = P.stack_blocks(groups).reshape(1, -1)
        if not np.isfinite(x.astype(np.float32)).all():
            _check_int4_nonfinite(x)
            return
        _check_int4(x)

    run()


def _check_int4_nonfinite(x: np.ndarray) -> None:
    """The implementation-defined class: mxformats refuses NaN/±Inf; compressed-tensors writes
    a NaN or Inf scale for each such group and leaves every other group exactly as for finite
    input (its groups are independent)."""
    with pytest.raises(ValueError, match="implementation-defined"):
        quantize_int4(x, group_size=32, profile=PROFILE)
    theirs = P.ct_int4(x)
    groups = x.reshape(-1, 32).astype(np.float32)
    bad = ~np.isfinite(groups).all(axis=1)
    scale = theirs["weight_scale"].astype(np.float32).reshape(-1)
    assert np.all(~np.isfinite(scale[bad])), scale[bad]
    if (~bad).any():
        finite = np.ascontiguousarray(x.reshape(-1, 32)[~bad].reshape(1, -1))
        q, s = quantize_int4(finite, group_size=32, profile=PROFILE)
        their_q = theirs["q"].reshape(-1, 32)[~bad].reshape(1, -1)
        assert np.array_equal(q, their_q)
        assert np.array_equal(s.astype(np.float32).reshape(-1), scale[~bad])


def test_int4_nan_inf_groups() -> None:
    x = np.zeros((1, 96), dtype=np.float32)
    x[0, :] = np.linspace(-1, 1, 96)
    x[0, 3] = np.nan
    x[0, 40] = np.inf
    _check_int4_nonfinite(x)


@pytest.mark.parametrize("cols", [8, 12, 36, 100])
def test_pack_to_int32_padding(cols: int) -> None:
    """Sizes not divisible by 8 or 32: ``pack_to_int32`` pads to ``ceil(cols/8)`` words and
    the padding nibbles hold raw 0; ``pack_int4`` follows it."""
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    rng = np.random.default_rng(cols)
    q = rng.integers(-8, 8, size=(5, cols)).astype(np.int8)
    theirs = pack_to_int32(torch.from_numpy(q), 4).numpy()
    ours = pack_int4(q, layout=PROFILE)
    assert theirs.shape == (5, -(-cols // 8))
    assert np.array_equal(ours, theirs)


def test_group_size_must_divide_columns() -> None:
    """compressed-tensors' ``_process_group`` (forward_helpers.py L119) raises for a group size
    that does not divide the columns (llm-compressor checks it earlier too, its
    ``bypass_divisibility_checks: false``); so does the profile."""
    import torch
    from compressed_tensors.quantization.lifecycle.forward import quantize

    x = torch.ones((2, 48))
    scale = torch.ones((2, 2))
    err = P.call_or_error(lambda: quantize(x, scale, torch.zeros_like(scale), P.ct_int4_args(32),
                                           dtype=torch.int8))
    assert isinstance(err, ValueError) and "group_size" in str(err), err
    with pytest.raises(ValueError):
        quantize_int4(x.numpy(), group_size=32, profile=PROFILE)
