"""torchao 0.18.0 ``to_mx`` (FLOOR, CEIL, EVEN, RCEIL), run on the CPU, against the
``torchao-*`` profiles of :func:`mxformats.quantize_mx`: byte equality of scales and codes for
E2M1, E4M3FN, E5M2, E2M3 and E3M2, on float32 and bfloat16 input.

Inputs: the boundary families of ``mxformats.testing.cases.mx_blocks`` (ties, scale-rule
boundaries, the reference vectors, specials, tiny and huge blocks, every boundary value),
Hypothesis blocks, and 100,000 seeded random blocks per profile and element (3.2 M values).

Input classes (spec/mx.md, ``torchao-*``):

* defined, compared byte for byte: everything, NaN blocks included, with canonical NaNs.
* implementation-defined: the *code* of a NaN element whose payload is not the canonical
  quiet NaN. torchao pushes the NaN's bits through ``_f32_to_floatx_unpacked``'s magic-adder
  branch (kernels.py), so its code depends on the payload; the profile writes the canonical
  NaN's code. Those codes are not compared; their block's scale byte is, and must be 0xFF in
  both, so every consumer decodes the whole block as NaN either way (asserted).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import requires
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

requires("torch")
requires("torchao.prototype.mx_formats.mx_tensor")

import _producers as P  # noqa: E402

from mxformats import get_format  # noqa: E402
from mxformats.schemes.mx import quantize_mx  # noqa: E402
from mxformats.testing.cases import blocks_strategy, mx_blocks  # noqa: E402

PROFILES = tuple(P.TORCHAO_MODES)
ELEMENTS = ("e2m1", "e4m3fn", "e5m2", "e2m3", "e3m2")
DTYPES = {"float32": P.F32, "bfloat16": P.BF16}
RANDOM_BLOCKS = 100_000


def _check(x: np.ndarray, elem: str, profile: str, labels: list[str] | None = None) -> None:
    fmt = get_format(elem)
    theirs = P.torchao_to_mx(x, elem, profile)
    ours = tuple(quantize_mx(x, fmt, profile=profile))
    payload = P.noncanonical_nan(x)
    P.assert_mx_equal(x, ours, theirs, packed=elem == "e2m1", who=profile, labels=labels,
                      skip=payload)
    if payload.any():  # the implementation-defined class: both write 0xFF for those blocks
        rows = payload.reshape(-1, P.BLOCK).any(axis=1)
        assert np.all(theirs[1].reshape(-1)[rows] == 0xFF)
        assert np.all(ours[1].reshape(-1)[rows] == 0xFF)


# -- the wrapper against sources.md §6 (values executed with torchao 0.18.0) --------------------

Z = [0.0] * 30


def _block(*values: float) -> list[float]:
    return [*values, *([0.0] * (32 - len(values)))]


# (vector, block head, elem, {profile: (scale, first codes)})
VECTORS = [
    ("1", [6.0, 5.0], "e2m1", {"torchao-floor": (0x7F, [7, 6])}),
    ("2", [6.0, 0.25], "e2m1", {"torchao-floor": (0x7F, [7, 0])}),
    ("3", [6.0, 1.25], "e2m1", {"torchao-floor": (0x7F, [7, 2])}),
    ("4", [6.0, 2.5], "e2m1", {"torchao-floor": (0x7F, [7, 4])}),
    ("5", [6.0, 0.75, 1.75, 3.5], "e2m1", {"torchao-floor": (0x7F, [7, 2, 4, 6])}),
    ("6", [4.0, -0.0], "e2m1", {"torchao-floor": (0x7F, [6, 8])}),
    ("7", [4.0, -0.25], "e2m1", {"torchao-floor": (0x7F, [6, 8])}),
    ("8", [4.0, -0.2], "e2m1", {"torchao-floor": (0x7F, [6, 8])}),
    ("9", [4.0, float.fromhex("0x1.000002p-2")], "e2m1", {"torchao-floor": (0x7F, [6, 1])}),
    ("10", [-5.0, 3.0, 2.9], "e2m1",
     {"torchao-floor": (0x7F, [0xE, 5, 5]), "torchao-ceil": (0x80, [0xC, 3, 3])}),
    ("11", [7.0, 1.0, 0.3, -2.9], "e2m1",
     {"torchao-floor": (0x7F, [7, 2, 1, 0xD]), "torchao-even": (0x80, [6, 1, 0, 0xB]),
      "torchao-ceil": (0x80, [6, 1, 0, 0xB]), "torchao-rceil": (0x80, [6, 1, 0, 0xB])}),
    ("12", [6.5, 1.0, 0.76], "e2m1",
     {"torchao-floor": (0x7F, [7, 2, 2]), "torchao-even": (0x7F, [7, 2, 2]),
      "torchao-ceil": (0x80, [5, 1, 1]), "torchao-rceil": (0x80, [5, 1, 1])}),
    ("13", [3.5, 1.0, 0.25], "e2m1",
     {"torchao-floor": (0x7E, [7, 4, 1]), "torchao-even": (0x7F, [6, 2, 0]),
      "torchao-ceil": (0x7F, [6, 2, 0]), "torchao-rceil": (0x7F, [6, 2, 0])}),
    ("14", [7.5, 1.0], "e2m1",
     {"torchao-floor": (0x7F, [7, 2]), "torchao-even": (0x80, [6, 1]),
      "torchao-ceil": (0x80, [6, 1]), "torchao-rceil": (0x80, [6, 1])}),
    ("15", [1.5, 0.125, 0.1875], "e2m1",
     {"torchao-floor": (0x7D, [7, 1, 2]), "torchao-even": (0x7D, [7, 1, 2]),
      "torchao-ceil": (0x7E, [5, 0, 1]), "torchao-rceil": (0x7D, [7, 1, 2])}),
    ("16", [6.0, 5.0, 0.25, 0.75], "e2m1",
     {"torchao-floor": (0x7F, [7, 6, 0, 2]), "torchao-even": (0x7F, [7, 6, 0, 2]),
      "torchao-ceil": (0x80, [5, 4, 0, 1]), "torchao-rceil": (0x7F, [7, 6, 0, 2])}),
    ("17", [0.0, -0.0], "e2m1", {p: (0x00, [0, 8]) for p in PROFILES}),
    ("18", [math.nan, 1.0], "e2m1",
     {"torchao-floor": (0xFF, [3, 0]), "torchao-ceil": (0xFF, [3, 0]),
      "torchao-even": (0xFF, [3, 0]), "torchao-rceil": (0xFF, [3, 3])}),
    ("19", [math.inf, 1.0], "e2m1",
     {"torchao-floor": (0xFD, [7, 0]), "torchao-ceil": (0xFD, [7, 0]),
      "torchao-even": (0xFD, [7, 0]), "torchao-rceil": (0xFE, [7, 0])}),
    ("20", [2.0**-125, 2.0**-127], "e2m1",
     {"torchao-floor": (0x00, [4, 1]), "torchao-ceil": (0x00, [4, 1]),
      "torchao-even": (0x00, [4, 1]), "torchao-rceil": (0x00, [0, 0])}),
    ("21", [1e-38, 5e-39], "e2m1",
     {"torchao-floor": (0x00, [2, 1]), "torchao-rceil": (0x00, [0, 0])}),
    ("22", [3e38, 1.0], "e2m1",
     {"torchao-floor": (0xFC, [7, 0]), "torchao-ceil": (0xFD, [6, 0]),
      "torchao-even": (0xFD, [6, 0]), "torchao-rceil": (0xFD, [6, 0])}),
    ("39", [480.0, 1.0, 17.0], "e4m3fn",
     {"torchao-floor": (0x7F, [0x7E, 0x38, 0x58]), "torchao-even": (0x7F, [0x7E, 0x38, 0x58]),
      "torchao-rceil": (0x80, [0x77, 0x30, 0x50]), "torchao-ceil": (0x80, [0x77, 0x30, 0x50])}),
    ("40", [448.0, 1.0, 2.0**-10], "e4m3fn",
     {"torchao-floor": (0x7F, [0x7E, 0x38, 0]), "torchao-even": (0x7F, [0x7E, 0x38, 0]),
      "torchao-rceil": (0x7F, [0x7E, 0x38, 0]), "torchao-ceil": (0x80, [0x76, 0x30, 0])}),
    ("41", [500.0, 1.0], "e4m3fn",
     {"torchao-floor": (0x7F, [0x7E, 0x38]), "torchao-even": (0x80, [0x78, 0x30]),
      "torchao-rceil": (0x80, [0x78, 0x30])}),
]


@pytest.mark.parametrize(("vector", "head", "elem", "expected"), VECTORS,
                         ids=[f"vector{v[0]}" for v in VECTORS])
def test_wrapper_reproduces_formats_md_vectors(
    vector: str, head: list[float], elem: str, expected: dict[str, tuple[int, list[int]]]
) -> None:
    """The wrapper's byte layout (scale view, E2M1 nibble order, FP8 bytes) is right: the real
    to_mx gives the bytes sources.md §6 records for torchao, and so does the profile."""
    x = np.array([_block(*head)], dtype=np.float32)
    for profile, (scale, codes) in expected.items():
        got_codes, got_scales = P.torchao_to_mx(x, elem, profile)
        elements = P.unpack_nibbles(got_codes)[0] if elem == "e2m1" else got_codes[0]
        assert int(got_scales[0, 0]) == scale, (vector, profile, hex(int(got_scales[0, 0])))
        assert elements[: len(codes)].tolist() == codes, (vector, profile, elements[:8])
        _check(x, elem, profile)


# -- boundary families, random blocks, Hypothesis ---------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("profile", PROFILES)
def test_boundary_blocks(profile: str, elem: str, dtype: str) -> None:
    blocks = mx_blocks(get_format(elem), dtype=dtype)
    _check(np.ascontiguousarray(blocks.values), elem, profile, list(blocks.labels))


@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("profile", PROFILES)
def test_random_blocks(profile: str, elem: str) -> None:
    """100,000 random blocks (float32) per profile and element, and 100,000 bfloat16 blocks
    per profile for E2M1 (25,000 for the other elements)."""
    fmt = get_format(elem)
    grid = P.element_grid(fmt.values)
    seed = 1000 + PROFILES.index(profile) * 10 + ELEMENTS.index(elem)
    x = P.random_blocks(RANDOM_BLOCKS, P.F32, seed=seed, grid=grid, emax=fmt.emax)
    _check(x, elem, profile)
    n_bf16 = RANDOM_BLOCKS if elem == "e2m1" else RANDOM_BLOCKS // 4
    x = P.random_blocks(n_bf16, P.BF16, seed=seed + 5000, grid=grid, emax=fmt.emax)
    _check(x, elem, profile)


def _hypothesis_test(elem: str, dtype: str):  # type: ignore[no-untyped-def]
    fmt = get_format(elem)

    @settings(max_examples=25, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(blocks=st.lists(blocks_strategy(fmt, dtype=dtype), min_size=1, max_size=3),
           profile=st.sampled_from(PROFILES))
    def run(blocks: list[np.ndarray], profile: str) -> None:
        _check(P.stack_blocks(blocks), elem, profile)

    return run


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("elem", ELEMENTS)
def test_hypothesis_blocks(elem: str, dtype: str) -> None:
    _hypothesis_test(elem, dtype)()


def test_payload_nan_blocks_decode_as_nan_in_both() -> None:
    """The implementation-defined class, asserted: a NaN with a non-canonical payload gets a
    payload-dependent code from torchao (not the canonical NaN's), the scale byte is 0xFF in
    both, and the other elements of the block agree."""
    bits = np.array([0x7FC00001, 0x7FFFFFFF, 0xFFC12345, 0x7F800001], dtype=np.uint32)
    x = np.zeros((len(bits), 32), dtype=np.float32)
    x[:, 3] = bits.view(np.float32)
    x[:, 0] = 1.5
    x[:, 1] = -0.25
    for profile in PROFILES:
        _, scales = P.torchao_to_mx(x, "e2m1", profile)
        assert np.all(scales == 0xFF)
        ours = quantize_mx(x, get_format("e2m1"), profile=profile)
        assert np.all(ours.scales == 0xFF)
        _check(x, "e2m1", profile)
