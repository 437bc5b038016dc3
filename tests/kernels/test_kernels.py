"""Every kernel backend equals the reference, byte for byte (one module, every backend).

The backends are listed in ``backends.py``; each claims ``(format, profile)`` pairs per function
in its ``SUPPORTED`` mapping and every claim is tested here:

- the ``mxformats.testing`` harness (spec vectors, the exhaustive bfloat16 and float16 sweeps,
  the boundary tables, Hypothesis blocks) for the MX quantizers and dequantizers and the INT4
  quantizer;
- Hypothesis shapes: one row, large K, 3-D, transposed and sliced views, ``axis=0``;
- exhaustive sweeps through the elementwise paths (FP8 casts, INT4 dequantization, fn->fnuz);
- every registered profile a backend does not claim raises ``NotImplementedError`` naming it.

``pytest tests/kernels`` runs on the CPU (the Triton interpreter); ``pytest tests/kernels
--device cuda`` runs the same tests on a GPU. ``conftest.py`` parametrises: a test marked
``@pytest.mark.kernel("quantize_mx")`` runs once per ``(backend, fmt, profile)`` claimed by a
backend that runs on ``--device``; a test taking ``backend`` runs once per such backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires

import mxformats
from mxformats.codec import tensor_to_numpy
from mxformats.formats import E2M1, get_format
from mxformats.kernels import mx_plan as mx_plan
from mxformats.kernels.mx_plan import KERNEL_ELEMENTS
from mxformats.registry import profiles as registered_profiles
from mxformats.schemes import fp8_block as fp8_block_reference
from mxformats.schemes import int4 as int4_reference
from mxformats.schemes import mx as mx_reference
from mxformats.schemes import nvfp4 as nvfp4_reference
from mxformats.schemes.mx.consumers import CONSUMERS
from mxformats.schemes.mx.producers import PRODUCERS
from mxformats.testing import check_dequantizer, check_int4_quantizer, check_quantizer
from mxformats.testing.cases import float_dtype

from .backends import BACKENDS, Backend

torch = requires("torch")
hypothesis = requires("hypothesis")
st = hypothesis.strategies
given, settings = hypothesis.given, hypothesis.settings

DTYPES = ("float32", "bfloat16", "float16")


@pytest.fixture(scope="session")
def examples(device: str) -> int:
    """Hypothesis examples per test: the interpreter costs tens of ms per kernel launch; on a
    GPU the host-side reference is the cost, within benchmarks/gpu.py's seven-minute plan."""
    return 25 if device == "cpu" else 50


def _kernel(backend: Backend, function: str) -> Callable[..., Any]:
    for module in backend.requires:
        requires(module)
    return getattr(backend.load(), function)  # type: ignore[no-any-return]


def _claimed(backend: Backend, function: str) -> tuple[tuple[str, str], ...]:
    return tuple(backend.load().SUPPORTED.get(function, ()))


def _numpy(t: Any) -> np.ndarray:
    arr = tensor_to_numpy(t)
    assert arr is not None, f"expected a torch tensor, got {type(t).__name__}"
    return arr


def _bits(a: np.ndarray) -> np.ndarray:
    """Raw bit patterns (NaN compares by bits)."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16 \
        else a


def assert_bytes_equal(got: Any, expected: np.ndarray, what: str) -> None:
    g = _numpy(got) if not isinstance(got, np.ndarray) else got
    assert g.shape == expected.shape, f"{what}: shape {g.shape}, reference {expected.shape}"
    assert g.dtype.itemsize == expected.dtype.itemsize, f"{what}: {g.dtype} vs {expected.dtype}"
    gb, eb = _bits(np.ascontiguousarray(g)), _bits(np.ascontiguousarray(expected))
    if not np.array_equal(gb, eb):
        where = np.argwhere(gb != eb)
        first = tuple(int(i) for i in where[0])
        raise AssertionError(
            f"{what}: {len(where)} of {gb.size} differ; first at {first}: "
            f"got {gb[first]:#x}, reference {eb[first]:#x}"
        )


def _torch(a: np.ndarray, device: str) -> Any:
    """A numpy array (bfloat16 via ``ml_dtypes``) as a torch tensor on ``device``."""
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16) \
            .to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def _outcome(call: Callable[[], Any]) -> Any:
    """``call()``, or the class of the exception it raised."""
    try:
        return call()
    except Exception as err:  # compared with the reference's outcome
        return type(err)


def test_backend_imports(device: str) -> None:
    for backend in BACKENDS:
        if device in backend.devices:
            for module in backend.requires:
                requires(module)
            assert backend.load().SUPPORTED


#: Each quantizer a backend may have, the reference it stands in for and a profile to call.
QUANTIZERS = {
    "quantize_mx": (mx_reference.quantize_mx, "ocp"),
    "quantize_nvfp4": (nvfp4_reference.quantize_nvfp4, "modelopt"),
    "quantize_fp8_block": (fp8_block_reference.quantize_fp8_block, "deepseek"),
    "quantize_int4": (int4_reference.quantize_int4, "compressed-tensors"),
}


def test_quantizers_return_the_references_records(backend: Backend, device: str) -> None:
    """Each quantizer returns the reference's own record (MXArray, NVFP4Array, FP8BlockArray,
    Int4Array) with the reference's fields: its arrays' bytes and its metadata (profile, the
    axis made non-negative, block, group size, element)."""
    module = backend.load()
    x = np.random.default_rng(61).standard_normal((64, 96)).astype(np.float32)
    called = []
    for function, (reference, profile) in QUANTIZERS.items():
        if not hasattr(module, function):
            continue
        got = getattr(module, function)(_torch(x, device), axis=-2, profile=profile) \
            if function != "quantize_fp8_block" else \
            getattr(module, function)(_torch(x, device), profile=profile)
        want = reference(x, axis=-2, profile=profile) if function != "quantize_fp8_block" \
            else reference(x, profile=profile)
        assert type(got) is type(want), f"{backend.name} {function}: {type(got).__name__}"
        for name, value in vars(want).items():
            if isinstance(value, np.ndarray):
                assert_bytes_equal(getattr(got, name), value, f"{function} {name}")
            else:
                assert getattr(got, name) == value, f"{function} {name}"
        called.append(function)
    assert called


def test_unclaimed_mx_profiles_raise_not_implemented(backend: Backend, device: str) -> None:
    """Every registered MX profile and element the backend does not claim raises
    NotImplementedError naming the profile."""
    module = backend.load()
    tables = {"quantize_mx": PRODUCERS, "dequantize_mx": CONSUMERS}
    registered = {info.name for info in registered_profiles() if info.scheme == "mx"}
    unclaimed = [
        (function, fmt.name, name)
        for function, table in tables.items() if hasattr(module, function)
        for name, entry in table.items()
        for fmt in entry.elements if (fmt.name, name) not in _claimed(backend, function)
    ]
    assert {name for _, _, name in unclaimed} <= registered
    for function, fmt, name in unclaimed:
        with pytest.raises(NotImplementedError, match=name):
            _call_mx(getattr(module, function), function, fmt, name, device)


def _call_mx(fn: Callable[..., Any], function: str, fmt: str, profile: str, device: str) -> Any:
    """``fn`` on one valid row of two blocks (bfloat16 input for a quantizer)."""
    elem = get_format(fmt)
    if function == "quantize_mx":
        return fn(torch.ones(1, 64, dtype=torch.bfloat16, device=device), elem, profile=profile)
    width = 32 if elem.bits == 4 else 64
    return fn(torch.zeros(1, width, dtype=torch.uint8, device=device),
              torch.zeros(1, 2, dtype=torch.uint8, device=device), elem, profile=profile)


# -- MX quantize --------------------------------------------------------------------------------


@pytest.mark.kernel("quantize_mx")
def test_quantize_mx_harness(backend: Backend, fmt: str, profile: str, device: str,
                             examples: int) -> None:
    fn = _kernel(backend, "quantize_mx")
    check_quantizer(fn, profile=profile, elem=fmt, dtypes=DTYPES, max_examples=examples,
                    torch_device=device).raise_if_failed()


def _random_values(seed: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Raw bit patterns (NaN, Inf, subnormals, every magnitude) mixed with multiples of 1/4
    (element ties) at random powers of two, so that blocks mix magnitudes."""
    rng = np.random.default_rng(seed)
    np_dtype = float_dtype(dtype)
    width = np_dtype.itemsize
    raw = rng.integers(0, 1 << (8 * width), size=shape, dtype=np.uint64) \
        .astype(f"u{width}").view(np_dtype)
    quarters = rng.integers(-24, 25, size=shape) * 0.25 * np.exp2(rng.integers(-30, 30, size=shape))
    with np.errstate(over="ignore"):  # float16 overflows to Inf: one more special value
        nice = quarters.astype(np.float32).astype(np_dtype)
    return np.where(rng.random(shape) < rng.random(), raw, nice)


@st.composite
def _layouts(draw: Any, dtypes: tuple[str, ...], block: int) -> tuple[np.ndarray, int, str, Any]:
    """A float array of 1-3 dims with ``axis`` (a multiple of ``block`` long, one row to large
    K), and how the kernel gets it: contiguous, transposed (a permuted view) or sliced
    (every other row of a larger tensor)."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    blocks = draw(st.one_of(st.integers(1, 4), st.sampled_from([64, 224])))  # 224: K = 7168
    shape = [draw(st.integers(1, 5)) for _ in range(ndim)]
    shape[axis] = blocks * block
    dtype = draw(st.sampled_from(dtypes))
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    values = _random_values(draw(st.integers(0, 2**32 - 1)), tuple(shape), dtype)
    return values, axis, layout, lambda device: _laid_out(values, layout, device)


def _laid_out(values: np.ndarray, layout: str, device: str) -> Any:
    if layout == "transposed":
        order = list(range(values.ndim))[::-1]
        return _torch(np.ascontiguousarray(values.transpose(order)), device).permute(order)
    if layout == "sliced":
        doubled = np.repeat(values, 2, axis=0)
        return _torch(doubled, device)[::2]
    return _torch(values, device)


def test_quantize_mx_shapes(backend: Backend, device: str, examples: int) -> None:
    """Any shape, axis and strides: equal bytes with the reference (each claimed profile)."""
    fn = _kernel(backend, "quantize_mx")
    claims = _claimed(backend, "quantize_mx")

    @settings(max_examples=examples, deadline=None, database=None)
    @given(st.sampled_from(claims).flatmap(lambda claim: st.tuples(
        st.just(claim),
        _layouts(tuple(d for d in DTYPES if float_dtype(d) in PRODUCERS[claim[1]].dtypes), 32))))
    def check(case: Any) -> None:
        (fmt, profile), (values, axis, layout, make) = case
        expected = mx_reference.quantize_mx(values, get_format(fmt), axis=axis, profile=profile)
        codes, scales = fn(make(device), get_format(fmt), axis=axis, profile=profile)
        what = f"{profile} {fmt} {values.dtype} {values.shape} axis={axis} {layout}"
        assert_bytes_equal(codes, expected.codes, f"codes, {what}")
        assert_bytes_equal(scales, expected.scales, f"scales, {what}")

    check()


@pytest.mark.kernel("quantize_mx")
@pytest.mark.parametrize("count", [2, 33, 48, 100])
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantize_mx_ragged_last_block(backend: Backend, fmt: str, profile: str, count: int,
                                       dtype: str, device: str) -> None:
    """A last dimension that is not a multiple of the block: the reference's exception class,
    or its bytes (producers that define a short last block)."""
    fn = _kernel(backend, "quantize_mx")
    # Random rows, and rows whose short last block is small while every other element is large:
    # a kernel that reads past a row's end (into the next row) picks up a larger block maximum.
    poisoned = np.full((3, count), 2.0**12)
    poisoned[:, count - count % 32 if count % 32 else count - 32:] = 1.0
    for values in (_random_values(count, (3, count), dtype),
                   poisoned.astype(float_dtype(dtype))):
        expected = _outcome(lambda v=values: tuple(mx_reference.quantize_mx(
            v, get_format(fmt), profile=profile)))
        got = _outcome(lambda v=values: tuple(fn(_torch(v, device), get_format(fmt),
                                                 profile=profile)))
        if isinstance(expected, type):
            assert got is expected, f"the reference raises {expected}, the kernel {got}"
        else:
            assert not isinstance(got, type), f"the kernel raises {got}"
            for g, e, what in zip(got, expected, ("codes", "scales"), strict=True):
                assert_bytes_equal(g, e, what)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantize_mx_finite_sweep(backend: Backend, dtype: str, device: str) -> None:
    """Every finite 16-bit pattern, in blocks of finite values only (so the Triton E2M1
    kernel takes its fast path, one product and one addition, on every tile it can), in
    magnitude order (each block near its maximum: every binade, every tie) and shuffled
    (small elements under large maxima: the subnormal quanta), 16K elements per call, for
    every E2M1 claim that takes ``dtype``: equal bytes with the reference. The shuffled values
    are swept once more without the top binade: there compressed-tensors' bfloat16 factor is
    zero (a general-path block in every shuffled tile), so without it its sign-function zeros
    never reach the fast path."""
    fn = _kernel(backend, "quantize_mx")
    np_dtype = float_dtype(dtype)
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np_dtype)
    finite = patterns[np.isfinite(patterns.astype(np.float32))]
    finite = finite[np.argsort(np.abs(finite.astype(np.float32)), kind="stable")]
    shuffled = finite[np.random.default_rng(16).permutation(finite.size)]
    below_top = shuffled[np.abs(shuffled.astype(np.float32)) < abs(float(finite[-1])) / 2]
    chunk = 1 << 14
    claims = [profile for fmt, profile in _claimed(backend, "quantize_mx")
              if fmt == "e2m1" and np_dtype in PRODUCERS[profile].dtypes]
    assert claims
    for profile in claims:
        for order, values in (("sorted", finite), ("shuffled", shuffled),
                              ("shuffled below the top binade", below_top)):
            values = values[:values.size // 32 * 32]
            for start in range(0, values.size, chunk):
                part = values[start:start + chunk]
                part = part.reshape(-1, 256 if part.size % 256 == 0 else 32)
                expected = mx_reference.quantize_mx(part, E2M1, profile=profile)
                codes, scales = fn(_torch(part, device), E2M1, profile=profile)
                what = f"{profile} {dtype} {order} from {start}"
                assert_bytes_equal(codes, expected.codes, f"codes, {what}")
                assert_bytes_equal(scales, expected.scales, f"scales, {what}")


def test_quantize_mx_float32_around_every_tie(backend: Backend, device: str) -> None:
    """float32 E2M1 elements at every tie and value of E2M1 and one and two float32 ulps to
    either side, under a block maximum of 6 at scales from 2**-40 to 2**40 (the fast path),
    random signs, for every E2M1 claim that takes float32: equal bytes with the reference.
    A float32 element can sit one ulp from a tie, which 16-bit input cannot."""
    fn = _kernel(backend, "quantize_mx")
    points = np.array([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0,
                       6.0], np.float32)
    near = [points]
    for direction in (np.float32(0), np.float32(np.inf)):
        step = points
        for _ in range(2):
            step = np.nextafter(step, direction)
            near.append(step)
    values = np.concatenate(near)
    rng = np.random.default_rng(29)
    blocks = np.zeros((values.size, 32), np.float32)
    blocks[:, 0] = 6.0
    blocks[:, 1:] = rng.choice(values, size=(values.size, 31))
    blocks[np.arange(values.size), rng.integers(1, 32, values.size)] = values
    blocks *= np.where(rng.random(blocks.shape) < 0.5, -1, 1).astype(np.float32)
    claims = [profile for fmt, profile in _claimed(backend, "quantize_mx")
              if fmt == "e2m1" and np.dtype(np.float32) in PRODUCERS[profile].dtypes]
    assert claims
    for exponent in (-40, -3, 0, 7, 40):
        x = blocks * np.float32(2.0**exponent)
        for profile in claims:
            expected = mx_reference.quantize_mx(x, E2M1, profile=profile)
            codes, scales = fn(_torch(x, device), E2M1, profile=profile)
            assert_bytes_equal(codes, expected.codes, f"codes, {profile} 2**{exponent}")
            assert_bytes_equal(scales, expected.scales, f"scales, {profile} 2**{exponent}")


QUANTIZE_REFUSALS = {
    "integer data": (np.ones((2, 32), np.int32), {}),
    "0-d": (np.float32(1.0), {}),
    "axis out of range": (np.ones((2, 32), np.float32), {"axis": 2}),
    "dtype the profile refuses": (np.ones((2, 32), np.float32), {"profile": "vllm"}),
    "odd E2M1 length": (np.ones((2, 31), np.float32), {"profile": "triton-round-up"}),
    "ragged, no short block defined": (np.ones((2, 48), np.float32), {}),
    "unknown profile": (np.ones((2, 32), np.float32), {"profile": "no-such-profile"}),
    "element the profile does not write": (np.ones((2, 32), np.float32),
                                           {"profile": "quark", "elem": "e4m3fn"}),
    "block size the profile refuses": (np.ones((2, 32), np.float32),
                                       {"profile": "vllm", "block_size": 16}),
    "block size 0": (np.ones((2, 32), np.float32), {"block_size": 0}),
}


@pytest.mark.parametrize("case", QUANTIZE_REFUSALS)
def test_quantize_mx_refuses_as_the_reference(backend: Backend, case: str, device: str) -> None:
    values, kwargs = QUANTIZE_REFUSALS[case]
    kwargs = {k: get_format(v) if k == "elem" else v for k, v in kwargs.items()}
    expected = _outcome(lambda: mx_reference.quantize_mx(values, **kwargs))
    assert isinstance(expected, type), "the reference takes this input"
    got = _outcome(lambda: _kernel(backend, "quantize_mx")(_torch(np.asarray(values), device),
                                                           **kwargs))
    assert got is expected


def _table_cases() -> list[Any]:
    return [pytest.param(name, fmt, dtype, id=f"{name}-{fmt.name}-{dtype}")
            for name, producer in PRODUCERS.items() for fmt in KERNEL_ELEMENTS
            if mx_plan.quantize_claims(producer, fmt, microxcaling=True)
            for dtype in DTYPES if float_dtype(dtype) in producer.dtypes]


@pytest.mark.parametrize(("profile", "elem", "dtype"), _table_cases())
def test_scale_table_equals_the_scale_rule(profile: str, elem: Any, dtype: str) -> None:
    """The front end's per-binade scale table gives the rule's own entry for every block
    maximum of a 16-bit type, and for float32 maxima at and around every threshold, at both
    ends of every binade and at random."""
    plan = mx_plan.quantize_plan(profile, elem, dtype, 32)
    np_dtype = float_dtype(dtype)
    if np_dtype.itemsize == 2:
        own = np.arange(0x7C01 if dtype == "float16" else 0x7F81, dtype=np.uint16).view(np_dtype)
        bits = own.astype(np.float32).view(np.uint32).astype(np.int64)
    else:
        binades = np.arange(255, dtype=np.int64) << 23
        thresholds = binades + np.minimum(plan.scale_table[0, :255], 0x7FFFFF)
        around = (thresholds[:, None] + np.arange(-3, 4)).ravel()
        ends = np.concatenate([binades, binades + 0x7FFFFF])
        rng = np.random.default_rng(7)
        bits = np.concatenate([around, ends, rng.integers(0, 0x7F800001, 200_000)])
        bits = np.clip(bits, 0, 0x7F800000)
    table = plan.scale_table.astype(np.int64)
    field, mantissa = bits >> 23, bits & 0x7FFFFF
    looked_up = np.where(mantissa >= table[0, field], table[2, field], table[1, field])
    amax = bits.astype(np.uint32).view(np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        expected = mx_plan._pack_scales(PRODUCERS[profile].scale_rule(amax, elem, np_dtype))
    wrong = np.flatnonzero(looked_up != expected)
    assert wrong.size == 0, f"{wrong.size} maxima differ, first {amax[wrong[0]]!r}"


@pytest.mark.parametrize(("profile", "elem", "dtype"),
                         [case for case in _table_cases() if case.values[1] == E2M1])
def test_fast_k_limit_covers_every_row_it_can(profile: str, elem: Any, dtype: str) -> None:
    """The E2M1 fast path's range (:func:`~mxformats.kernels.mx_plan.fast_k_limit`): every
    factor from ``FAST_K_MIN``, for every claim and input type (ties to even and away)."""
    plan = mx_plan.quantize_plan(profile, elem, dtype, 32)
    assert plan.fast_k_limit == 256 - mx_plan.SCALE_K_OFFSET


@pytest.mark.parametrize(("k", "delta"), [(-3, 1), (5, -1), (mx_plan.FAST_K_MIN, 1)])
def test_fast_k_limit_stops_at_the_first_row_that_disagrees(k: int, delta: int) -> None:
    """A threshold one pattern off in the row of ``2**k`` (as a disagreement between the
    fast path's arithmetic and the reference would be), above or below: the limit is ``k``."""
    plan = mx_plan.quantize_plan("ocp", E2M1, "bfloat16", 32)
    table = plan.element_table.copy()
    table[k + mx_plan.SCALE_K_OFFSET, 3] += delta
    assert mx_plan.fast_k_limit(plan.source, plan.round_away, table) == k


@pytest.mark.parametrize("k", [0, 7])
def test_fast_k_limit_checks_an_unreached_level_at_the_largest_value(k: int) -> None:
    """A row that says no finite ``|x|`` reaches code 7 (its threshold at Inf's bits) where
    the arithmetic reaches it (at ``2**k`` the largest bfloat16 saturates): the largest finite
    ``|x|`` is checked below that threshold, and the limit is ``k``."""
    plan = mx_plan.quantize_plan("ocp", E2M1, "bfloat16", 32)
    table = plan.element_table.copy()
    table[k + mx_plan.SCALE_K_OFFSET, 6] = plan.source.inf_code
    assert mx_plan.fast_k_limit(plan.source, plan.round_away, table) == k


# -- MX dequantize ------------------------------------------------------------------------------


@pytest.mark.kernel("dequantize_mx")
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_mx_harness(backend: Backend, fmt: str, profile: str, dtype: str,
                               device: str, examples: int) -> None:
    fn = _kernel(backend, "dequantize_mx")
    check_dequantizer(fn, profile=profile, elem=fmt, dtype=dtype, max_examples=examples,
                      torch_device=device).raise_if_failed()


@st.composite
def _mx_blocks(draw: Any, fmt: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Random codes (packed as quantize_mx packs them) and scale bytes of 1-3 dims, blocks of
    32 along a random axis (the last one maybe short), one block to large K."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    shape = [draw(st.integers(1, 5)) for _ in range(ndim)]
    blocks = draw(st.one_of(st.integers(1, 4), st.sampled_from([64, 224])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    per_block = 16 if get_format(fmt).bits == 4 else 32  # code bytes
    shape[axis] = blocks * per_block - draw(st.integers(0, per_block - 1))
    codes = rng.integers(0, 256, size=shape).astype(np.uint8)
    shape[axis] = blocks
    special = np.array([0x00, 0x01, 0x7F, 0x8F, 0xFE, 0xFF], np.uint8)
    scales = np.where(rng.random(shape) < 0.2, rng.choice(special, size=shape),
                      rng.integers(0, 256, size=shape)).astype(np.uint8)
    return codes, scales, axis


def test_dequantize_mx_shapes(backend: Backend, device: str, examples: int) -> None:
    """Any shape, axis and strides: equal bits with the reference (each claimed profile)."""
    fn = _kernel(backend, "dequantize_mx")

    @settings(max_examples=examples, deadline=None, database=None)
    @given(st.sampled_from(_claimed(backend, "dequantize_mx")).flatmap(
        lambda claim: st.tuples(st.just(claim), _mx_blocks(claim[0]), st.sampled_from(DTYPES),
                                st.sampled_from(["contiguous", "transposed", "sliced"]))))
    def check(case: Any) -> None:
        (fmt, profile), (codes, scales, axis), dtype, layout = case
        elem = get_format(fmt)
        expected = _outcome(lambda: mx_reference.dequantize_mx(
            codes, scales, elem, axis=axis, profile=profile, dtype=float_dtype(dtype)))
        got = _outcome(lambda: fn(_laid_out(codes, layout, device),
                                  _laid_out(scales, layout, device), elem, axis=axis,
                                  profile=profile, dtype=getattr(torch, dtype)))
        what = f"{profile} {fmt} -> {dtype} {codes.shape} axis={axis} {layout}"
        if isinstance(expected, type):  # an output type the consumer cannot produce
            assert got is expected, f"{what}: the reference raises {expected}, got {got}"
        else:
            assert_bytes_equal(got, expected, what)

    check()


DEQUANTIZE_REFUSALS = {
    "no scales": ((np.zeros((2, 16), np.uint8), None), {}),
    "float codes": ((np.zeros((2, 16), np.float32), np.zeros((2, 1), np.uint8)), {}),
    "scales of the wrong shape": ((np.zeros((2, 16), np.uint8), np.zeros((2, 2), np.uint8)), {}),
    "axis out of range": ((np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8)),
                          {"axis": 2}),
    "unknown profile": ((np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8)),
                        {"profile": "no-such-profile"}),
    "output type the consumer cannot produce": (
        (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8)),
        {"profile": "quark-hip-fp16", "dtype": "bfloat16"}),
    "element the consumer does not read": (
        (np.zeros((2, 32), np.uint8), np.zeros((2, 1), np.uint8)),
        {"profile": "compressed-tensors", "elem": "e4m3fn"}),
}


@pytest.mark.parametrize("case", DEQUANTIZE_REFUSALS)
def test_dequantize_mx_refuses_as_the_reference(backend: Backend, case: str,
                                                device: str) -> None:
    (codes, scales), kwargs = DEQUANTIZE_REFUSALS[case]
    ref_kwargs = {k: get_format(v) if k == "elem" else float_dtype(v) if k == "dtype" else v
                  for k, v in kwargs.items()}
    kernel_kwargs = {k: get_format(v) if k == "elem" else getattr(torch, v) if k == "dtype"
                     else v for k, v in kwargs.items()}
    expected = _outcome(lambda: mx_reference.dequantize_mx(codes, scales, **ref_kwargs))
    assert isinstance(expected, type), "the reference takes this input"
    fn = _kernel(backend, "dequantize_mx")
    got = _outcome(lambda: fn(_torch(codes, device),
                              None if scales is None else _torch(scales, device),
                              **kernel_kwargs))
    assert got is expected


# -- INT4 (compressed-tensors group-32), Quark W4A8, FP8 per-tensor casts ------------------------


def assert_bytes_equal_nan_any(got: Any, expected: np.ndarray, what: str) -> None:
    """Byte equality except that a NaN output may be any NaN where the reference has a NaN (a
    consumer's NaN sign and payload are implementation-defined, spec/mx.md §6)."""
    g = _numpy(got)
    wide_got, wide_expected = g.astype(np.float64), expected.astype(np.float64)
    assert np.array_equal(np.isnan(wide_got), np.isnan(wide_expected)), f"{what}: NaN positions"
    finite = ~np.isnan(wide_expected)
    assert_bytes_equal(g[finite], expected[finite], what)


def _viewed(x: Any, draw: Any) -> Any:
    """``x`` (a torch tensor) seen through a drawn view: as is, transposed storage (the same
    values with permuted strides) or a strided slice (every other entry along a drawn dim)."""
    layout = draw(st.sampled_from(("contiguous", "transposed", "sliced")))
    if layout == "transposed" and x.ndim > 1:
        return x.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":
        dim = draw(st.integers(0, x.ndim - 1))
        spread = torch.repeat_interleave(x, 2, dim=dim)
        return spread[(slice(None),) * dim + (slice(None, None, 2),)]
    return x


#: Leading dimensions of a Hypothesis shape: none (one row), one or two (3-D).
_LEADING = st.lists(st.integers(1, 5), min_size=0, max_size=2)


@pytest.mark.kernel("quantize_int4")
def test_quantize_int4_harness(backend: Backend, fmt: str, profile: str, device: str,
                               examples: int) -> None:
    """The harness on every dtype. Its float32 and float16 sweeps hold many NaN/Inf groups,
    which a refusing quantizer makes it bisect call by call: on the interpreter (a few ms per
    call) only the bfloat16 sweep runs, the other dtypes get the boundary and Hypothesis
    sources."""
    fn = _kernel(backend, "quantize_int4")
    swept = DTYPES if device != "cpu" else ("bfloat16",)
    check_int4_quantizer(fn, profile=profile, dtypes=swept, max_examples=examples,
                         torch_device=device).raise_if_failed()
    rest = tuple(d for d in DTYPES if d not in swept)
    if rest:
        check_int4_quantizer(fn, profile=profile, dtypes=rest, sources=("boundary", "hypothesis"),
                             max_examples=examples, torch_device=device).raise_if_failed()


@pytest.mark.kernel("quantize_int4")
def test_quantize_int4_shapes(backend: Backend, fmt: str, profile: str, device: str,
                              examples: int) -> None:
    """One row, large K, 3-D, per-channel, any axis, transposed and sliced views."""
    fn = _kernel(backend, "quantize_int4")

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(st.data())
    def check(data: Any) -> None:
        dtype = data.draw(st.sampled_from(DTYPES))
        group = data.draw(st.sampled_from((32, None)))
        lead = data.draw(_LEADING)
        n = 32 * data.draw(st.one_of(st.integers(1, 4), st.just(256)))
        shape = [*lead, n]
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        shape.insert(axis % len(shape), shape.pop())  # the quantized length sits at axis
        seed = data.draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        values = rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 11)  # float16 range
        x = _viewed(_torch(values.astype(float_dtype(dtype)), device), data.draw)
        expected_q, expected_s = mxformats.quantize_int4(
            _numpy(x), group_size=group, axis=axis, profile=profile)
        q, s = fn(x, group_size=group, axis=axis, profile=profile)
        assert_bytes_equal(q, expected_q, f"q {dtype} {tuple(x.shape)} axis {axis}")
        assert_bytes_equal(s, expected_s, f"scales {dtype} {tuple(x.shape)} axis {axis}")

    check()


@pytest.mark.kernel("quantize_int4")
def test_quantize_int4_refuses_what_the_reference_refuses(
        backend: Backend, fmt: str, profile: str, device: str) -> None:
    fn = _kernel(backend, "quantize_int4")
    x = _torch(np.ones((2, 64), np.float32), device)
    with pytest.raises(ValueError, match="multiple of group_size"):
        fn(x[:, :40], profile=profile)
    with pytest.raises(ValueError, match="unknown int4 producer profile 'gptq'"):
        fn(x, profile="gptq")
    with pytest.raises(NotImplementedError, match="float64"):
        fn(x.double(), profile=profile)


@pytest.mark.kernel("pack_int4")
def test_pack_unpack_int4(backend: Backend, fmt: str, profile: str, device: str,
                          examples: int) -> None:
    layout = profile
    pack = _kernel(backend, "pack_int4")
    unpack = _kernel(backend, "unpack_int4")

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(st.data())
    def check(data: Any) -> None:
        shape = [*data.draw(_LEADING), data.draw(st.one_of(st.integers(1, 40), st.just(4099)))]
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        shape.insert(axis % len(shape), shape.pop())
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        q = _viewed(_torch(rng.integers(-8, 8, shape, dtype=np.int8), device), data.draw)
        expected = mxformats.pack_int4(_numpy(q), layout=layout, axis=axis)
        packed = pack(q, layout=layout, axis=axis)
        assert_bytes_equal(packed, expected, f"pack {tuple(q.shape)} axis {axis}")
        words = _viewed(_torch(expected, device), data.draw)
        size = q.shape[axis]
        assert_bytes_equal(unpack(words, layout=layout, axis=axis, size=size),
                           mxformats.unpack_int4(expected, layout=layout, axis=axis, size=size),
                           f"unpack {tuple(words.shape)} axis {axis}")

    check()
    every_word = np.arange(-(2**31), 2**31, 2**16 - 3, dtype=np.int64)[:2**16].astype(np.int32)
    assert_bytes_equal(unpack(_torch(every_word.reshape(-1, 8), device), layout=layout),
                       mxformats.unpack_int4(every_word.reshape(-1, 8), layout=layout),
                       "unpack, words spread over the int32 range")
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack(_torch(np.array([[3, 8]], np.int8), device), layout=layout)


def _every_scale(scale_dtype: str) -> np.ndarray:
    """Every bit pattern of a 16-bit float as a ``(65536, 1)`` column of scales."""
    return np.arange(2**16, dtype=np.uint16).view(float_dtype(scale_dtype)).reshape(-1, 1)


@pytest.mark.kernel("dequantize_int4")
@pytest.mark.parametrize("scale_dtype", ["bfloat16", "float16"])
def test_dequantize_int4_exhaustive(backend: Backend, fmt: str, profile: str, scale_dtype: str,
                                    device: str) -> None:
    """All 16 q values × every bfloat16 / float16 scale pattern, into each output dtype."""
    fn = _kernel(backend, "dequantize_int4")
    scales = _every_scale(scale_dtype)
    q = np.tile(np.arange(-8, 8, dtype=np.int8), (scales.shape[0], 2))
    for out_dtype in ("float32", "bfloat16", "float16"):
        with np.errstate(invalid="ignore", over="ignore"):  # the reference's Inf × 0
            expected = mxformats.dequantize_int4(q, scales, profile=profile,
                                                 dtype=float_dtype(out_dtype))
        got = fn(_torch(q, device), _torch(scales, device), profile=profile,
                 dtype=getattr(torch, out_dtype))
        assert_bytes_equal_nan_any(got, expected, f"{scale_dtype} scales -> {out_dtype}")


@pytest.mark.kernel("dequantize_int4")
def test_dequantize_int4_shapes(backend: Backend, fmt: str, profile: str, device: str,
                                examples: int) -> None:
    fn = _kernel(backend, "dequantize_int4")

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(st.data())
    def check(data: Any) -> None:
        scale_dtype = data.draw(st.sampled_from(DTYPES))
        out_dtype = data.draw(st.sampled_from(("float32", "bfloat16", "float16", "float64")))
        # 4: groups narrower than the 8 elements a HIP lane decodes, so a lane crosses them
        group = data.draw(st.sampled_from((32, None, 4)))
        shape = [*data.draw(_LEADING), 32 * data.draw(st.one_of(st.integers(1, 4),
                                                                 st.just(256)))]
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        shape.insert(axis % len(shape), shape.pop())
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        scale_shape = list(shape)
        scale_shape[axis] = 1 if group is None else shape[axis] // group
        q = _viewed(_torch(rng.integers(-8, 8, shape, dtype=np.int8), device), data.draw)
        low = -24 if scale_dtype == "float16" else -130  # into the subnormals
        raw = rng.standard_normal(scale_shape) * 2.0 ** rng.integers(low, 12, scale_shape)
        s = _viewed(_torch(raw.astype(float_dtype(scale_dtype)), device), data.draw)
        expected = mxformats.dequantize_int4(_numpy(q), _numpy(s), group_size=group, axis=axis,
                                             profile=profile, dtype=np.dtype(out_dtype)
                                             if out_dtype == "float64" else float_dtype(out_dtype))
        got = fn(q, s, group_size=group, axis=axis, profile=profile,
                 dtype=getattr(torch, out_dtype))
        assert_bytes_equal(got, expected, f"{scale_dtype} -> {out_dtype} {shape} axis {axis}")

    check()


def _every_finite(dtype: str, below: float) -> np.ndarray:
    """Every finite bit pattern of a 16-bit float with magnitude below ``below``."""
    values = np.arange(2**16, dtype=np.uint16).view(float_dtype(dtype))
    wide = values.astype(np.float32)
    return values[np.isfinite(wide) & (np.abs(wide) < below)]


@pytest.mark.kernel("quantize_fp8")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantize_fp8_exhaustive(backend: Backend, fmt: str, profile: str, dtype: str,
                                 device: str) -> None:
    """Every finite bfloat16 / float16 pattern, as one tensor and again below 1 and below
    2^-10 (three per-tensor scales); every pattern with NaN and ±Inf as well, which the
    ``static`` profile refuses and the vLLM profiles define."""
    fn = _kernel(backend, "quantize_fp8")
    element = get_format(fmt)
    for below in (float("inf"), 1.0, 2.0**-10):
        x = _every_finite(dtype, below)
        codes, scale = fn(_torch(x, device), element, profile=profile)
        expected_codes, expected_scale = mxformats.quantize_fp8(x, element, profile=profile)
        assert_bytes_equal(scale, expected_scale, f"scale, {dtype} below {below}")
        assert_bytes_equal(codes, expected_codes, f"codes, {dtype} below {below}")
    every = np.arange(2**16, dtype=np.uint16).view(float_dtype(dtype))
    outcome = _outcome(lambda: fn(_torch(every, device), element, profile=profile))
    with np.errstate(invalid="ignore", over="ignore"):
        expected = _outcome(lambda: mxformats.quantize_fp8(every, element, profile=profile))
    if isinstance(expected, type):
        assert outcome is expected, f"{dtype} with NaN/Inf: {outcome}, reference {expected}"
    else:
        assert_bytes_equal(outcome[1], expected[1], f"scale, {dtype} with NaN/Inf")
        assert_bytes_equal(outcome[0], expected[0], f"codes, {dtype} with NaN/Inf")


@pytest.mark.kernel("quantize_fp8")
def test_quantize_fp8_shapes(backend: Backend, fmt: str, profile: str, device: str,
                             examples: int) -> None:
    """One row, large K, 3-D, transposed and sliced views, all-zero tensors."""
    fn = _kernel(backend, "quantize_fp8")
    element = get_format(fmt)

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(st.data())
    def check(data: Any) -> None:
        dtype = data.draw(st.sampled_from(DTYPES))
        shape = [*data.draw(_LEADING), data.draw(st.one_of(st.integers(1, 100), st.just(7168)))]
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        scale = 0.0 if data.draw(st.booleans()) and len(shape) == 1 else 2.0 ** rng.integers(
            -24, 11)
        x = _viewed(_torch((rng.standard_normal(shape) * scale).astype(float_dtype(dtype)),
                           device), data.draw)
        codes, s = fn(x, element, profile=profile)
        expected_codes, expected_scale = mxformats.quantize_fp8(_numpy(x), element,
                                                                profile=profile)
        assert_bytes_equal(s, expected_scale, f"scale {dtype} {tuple(x.shape)}")
        assert_bytes_equal(codes, expected_codes, f"codes {dtype} {tuple(x.shape)}")

    check()
    with pytest.raises(ValueError, match="unknown fp8 profile 'mx'"):
        fn(_torch(np.ones(4, np.float32), device), element, profile="mx")


@pytest.mark.kernel("e4m3fn_to_fnuz")
def test_e4m3fn_to_fnuz_exhaustive(backend: Backend, fmt: str, profile: str,
                                   device: str) -> None:
    """All 256 E4M3FN codes (contiguous and as a strided view), scales with specials."""
    fn = _kernel(backend, "e4m3fn_to_fnuz")
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    scales = np.array([1.5, 2.0**-149, 3.4e38, 0.0, -0.0, np.inf, np.nan], np.float32)
    on_device = _torch(codes, device)
    for given_codes, reference_codes in ((on_device, codes), (on_device.T, codes.T)):
        got_codes, got_scales = fn(given_codes, _torch(scales, device))
        with np.errstate(over="ignore"):
            expected_codes, expected_scales = mxformats.e4m3fn_to_fnuz(reference_codes, scales)
        assert_bytes_equal(got_codes, expected_codes, "codes")
        assert_bytes_equal_nan_any(got_scales, expected_scales, "scales")
    with pytest.raises(TypeError, match="uint8"):
        fn(_torch(codes.astype(np.int16), device), _torch(scales, device))
    with pytest.raises(TypeError, match="float32"):
        fn(_torch(codes, device), _torch(scales.astype(np.float64), device))


@pytest.mark.kernel("dequantize_w4a8")
def test_dequantize_w4a8(backend: Backend, fmt: str, profile: str, device: str,
                         examples: int) -> None:
    """Weights from ``mxformats.quantize_w4a8`` (padded rows included), every output dtype."""
    fn = _kernel(backend, "dequantize_w4a8")

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(st.data())
    def check(data: Any) -> None:
        dtype = data.draw(st.sampled_from(DTYPES))
        out_dtype = data.draw(st.sampled_from((*DTYPES, "float64")))
        rows = data.draw(st.one_of(st.integers(1, 8), st.just(300)))
        cols = data.draw(st.one_of(st.integers(1, 70), st.just(2048)))
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        w = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-8, 8, (rows, 1))
        weight, s1, s2 = mxformats.quantize_w4a8(w.astype(float_dtype(dtype)))
        numpy_out = np.dtype(out_dtype) if out_dtype == "float64" else float_dtype(out_dtype)
        expected = mxformats.dequantize_w4a8(weight, s1, s2, dtype=numpy_out)
        got = fn(_viewed(_torch(weight, device), data.draw), _torch(s1, device),
                 _torch(s2, device), dtype=getattr(torch, out_dtype))
        assert_bytes_equal(got, expected, f"{dtype} [{rows}, {cols}] -> {out_dtype}")

    check()


# -- FP8 block scaling (DeepSeek-V3 weight_scale_inv, compressed-tensors FP8_BLOCK) -------------


def _fp8_block_vectors(op: str) -> list[dict[str, Any]]:
    path = Path(__file__).resolve().parents[2] / "spec" / "vectors" / "fp8-block" / f"{op}.json"
    cases: list[dict[str, Any]] = json.loads(path.read_text())["cases"]
    return cases


def _hex_array(values: list[str], dtype: Any, shape: list[int]) -> np.ndarray:
    return np.array([float.fromhex(v) for v in values]).astype(dtype).reshape(shape)


def _check_fp8_block(fn: Callable[..., Any], values: np.ndarray, block: tuple[int, int],
                     profile: str, device: str, what: str, given: Any = None) -> None:
    """``fn`` on ``values`` (or on ``given``, its torch layout) against the reference."""
    expected = fp8_block_reference.quantize_fp8_block(values, block=block, profile=profile)
    codes, scales = fn(_torch(values, device) if given is None else given, block=block,
                       profile=profile)
    assert_bytes_equal(codes, expected.codes, f"codes, {what}")
    assert_bytes_equal(scales, expected.scales, f"scales, {what}")


@pytest.mark.kernel("quantize_fp8_block")
def test_quantize_fp8_block_vectors(backend: Backend, fmt: str, profile: str,
                                    device: str) -> None:
    """The spec's vectors (spec/vectors/fp8-block/quantize.json) of the profile."""
    fn = _kernel(backend, "quantize_fp8_block")
    cases = [c for c in _fp8_block_vectors("quantize") if c["profile"] == profile]
    assert cases
    for case in cases:
        x = _hex_array(case["input"], float_dtype(case["dtype"]), case["shape"])
        codes, scales = fn(_torch(x, device), block=tuple(case["block"]), profile=profile)
        assert _numpy(codes).reshape(-1).tolist() == [int(c, 16) for c in case["codes"]], \
            case["id"]
        expected = _hex_array(case["scales"], float_dtype(case["scale_dtype"]),
                              list(_numpy(scales).shape))
        assert_bytes_equal(scales, expected, f"scales, {case['id']}")


@pytest.mark.kernel("quantize_fp8_block")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantize_fp8_block_exhaustive(backend: Backend, fmt: str, profile: str, dtype: str,
                                       device: str) -> None:
    """Every 16-bit pattern (NaN, ±Inf, ±0, subnormals) in magnitude order, 4 x 128 tiles
    (every fourth binade as a tile maximum; NaN and Inf tiles last), and every finite one
    shuffled into 48 x 112 tiles (small elements under large maxima; partial edge tiles in
    both directions, tiles narrower than their power-of-two width)."""
    fn = _kernel(backend, "quantize_fp8_block")
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(float_dtype(dtype))
    wide = patterns.astype(np.float32)
    order = np.argsort(np.abs(wide), kind="stable")
    finite = patterns[np.isfinite(wide)]
    shuffled = finite[np.random.default_rng(8).permutation(finite.size)]
    _check_fp8_block(fn, patterns[order].reshape(512, 128), (4, 128), profile, device,
                     f"{profile} {dtype} sorted")
    _check_fp8_block(fn, shuffled[:shuffled.size // 240 * 240].reshape(-1, 240), (48, 112),
                     profile, device, f"{profile} {dtype} shuffled")


@pytest.mark.kernel("quantize_fp8_block")
def test_quantize_fp8_block_checkpoint_shapes(backend: Backend, fmt: str, profile: str,
                                              device: str) -> None:
    """Kimi-K2's ragged shapes in 128 x 128 tiles: ``kv_a_proj_with_mqa`` (576 rows: a half
    tile row; 576 x 7168 on a GPU, 576 x 1024 on the interpreter) and a 96-column expert
    slice (every tile partial), bfloat16."""
    fn = _kernel(backend, "quantize_fp8_block")
    wide = 7168 if device != "cpu" else 1024
    for shape in ((576, wide), (384, 96)):
        values = _random_values(shape[1], shape, "bfloat16")
        _check_fp8_block(fn, values, (128, 128), profile, device, f"{profile} {shape}")


@st.composite
def _fp8_block_cases(draw: Any) -> tuple[Any, ...]:
    """A weight of 1-300 rows and 1-257 columns (96 included), a block shape, a dtype, and
    how the kernel gets it: contiguous, transposed or sliced."""
    shape = (draw(st.integers(1, 300)), draw(st.sampled_from([1, 5, 96, 128, 200, 257])))
    block = draw(st.sampled_from([(128, 128), (1, 128), (128, 1), (64, 96), (32, 16)]))
    dtype = draw(st.sampled_from(DTYPES))
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    return _random_values(draw(st.integers(0, 2**32 - 1)), shape, dtype), block, layout


@pytest.mark.kernel("quantize_fp8_block")
def test_fp8_block_shapes(backend: Backend, fmt: str, profile: str, device: str,
                          examples: int) -> None:
    """Any 2-D shape, block and strides: quantize, and dequantize the reference's result, with
    the reference's bytes."""
    quantize = _kernel(backend, "quantize_fp8_block")
    dequantize = _kernel(backend, "dequantize_fp8_block")

    @settings(max_examples=max(5, examples // 3), deadline=None, database=None)
    @given(_fp8_block_cases())
    def check(case: tuple[Any, ...]) -> None:
        values, block, layout = case
        what = f"{profile} {values.dtype} {values.shape} {block} {layout}"
        _check_fp8_block(quantize, values, block, profile, device, what,
                         _laid_out(values, layout, device))
        q = fp8_block_reference.quantize_fp8_block(values, block=block, profile=profile)
        for out in ("float32", "bfloat16"):
            expected = fp8_block_reference.dequantize_fp8_block(
                q.codes, q.scales, block=block, profile=profile, dtype=float_dtype(out))
            got = dequantize(_torch(q.codes, device), _torch(q.scales, device), block=block,
                             profile=profile, dtype=getattr(torch, out))
            assert_bytes_equal(got, expected, f"dequantize to {out}, {what}")

    check()


@pytest.mark.kernel("dequantize_fp8_block")
@pytest.mark.parametrize("scale_dtype", ["float32", "bfloat16"])
def test_dequantize_fp8_block_exhaustive(backend: Backend, fmt: str, profile: str,
                                         scale_dtype: str, device: str) -> None:
    """All 256 codes under scales of every exponent (four mantissas each, both signs, ±0,
    ±Inf, NaN), one scale per row, into float32, bfloat16 and float16, byte for byte: every NaN
    output (NaN code, NaN scale, ``Inf · 0``) the canonical quiet NaN (spec/fp8-block.md §6)."""
    fn = _kernel(backend, "dequantize_fp8_block")
    np_scale = float_dtype(scale_dtype)
    bits = np.dtype(f"u{np_scale.itemsize}")
    mbits = 23 if scale_dtype == "float32" else 7
    exponents = np.arange(1 << (8 * np_scale.itemsize - 1 - mbits), dtype=np.uint64)
    mantissas = np.array([0, 1, 1 << (mbits - 1), (1 << mbits) - 1], dtype=np.uint64)
    magnitudes = ((exponents[:, None] << np.uint64(mbits)) | mantissas[None, :]).reshape(-1)
    signed = np.concatenate([magnitudes, magnitudes | np.uint64(1 << (8 * np_scale.itemsize - 1))])
    scales = signed.astype(bits).view(np_scale).reshape(-1, 1)
    codes = np.tile(np.arange(256, dtype=np.uint8), (scales.shape[0], 1))
    for out in DTYPES:
        expected = fp8_block_reference.dequantize_fp8_block(
            codes, scales, block=(1, 256), profile=profile, dtype=float_dtype(out))
        got = fn(_torch(codes, device), _torch(scales, device), block=(1, 256), profile=profile,
                 dtype=getattr(torch, out))
        assert_bytes_equal(got, expected, f"{profile}, {scale_dtype} scales, to {out}")


FP8_BLOCK_REFUSALS = {
    "1-D": (np.ones(128, np.float32), {}),
    "3-D": (np.ones((2, 4, 8), np.float32), {}),
    "empty": (np.ones((0, 8), np.float32), {}),
    "float64": (np.ones((2, 8), np.float64), {}),
    "integer data": (np.ones((2, 8), np.int32), {}),
    "block of one int": (np.ones((2, 8), np.float32), {"block": 128}),
    "block with a zero": (np.ones((2, 8), np.float32), {"block": (0, 128)}),
    "unknown profile": (np.ones((2, 8), np.float32), {"profile": "no-such-profile"}),
}


@pytest.mark.kernel("quantize_fp8_block")
def test_quantize_fp8_block_refuses_as_the_reference(backend: Backend, fmt: str, profile: str,
                                                     device: str) -> None:
    """Each bad argument raises what the reference raises."""
    fn = _kernel(backend, "quantize_fp8_block")
    for case, (values, overrides) in FP8_BLOCK_REFUSALS.items():
        kwargs = {"profile": profile, **overrides}
        expected = _outcome(lambda v=values, k=kwargs:
                            fp8_block_reference.quantize_fp8_block(v, **k))
        assert isinstance(expected, type), f"{case}: the reference accepts it"
        got = _outcome(lambda v=values, k=kwargs: fn(_torch(v, device), **k))
        assert got is expected, f"{case}: the reference raises {expected.__name__}, the " \
            f"kernel {got}"


@pytest.mark.kernel("dequantize_fp8_block")
def test_dequantize_fp8_block_refuses_wrong_scale_shapes(backend: Backend, fmt: str,
                                                         profile: str, device: str) -> None:
    codes, scales = np.zeros((130, 8), np.uint8), np.ones((1, 1), np.float32)
    expected = _outcome(lambda: fp8_block_reference.dequantize_fp8_block(codes, scales,
                                                                         profile=profile))
    got = _outcome(lambda: _kernel(backend, "dequantize_fp8_block")(
        _torch(codes, device), _torch(scales, device), profile=profile))
    assert expected is ValueError and got is ValueError


# -- NVFP4 (ModelOpt weight_scale_2, compressed-tensors weight_global_scale) --------------------


def _nvfp4_vectors(profile: str) -> list[dict[str, Any]]:
    path = Path(__file__).resolve().parents[2] / "spec" / "vectors" / "nvfp4" / f"{profile}.json"
    cases: list[dict[str, Any]] = json.loads(path.read_text())["cases"]
    return cases


def _check_nvfp4(fn: Callable[..., Any], values: np.ndarray, profile: str, device: str,
                 what: str, *, axis: int = -1, global_amax: float | None = None,
                 given: Any = None) -> Any:
    """``fn`` on ``values`` (or on ``given``, its torch layout) against the reference: the same
    exception class, or the same bytes. Returns the reference's result (None if it raised)."""
    with np.errstate(over="ignore"):
        expected = _outcome(lambda: nvfp4_reference.quantize_nvfp4(
            values, axis=axis, profile=profile, global_amax=global_amax))
    got = _outcome(lambda: fn(_torch(values, device) if given is None else given, axis=axis,
                              profile=profile, global_amax=global_amax))
    if isinstance(expected, type):
        assert got is expected, f"{what}: the reference raises {expected.__name__}, got {got}"
        return None
    assert not isinstance(got, type), f"{what}: the kernel raises {got.__name__}"
    codes, scales, global_scale = got
    assert_bytes_equal(codes, expected.codes, f"codes, {what}")
    assert_bytes_equal(scales, expected.scales, f"scales, {what}")
    assert_bytes_equal(global_scale, expected.global_scale, f"global scale, {what}")
    return expected


@pytest.mark.kernel("quantize_nvfp4")
def test_quantize_nvfp4_vectors(backend: Backend, fmt: str, profile: str, device: str) -> None:
    """The spec's vectors (spec/vectors/nvfp4/<profile>.json): packed codes, scales, global."""
    fn = _kernel(backend, "quantize_nvfp4")
    cases = _nvfp4_vectors(profile)
    assert cases
    for case in cases:
        x = _hex_array(case["input"], float_dtype(case["dtype"]), case["shape"])
        amax = case["global_amax"] and float.fromhex(case["global_amax"])
        codes, scales, global_scale = fn(_torch(x, device), profile=profile, global_amax=amax)
        packed = mx_reference.pack_fp4(_numpy(codes))
        assert packed.reshape(-1).tolist() == [int(c, 16) for c in case["packed"]], case["vector"]
        assert _numpy(scales).reshape(-1).tolist() == [int(c, 16) for c in case["scales"]], \
            case["vector"]
        assert_bytes_equal(global_scale.reshape(-1)[:1],
                           np.array([float.fromhex(case["global_scale"])], np.float32),
                           f"global scale, {case['vector']}")


@pytest.mark.kernel("dequantize_nvfp4")
def test_dequantize_nvfp4_vectors(backend: Backend, fmt: str, profile: str, device: str) -> None:
    """The spec's consumer vectors, from the packed bytes and from the unpacked codes."""
    fn = _kernel(backend, "dequantize_nvfp4")
    cases = _nvfp4_vectors(profile)
    assert cases
    for case in cases:
        packed = np.array([int(c, 16) for c in case["packed"]], np.uint8)
        shape = case["shape"]
        packed = packed.reshape(shape[0], shape[1] // 2)
        scales = np.array([int(c, 16) for c in case["scales"]], np.uint8).reshape(shape[0], -1)
        global_scale = _torch(np.array([float.fromhex(case["global_scale"])], np.float32), device)
        expected = np.array([float.fromhex(v) if v != "nan" else np.nan
                             for v in case["expected"]], np.float32).reshape(shape)
        for codes, is_packed in ((packed, True), (mx_reference.unpack_fp4(packed), False)):
            got = fn(_torch(codes, device), _torch(scales, device), global_scale,
                     profile=profile, packed=is_packed)
            assert_bytes_equal(got, expected, f"{case['vector']} packed={is_packed}")


@pytest.mark.kernel("quantize_nvfp4")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantize_nvfp4_exhaustive(backend: Backend, fmt: str, profile: str, dtype: str,
                                   device: str) -> None:
    """Every finite 16-bit pattern (±0, subnormals, the largest): in magnitude order cut into
    eight tensors (eight global scales; each block near its maximum: every tie, every binade)
    and shuffled in one (small elements under large maxima, tiny and zero E4M3 scales), with
    the tensor's own maximum and with a caller's ``global_amax``. Every NaN and ±Inf pattern
    is refused as the reference refuses it: each kind alone in an otherwise finite tensor."""
    fn = _kernel(backend, "quantize_nvfp4")
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(float_dtype(dtype))
    wide = patterns.astype(np.float32)
    finite = patterns[np.isfinite(wide)]  # 256 x 254 (bfloat16), 256 x 248 (float16)
    ordered = finite[np.argsort(np.abs(finite.astype(np.float32)), kind="stable")]
    for part, chunk in enumerate(np.split(ordered, 8)):
        _check_nvfp4(fn, chunk.reshape(-1, 16), profile, device, f"{dtype} sorted part {part}")
    shuffled = finite[np.random.default_rng(4).permutation(finite.size)].reshape(-1, 256)
    _check_nvfp4(fn, shuffled, profile, device, f"{dtype} shuffled")
    _check_nvfp4(fn, shuffled, profile, device, f"{dtype} shuffled, global_amax",
                 global_amax=float(np.abs(wide[np.isfinite(wide)]).max()) * 4)
    not_finite = patterns[~np.isfinite(wide)]
    kinds = {"+Inf": not_finite[wide[~np.isfinite(wide)] > 0][:1],
             "-Inf": not_finite[wide[~np.isfinite(wide)] < 0][:1],
             "every NaN": not_finite[np.isnan(wide[~np.isfinite(wide)])]}
    for name, bad in kinds.items():
        x = np.concatenate([finite[:4096], bad])
        x = x[:x.size // 16 * 16].reshape(-1, 16)
        for amax in (None, 1.0):
            _check_nvfp4(fn, x, profile, device, f"{dtype} {name}, global_amax={amax}",
                         global_amax=amax)


@st.composite
def _nvfp4_cases(draw: Any) -> tuple[Any, ...]:
    """A finite float array of 1-3 dims (one row of K = 7168 to a few short rows; some hold
    one NaN or Inf), an axis whose length is a multiple of 16, a layout (contiguous,
    transposed, sliced) and a global_amax (None, or around the tensor's maximum)."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    shape = [draw(st.integers(1, 7)) for _ in range(ndim)]
    wide = draw(st.booleans())
    shape[axis] = 16 * (448 if wide else draw(st.integers(1, 5)))
    if wide:
        shape = [1 if i != axis % ndim else s for i, s in enumerate(shape)]
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**32 - 1))
    values = _random_values(seed, tuple(shape), dtype)
    values = np.where(np.isfinite(values.astype(np.float32)), values, values.dtype.type(0))
    if draw(st.integers(0, 9)) == 0:
        values.reshape(-1)[seed % values.size] = draw(st.sampled_from([np.nan, np.inf]))
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    amax = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.25, 1.0, 4.0])))
    top = float(np.abs(values.astype(np.float32)).max())
    global_amax = None if amax is None or not np.isfinite(top) else amax * top
    return values, axis, layout, global_amax


@pytest.mark.kernel("quantize_nvfp4")
def test_nvfp4_shapes(backend: Backend, fmt: str, profile: str, device: str,
                      examples: int) -> None:
    """Any shape, axis and strides, a caller's global_amax: quantize with the reference's
    bytes (or its exception), then dequantize the reference's result with each consumer of
    the profile's global form, packed or not, into a drawn dtype."""
    quantize = _kernel(backend, "quantize_nvfp4")
    dequantize = _kernel(backend, "dequantize_nvfp4")
    form = nvfp4_reference.PRODUCERS[profile].global_form
    consumers = [name for name, c in nvfp4_reference.CONSUMERS.items() if c.global_form == form]

    @settings(max_examples=max(8, examples // 2), deadline=None, database=None)
    @given(_nvfp4_cases(), st.sampled_from(consumers), st.booleans(),
           st.sampled_from((*DTYPES, "float64")))
    def check(case: tuple[Any, ...], consumer: str, packed: bool, out: str) -> None:
        values, axis, layout, global_amax = case
        what = f"{profile} {values.dtype} {values.shape} axis={axis} {layout} amax={global_amax}"
        q = _check_nvfp4(quantize, values, profile, device, what, axis=axis,
                         global_amax=global_amax, given=_laid_out(values, layout, device))
        if q is None:
            return
        codes = q.packed() if packed else q.codes
        out_dtype = np.dtype(out) if out == "float64" else float_dtype(out)
        with np.errstate(over="ignore"):  # float16 overflows to Inf
            expected = nvfp4_reference.dequantize_nvfp4(codes, q.scales, q.global_scale,
                                                        axis=axis, profile=consumer,
                                                        packed=packed, dtype=out_dtype)
        got = dequantize(_laid_out(codes, layout, device), _torch(q.scales, device),
                         _torch(q.global_scale, device), axis=axis, profile=consumer,
                         packed=packed, dtype=getattr(torch, out))
        assert_bytes_equal(got, expected, f"dequantize {consumer} to {out}, {what}")

    check()


@pytest.mark.kernel("quantize_nvfp4")
def test_quantize_nvfp4_checkpoint_shapes(backend: Backend, fmt: str, profile: str,
                                          device: str) -> None:
    """Kimi-K2's shapes, bfloat16: ``kv_a_proj_with_mqa`` (576 rows; 576 x 7168 on a GPU,
    576 x 256 on the interpreter) and a 96-column expert slice quantized along its rows
    (``axis=0``) and along its 96 columns."""
    fn = _kernel(backend, "quantize_nvfp4")
    wide = 7168 if device != "cpu" else 256
    values = _random_values(576, (576, wide), "bfloat16")
    values = np.where(np.isfinite(values.astype(np.float32)), values, values.dtype.type(0))
    _check_nvfp4(fn, values, profile, device, f"{profile} (576, {wide})")
    expert = values[:384, :96]
    for axis in (0, 1):
        _check_nvfp4(fn, expert, profile, device, f"{profile} (384, 96) axis={axis}", axis=axis)


@pytest.mark.kernel("quantize_nvfp4")
def test_quantize_nvfp4_edge_program_reads_only_its_tensor(backend: Backend, fmt: str,
                                                           profile: str, device: str) -> None:
    """Nine blocks (3 rows of 48), fewer than a program takes: the rows of the storage after
    the tensor hold NaN, which a program reading past the tensor's last block would find (and
    refuse the finite tensor)."""
    fn = _kernel(backend, "quantize_nvfp4")
    storage = np.full((3 + 64, 48), np.nan, np.float32)
    storage[:3] = _random_values(3, (3, 48), "float32")
    values = np.where(np.isfinite(storage[:3]), storage[:3], np.float32(1.0))
    storage[:3] = values
    _check_nvfp4(fn, values, profile, device, f"{profile} (3, 48) in a NaN storage",
                 given=_torch(storage, device)[:3])


def test_nvfp4_global_amax_is_the_same_whatever_the_grid(device: str, monkeypatch: Any) -> None:
    """The Triton two-pass maximum, the block scales and the codes do not depend on the
    launch grid: elements per program of pass 1, partials per program of pass 2 (several
    rounds of it), blocks per program of the quantizer. NaN anywhere is still refused."""
    requires("triton")
    from mxformats.kernels.triton import nvfp4 as triton_nvfp4

    values = _random_values(7, (16, 128), "bfloat16")
    values = np.where(np.isfinite(values.astype(np.float32)), values, values.dtype.type(0))
    values[15, 127] = 2.0**100  # the maximum in the last element of the last program
    poisoned = values.copy()
    poisoned[15, 0] = np.nan
    for amax_elements, reduce_block, blocks in ((1 << 15, 4096, 2048), (64, 4, 8)):
        where = "interpreter" if device == "cpu" else "gpu"
        monkeypatch.setitem(triton_nvfp4.AMAX_ELEMENTS, where, amax_elements)
        monkeypatch.setitem(triton_nvfp4.BLOCKS, where, blocks)
        monkeypatch.setattr(triton_nvfp4, "REDUCE_BLOCK", reduce_block)
        for profile in nvfp4_reference.PRODUCERS:
            what = f"{profile}, grid ({amax_elements}, {reduce_block}, {blocks})"
            _check_nvfp4(triton_nvfp4.quantize_nvfp4, values, profile, device, what)
            _check_nvfp4(triton_nvfp4.quantize_nvfp4, poisoned, profile, device, what + " NaN")


@pytest.mark.kernel("dequantize_nvfp4")
def test_dequantize_nvfp4_exhaustive(backend: Backend, fmt: str, profile: str,
                                     device: str) -> None:
    """All 16 codes under all 256 scale bytes (NaN 0x7F/0xFF, subnormals, ±0), under global
    scales 0, -0, the smallest subnormal, 1/2688, 1, 2688, the largest float32, ±Inf, NaN and a
    negative NaN with a payload: unpacked into float32 and float16, packed into bfloat16; and
    into float64 under 1/2688. Every NaN output is the canonical quiet NaN, by its bits."""
    fn = _kernel(backend, "dequantize_nvfp4")
    codes = np.tile(np.arange(16, dtype=np.uint8), (256, 1))
    scales = np.arange(256, dtype=np.uint8).reshape(256, 1)
    packed = mx_reference.pack_fp4(codes)
    for global_value in (0.0, -0.0, 2.0**-149, 1 / 2688, 1.0, 2688.0, 3.4028235e38, np.inf,
                         -np.inf, np.nan, np.uint32(0xFFC12345).view(np.float32)):
        stored = np.array([global_value], np.float32)
        outs = [("float32", False), ("float16", False), ("bfloat16", True)]
        for out, is_packed in outs + [("float64", False)] * bool(global_value == 1 / 2688):
            out_dtype = np.dtype(out) if out == "float64" else float_dtype(out)
            with np.errstate(all="ignore"):
                expected = nvfp4_reference.dequantize_nvfp4(codes, scales, stored,
                                                            profile=profile, dtype=out_dtype)
            got = fn(_torch(packed if is_packed else codes, device), _torch(scales, device),
                     _torch(stored, device), profile=profile, packed=is_packed,
                     dtype=getattr(torch, out))
            assert_bytes_equal(got, expected, f"global {global_value} to {out} "
                                       f"packed={is_packed}")


NVFP4_REFUSALS: dict[str, tuple[np.ndarray, dict[str, Any]]] = {
    "integer data": (np.ones((2, 16), np.int32), {}),
    "float64": (np.ones((2, 16), np.float64), {}),
    "axis out of range": (np.ones((2, 16), np.float32), {"axis": 2}),
    "ragged": (np.ones((2, 24), np.float32), {}),
    "empty rows": (np.ones((0, 16), np.float32), {}),
    "unknown profile": (np.ones((2, 16), np.float32), {"profile": "no-such-profile"}),
    "negative global_amax": (np.ones((2, 16), np.float32), {"global_amax": -1.0}),
    "NaN": (np.full((2, 16), np.nan, np.float32), {}),
    "Inf with a global_amax": (np.full((2, 16), np.inf, np.float32), {"global_amax": 1.0}),
}


@pytest.mark.kernel("quantize_nvfp4")
def test_quantize_nvfp4_refuses_as_the_reference(backend: Backend, fmt: str, profile: str,
                                                 device: str) -> None:
    """Each bad argument raises what the reference raises."""
    fn = _kernel(backend, "quantize_nvfp4")
    for case, (values, overrides) in NVFP4_REFUSALS.items():
        kwargs = {"profile": profile, **overrides}
        expected = _outcome(lambda v=values, k=kwargs: nvfp4_reference.quantize_nvfp4(v, **k))
        assert isinstance(expected, type), f"{case}: the reference accepts it"
        got = _outcome(lambda v=values, k=kwargs: fn(_torch(v, device), **k))
        assert got is expected, f"{case}: the reference raises {expected.__name__}, got {got}"


@pytest.mark.kernel("dequantize_nvfp4")
def test_dequantize_nvfp4_refuses_as_the_reference(backend: Backend, fmt: str, profile: str,
                                                   device: str) -> None:
    """Codes out of range (uint8 and wider), negative packed bytes, float scales, a scale
    shape or a global scale of the wrong size raise what the reference raises."""
    fn = _kernel(backend, "dequantize_nvfp4")
    scales, stored = np.zeros((2, 1), np.uint8), np.ones(1, np.float32)
    cases = {
        "uint8 code 16": (np.full((2, 16), 16, np.uint8), scales, stored, {}),
        "int32 code 16": (np.full((2, 16), 16, np.int32), scales, stored, {}),
        "negative packed byte": (np.full((2, 8), -1, np.int16), scales, stored,
                                 {"packed": True}),
        "float scales": (np.zeros((2, 16), np.uint8), scales.astype(np.float32), stored, {}),
        "scales of the wrong shape": (np.zeros((2, 32), np.uint8), scales, stored, {}),
        "two global scales": (np.zeros((2, 16), np.uint8), scales, np.ones(2, np.float32), {}),
    }
    for case, (codes, s, g, kwargs) in cases.items():
        expected = _outcome(lambda c=codes, s=s, g=g, k=kwargs: nvfp4_reference.dequantize_nvfp4(
            c, s, g, profile=profile, **k))
        assert isinstance(expected, type), f"{case}: the reference accepts it"
        got = _outcome(lambda c=codes, s=s, g=g, k=kwargs: fn(
            _torch(c, device), _torch(s, device), _torch(g, device), profile=profile, **k))
        assert got is expected, f"{case}: the reference raises {expected.__name__}, got {got}"
