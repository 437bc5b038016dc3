"""ml_dtypes casts (0.6.0 pinned; version-keyed differences in ``tests/peers.py``) against mxformats where they define the same thing.

* ``ocp`` producer elements = ml_dtypes' cast of ``x / 2**e`` (sources.md §6.2/§6.3:
  "ml_dtypes + FLOOR"): ml_dtypes rounds to nearest-even from the exact quotient (float64) to
  ``float4_e2m1fn``, ``float6_e2m3fn``, ``float6_e3m2fn``, ``float8_e4m3fn``, ``float8_e5m2``.
  Where they differ, the divergence is asserted, not skipped: ml_dtypes' E4M3FN overflow gives
  NaN (0x7F, |q| > 464) and E5M2's gives Inf (0x7C, |q| >= 61440) where ``ocp`` saturates; a
  NaN/Inf block is a NaN block in ``ocp`` (0xFF, codes 0) where ml_dtypes casts each element
  (E2M1: +NaN → 0x8, -NaN → 0x0, ±Inf → ±6; sources.md §3.1).
* ``ocp`` consumer = ml_dtypes decode of the codes × ml_dtypes ``float8_e8m0fnu`` decode of
  the scale, for every code and every scale byte, into float32, bfloat16 and float16 (the
  products are exact in float32, so the one rounding matches the profile's).
* INT4 nibbles: ``unpack_int4`` (``linear``, ``compressed-tensors``) = ml_dtypes ``int4`` /
  ``uint4`` read from the same nibbles; ml_dtypes' int4 cast (vector 46) truncates and wraps
  (0.7.0: out of range gives 0).
"""

from __future__ import annotations

import _producers as P
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peers import MD, MD_INT4_WRAPS

from mxformats import get_format
from mxformats.schemes.int4 import unpack_int4
from mxformats.schemes.mx import dequantize_mx, pack_fp4, quantize_mx
from mxformats.testing.cases import blocks_strategy, mx_blocks

ML = {
    "e2m1": ml_dtypes.float4_e2m1fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e4m3fn": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
}
ELEMENTS = tuple(ML)
RANDOM_BLOCKS = 100_000


def _ml_codes(q: np.ndarray, elem: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return q.astype(ML[elem]).view(np.uint8)


def _check_ocp(x: np.ndarray, elem: str) -> None:
    fmt = get_format(elem)
    codes, scales = quantize_mx(x, fmt, profile="ocp")
    if elem == "e2m1":
        codes = P.unpack_nibbles(codes)
    codes = codes.reshape(-1, P.BLOCK)
    scales = scales.reshape(-1).astype(np.int64)
    xb = x.reshape(-1, P.BLOCK)
    special = ~np.isfinite(xb.astype(np.float32)).all(axis=1)
    # NaN/Inf blocks: ocp writes a NaN block; ml_dtypes would cast element by element.
    assert np.all(scales[special] == 0xFF) and np.all(codes[special] == 0)
    if special.any() and elem == "e2m1":
        nan = P.nan_mask(xb[special])
        with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly
            wide = xb[special].astype(np.float64)
        ml = _ml_codes(wide, elem)
        sign = np.signbit(wide)
        assert np.all(ml[nan] == np.where(sign[nan], 0x0, 0x8))  # sources.md §3.1
    finite = ~special
    with np.errstate(over="ignore"):
        q = xb[finite].astype(np.float64) * np.exp2(127.0 - scales[finite])[:, None]
    ml = _ml_codes(q, elem)
    ours = codes[finite]
    differ = ml != ours
    if elem == "e4m3fn":  # ml_dtypes does not saturate: NaN beyond 464 (ties to 448 at 464)
        overflow = np.abs(q) > 464
        assert np.all(ml[overflow] & 0x7F == 0x7F)
        assert np.all(ours[overflow] & 0x7F == 0x7E)
        differ &= ~overflow
    if elem == "e5m2":  # ml_dtypes overflows to Inf from 61440 on
        overflow = np.abs(q) >= 61440
        assert np.all(ml[overflow] & 0x7F == 0x7C)
        assert np.all(ours[overflow] & 0x7F == 0x7B)
        differ &= ~overflow
    if differ.any():
        i, j = np.argwhere(differ)[0]
        raise AssertionError(
            f"{int(differ.sum())} codes differ from ml_dtypes; first: block "
            f"{P.hexfloats(xb[finite][i])}, element {j} (q = {float(q[i, j]).hex()}): "
            f"mxformats 0x{int(ours[i, j]):x}, ml_dtypes 0x{int(ml[i, j]):x}"
        )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("elem", ELEMENTS)
def test_ocp_elements_are_ml_dtypes_casts_boundary(elem: str, dtype: str) -> None:
    blocks = mx_blocks(get_format(elem), dtype=dtype)
    _check_ocp(np.ascontiguousarray(blocks.values), elem)


@pytest.mark.parametrize("elem", ELEMENTS)
def test_ocp_elements_are_ml_dtypes_casts_random(elem: str) -> None:
    fmt = get_format(elem)
    x = P.random_blocks(RANDOM_BLOCKS, P.F32,
                        seed=7000 + ELEMENTS.index(elem), grid=P.element_grid(fmt.values),
                        emax=fmt.emax)
    _check_ocp(x, elem)


@pytest.mark.parametrize("elem", ELEMENTS)
def test_ocp_elements_are_ml_dtypes_casts_hypothesis(elem: str) -> None:
    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(blocks_strategy(get_format(elem), dtype="float32"), min_size=1, max_size=4))
    def run(blocks: list[np.ndarray]) -> None:
        _check_ocp(P.stack_blocks(blocks), elem)

    run()


@pytest.mark.parametrize("out", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("elem", ELEMENTS)
def test_ocp_consumer_is_ml_dtypes_decode(elem: str, out: str) -> None:
    """Every code × every scale byte: ``dequantize_mx(profile="ocp")`` = ml_dtypes element ×
    ml_dtypes E8M0 (0x00 = 2**-127, 0xFF = NaN), rounded once to the output dtype."""
    fmt = get_format(elem)
    n_codes = 1 << fmt.bits
    row = np.tile(np.arange(n_codes, dtype=np.uint8), max(1, 32 // n_codes))  # 32 or n_codes
    logical = np.tile(row, (256, 1))  # one row per scale byte, every code in each row
    scales = np.repeat(np.arange(256, dtype=np.uint8)[:, None], row.size // 32, axis=1)
    packed = pack_fp4(logical) if elem == "e2m1" else logical
    dtype = np.dtype(ml_dtypes.bfloat16) if out == "bfloat16" else np.dtype(out)
    ours = dequantize_mx(packed, scales, fmt, profile="ocp", dtype=dtype)
    element = logical.view(ML[elem]).astype(np.float32)
    scale = np.repeat(scales, 32, axis=1).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        theirs = (element * scale).astype(dtype)
    bits = np.uint16 if dtype.itemsize == 2 else np.uint32
    nan = np.isnan(theirs.astype(np.float32))
    assert np.array_equal(np.isnan(ours.astype(np.float32)), nan)
    assert np.array_equal(ours.view(bits)[~nan], theirs.view(bits)[~nan])


def test_ml_dtypes_nan_and_inf_element_codes() -> None:
    """sources.md §3.1, asserted on the installed ml_dtypes: E2M1 +NaN → 0x8 (-0), -NaN →
    0x0, ±Inf → ±6, no saturation for E4M3FN (464 ties to 448, 464.0001 and Inf → NaN)."""
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 7.0, 1e9])
    assert _ml_codes(x, "e2m1").tolist() == [0x8, 0x0, 0x7, 0xF, 0x7, 0x7]
    assert _ml_codes(np.array([464.0, 464.0001, np.inf]), "e4m3fn").tolist() == [0x7E, 0x7F, 0x7F]


def test_int4_nibbles_read_as_ml_dtypes_int4_uint4() -> None:
    rng = np.random.default_rng(46)
    words = rng.integers(-(2**31), 2**31, size=(1000, 16), dtype=np.int64).astype(np.int32)
    nibbles = (words.view(np.uint32)[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    nibbles = nibbles.reshape(1000, -1).astype(np.uint8)
    linear = unpack_int4(words, layout="linear")
    assert np.array_equal(linear, nibbles.view(ml_dtypes.int4).astype(np.int8))
    ct = unpack_int4(words, layout="compressed-tensors")
    assert np.array_equal(ct, nibbles.view(ml_dtypes.uint4).astype(np.int8) - 8)


def test_ml_dtypes_int4_cast_truncates_and_wraps() -> None:
    """sources.md §6.7 #46: ml_dtypes' int4 is a storage type, not a quantizer."""
    x = np.array([9.0, 2.5, -2.5, 100.0])
    with np.errstate(invalid="ignore"):  # 0.7.0 warns on the out-of-range 9 and 100
        got = x.astype(ml_dtypes.int4).astype(np.int8).tolist()
    assert got == ([-7, 2, -2, 4] if MD_INT4_WRAPS else [0, 2, -2, 0]), MD
