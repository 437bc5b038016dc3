"""The TestFloat-style boundary generator (mxformats.testing.cases)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings

from mxformats import E4M3FN
from mxformats.testing.cases import (
    DTYPES,
    blocks_strategy,
    boundary_values,
    exponent_table,
    float_dtype,
    int4_group_strategy,
    int4_groups,
    mx_blocks,
    significand_patterns,
    values_strategy,
)

BITS = {"float32": np.uint32, "bfloat16": np.uint16, "float16": np.uint16}


def bits(values: np.ndarray, dtype: str) -> list[int]:
    return values.view(BITS[dtype]).astype(np.int64).tolist()


# -- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_have_the_dtype_and_no_repeats(dtype: str) -> None:
    v = boundary_values(dtype)
    assert v.dtype == float_dtype(dtype)
    assert len(set(bits(v, dtype))) == v.size


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_are_deterministic_for_a_seed(dtype: str) -> None:
    assert bits(boundary_values(dtype), dtype) == bits(boundary_values(dtype, seed=1), dtype)
    other = boundary_values(dtype, seed=2)
    assert bits(boundary_values(dtype), dtype) != bits(other, dtype)
    # The table part does not depend on the seed: only the random values move.
    table = set(bits(boundary_values(dtype, n=0), dtype))
    assert table <= set(bits(other, dtype))


def test_n_and_level_only_add_cases() -> None:
    base = set(bits(boundary_values("float32", n=0), "float32"))
    more = set(bits(boundary_values("float32", n=500), "float32"))
    deeper = set(bits(boundary_values("float32", level=2, n=0), "float32"))
    assert base < more and base < deeper
    assert len(more) - len(base) <= 500


def test_float32_table_covers_testfloat_exponents_and_patterns() -> None:
    v = boundary_values("float32", n=0)
    with np.errstate(invalid="ignore"):  # the table holds signalling NaNs
        f = set(v.astype(np.float64).tolist())
    b = set(bits(v, "float32"))
    expected = [
        2.0**-149,  # smallest subnormal (exponent 0, pattern 1)
        2.0**-126 - 2.0**-149,  # largest subnormal (all ones)
        2.0**-126,  # smallest normal
        1.0, 1.5, 2.0 - 2.0**-23, 0.5,  # around 1 (single bit, all ones)
        float(np.finfo(np.float32).max),  # largest finite
        6.0, 4.0, 8.0, 12.0,  # around and beyond E2M1's max at scale 1
        0.75, 1.75,  # runs of ones from the top
        -1.0, -(2.0**-149),  # both signs
    ]
    for x in expected:
        assert x in f, x
    assert 0x7F800000 in b and 0xFF800000 in b  # ±Inf
    assert any(x & 0x7F800000 == 0x7F800000 and x & 0x7FFFFF for x in b)  # NaN
    assert 0x80000000 in b  # -0


def test_exponent_table_levels() -> None:
    assert exponent_table("float32", level=2) == list(range(256))
    table = exponent_table("float32")
    assert {0, 1, 126, 127, 128, 254, 255} <= set(table)
    assert 127 + 3 in table  # beyond E2M1's largest value (2^2 · 1.5) at scale 1
    assert {127 + 8, 127 + 9} <= set(exponent_table("float32", elem=E4M3FN))


def test_significand_patterns() -> None:
    p = significand_patterns(7)
    assert {0, 1, 0x7F, 0x40, 0x60, 0x70, 0x03, 0x07, 0x20} <= set(p)
    assert set(p) < set(significand_patterns(7, level=2))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown input dtype"):
        boundary_values("float8")
    with pytest.raises(ValueError, match="level"):
        boundary_values(level=0)
    with pytest.raises(ValueError, match="n must be"):
        boundary_values(n=-1)
    with pytest.raises(ValueError, match="unknown block families"):
        mx_blocks(families=["ties", "nope"])


# -- MX blocks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_blocks_shape_dtype_and_families(dtype: str) -> None:
    b = mx_blocks(dtype=dtype)
    assert b.values.shape == (len(b), 32)
    assert b.values.dtype == float_dtype(dtype)
    assert b.families == (
        "ties", "scale-boundaries", "reference", "specials", "tiny", "huge", "values", "random"
    )
    rows = {row.tobytes() for row in b.values}
    assert len(rows) == len(b)  # no duplicate blocks


def test_blocks_are_deterministic() -> None:
    a, b = mx_blocks(seed=3), mx_blocks(seed=3)
    assert np.array_equal(a.values.view(np.uint32), b.values.view(np.uint32))
    assert a.labels == b.labels
    c = mx_blocks(seed=4)
    assert not np.array_equal(a.family("random").values.view(np.uint32),
                              c.family("random").values.view(np.uint32))
    assert np.array_equal(a.family("ties").values.view(np.uint32),
                          c.family("ties").values.view(np.uint32))


def test_tie_blocks_hold_every_e2m1_midpoint_at_each_scale() -> None:
    ties = mx_blocks(families=["ties"])
    midpoints = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    scales = set()
    for label, row in ties:
        s = int(label.split("2^")[1].split()[0])
        scales.add(s)
        values = row.astype(np.float64)
        assert values[0] == 6.0 * 2.0**s  # amax: the OCP scale is 2^s
        for m in midpoints:
            assert m * 2.0**s in values and -m * 2.0**s in values
    assert {-127, -126, -125, 0, 1, 124, 125} <= scales


def test_scale_boundary_blocks() -> None:
    b = mx_blocks(families=["scale-boundaries"])
    amax = {float(np.max(np.abs(row.astype(np.float64)))) for _, row in b}
    for x in (1.75, 1.9375 * 2, 1.0, 2.0**-126, 1.75 * 2.0**127):
        assert x in amax, x
    below = float(np.nextafter(np.float32(1.75), np.float32(0)))
    above = float(np.nextafter(np.float32(1.75), np.float32(2)))
    assert below in amax and above in amax


def test_special_tiny_huge_and_reference_blocks() -> None:
    b = mx_blocks()
    labels = set(b.labels)
    for label in ("specials: all +0.0", "specials: all -0.0", "specials: NaN last",
                  "specials: +Inf and -Inf", "reference: sources.md §6 #18",
                  "reference: sources.md §6 #20", "tiny: amax 2^-125",
                  "tiny: all 2^-149", "huge: amax 1.75·2^127", "huge: largest finite float32"):
        assert label in labels, label
    tiny = b.family("tiny").values.astype(np.float64)
    maxima = np.max(np.abs(tiny), axis=1)
    for k in range(125, 150):
        assert 2.0**-k in maxima
    specials = b.family("specials").values
    assert np.isnan(specials).any() and np.isinf(specials).any()
    assert np.signbit(specials[specials == 0]).any()


def test_other_elements_and_sizes() -> None:
    b = mx_blocks(E4M3FN, block_size=16)
    assert b.values.shape[1] == 16
    first = b.family("ties").values[0].astype(np.float64)
    assert first[0] == 448.0 * 2.0**-127
    with pytest.raises(ValueError, match="not an MX element"):
        mx_blocks(elem=__import__("mxformats").INT4)


def test_bfloat16_blocks_are_exact_bfloat16() -> None:
    b = mx_blocks(dtype="bfloat16")
    assert b.values.dtype == np.dtype(ml_dtypes.bfloat16)
    # The ulp neighbours of 0.25 at scale 1 are bfloat16 neighbours, not float32 ones.
    ties = b.family("ties")
    row = next(r for label, r in ties if label.endswith("scale 2^0"))
    assert float(np.nextafter(np.float32(0.25), np.float32(1))) not in row.astype(np.float64)
    assert 0.25 + 2.0**-9 in row.astype(np.float64)


def test_int4_groups() -> None:
    g = int4_groups(group_size=16)
    assert g.values.shape[1] == 16
    assert g.families[:2] == ("ties", "reference")
    label, row = next(iter(g.family("ties")))
    scale = 2.0 ** int(label.split("2^")[1].split()[0])
    values = row.astype(np.float64)
    assert values[0] == 7.5 * scale  # amax first: the scale amax / 7.5 is a power of two
    assert values[1] == -7.5 * scale and values[2] == -6.5 * scale  # k + 0.5 from k = -8
    assert "reference: sources.md §6.7 #42 (x = -amax)" in g.labels


# -- Hypothesis ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(blocks_strategy(block_size=8, dtype="bfloat16"))
def test_blocks_strategy_draws_blocks(block: np.ndarray) -> None:
    assert block.shape == (8,) and block.dtype == np.dtype(ml_dtypes.bfloat16)


@settings(max_examples=30, deadline=None)
@given(values_strategy("float16"))
def test_values_strategy_draws_values(v: np.generic) -> None:
    assert v.dtype == np.float16


@settings(max_examples=20, deadline=None)
@given(int4_group_strategy(group_size=8))
def test_int4_strategy_draws_groups(group: np.ndarray) -> None:
    assert group.shape == (8,) and group.dtype == np.float32


def test_docstring_examples() -> None:
    import doctest

    import mxformats.testing.cases

    result = doctest.testmod(mxformats.testing.cases)
    assert result.attempted >= 10 and result.failed == 0
