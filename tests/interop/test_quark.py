"""AMD Quark 0.13, run on the CPU, against mxformats' Quark profiles.

* ``quark`` (MXFP4 export): Quark's file-to-file export of one weight,
  ``file2file_quantization._single_stage_quantize_weight`` with the ``OCP_MXFP4Spec`` weight
  config of the kimi-k2-mxfp4-quark fixture (``PerBlockMXObserver`` → ``even_round``;
  ``scaled_real_quantize`` → ``real_quantize_fp4_fp6_per_group`` →
  ``torch.ops.quark.fake_quantize_to_low_precision_fp``, the C++ CPU op, JIT-built with
  ninja/g++ on first import; ``Pack_fp4``; ``to_e8m0_uint8``).
* ``quark-triton``: ``kernel/mx/triton.py::downcast_to_mxfp_torch`` (EVEN), the torch
  reference of Quark's Triton path, run from the installed source without triton (see
  ``_producers.quark_triton_reference``). The Triton kernel itself needs a GPU: it is covered
  by the labelled vectors of spec/vectors/mx/quark-triton.json.
* INT4: ``_single_stage_quantize_weight`` with Quark's ``Int4PerChannelSpec`` and
  ``Int4PerGroupSpec`` (``real_quantize_int_per_channel_affine`` / per-group, ``Pack_4_bits``
  without reorder) vs ``quantize_int4(profile="quark")`` + ``pack_int4(layout="linear")``.
* W4A8: ``_progressive_quantize_weight`` with the ProgressiveSpec stages of the
  kimi-k2-w4a8-quark fixture vs ``quantize_w4a8``.

Inputs are bfloat16, float32 and (MXFP4) float16. Input classes: for MXFP4 every input is
compared byte for byte (NaN blocks are pinned in the profile and reproduced), except the
implementation-defined non-canonical NaN payloads; INT4/W4A8 NaN/±Inf inputs are refused by
mxformats (implementation-defined) and what Quark writes for them is asserted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import requires
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

requires("torch")
requires("quark.torch")

import _producers as P  # noqa: E402

from mxformats import E2M1  # noqa: E402
from mxformats.formats import E4M3FN, E5M2  # noqa: E402
from mxformats.schemes.fp8 import quantize_fp8  # noqa: E402
from mxformats.schemes.int4 import dequantize_int4, pack_int4, quantize_int4  # noqa: E402
from mxformats.schemes.mx import dequantize_mx, pack_fp4, quantize_mx  # noqa: E402
from mxformats.schemes.w4a8 import quantize_w4a8  # noqa: E402
from mxformats.testing.cases import blocks_strategy, int4_group_strategy, mx_blocks  # noqa: E402

DTYPES = {"float32": P.F32, "bfloat16": P.BF16, "float16": P.F16}
MX_PRODUCERS = {"quark": P.quark_mxfp4, "quark-triton": P.quark_triton_mxfp4}
RANDOM_BLOCKS = 100_000


def _check_mx(x: np.ndarray, profile: str, labels: list[str] | None = None) -> None:
    theirs = MX_PRODUCERS[profile](x)
    ours = tuple(quantize_mx(x, E2M1, profile=profile))
    payload = P.noncanonical_nan(x)
    P.assert_mx_equal(x, ours, theirs, packed=True, who=profile, labels=labels, skip=payload)


def _block(head: list[float]) -> np.ndarray:
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, : len(head)] = head
    return x


# (vector, block head, {profile: (scale, codes)}), sources.md §6 ("Quark export" and "Quark
# Triton" / "triton-old" entries)
VECTORS = [
    ("1", [6.0, 5.0], {"quark": (0x7F, [7, 6]), "quark-triton": (0x7F, [7, 7])}),
    ("2", [6.0, 0.25], {"quark": (0x7F, [7, 0]), "quark-triton": (0x7F, [7, 1])}),
    ("3", [6.0, 1.25], {"quark": (0x7F, [7, 2]), "quark-triton": (0x7F, [7, 3])}),
    ("4", [6.0, 2.5], {"quark": (0x7F, [7, 4]), "quark-triton": (0x7F, [7, 5])}),
    ("6", [4.0, -0.0], {"quark": (0x7F, [6, 0])}),
    ("7", [4.0, -0.25], {"quark": (0x7F, [6, 0]), "quark-triton": (0x7F, [6, 9])}),
    ("8", [4.0, -0.2], {"quark": (0x7F, [6, 0])}),
    ("11", [7.0, 1.0, 0.3, -2.9], {"quark": (0x80, [6, 1, 0, 0xB])}),
    ("12", [6.5, 1.0, 0.76], {"quark": (0x7F, [7, 2, 2])}),
    ("13", [3.5, 1.0, 0.25], {"quark": (0x7F, [6, 2, 0]), "quark-triton": (0x7F, [6, 2, 1])}),
    ("14", [7.5, 1.0], {"quark": (0x80, [6, 1])}),
    ("15", [1.5, 0.125, 0.1875], {"quark": (0x7D, [7, 1, 2])}),
    ("16", [6.0, 5.0, 0.25, 0.75], {"quark": (0x7F, [7, 6, 0, 2])}),
    ("17", [0.0, -0.0], {"quark": (0x01, [0, 0])}),
    ("18", [math.nan, 1.0], {"quark": (0x7F, [7] * 32), "quark-triton": (0xFF, [7, 7])}),
    ("19", [math.inf, 1.0], {"quark": (0xFE, [6, 0]), "quark-triton": (0xFE, [7, 0])}),
    ("20", [2.0**-125, 2.0**-127], {"quark": (0x01, [6, 2]), "quark-triton": (0x00, [6, 2])}),
    ("21", [1e-38, 5e-39], {"quark": (0x01, [3, 2])}),
    ("22", [3e38, 1.0], {"quark": (0xFE, [4, 0])}),
]


@pytest.mark.parametrize(("vector", "head", "expected"), VECTORS,
                         ids=[f"vector{v[0]}" for v in VECTORS])
def test_mx_wrappers_reproduce_formats_md_vectors(
    vector: str, head: list[float], expected: dict[str, tuple[int, list[int]]]
) -> None:
    x = _block(head)
    for profile, (scale, codes) in expected.items():
        got_codes, got_scales = MX_PRODUCERS[profile](x)
        assert int(got_scales[0, 0]) == scale, (vector, profile, hex(int(got_scales[0, 0])))
        got = P.unpack_nibbles(got_codes)[0, : len(codes)].tolist()
        assert got == codes, (vector, profile, got)
        _check_mx(x, profile)


def test_cpu_op_is_the_real_kernel() -> None:
    """The element rounding goes through Quark's compiled CPU op (not a Python fallback): it
    is registered, and it rounds ties to even, keeps NaN/Inf and gives +0 for -0.25 and -0."""
    import quark.torch  # noqa: F401
    import torch

    op = torch.ops.quark.fake_quantize_to_low_precision_fp
    x = torch.tensor([0.25, 0.75, 2.5, 5.0, -0.25, -0.0, 7.0, math.inf, math.nan])
    y = op(x, 2, 1, 6.0, 0)
    assert y[:7].tolist() == [0.0, 1.0, 2.0, 4.0, 0.0, 0.0, 6.0]
    assert not math.copysign(1.0, float(y[4])) < 0 and not math.copysign(1.0, float(y[5])) < 0
    assert math.isinf(float(y[7])) and math.isnan(float(y[8]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("profile", MX_PRODUCERS)
def test_mx_boundary_blocks(profile: str, dtype: str) -> None:
    blocks = mx_blocks(E2M1, dtype=dtype)
    _check_mx(np.ascontiguousarray(blocks.values), profile, list(blocks.labels))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("profile", MX_PRODUCERS)
def test_mx_random_blocks(profile: str, dtype: str) -> None:
    """100,000 random blocks per profile in float32 and bfloat16 (3.2 M values each), 25,000
    in float16."""
    n = RANDOM_BLOCKS if dtype != "float16" else RANDOM_BLOCKS // 4
    seed = 4000 + list(MX_PRODUCERS).index(profile) * 10 + list(DTYPES).index(dtype)
    x = P.random_blocks(n, DTYPES[dtype], seed=seed, grid=P.element_grid(E2M1.values),
                        emax=E2M1.emax)
    _check_mx(x, profile)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("profile", MX_PRODUCERS)
def test_mx_hypothesis(profile: str, dtype: str) -> None:
    @settings(max_examples=50, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(blocks_strategy(E2M1, dtype=dtype), min_size=1, max_size=3))
    def run(blocks: list[np.ndarray]) -> None:
        _check_mx(P.stack_blocks(blocks), profile)

    run()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_triton_round_up_scales_against_quarks_copy_of_triton_kernels(dtype: str) -> None:
    """A partial live check of ``triton-round-up`` (triton_kernels itself is not installable):
    Quark's ``downcast_to_mxfp_torch`` is triton_kernels' torch reference from before PR #8110,
    with the same ROUND_UP scale, ``(bits(amax/6) + 0x7FFFFF) & 0x7F800000``. On 100,000
    random blocks its scale bytes equal the profile's exactly (NaN blocks included: the carry
    gives 0x00), and its codes differ only at exact E2M1 ties, where its round-half-up takes
    the upper neighbour and the profile (RNE, after PR #8110) the even one."""
    x = P.random_blocks(RANDOM_BLOCKS, DTYPES[dtype], seed=9000 + len(dtype),
                        grid=P.element_grid(E2M1.values), emax=E2M1.emax)
    codes, scales = P.quark_triton_mxfp4(x, "ROUND_UP")
    ours = quantize_mx(x, E2M1, profile="triton-round-up")
    assert np.array_equal(scales, ours.scales)
    theirs_c = P.unpack_nibbles(codes).reshape(-1, P.BLOCK).astype(np.int64)
    ours_c = P.unpack_nibbles(ours.codes).reshape(-1, P.BLOCK).astype(np.int64)
    with np.errstate(all="ignore"):
        q = x.reshape(-1, P.BLOCK).astype(np.float64) * np.exp2(
            127.0 - ours.scales.reshape(-1).astype(np.float64))[:, None]
    ties = np.isin(np.abs(q), [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    differ = theirs_c != ours_c
    assert not np.any(differ & ~ties), np.argwhere(differ & ~ties)[:3]
    assert differ.any()
    assert np.array_equal(theirs_c[differ] & 0x8, ours_c[differ] & 0x8)  # same sign
    assert np.array_equal(theirs_c[differ] & 0x7, (ours_c[differ] & 0x7) + 1)  # one step up


@pytest.mark.parametrize("out", ["float16", "bfloat16"])
def test_quark_triton_consumer_every_code_and_scale(out: str) -> None:
    """The ``quark-triton`` consumer against ``upcast_from_mxfp_torch`` (triton.py L831, the
    torch reference of the Triton dequant), every code under every scale byte. Equal wherever
    the scale 2**(b-127) is exact in the output dtype (0x00 decodes to 0.0: ``scale << 23``,
    L861). Where the two Quark paths differ, asserted: byte 0xFF, which the reference
    multiplies as 255 << 23 = +Inf (±Inf, NaN for zero codes) and the Triton kernel, followed
    by the profile, forces to NaN (L333); and in float16 the scales beyond 2**15 or below
    2**-24, which the kernel rounds to float16 before multiplying (L287-L288: Inf, 0;
    0 × Inf = NaN) while the reference multiplies in float32 and rounds once."""
    import torch

    tdtype, dtype = {"float16": (torch.float16, P.F16), "bfloat16": (torch.bfloat16, P.BF16)}[out]
    logical, scales = P.every_code_and_scale(4)
    packed = pack_fp4(logical)
    theirs = P.quark_triton_upcast(packed, scales, tdtype)
    ours = dequantize_mx(packed, scales, E2M1, profile="quark-triton", dtype=dtype)
    exact = np.ones(256, dtype=bool)
    if out == "float16":
        exact[: 127 - 24] = False
        exact[127 + 16 :] = False
        exact[0] = True  # 0x00 is 0.0 in both
    exact[255] = False
    assert P.same_floats(ours[exact], theirs[exact])
    ff_theirs = theirs[255].astype(np.float32)
    zero = (logical[255] & 0x7) == 0
    assert np.all(np.isnan(ff_theirs[zero])) and np.all(np.isinf(ff_theirs[~zero]))
    assert np.all(np.isnan(ours[255].astype(np.float32)))
    rows = np.flatnonzero(~exact[:255])
    if rows.size:  # float16: the kernel's scale in float16, then the product in float16
        with np.errstate(over="ignore", invalid="ignore"):
            scale16 = np.exp2(rows.astype(np.float64) - 127).astype(np.float16)
            kernel = E2M1.values[logical[rows]].astype(np.float16) * scale16[:, None]
        assert P.same_floats(ours[rows], kernel)


@pytest.mark.parametrize("group_size", [None, 32])
def test_int4_consumer_dequantize(group_size: int | None) -> None:
    """The ``quark`` INT4 consumer = ``dequantize_int_per_channel_affine`` /
    ``dequantize_int_per_group_affine`` (hw_emulation_interface.py L1877/L1904: float32)."""
    import torch
    from quark.torch.kernel.hw_emulation.hw_emulation_interface import (
        dequantize_int_per_channel_affine,
        dequantize_int_per_group_affine,
    )

    rng = np.random.default_rng(32 if group_size else 1)
    q = rng.integers(-8, 8, size=(64, 256)).astype(np.int8)
    groups = 1 if group_size is None else 256 // group_size
    scales = np.exp2(rng.uniform(-130, 120, size=(64, groups))).astype(np.float32)
    tq, ts = torch.from_numpy(q), torch.from_numpy(scales)
    if group_size is None:
        theirs = dequantize_int_per_channel_affine(tq, ts.reshape(-1), torch.zeros(64), 0)
    else:
        theirs = dequantize_int_per_group_affine(tq, ts, torch.zeros_like(ts), 1, group_size)
    ours = dequantize_int4(q, scales, group_size=group_size, axis=1 if group_size is None else -1,
                           profile="quark", dtype=np.float32)
    assert P.same_floats(ours, P.from_torch(theirs))


# -- INT4 -------------------------------------------------------------------------------------


def test_pack_4_bits_reproduces_formats_md_vectors() -> None:
    """sources.md §6.7 #44/#45: ``Pack_4_bits`` with and without reorder; ``pack_int4`` layouts
    ``quark`` and ``linear`` write the same words."""
    import torch
    from quark.torch.utils.pack import Pack_4_bits

    packer = Pack_4_bits(None, "int4")
    for values, reordered, plain in [
        (list(range(8)), 0x75316420, 0x76543210),
        (list(range(-8, 0)), 0xFDB9ECA8, 0xFEDCBA98),
    ]:
        t = torch.tensor([values], dtype=torch.int32)
        assert int(packer.pack(t, True)[0, 0]) & 0xFFFFFFFF == reordered
        assert int(packer.pack(t, False)[0, 0]) & 0xFFFFFFFF == plain
        q = np.array([values], dtype=np.int8)
        assert int(pack_int4(q, layout="quark")[0, 0]) & 0xFFFFFFFF == reordered
        assert int(pack_int4(q, layout="linear")[0, 0]) & 0xFFFFFFFF == plain


def _quark_int4(x: np.ndarray, group_size: int | None) -> dict[str, np.ndarray]:
    """Quark's single-stage INT4 export, unpacked to q in x's layout: per channel the words
    run along the input dimension; per group (``PER_GROUP_INT_TRANSPOSE_DTYPES``) Quark packs
    the transposed weight, so the words run along the output dimension."""
    return P.quark_single_stage(x, P.quark_int4_config(group_size))


def _check_int4(x: np.ndarray, group_size: int | None) -> None:
    theirs = _quark_int4(x, group_size)
    axis = 1 if group_size is None else -1
    q, scales = quantize_int4(x, group_size=group_size, axis=axis, profile="quark")
    assert theirs["weight_scale"].dtype == np.float32
    their_scale = theirs["weight_scale"].reshape(scales.shape)
    if not np.array_equal(scales.view(np.uint32), their_scale.view(np.uint32)):
        i = tuple(np.argwhere(scales.view(np.uint32) != their_scale.view(np.uint32))[0])
        raise AssertionError(f"scale {i}: mxformats {scales[i]!r}, Quark {their_scale[i]!r}")
    if group_size is None:
        packed = pack_int4(q, layout="linear", axis=1)
    else:
        packed = np.ascontiguousarray(pack_int4(q, layout="linear", axis=0).T)
    if not np.array_equal(packed, theirs["weight"]):
        i = tuple(np.argwhere(packed != theirs["weight"])[0])
        raise AssertionError(f"word {i}: mxformats 0x{int(packed[i]) & 0xFFFFFFFF:08x}, "
                             f"Quark 0x{int(theirs['weight'][i]) & 0xFFFFFFFF:08x}")


def test_int4_vectors_42_43_reciprocal_multiply() -> None:
    """sources.md §6.7 #42: x = -amax → -7 in Quark (x · (1/s) = -7.4999995), -8 in
    compressed-tensors; #43: x = 0.15186960995197296 at s = 0.1012464091181755 → 1."""
    import torch
    from quark.torch.kernel.hw_emulation.hw_emulation_interface import (
        real_quantize_int_per_channel_affine,
    )

    amax = 0.9083542823791504
    x = np.zeros((2, 32), dtype=np.float32)
    x[0, :3] = [amax, -amax, 0.5 * amax]
    x[1, :2] = [0.1012464091181755 * 7.5, 0.15186960995197296]
    q, scales = quantize_int4(x, group_size=None, axis=1, profile="quark")
    assert q[0, 1] == -7
    s = torch.from_numpy(scales.reshape(-1))
    theirs = real_quantize_int_per_channel_affine(
        torch.from_numpy(x), s, torch.zeros(2, dtype=torch.int32), 0, -8, 7, 8)
    assert int(theirs[0, 1]) == -7
    if float(scales[1, 0]) == np.float32(0.1012464091181755):
        assert int(theirs[1, 1]) == 1 and q[1, 1] == 1
    _check_int4(x, None)


@pytest.mark.parametrize("group_size", [None, 32])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_int4_random(dtype: str, group_size: int | None) -> None:
    """A [1024, 3200] weight: 100,000 groups of 32 (per group) or 1,024 channels of 3,200."""
    rng = np.random.default_rng(5000 + len(dtype) + (group_size or 0))
    x = rng.standard_normal((1024, 3200)) * np.exp2(rng.integers(-30, 30, size=(1024, 1)))
    x[rng.random(x.shape) < 0.05] = 0.0
    _check_int4(P.cast(x, DTYPES[dtype]), group_size)


@pytest.mark.parametrize("group_size", [None, 32])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_int4_hypothesis(dtype: str, group_size: int | None) -> None:
    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(int4_group_strategy(dtype=dtype), min_size=8, max_size=8))
    def run(groups: list[np.ndarray]) -> None:
        # eight rows of one group each: per channel, each row is a channel of 32
        x = P.stack_blocks(groups)
        if not np.isfinite(x.astype(np.float32)).all():
            _check_int4_nonfinite(x, group_size)
            return
        _check_int4(x, group_size)

    run()


def _check_int4_nonfinite(x: np.ndarray, group_size: int | None) -> None:
    """Implementation-defined: mxformats raises ValueError. Quark raises too for NaN (its
    observer's ``check_min_max_valid``, quantization/nn/utils.py L29: "min val should be less
    than max val"); for ±Inf it writes an infinite scale for that row or group and quantizes
    every finite row as usual (asserted per channel)."""
    axis = 1 if group_size is None else -1
    with pytest.raises(ValueError, match="implementation-defined"):
        quantize_int4(x, group_size=group_size, axis=axis, profile="quark")
    if P.nan_mask(x).any():
        with pytest.raises(RuntimeError, match="min val should be less than max val"):
            _quark_int4(x, group_size)
        return
    theirs = _quark_int4(x, group_size)
    rows = np.isfinite(x.astype(np.float32)).all(axis=1)
    scale = theirs["weight_scale"].reshape(x.shape[0], -1)
    assert np.isinf(scale[~rows]).any(axis=1).all()
    if rows.any() and group_size is None:
        q, s = quantize_int4(np.ascontiguousarray(x[rows]), group_size=None, axis=1,
                             profile="quark")
        assert np.array_equal(s.reshape(-1).view(np.uint32),
                              scale[rows].reshape(-1).view(np.uint32))
        assert np.array_equal(pack_int4(q, layout="linear", axis=1), theirs["weight"][rows])


def test_int4_nan_and_inf_rows() -> None:
    x = np.tile(np.linspace(-1, 1, 32, dtype=np.float32), (8, 1))
    x[3, 5] = np.inf
    x[6, 0] = -np.inf
    for group_size in (None, 32):
        _check_int4_nonfinite(x, group_size)
    x[1, 1] = np.nan
    for group_size in (None, 32):
        _check_int4_nonfinite(x, group_size)


# -- W4A8 -------------------------------------------------------------------------------------


def _check_w4a8(w: np.ndarray) -> None:
    theirs = P.quark_w4a8(w)
    ours = quantize_w4a8(w)
    assert theirs["weight_scale"].dtype == np.float32 and theirs["weight_scale"].shape == ()
    assert ours.weight_scale.view(np.uint32) == theirs["weight_scale"].view(np.uint32), (
        ours.weight_scale, theirs["weight_scale"])
    assert np.array_equal(ours.weight_scale_2.view(np.uint32),
                          theirs["weight_scale_2"].view(np.uint32))
    assert ours.weight.shape == theirs["weight"].shape
    if not np.array_equal(ours.weight, theirs["weight"]):
        i = tuple(np.argwhere(ours.weight != theirs["weight"])[0])
        raise AssertionError(f"word {i}: mxformats 0x{int(ours.weight[i]) & 0xFFFFFFFF:08x}, "
                             f"Quark 0x{int(theirs['weight'][i]) & 0xFFFFFFFF:08x}; row input "
                             f"{P.hexfloats(w[i[0], 8 * i[1] : 8 * i[1] + 8])}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_w4a8_random(dtype: str) -> None:
    """A [1024, 3200] weight (3.3 M values; 102,400 groups of 32 along the rows), plus
    heavy-tailed rows so the FP8 stage saturates and underflows."""
    rng = np.random.default_rng(6000 + len(dtype))
    w = rng.standard_normal((1024, 3200)) * 0.02
    w[::37] *= 5.0
    w[rng.random(w.shape) < 0.001] *= 1e4
    w[rng.random(w.shape) < 0.01] = 0.0
    _check_w4a8(P.cast(w, DTYPES[dtype]))


@pytest.mark.parametrize("cols", [8, 36, 100])
def test_w4a8_columns_not_multiple_of_8_or_32(cols: int) -> None:
    rng = np.random.default_rng(cols)
    _check_w4a8(P.cast(rng.standard_normal((16, cols)), P.BF16))


def _check_w4a8_nonfinite(w: np.ndarray) -> None:
    """Implementation-defined: mxformats raises ValueError; Quark raises RuntimeError in the
    stage-2 observer (NaN, or Inf / Inf = NaN once the per-tensor scale s1 is infinite)."""
    with pytest.raises(ValueError, match="implementation-defined"):
        quantize_w4a8(w)
    with pytest.raises(RuntimeError, match="min val should be less than max val"):
        P.quark_w4a8(w)


def test_w4a8_nan_and_inf() -> None:
    for v in (np.nan, np.inf, -np.inf):
        w = np.ones((4, 32), dtype=np.float32)
        w[2, 7] = v
        _check_w4a8_nonfinite(w)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_w4a8_hypothesis(dtype: str) -> None:
    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(int4_group_strategy(dtype=dtype), min_size=2, max_size=6))
    def run(rows: list[np.ndarray]) -> None:
        w = P.stack_blocks(rows)
        if not np.isfinite(w.astype(np.float32)).all():
            _check_w4a8_nonfinite(w)
            return
        _check_w4a8(w)

    run()


# -- FP8 per-tensor (the ``static`` profile) ------------------------------------------------------

FP8 = {"fp8_e4m3": E4M3FN, "fp8_e5m2": E5M2}


def _quark_fp8(x: np.ndarray, dtype: str) -> dict[str, np.ndarray]:
    """Quark's single-stage export with the W4A8 fixture's stage-1 config
    (``FP8E4M3PerTensorSpec``, static, scale_type float32), E4M3 or E5M2: the weight's FP8
    bytes and the float32 scale."""
    config = dict(P.QUARK_W4A8_WEIGHT[0], dtype=dtype)
    return P.quark_single_stage(x, P.quark_config(config))


def _check_fp8(x: np.ndarray, dtype: str) -> None:
    theirs = _quark_fp8(x, dtype)
    codes, scale = quantize_fp8(x, FP8[dtype], profile="static")
    assert theirs["weight_scale"].dtype == np.float32 and theirs["weight_scale"].shape == ()
    assert scale.view(np.uint32) == theirs["weight_scale"].view(np.uint32), (scale, theirs)
    if not np.array_equal(codes, theirs["weight"]):
        i = tuple(np.argwhere(codes != theirs["weight"])[0])
        raise AssertionError(f"code {i}: input {P.hexfloats(x[i[0], i[1]:i[1] + 1])}, mxformats "
                             f"0x{int(codes[i]):02x}, Quark 0x{int(theirs['weight'][i]):02x}")


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fp8_static_random(dtype: str, fp8: str) -> None:
    """A [1024, 3200] weight, heavy-tailed (the quotient rounds to the input dtype first)."""
    rng = np.random.default_rng(8000 + len(dtype) + len(fp8))
    w = rng.standard_normal((1024, 3200)) * np.exp2(rng.integers(-12, 12, size=(1024, 1)))
    w[rng.random(w.shape) < 0.01] = 0.0
    _check_fp8(P.cast(w, DTYPES[dtype]), fp8)


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fp8_static_hypothesis(dtype: str, fp8: str) -> None:
    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(blocks_strategy(FP8[fp8], dtype=dtype), min_size=1, max_size=4))
    def run(rows: list[np.ndarray]) -> None:
        x = P.stack_blocks(rows)
        if not np.isfinite(x.astype(np.float32)).all():
            _check_fp8_nonfinite(x, fp8)
            return
        _check_fp8(x, fp8)

    run()


def _check_fp8_nonfinite(x: np.ndarray, fp8: str) -> None:
    """Implementation-defined: mxformats raises ValueError; Quark writes the NaN or Inf amax
    into the per-tensor scale (amax / 448) and every code follows from x / scale."""
    with pytest.raises(ValueError, match="implementation-defined"):
        quantize_fp8(x, FP8[fp8], profile="static")
    theirs = _quark_fp8(x, fp8)
    assert not np.isfinite(theirs["weight_scale"])


def test_fp8_static_nan_and_inf() -> None:
    for v in (np.nan, np.inf, -np.inf):
        x = np.ones((4, 32), dtype=np.float32)
        x[1, 3] = v
        for fp8 in FP8:
            _check_fp8_nonfinite(x, fp8)
