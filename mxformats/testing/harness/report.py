"""The harness's results and how they read: :class:`CheckReport` (one per check), the first
:class:`Mismatch` with its :class:`BlockResult` pair, :class:`SourceRun` per source of cases,
:class:`CheckError`, and the rendering of a report as text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from mxformats.formats import get_format

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DEQUANT_SOURCES",
    "SOURCES",
    "BlockResult",
    "CheckError",
    "CheckReport",
    "Mismatch",
    "SourceRun",
    "hex_value"
]


Kind = Literal["quantizer", "dequantizer", "int4-quantizer"]

#: The sources of cases, in the order they run.
SOURCES: tuple[str, ...] = ("vectors", "sweep", "boundary", "hypothesis")
#: Sources of :func:`check_dequantizer`.
DEQUANT_SOURCES: tuple[str, ...] = ("vectors", "exhaustive", "random", "hypothesis")


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class BlockResult:
    """What one side (the function under test, or the reference) produced for one block.

    Quantizers: ``scale`` (the E8M0 byte; for INT4, the scale's bit pattern, ``scale_width``
    bytes wide) with its value ``scale_value``, and ``codes`` (one element code per entry,
    unpacked from the nibbles; INT4: the integers), plus the raw ``packed`` bytes.
    Dequantizers: ``output`` (the decoded values, as returned). ``error`` instead when the call
    raised; ``note`` when the whole result had the wrong type or shape.
    """

    scale: int | None = None
    codes: NDArray[np.int64] | None = None
    packed: NDArray[np.uint8] | None = None
    output: NDArray[Any] | None = None
    error: str | None = None
    scale_value: float | None = None
    scale_width: int = 1
    note: str | None = None


@dataclass(frozen=True, eq=False)
class Mismatch:
    """The first block where the function and the reference disagree.

    Attributes:
        source: which source found it (``vectors``, ``sweep``, ``boundary``, ``hypothesis``;
            for dequantizers ``exhaustive`` and ``random``).
        label: what the block is (e.g. ``ties: element midpoints at scale 2^-125``).
        dtype: the input dtype (quantizers) or output dtype (dequantizers).
        block: the block's index in the batch that was passed (``batch_size`` blocks).
        batch_size: how many blocks that call held.
        inputs: the block's input: values (quantizers) or element codes (dequantizers).
        input_scale: the block's E8M0 scale byte (dequantizers only).
        expected, got: the reference's and the function's results for the block.
        summary: one line saying what differs.
        more: how many further blocks of the same source batch differ.
    """

    source: str
    label: str
    dtype: str
    block: int
    batch_size: int
    inputs: NDArray[Any]
    expected: BlockResult
    got: BlockResult
    summary: str
    more: int = 0
    input_scale: int | None = None


@dataclass(frozen=True)
class SourceRun:
    """One source run in one dtype: how many blocks were checked (or why it was skipped)."""

    source: str
    dtype: str
    blocks: int
    skipped: str | None = None


@dataclass(frozen=True, eq=False)
class CheckReport:
    """The result of a check: ``ok`` when no block differed; ``str(report)`` is the readable
    report, :meth:`raise_if_failed` raises it as an AssertionError.

    Attributes:
        kind: ``quantizer``, ``dequantizer`` or ``int4-quantizer``.
        function, reference: qualified names of the function under test and the reference.
        profile: the profile checked against.
        settings: the other arguments (elem, block_size, dtypes, level, seed, ...).
        runs: every source × dtype that ran, with its block count, in order.
        mismatch: the first difference, or None.
        notes: what was skipped and why.
        seconds: wall time of the check.
    """

    kind: Kind
    function: str
    reference: str
    profile: str
    settings: dict[str, object]
    runs: tuple[SourceRun, ...]
    mismatch: Mismatch | None
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every checked block was byte-identical to the reference."""
        return self.mismatch is None

    @property
    def blocks_checked(self) -> int:
        """Blocks compared over all sources and dtypes (for Hypothesis, examples, each a batch
        of one to four blocks)."""
        return sum(r.blocks for r in self.runs)

    def raise_if_failed(self) -> None:
        """Raise AssertionError with the readable report when a block differed."""
        if not self.ok:
            raise AssertionError(str(self))

    def __repr__(self) -> str:
        status = "OK" if self.mismatch is None else f"FAILED ({self.mismatch.summary})"
        return (f"<CheckReport {self.kind} {self.function} vs profile {self.profile!r}: "
                f"{status}; {self.blocks_checked} checked>")

    def __str__(self) -> str:
        return _render_report(self)


class CheckError(Exception):
    """The check itself could not run: the reference returned something malformed, or
    refused every input dtype so that nothing was compared."""


# -- calling user functions: numpy and torch -----------------------------------------------------


def _row_bits(a: NDArray[Any]) -> NDArray[Any]:
    """Rows as unsigned integers of the same width, for bit comparison."""
    width = a.dtype.itemsize
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    return np.ascontiguousarray(a).view(view)



# -- rendering ------------------------------------------------------------------------------------


def hex_value(v: float) -> str:
    """A float as a short exact hex literal: ``0x1.8p+2``, ``-0x0p+0``, ``inf``, ``nan``."""
    if np.isnan(v):
        return "-nan" if np.signbit(v) else "nan"
    if np.isinf(v):
        return "-inf" if v < 0 else "inf"
    text = float(v).hex()  # e.g. 0x1.8000000000000p+2
    mantissa, _, exponent = text.partition("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"


def _e8m0_text(byte: int | None) -> str:
    if byte is None:
        return "none"
    if byte == 0xFF:
        return "0xFF (NaN)"
    return f"0x{byte:02X} (2^{byte - 127})"


def _row_text(items: Sequence[str], per_line: int = 8, indent: str = "    ") -> list[str]:
    """Indexed cells, ``per_line`` to a line; a run of four or more equal items is one cell
    (``[ 2-31] 0x0p+0 ×30``)."""
    cells: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[i]:
            j += 1
        if j - i >= 3:
            cells.append(f"[{i:2d}-{j}] {items[i]} ×{j - i + 1}")
            i = j + 1
        else:
            cells.append(f"[{i:2d}] {items[i]}")
            i += 1
    width = max((len(c) for c in cells), default=0)
    lines = []
    for start in range(0, len(cells), per_line):
        row = [f"{c:<{width}}" for c in cells[start : start + per_line]]
        lines.append(indent + "  ".join(row).rstrip())
    return lines


def _codes_text(codes: NDArray[np.int64] | None, kind: Kind, elem_bits: int) -> str:
    if codes is None:
        return "none"
    if kind == "int4-quantizer":
        return " ".join(f"{int(c):d}" for c in codes)
    width = (elem_bits + 3) // 4
    return " ".join(f"{int(c):0{width}X}" for c in codes)


def _result_lines(r: BlockResult, m: Mismatch, report: CheckReport) -> list[str]:
    if r.note is not None:
        return [r.note]
    if r.error is not None:
        return [f"error: {r.error}"]
    if report.kind == "dequantizer":
        if r.output is None:
            return ["nothing"]
        with np.errstate(invalid="ignore"):
            wide = r.output.astype(np.float64)
        return ["output:", *_row_text([hex_value(float(v)) for v in wide], per_line=4,
                                      indent="")]
    elem_bits = get_format(str(report.settings.get("elem", "e2m1"))).bits if \
        report.kind == "quantizer" else 4
    if report.kind == "quantizer":
        scale = _e8m0_text(r.scale)
    elif r.scale is None:
        scale = "none"
    else:
        scale = (f"{hex_value(r.scale_value if r.scale_value is not None else np.nan)} "
                 f"(bits 0x{r.scale:0{2 * r.scale_width}X})")
    lines = [f"scale {scale}", f"codes {_codes_text(r.codes, report.kind, elem_bits)}"]
    if r.packed is not None:
        lines.append("bytes " + " ".join(f"{int(b):02X}" for b in r.packed))
    return lines


def _render_report(report: CheckReport) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in report.settings.items()
                     if v is not None and k != "max_examples")
    title = (f"check_{report.kind.replace('-', '_')}({report.function}, profile="
             f"{report.profile!r}, {args})")
    status = "OK" if report.ok else "FAILED"
    lines = [f"{title}: {status}",
             f"reference: {report.reference}; {report.blocks_checked} blocks checked in "
             f"{report.seconds:.2f} s"]
    ran: dict[str, dict[str, int | str]] = {}
    for r in report.runs:
        per_dtype = ran.setdefault(r.source, {})
        if r.skipped is not None:
            per_dtype[r.dtype] = f"skipped ({r.skipped})"
        else:
            before = per_dtype.get(r.dtype, 0)
            per_dtype[r.dtype] = (before if isinstance(before, int) else 0) + r.blocks
    unit = {"hypothesis": " examples"}
    for source, per_dtype in ran.items():
        lines.append(f"  {source}: " + ", ".join(
            f"{d} {n}{unit.get(source, ' blocks') if isinstance(n, int) else ''}"
            for d, n in per_dtype.items()))
    lines += [f"  note: {n}" for n in report.notes]
    m = report.mismatch
    if m is None:
        return "\n".join(lines)
    lines += ["", f"FIRST DIFFERENCE ({m.summary})",
              f"  found by: {m.source} ({m.label})",
              f"  {'output' if report.kind == 'dequantizer' else 'input'} dtype: {m.dtype}; "
              f"block {m.block} of a call with {m.batch_size} block(s)"]
    if report.kind == "dequantizer":
        lines.append(f"  input: scale {_e8m0_text(m.input_scale)}, codes "
                     + _codes_text(m.inputs.astype(np.int64), "quantizer",
                                   get_format(str(report.settings["elem"])).bits))
    else:
        with np.errstate(invalid="ignore"):
            values = m.inputs.astype(np.float64)
        lines.append(f"  input block ({values.size} values, hex floats):")
        lines += _row_text([hex_value(float(v)) for v in values], per_line=4, indent="    ")
    for name, side in (("expected", m.expected), ("got     ", m.got)):
        body = _result_lines(side, m, report)
        lines.append(f"  {name} {body[0]}")
        lines += [f"  {' ' * len(name)} {b}" for b in body[1:]]
    detail = _element_detail(m, report)
    if detail:
        lines.append(f"  {detail}")
    if m.more:
        lines.append(f"  ... and {m.more} more block(s) of this {m.source} batch differ")
    return "\n".join(lines)


def _element_detail(m: Mismatch, report: CheckReport) -> str:
    """The first differing element, spelled out."""
    e, g = m.expected, m.got
    if report.kind == "dequantizer":
        if e.output is None or g.output is None or e.output.shape != g.output.shape:
            return ""
        diff = np.flatnonzero(_row_bits(e.output).ravel() != _row_bits(g.output).ravel())
        if not diff.size:
            return ""
        i = int(diff[0])
        return (f"element {i}: code 0x{int(m.inputs[i]):X}: expected "
                f"{hex_value(float(e.output.astype(np.float64)[i]))}, got "
                f"{hex_value(float(g.output.astype(np.float64)[i]))}")
    if e.codes is None or g.codes is None or e.codes.shape != g.codes.shape:
        return ""
    diff = np.flatnonzero(e.codes != g.codes)
    if not diff.size:
        return ""
    i = int(diff[0])
    with np.errstate(invalid="ignore"):
        value = float(m.inputs.astype(np.float64)[i]) if i < m.inputs.size else float("nan")
    what, fmt = ("q", "{:d}") if report.kind == "int4-quantizer" else ("code", "0x{:X}")
    return (f"element {i}: input {hex_value(value)} ({value!r}): expected {what} "
            f"{fmt.format(int(e.codes[i]))}, got {fmt.format(int(g.codes[i]))}")


