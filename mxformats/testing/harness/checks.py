"""The checks: :func:`check_quantizer`, :func:`check_dequantizer` and
:func:`check_int4_quantizer` call a user's function on every source's cases (numpy or torch),
compare its bytes with the reference batch by batch (and in a Hypothesis search) and stop at
the first mismatch; :func:`load_function` imports the function ``mxformats check`` is given."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from mxformats.arith import BF16
from mxformats.containers import tensor_to_numpy
from mxformats.formats import E2M1, Format, get_format
from mxformats.schemes.mx import pack_fp4
from mxformats.testing.cases import (
    DTYPES,
    Blocks,
    blocks_strategy,
    float_dtype,
    int4_group_strategy,
    int4_groups,
    mx_blocks,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

from mxformats.testing.harness.report import (
    DEQUANT_SOURCES,
    SOURCES,
    BlockResult,
    CheckError,
    CheckReport,
    Kind,
    Mismatch,
    SourceRun,
    _row_bits,
)
from mxformats.testing.harness.sources import (
    _dequant_vector_blocks,
    _isnan,
    _sweep_blocks,
    _vector_blocks,
    load_vectors,
)

__all__ = [
    "NO_HYPOTHESIS", "check_dequantizer", "check_int4_quantizer", "check_quantizer",
    "load_function"
]


def _qualname(fn: Callable[..., Any]) -> str:
    if isinstance(fn, functools.partial):
        keywords = "".join(f", {k}={v!r}" for k, v in fn.keywords.items())
        return f"partial({_qualname(fn.func)}{keywords})"
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _torch_input(x: NDArray[Any], device: str) -> Any:
    import torch

    if x.dtype == BF16:
        t = torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(x))
    return t.to(device)


def _torch_dtype(dtype: np.dtype[Any]) -> Any:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float64": torch.float64}[dtype.name]


def _to_numpy(x: object) -> NDArray[Any]:
    """A returned array or tensor as numpy, keeping the bytes (torch tensors via the CPU)."""
    tensor = tensor_to_numpy(x)
    return np.asarray(x) if tensor is None else tensor


def _as_bytes(x: NDArray[Any], what: str) -> NDArray[np.uint8]:
    if x.dtype.itemsize != 1 or x.dtype.kind not in "uiV":
        raise _Malformed(f"{what} must be one byte per entry (uint8), got dtype {x.dtype}")
    return x.view(np.uint8)


class _Malformed(Exception):
    """The function returned something of the wrong type or shape."""


@dataclass(frozen=True, eq=False)
class _Out:
    """A whole batch's result, normalised: ``main`` (codes bytes, or dequantized output, or
    INT4 integers) with blocks along axis 0, and ``scales`` with one entry per block."""

    main: NDArray[Any]
    scales: NDArray[Any] | None


def _quantizer_out(result: object, axis: int, what: str) -> _Out:
    if hasattr(result, "codes") and hasattr(result, "scales"):
        codes, scales = result.codes, result.scales
    elif isinstance(result, tuple | list) and len(result) == 2:
        codes, scales = result
    else:
        raise _Malformed(f"{what} returned {type(result).__name__}; expected (codes, scales) or "
                         "an MXArray")
    c = _as_bytes(_to_numpy(codes), "codes")
    s = _as_bytes(_to_numpy(scales), "scales")
    if c.ndim != 2 or s.ndim != 2:
        raise _Malformed(f"{what} returned codes of shape {c.shape} and scales of shape {s.shape}"
                         " for a 2-D input")
    if axis == 0:
        c, s = c.T, s.T
    return _Out(np.ascontiguousarray(c), np.ascontiguousarray(s))


def _int4_out(result: object, axis: int, what: str) -> _Out:
    if hasattr(result, "q") and hasattr(result, "scales"):
        q, scales = result.q, result.scales
    elif isinstance(result, tuple | list) and len(result) == 2:
        q, scales = result
    else:
        raise _Malformed(f"{what} returned {type(result).__name__}; expected (q, scales) or an "
                         "Int4Array")
    qa, sa = _to_numpy(q), _to_numpy(scales)
    if qa.dtype.kind not in "iu":
        raise _Malformed(f"q must hold integers, got dtype {qa.dtype}")
    if axis == 0:
        qa, sa = qa.T, sa.T
    return _Out(np.ascontiguousarray(qa.astype(np.int64)), np.ascontiguousarray(sa))


# -- comparing batches ---------------------------------------------------------------------------


Call = Callable[["NDArray[Any]", "NDArray[Any] | None"], _Out]


@dataclass
class _Found:
    index: int  # in the whole batch
    count: int  # differing blocks found in the batch
    call_start: int  # the smallest call that showed the difference: its first block
    call_size: int  # and its size
    got: BlockResult
    expected: BlockResult
    summary: str


class _Comparer:
    """Compares the function with the reference on a batch and finds the first differing block.

    When either side raises on a batch, the batch is split in halves until the blocks that
    raise are isolated: a block where both raise agrees (an error the profile documents);
    a block where only one raises differs.
    """

    def __init__(self, kind: Kind, fn: Call, ref: Call, elem: Format, nan_any: bool) -> None:
        self.kind = kind
        self.fn = fn
        self.ref = ref
        self.elem = elem
        self.nan_any = nan_any

    @staticmethod
    def _call(call: Call, x: NDArray[Any], s: NDArray[Any] | None) -> _Out | BaseException:
        # Bytes are judged, not floating-point warnings (the cases hold signalling NaNs).
        try:
            with np.errstate(all="ignore"):
                return call(x, s)
        except _Malformed as err:
            return err
        except Exception as err:
            return err

    def first_difference(self, x: NDArray[Any], s: NDArray[Any] | None) -> _Found | None:
        return self._scan(x, s, 0, x.shape[0])

    def _scan(self, x: NDArray[Any], s: NDArray[Any] | None, lo: int, hi: int) -> _Found | None:
        xs, ss = x[lo:hi], (s[lo:hi] if s is not None else None)
        got = self._call(self.fn, xs, ss)
        expected = self._call(self.ref, xs, ss)
        if isinstance(got, _Malformed):
            return _Found(lo, 1, lo, hi - lo, BlockResult(note=str(got)), BlockResult(),
                          f"the function's result is malformed: {got}")
        if isinstance(got, _Out) and isinstance(expected, _Out):
            return self._compare(got, expected, lo, hi - lo)
        if isinstance(expected, _Malformed):
            raise CheckError(f"the reference returned a malformed result: {expected}")
        if hi - lo == 1:
            if isinstance(got, BaseException) and isinstance(expected, BaseException):
                return None  # both refuse this block
            if isinstance(expected, BaseException):
                assert isinstance(got, _Out)
                return _Found(lo, 1, lo, 1, self._block(got, 0),
                              BlockResult(error=_err(expected)),
                              "the reference raises on this block, the function does not")
            assert isinstance(got, BaseException) and isinstance(expected, _Out)
            return _Found(lo, 1, lo, 1, BlockResult(error=_err(got)), self._block(expected, 0),
                          "the function raises on this block")
        mid = (lo + hi) // 2
        left = self._scan(x, s, lo, mid)
        right = self._scan(x, s, mid, hi)
        if left is None:
            return right
        if right is not None:
            left.count += right.count
        return left

    def _block(self, out: _Out, i: int) -> BlockResult:
        if self.kind == "dequantizer":
            return BlockResult(output=out.main[i])
        scale = value = None
        width = 1
        if out.scales is not None:
            row = out.scales[i].ravel()
            if row.size:
                scale, width = int(_row_bits(row)[0]), row.dtype.itemsize
                if self.kind == "int4-quantizer":
                    with np.errstate(invalid="ignore"):
                        value = float(row[:1].astype(np.float64)[0])
                else:
                    value = float(2.0 ** (scale - 127)) if scale != 0xFF else float("nan")
        if self.kind == "int4-quantizer":
            return BlockResult(scale=scale, codes=out.main[i].astype(np.int64),
                               scale_value=value, scale_width=width)
        packed = out.main[i]
        return BlockResult(scale=scale, codes=_unpack_codes(packed, self.elem), packed=packed,
                           scale_value=value)

    def _compare(self, got: _Out, expected: _Out, offset: int, batch: int) -> _Found | None:
        g, e = got.main, expected.main
        if g.shape != e.shape or g.dtype.itemsize != e.dtype.itemsize:
            what = "output" if self.kind == "dequantizer" else "codes"
            return _Found(offset, 1, offset, batch,
                          BlockResult(note=f"{what} of dtype {g.dtype}, shape {g.shape}"),
                          BlockResult(note=f"{what} of dtype {e.dtype}, shape {e.shape}"),
                          f"{what} have dtype {g.dtype} shape {g.shape}; expected dtype "
                          f"{e.dtype} shape {e.shape}")
        gb = _row_bits(g).reshape(g.shape[0], -1)
        eb = _row_bits(e).reshape(e.shape[0], -1)
        differ = gb != eb
        if self.nan_any and self.kind == "dequantizer":
            both_nan = _isnan(g).reshape(differ.shape) & _isnan(e).reshape(differ.shape)
            differ &= ~both_nan
        rows = differ.any(axis=1)
        if got.scales is not None and expected.scales is not None:
            gs, es = got.scales, expected.scales
            if gs.shape != es.shape or gs.dtype != es.dtype:
                return _Found(offset, 1, offset, batch,
                              BlockResult(note=f"scales of dtype {gs.dtype}, shape {gs.shape}"),
                              BlockResult(note=f"scales of dtype {es.dtype}, shape {es.shape}"),
                              f"scales have dtype {gs.dtype} shape {gs.shape}; expected dtype "
                              f"{es.dtype} shape {es.shape}")
            scale_rows = (_row_bits(gs).reshape(gs.shape[0], -1)
                          != _row_bits(es).reshape(es.shape[0], -1)).any(axis=1)
            rows = rows | scale_rows
        else:
            scale_rows = np.zeros_like(rows)
        if not rows.any():
            return None
        i = int(np.argmax(rows))
        got_block, expected_block = self._block(got, i), self._block(expected, i)
        return _Found(offset + i, int(rows.sum()), offset, batch, got_block, expected_block,
                      self._summary(bool(scale_rows[i]), differ[i], got_block, expected_block))

    def _summary(self, scale_differs: bool, differ: NDArray[np.bool_], got: BlockResult,
                 expected: BlockResult) -> str:
        parts = []
        if scale_differs:
            parts.append("scale differs" if self.kind == "int4-quantizer"
                         else "scale byte differs")
        if self.kind == "dequantizer":
            where = np.flatnonzero(differ)
            if where.size:
                parts.append(f"output differs at element {int(where[0])}"
                             + (f" and {where.size - 1} more" if where.size > 1 else ""))
        elif got.codes is not None and expected.codes is not None:
            where = np.flatnonzero(got.codes != expected.codes)
            if where.size:
                parts.append(f"codes differ at element {int(where[0])}"
                             + (f" and {where.size - 1} more" if where.size > 1 else ""))
        return "; ".join(parts) or "bytes differ"


def _err(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _unpack_codes(packed: NDArray[np.uint8], elem: Format) -> NDArray[np.int64]:
    """Element codes of one block's bytes: nibbles low-first for 4-bit elements."""
    b = packed.astype(np.int64).ravel()
    if elem.bits == 4:
        return np.stack([b & 0xF, b >> 4], axis=-1).ravel()
    return b


# -- Hypothesis -----------------------------------------------------------------------------------


def _hypothesis_search(
    strategy: Any, check: Callable[[NDArray[Any]], _Found | None], max_examples: int, seed: int
) -> tuple[tuple[NDArray[Any], _Found] | None, int, str | None]:
    """Run Hypothesis over batches drawn from ``strategy``; return the shrunk failing batch and
    its finding, the number of examples run, and a note when Hypothesis is missing."""
    try:
        import hypothesis
        from hypothesis import HealthCheck, Verbosity, given, settings
    except ImportError:
        return None, 0, NO_HYPOTHESIS

    failures: list[tuple[NDArray[Any], _Found]] = []
    examples = 0

    class _Failed(Exception):
        pass

    @hypothesis.seed(seed)
    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
              verbosity=Verbosity.quiet, suppress_health_check=list(HealthCheck),
              print_blob=False, report_multiple_bugs=False)
    @given(strategy)
    def search(batch: NDArray[Any]) -> None:
        nonlocal examples
        examples += 1
        found = check(batch)
        if found is not None:
            failures.append((batch, found))
            raise _Failed

    try:
        search()
    except _Failed:
        return failures[-1], examples, None
    return None, examples, None


# -- the checks ----------------------------------------------------------------------------------


def _reference_quantizer() -> Callable[..., Any]:
    from mxformats.schemes.mx import quantize_mx

    return quantize_mx


def _reference_dequantizer() -> Callable[..., Any]:
    from mxformats.schemes.mx import dequantize_mx

    return dequantize_mx


def _check_axis(axis: int) -> int:
    if axis not in (-1, 0, 1):
        raise ValueError(f"axis must be -1, 0 or 1 (blocks run along it in a 2-D input), "
                         f"got {axis}")
    return 0 if axis == 0 else -1


@dataclass
class _Run:
    kind: Kind
    comparer: _Comparer
    runs: list[SourceRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mismatch: Mismatch | None = None

    def batch(self, source: str, dtype: str, blocks: Blocks,
              scales: NDArray[np.uint8] | None = None, *, record: bool = True) -> bool:
        """Check one batch; True when it found the first mismatch (stop)."""
        if len(blocks) == 0:
            return False
        found = self.comparer.first_difference(blocks.values, scales)
        if record:
            self.runs.append(SourceRun(source, dtype, len(blocks)))
        if found is None:
            return False
        self.mismatch = Mismatch(
            source=source, label=blocks.labels[found.index], dtype=dtype,
            block=found.index - found.call_start, batch_size=found.call_size,
            inputs=blocks.values[found.index], expected=found.expected, got=found.got,
            summary=found.summary, more=found.count - 1,
            input_scale=int(scales[found.index].ravel()[0]) if scales is not None else None)
        return True


def check_quantizer(
    fn: Callable[..., Any],
    *,
    profile: str = "ocp",
    elem: Format | str = E2M1,
    block_size: int = 32,
    axis: int = -1,
    dtypes: Sequence[str] = ("float32", "bfloat16"),
    level: int = 1,
    max_examples: int = 100,
    seed: int = 1,
    sources: Sequence[str] = SOURCES,
    torch_device: str | None = None,
    reference: Callable[..., Any] | None = None,
) -> CheckReport:
    """Check an MX quantizer against ``quantize_mx(..., profile=profile)`` byte for byte.

    ``fn`` is called as ``fn(x, elem, block_size=block_size, axis=axis, profile=profile)``
    with ``x`` a 2-D array of blocks (``(blocks, block_size)``, or transposed for
    ``axis=0``) and must return an :class:`~mxformats.schemes.mx.MXArray` or a pair
    ``(codes, scales)``: uint8 codes packed as ``quantize_mx`` packs them (E2M1: two per
    byte, element 2k in the low nibble) and uint8 E8M0 scale bytes.

    Args:
        fn: the function under test (it is called many times; it must be deterministic).
        profile: the producer profile whose bytes ``fn`` must reproduce.
        elem: the element format (a :class:`~mxformats.formats.Format` or its name).
        block_size: elements per block.
        axis: -1 (blocks along rows, default) or 0 (along columns).
        dtypes: input dtypes to run, among ``"float32"``, ``"bfloat16"``, ``"float16"``.
        level: depth of the boundary tables (:mod:`mxformats.testing.cases`); 2 crosses every
            exponent with every pattern.
        max_examples: Hypothesis examples per dtype (each a batch of 1-4 blocks).
        seed: seeds the random blocks and Hypothesis (default 1; equal seeds, equal cases).
        sources: which of :data:`SOURCES` to run (``vectors``, ``sweep``, ``boundary``,
            ``hypothesis``), in that order.
        torch_device: None to pass numpy arrays; a device name (``"cpu"``, ``"cuda"``) to pass
            torch tensors on it.
        reference: the function to compare with (default ``mxformats.quantize_mx``), e.g.
            a torch reference when checking the kernel that mirrors it.

    Returns:
        A :class:`CheckReport`; the check stops at the first differing block.

    Raises:
        ValueError: an unknown profile or element, a bad dtype or source name.
        CheckError: the reference refused every input dtype, so nothing was compared.

    Where the reference raises on a block (an input the profile leaves undefined and refuses),
    ``fn`` must raise too; a whole input dtype the profile refuses is skipped with a note.

    Example::

        from mxformats.testing import check_quantizer
        from mxformats.kernels.triton import quantize_mx as triton_quantize_mx

        def test_triton_matches_ocp():
            check_quantizer(triton_quantize_mx, profile="ocp",
                            torch_device="cuda").raise_if_failed()
    """
    elem = get_format(elem)
    if elem.emax is None:
        raise ValueError(f"{elem.name} is not an MX element format")
    if elem.bits == 4 and block_size % 2:
        raise ValueError(f"block_size must be even for a 4-bit element, got {block_size}")
    ax = _check_axis(axis)
    _check_choices("dtypes", dtypes, DTYPES)
    _check_choices("sources", sources, SOURCES)
    start = time.perf_counter()
    if reference is None:
        _known_profile("mx", ("producer", "activation"), profile)
    ref_fn = reference if reference is not None else _reference_quantizer()

    def caller(f: Callable[..., Any], what: str, torch: bool) -> Call:
        def call(x: NDArray[Any], _s: NDArray[Any] | None) -> _Out:
            xin = x.T if ax == 0 else x
            arg = _torch_input(xin, torch_device) if (torch and torch_device) else xin
            return _quantizer_out(f(arg, elem, block_size=block_size, axis=axis,
                                    profile=profile), ax, what)
        return call

    comparer = _Comparer("quantizer", caller(fn, "the function", True),
                         caller(ref_fn, "the reference", False), elem, nan_any=False)
    run = _Run("quantizer", comparer)
    done = False
    for source in SOURCES:
        if source not in sources or done:
            continue
        for dtype in dtypes:
            if done:
                break
            if not _probe(run, source, dtype, block_size):
                continue
            if source == "vectors":
                vectors = load_vectors(profile)
                if vectors is None:
                    run.runs.append(SourceRun(source, dtype, 0, "not shipped"))
                    _note(run, f"vectors: no spec/vectors/mx/{profile}.json here; skipped")
                    continue
                blocks, left_out = _vector_blocks(vectors, elem, block_size, dtype)
                if left_out:
                    _note(run, f"vectors: {left_out} case(s) of {vectors[0]} not used in "
                          f"{dtype} (not representable, or no input block)")
                done = run.batch(source, dtype, blocks)
            elif source == "sweep":
                for _, blocks in _sweep_blocks(dtype, block_size):
                    if run.batch(source, dtype, blocks):
                        done = True
                        break
            elif source == "boundary":
                done = run.batch(source, dtype, mx_blocks(elem, block_size=block_size,
                                                          dtype=dtype, level=level, seed=seed))
            else:
                done = _run_hypothesis(run, dtype, functools.partial(
                    blocks_strategy, elem, block_size=block_size, dtype=dtype, level=level,
                    seed=seed),
                    max_examples, seed)
    return _finish(
        run,
        kind="quantizer", function=_qualname(fn), reference=_qualname(ref_fn), profile=profile,
        settings={"elem": elem.name, "block_size": block_size, "axis": axis,
                  "dtypes": tuple(dtypes), "level": level, "seed": seed,
                  "max_examples": max_examples, "torch_device": torch_device},
        seconds=time.perf_counter() - start)


def _known_profile(scheme: str, kinds: tuple[str, ...], name: str) -> None:
    """ValueError listing the valid names when ``name`` is not a registered profile of one of
    ``kinds``."""
    from mxformats.registry import get_profile_info

    for kind in kinds[1:]:
        try:
            get_profile_info(scheme, kind, name)
            return
        except ValueError:
            pass
    get_profile_info(scheme, kinds[0], name)


def _finish(run: _Run, **fields: Any) -> CheckReport:
    report = CheckReport(runs=tuple(run.runs), mismatch=run.mismatch, notes=tuple(run.notes),
                         **fields)
    refused = [r for r in report.runs if (r.skipped or "").startswith("the reference refuses")]
    if report.ok and report.blocks_checked == 0 and refused:
        raise CheckError("nothing was compared: " + "; ".join(report.notes))
    return report


def _note(run: _Run, text: str) -> None:
    if text not in run.notes:
        run.notes.append(text)


def _probe(run: _Run, source: str, dtype: str, block_size: int) -> bool:
    """Whether the reference takes ``dtype`` input at all (one block of ones); a dtype the
    profile refuses is skipped with a note."""
    if run.kind == "dequantizer":
        return True
    x = np.ones((1, block_size), dtype=float_dtype(dtype))
    try:
        run.comparer.ref(x, None)
    except Exception as err:
        run.runs.append(SourceRun(source, dtype, 0, f"the reference refuses {dtype}"))
        _note(run, f"{dtype}: skipped, the reference refuses {dtype} input ({_err(err)})")
        return False
    return True


#: Why the Hypothesis source is skipped on a core install (hypothesis is a test extra).
NO_HYPOTHESIS = "hypothesis is not installed: pip install 'mxformats[test]'"


def _run_hypothesis(run: _Run, dtype: str, block: Callable[[], Any], max_examples: int,
                    seed: int) -> bool:
    """The Hypothesis source; ``block`` builds the block strategy (it imports hypothesis)."""
    try:
        from hypothesis import strategies as st
    except ImportError:
        run.runs.append(SourceRun("hypothesis", dtype, 0, NO_HYPOTHESIS))
        _note(run, f"hypothesis: skipped ({NO_HYPOTHESIS})")
        return False
    batches = st.lists(block(), min_size=1, max_size=4).map(np.stack)
    result, examples, note = _hypothesis_search(
        batches, lambda b: run.comparer.first_difference(b, None), max_examples, seed)
    if note is not None:
        run.runs.append(SourceRun("hypothesis", dtype, 0, note))
        _note(run, f"hypothesis: skipped ({note})")
        return False
    run.runs.append(SourceRun("hypothesis", dtype, examples))
    if result is None:
        return False
    batch, _ = result
    labels = tuple(f"hypothesis: shrunk example, block {i} of {batch.shape[0]}"
                   for i in range(batch.shape[0]))
    return run.batch("hypothesis", dtype, Blocks(batch, labels), record=False)


def _check_choices(what: str, given: Sequence[str], valid: Sequence[str]) -> None:
    bad = [g for g in given if g not in valid]
    if bad or isinstance(given, str):
        raise ValueError(f"{what}: {bad or given!r} not valid; choose from {', '.join(valid)}")


def _dequant_cases(elem: Format, block_size: int) -> Blocks:
    """Every scale byte × every element code: for each scale byte, blocks that hold every code
    (forwards then backwards, so each code sits at even and odd positions)."""
    n_codes = 1 << elem.bits
    sweep = np.concatenate([np.arange(n_codes), np.arange(n_codes)[::-1]])
    per_scale = -(-sweep.size // block_size)
    padded = np.zeros(per_scale * block_size, dtype=np.int64)
    padded[: sweep.size] = sweep
    rows = np.tile(padded.reshape(per_scale, block_size), (256, 1))
    labels = tuple(f"exhaustive: scale 0x{s:02X}, codes part {k + 1}/{per_scale}"
                   for s in range(256) for k in range(per_scale))
    return Blocks(rows, labels)


def _pack(codes: NDArray[np.int64], elem: Format) -> NDArray[np.uint8]:
    c = codes.astype(np.uint8)
    return pack_fp4(c, axis=-1) if elem.bits == 4 else c


def check_dequantizer(
    fn: Callable[..., Any],
    *,
    profile: str = "ocp",
    elem: Format | str = E2M1,
    block_size: int = 32,
    axis: int = -1,
    dtype: str = "float32",
    level: int = 1,
    max_examples: int = 100,
    seed: int = 1,
    sources: Sequence[str] = DEQUANT_SOURCES,
    nan: Literal["bits", "any"] = "bits",
    torch_device: str | None = None,
    reference: Callable[..., Any] | None = None,
) -> CheckReport:
    """Check an MX dequantizer against ``dequantize_mx(..., profile=profile)`` by output bits.

    ``fn`` is called as ``fn(codes, scales, elem, block_size=block_size, axis=axis,
    profile=profile, dtype=dtype)`` with uint8 ``codes`` (packed as ``quantize_mx`` packs them)
    and uint8 E8M0 ``scales`` (one per block), and must return the decoded values.

    Sources: ``vectors`` (the ``dequantize`` cases of ``spec/vectors/mx/<profile>.json`` for
    this element and output dtype, where shipped), ``exhaustive`` (every scale byte 0x00..0xFF
    × every element code, at even and odd positions), ``random`` (``64 * level`` seeded random
    blocks) and ``hypothesis``.

    Args:
        dtype: the output dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (passed to
            ``fn`` as a numpy dtype, or a torch dtype with ``torch_device``).
        nan: ``"bits"`` (default) compares NaN outputs bit for bit; ``"any"`` accepts any NaN
            where the reference gives a NaN.

    The other arguments are those of :func:`check_quantizer`.

    Example::

        check_dequantizer(my_dequant, profile="quark-hip-fp16", dtype="float16").raise_if_failed()
    """
    elem = get_format(elem)
    if elem.emax is None:
        raise ValueError(f"{elem.name} is not an MX element format")
    if elem.bits == 4 and block_size % 2:
        raise ValueError(f"block_size must be even for a 4-bit element, got {block_size}")
    if nan not in ("bits", "any"):
        raise ValueError(f"nan must be 'bits' or 'any', got {nan!r}")
    ax = _check_axis(axis)
    _check_choices("sources", sources, DEQUANT_SOURCES)
    out_dtype = float_dtype(dtype)
    start = time.perf_counter()
    if reference is None:
        _known_profile("mx", ("consumer",), profile)
    ref_fn = reference if reference is not None else _reference_dequantizer()

    def caller(f: Callable[..., Any], what: str, torch: bool) -> Call:
        def call(codes: NDArray[Any], scales: NDArray[Any] | None) -> _Out:
            assert scales is not None
            packed = _pack(codes, elem)
            s = scales.reshape(-1, 1).astype(np.uint8)
            if ax == 0:
                packed, s = packed.T, s.T
            use_torch = torch and torch_device is not None
            args = ((_torch_input(packed, torch_device), _torch_input(s, torch_device))
                    if use_torch and torch_device else (packed, s))
            out_type = _torch_dtype(out_dtype) if use_torch else out_dtype
            out = _to_numpy(f(*args, elem, block_size=block_size, axis=axis, profile=profile,
                              dtype=out_type))
            if out.ndim != 2:
                raise _Malformed(f"{what} returned shape {out.shape} for a 2-D input")
            return _Out(np.ascontiguousarray(out.T if ax == 0 else out), None)
        return call

    comparer = _Comparer("dequantizer", caller(fn, "the function", True),
                         caller(ref_fn, "the reference", False), elem, nan_any=nan == "any")
    run = _Run("dequantizer", comparer)
    rng = np.random.default_rng([seed, 0x6471])
    for source in DEQUANT_SOURCES:
        if source not in sources:
            continue
        if source == "vectors":
            vectors = load_vectors(profile)
            if vectors is None:
                run.runs.append(SourceRun(source, dtype, 0, "not shipped"))
                _note(run, f"vectors: no spec/vectors/mx/{profile}.json here; skipped")
                continue
            blocks, scales, left_out = _dequant_vector_blocks(vectors, elem, block_size, dtype)
            if left_out:
                _note(run, f"vectors: {left_out} dequantize case(s) of {vectors[0]} not used "
                      f"(not {block_size} codes, or unreadable)")
        elif source == "exhaustive":
            blocks = _dequant_cases(elem, block_size)
            per_scale = len(blocks) // 256
            scales = np.repeat(np.arange(256, dtype=np.uint8), per_scale)
        elif source == "random":
            count = 64 * level
            codes = rng.integers(0, 1 << elem.bits, size=(count, block_size))
            scales = rng.integers(0, 256, size=count).astype(np.uint8)
            blocks = Blocks(codes, tuple(f"random: block {i} (seed {seed})"
                                         for i in range(count)))
        else:
            if _dequant_hypothesis(run, elem, block_size, dtype, max_examples, seed):
                break
            continue
        if run.batch(source, dtype, blocks, scales):
            break
    return _finish(
        run,
        kind="dequantizer", function=_qualname(fn), reference=_qualname(ref_fn),
        profile=profile,
        settings={"elem": elem.name, "block_size": block_size, "axis": axis, "dtype": dtype,
                  "level": level, "seed": seed, "max_examples": max_examples, "nan": nan,
                  "torch_device": torch_device},
        seconds=time.perf_counter() - start)


def _dequant_hypothesis(run: _Run, elem: Format, block_size: int, dtype: str,
                        max_examples: int, seed: int) -> bool:
    try:
        from hypothesis import strategies as st
    except ImportError:
        _note(run, f"hypothesis: skipped ({NO_HYPOTHESIS})")
        run.runs.append(SourceRun("hypothesis", dtype, 0, NO_HYPOTHESIS))
        return False
    special = [0x00, 0x01, 0x02, 0x66, 0x7F, 0x80, 0x8E, 0x8F, 0x90, 0xFD, 0xFE, 0xFF]
    scale = st.one_of(st.sampled_from(special), st.integers(0, 255))
    code = st.integers(0, (1 << elem.bits) - 1)
    block = st.tuples(scale, st.lists(code, min_size=block_size, max_size=block_size))
    batches = st.lists(block, min_size=1, max_size=4).map(
        lambda bs: (np.asarray([b[1] for b in bs], dtype=np.int64),
                    np.asarray([b[0] for b in bs], dtype=np.uint8)))
    result, examples, note = _hypothesis_search(
        batches, lambda b: run.comparer.first_difference(b[0], b[1]), max_examples, seed)
    if note is not None:
        _note(run, f"hypothesis: skipped ({note})")
        run.runs.append(SourceRun("hypothesis", dtype, 0, note))
        return False
    run.runs.append(SourceRun("hypothesis", dtype, examples))
    if result is None:
        return False
    (codes, scales), _ = result
    labels = tuple(f"hypothesis: shrunk example, block {i} of {codes.shape[0]}"
                   for i in range(codes.shape[0]))
    return run.batch("hypothesis", dtype, Blocks(codes, labels), scales, record=False)


def _reference_int4() -> Callable[..., Any]:
    from mxformats.schemes.int4 import quantize_int4

    return quantize_int4


def check_int4_quantizer(
    fn: Callable[..., Any],
    *,
    profile: str = "compressed-tensors",
    group_size: int = 32,
    axis: int = -1,
    dtypes: Sequence[str] = ("float32", "bfloat16"),
    level: int = 1,
    max_examples: int = 100,
    seed: int = 1,
    sources: Sequence[str] = ("sweep", "boundary", "hypothesis"),
    torch_device: str | None = None,
    reference: Callable[..., Any] | None = None,
) -> CheckReport:
    """Check a symmetric INT4 per-group quantizer against ``quantize_int4(..., profile=...)``.

    ``fn`` is called as ``fn(x, group_size=group_size, axis=axis, profile=profile)`` with a
    2-D ``x`` of groups and must return an :class:`~mxformats.schemes.int4.Int4Array` or ``(q,
    scales)``: integers in [-8, 7] (any integer dtype) and scales of the reference's dtype,
    compared bit for bit. Sources: ``sweep`` (every bfloat16/float16 pattern in groups),
    ``boundary`` (:func:`mxformats.testing.cases.int4_groups`: rounding ties at each scale,
    the divide-versus-reciprocal cases, specials, tiny and huge groups, random groups) and
    ``hypothesis``. Other arguments as :func:`check_quantizer`.
    """
    ax = _check_axis(axis)
    _check_choices("dtypes", dtypes, DTYPES)
    _check_choices("sources", sources, ("sweep", "boundary", "hypothesis"))
    start = time.perf_counter()
    if reference is None:
        _known_profile("int4", ("producer",), profile)
    ref_fn = reference if reference is not None else _reference_int4()

    def caller(f: Callable[..., Any], what: str, torch: bool) -> Call:
        def call(x: NDArray[Any], _s: NDArray[Any] | None) -> _Out:
            xin = x.T if ax == 0 else x
            arg = _torch_input(xin, torch_device) if (torch and torch_device) else xin
            return _int4_out(f(arg, group_size=group_size, axis=axis, profile=profile), ax, what)
        return call

    comparer = _Comparer("int4-quantizer", caller(fn, "the function", True),
                         caller(ref_fn, "the reference", False), E2M1, nan_any=False)
    run = _Run("int4-quantizer", comparer)
    done = False
    for source in ("sweep", "boundary", "hypothesis"):
        if source not in sources or done:
            continue
        for dtype in dtypes:
            if done:
                break
            x = np.ones((1, group_size), dtype=float_dtype(dtype))
            try:
                comparer.ref(x, None)
            except Exception as err:
                run.runs.append(SourceRun(source, dtype, 0, f"the reference refuses {dtype}"))
                _note(run, f"{dtype}: skipped, the reference refuses {dtype} input ({_err(err)})")
                continue
            if source == "sweep":
                for _, blocks in _sweep_blocks(dtype, group_size):
                    if run.batch(source, dtype, blocks):
                        done = True
                        break
            elif source == "boundary":
                done = run.batch(source, dtype, int4_groups(group_size=group_size, dtype=dtype,
                                                            level=level, seed=seed))
            else:
                done = _run_hypothesis(run, dtype, functools.partial(
                    int4_group_strategy, group_size=group_size, dtype=dtype, level=level,
                    seed=seed),
                    max_examples, seed)
    return _finish(
        run,
        kind="int4-quantizer", function=_qualname(fn), reference=_qualname(ref_fn),
        profile=profile,
        settings={"group_size": group_size, "axis": axis, "dtypes": tuple(dtypes),
                  "level": level, "seed": seed, "max_examples": max_examples,
                  "torch_device": torch_device},
        seconds=time.perf_counter() - start)


def load_function(spec: str) -> Callable[..., Any]:
    """Import ``MODULE:FUNCTION`` (or ``path/to/file.py:FUNCTION``) and return the function.

    This imports and so runs the module's code: only name code you trust. The current
    directory is put first on ``sys.path``, as ``python -m`` does.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FUNCTION, got {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ValueError(f"no such file: {module_name}")
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"cannot import {module_name}")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        mod_spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is not callable: it is a {type(obj).__name__}")
    return obj  # type: ignore[no-any-return]

