"""Which MXFP4 is golden? One block, every producer profile, side by side.

:func:`compare_profiles` quantizes a block with every MX producer profile (or the ones named),
decodes each result with its matching consumer, and flags the profiles whose bytes differ from
``"ocp"``. This is the question of triton-lang/triton issue #6054 ("torchao and Triton MXFP4
disagree on 0.25, 0.75: which is golden?"): there is no single MXFP4, there are profiles, and
this shows exactly where they part.

The block of the issue, padded with +0.0 to 32 elements:

>>> from mxformats.compare import compare_profiles
>>> c = compare_profiles([6, 5, 0.25, 0.75])
>>> ocp = c.result("ocp")                  # FLOOR scale, nearest-even: 5 -> 4, 0.25 -> 0
>>> ocp.scales, ocp.codes[:4].tolist(), ocp.decoded[:4].tolist()
((127,), [7, 6, 0, 2], [6.0, 4.0, 0.0, 1.0])
>>> c.result("quark-triton").decoded[:4].tolist()    # round-half-up: 5 -> 6, 0.25 -> 0.5
[6.0, 6.0, 0.5, 1.0]
>>> c.result("torchao-ceil").scales                  # CEIL: one scale step up
(128,)
>>> c.differing(), c.refused()
(['microxcaling', 'quark-triton', 'torchao-ceil'], [])
>>> c.result("vllm").input_dtype                     # vllm takes bfloat16/float16 only
'bfloat16'

From the command line: ``mxformats diff 6 5 0.25 0.75`` (a table, differences highlighted) or
``mxformats diff --json ...``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats._version import __version__
from mxformats.containers import numpy_dtype
from mxformats.formats import E2M1, Format, get_format
from mxformats.text import short_float

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray
    from rich.table import Table

__all__ = ["BASELINE", "ProfileComparison", "ProfileResult", "compare_profiles"]

#: The profile every other one is compared with.
BASELINE = "ocp"
#: Version of the JSON layout written by :meth:`ProfileComparison.to_json`.
SCHEMA_VERSION = 1

_DTYPES = ("float32", "bfloat16", "float16", "float64")
#: What a producer that refuses the requested input dtype is given instead, in this order
#: (bfloat16 first: the dtype of the checkpoints these producers quantize).
_DTYPES_FALLBACK = ("bfloat16", "float16", "float32", "float64")


@dataclass(frozen=True, eq=False)
class ProfileResult:
    """One producer profile's result for the compared values.

    Attributes:
        profile: the producer profile.
        consumer: the consumer profile that decoded it.
        scales: the E8M0 scale byte of each block.
        codes: the element code of each element (unpacked: one per element, padding included).
        decoded: the decoded values (float64 holding the consumer's output exactly).
        error: set instead of the above when the profile refused the input (e.g. a dtype it
            does not take); the other fields are then empty.
        scale_differs: indices of the blocks whose scale byte differs from the baseline's.
        code_differs: indices of the elements whose code differs from the baseline's.
        input_dtype: the dtype this profile was given: the comparison's, or, for a producer
            that does not take it (vLLM's kernel takes bfloat16/float16 only), the first of
            bfloat16, float16, float32, float64 that it takes.
    """

    profile: str
    consumer: str
    scales: tuple[int, ...]
    codes: NDArray[np.uint8]
    decoded: NDArray[np.float64]
    error: str | None = None
    scale_differs: tuple[int, ...] = ()
    code_differs: tuple[int, ...] = ()
    input_dtype: str = ""

    @property
    def differs(self) -> bool:
        """Whether this profile writes other bytes (scale or codes) than the baseline."""
        return bool(self.scale_differs or self.code_differs)


@dataclass(frozen=True, eq=False)
class ProfileComparison:
    """The result of :func:`compare_profiles`; ``str()`` is a plain-text table, ``rich`` prints
    it with the differences highlighted, :meth:`to_json` gives the data.

    Attributes:
        values: the input as the producers saw it (rounded to ``dtype``, padded with +0.0 to
            whole blocks), as float64, one row per block row.
        shown: how many elements of each row were given (the rest is padding).
        dtype: the input dtype the producers were given.
        elem, block_size: the MX element format and block size.
        baseline: the profile compared against (``"ocp"``).
        results: one :class:`ProfileResult` per profile, the baseline first.
        notes: remarks (values changed by rounding to ``dtype``, ...).
    """

    values: NDArray[np.float64]
    shown: int
    dtype: str
    elem: Format
    block_size: int
    baseline: str
    results: tuple[ProfileResult, ...]
    notes: tuple[str, ...] = ()

    def result(self, profile: str) -> ProfileResult:
        """The result of one profile (KeyError when it was not compared)."""
        for r in self.results:
            if r.profile == profile:
                return r
        raise KeyError(f"profile {profile!r} was not compared; compared: "
                       + ", ".join(r.profile for r in self.results))

    def differing(self) -> list[str]:
        """The profiles whose scale bytes or codes differ from the baseline's."""
        return [r.profile for r in self.results if r.differs]

    def refused(self) -> list[str]:
        """The profiles that refused the input (see each result's ``error``)."""
        return [r.profile for r in self.results if r.error is not None]

    def shown_elements(self) -> list[int]:
        """Element indices worth showing: the ones given, plus padding that some profile codes
        differently."""
        width = self.values.shape[-1]
        given = {row * width + i for row in range(self.values.shape[0])
                 for i in range(self.shown)}
        differing = {i for r in self.results for i in r.code_differs}
        return sorted(given | differing)

    # -- JSON -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON-ready data (``schema_version`` 1). Values are exact hex
        floats (``nan``, ``inf``); codes and scale bytes are hex strings."""
        digits = (self.elem.bits + 3) // 4
        flat = self.values.ravel()
        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "elem": self.elem.name,
            "block_size": self.block_size,
            "dtype": self.dtype,
            "baseline": self.baseline,
            "input": [_hex(float(v)) for v in flat],
            "shown_elements": self.shown_elements(),
            "profiles": [
                {
                    "profile": r.profile,
                    "consumer": r.consumer,
                    "input_dtype": r.input_dtype,
                    "differs_from_baseline": r.differs,
                    "error": r.error,
                    "scales": [f"0x{s:02X}" for s in r.scales],
                    "codes": [f"0x{int(c):0{digits}X}" for c in r.codes],
                    "decoded": [_hex(float(v)) for v in r.decoded],
                    "scale_differs": list(r.scale_differs),
                    "code_differs": list(r.code_differs),
                }
                for r in self.results
            ],
            "notes": list(self.notes),
        }

    def json(self, indent: int | None = 2) -> str:
        """:meth:`to_json` as a string."""
        return json.dumps(self.to_json(), indent=indent)

    # -- tables -----------------------------------------------------------------------------

    def table(self, max_elements: int = 48) -> Table:
        """A rich table: one row per profile; its scale byte, and per element its code and
        decoded value.

        Cells that differ from the baseline are bold red; the ``≠ ocp`` column flags the
        profiles that differ at all. At most ``max_elements`` element columns are shown. The
        caption names the consumers that decoded and the profiles that refused the input.
        """
        from rich.table import Table
        from rich.text import Text

        elements = self.shown_elements()
        hidden = max(0, len(elements) - max_elements)
        elements = elements[:max_elements]
        flat = self.values.ravel()
        digits = (self.elem.bits + 3) // 4
        title = (f"{self.elem.name} blocks of {self.block_size}, {self.dtype} input: each "
                 f"profile's scale, codes and decoded values (vs {self.baseline!r})")
        captions = []
        own = [r.profile for r in self.results if r.error is None and r.consumer == r.profile
               and r.profile != self.baseline]
        other = sorted({r.consumer for r in self.results if r.consumer not in
                        (r.profile, self.baseline)})
        if own or other:
            captions.append("decoded by " + " and ".join(
                part for part in (
                    f"{', '.join(own)} with their own consumer" if own else "",
                    f"{', '.join(other)}" if other else "") if part)
                + f"; the rest by {self.baseline!r}")
        captions += [f"{r.profile} refused: {r.error}" for r in self.results
                     if r.error is not None]
        captions += [f"{r.profile} was given {r.input_dtype} input (it does not take "
                     f"{self.dtype})" for r in self.results
                     if r.error is None and r.input_dtype != self.dtype]
        if hidden:
            captions.append(f"{hidden} more element(s) not shown: use --json for all")
        table = Table(title=title, caption="\n".join(captions) or None, show_lines=True,
                      title_justify="left", caption_justify="left")
        table.add_column("profile", no_wrap=True)
        table.add_column(f"≠ {self.baseline}", justify="center", no_wrap=True)
        table.add_column("scale", justify="right", no_wrap=True)
        for i in elements:
            table.add_column(f"x[{i}]\n{short_float(float(flat[i]))}", justify="right",
                             no_wrap=True)
        for r in self.results:
            flag = Text("yes", style="bold red") if r.differs else Text("no", style="green")
            name = Text(r.profile, style="bold" if r.profile == self.baseline else "")
            if r.error is not None:
                table.add_row(name, Text("-"), Text("refused", style="red"),
                              *(Text("-") for _ in elements))
                continue
            scale_cells = []
            for b, s in enumerate(r.scales):
                style = "bold red" if b in r.scale_differs else ""
                scale_cells.append(Text(_scale_text(s).replace(" ", "\n"), style=style))
            scale = Text("\n").join(scale_cells)
            cells = []
            for i in elements:
                style = "bold red" if i in r.code_differs else ""
                cells.append(Text(f"0x{int(r.codes[i]):0{digits}X}\n"
                                  f"{short_float(float(r.decoded[i]))}", style=style))
            table.add_row(name, flag, scale, *cells)
        return table

    def __rich__(self) -> Table:
        return self.table()

    def __str__(self) -> str:
        from rich.console import Console

        console = Console(width=1000, record=True, color_system=None, force_terminal=False,
                          file=io.StringIO())
        console.print(self.table())
        for note in self.notes:
            console.print(f"note: {note}")
        return console.export_text().rstrip()


def _hex(v: float) -> str:
    if np.isnan(v):
        return "-nan" if np.signbit(v) else "nan"
    if np.isinf(v):
        return "-inf" if v < 0 else "inf"
    return float(v).hex()


def _scale_text(byte: int) -> str:
    return "0xFF NaN" if byte == 0xFF else f"0x{byte:02X} 2^{byte - 127}"


def _mx_producers() -> list[str]:
    from mxformats.registry import profiles

    return [p.name for p in profiles() if p.scheme == "mx" and p.kind == "producer"]


def _load(block: ArrayLike | Path) -> NDArray[np.float64]:
    from mxformats.codec import as_float64

    if isinstance(block, Path):
        try:
            data = np.load(block, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot read {block} as a .npy array: {err}") from None
        block = data
    arr = np.asarray(block)
    if arr.dtype.kind in "iub":
        arr = arr.astype(np.float64)
    try:
        values = as_float64(arr)
    except TypeError as err:
        raise ValueError(f"the values must be floating-point numbers: {err}") from None
    if values.ndim == 0:
        values = values.reshape(1)
    if values.size == 0:
        raise ValueError("no values to compare")
    return values.reshape(-1, values.shape[-1])


def _unpack(codes: NDArray[np.uint8], elem: Format) -> NDArray[np.uint8]:
    c = np.asarray(codes, dtype=np.uint8)
    if elem.bits == 4:
        both: NDArray[np.uint8] = np.stack([c & 0xF, c >> 4], axis=-1).reshape(
            *c.shape[:-1], -1)
        return both
    return c


def compare_profiles(
    block: ArrayLike | Path,
    elem: Format | str = E2M1,
    profiles: Sequence[str] | None = None,
    *,
    consumer: str | None = None,
    block_size: int = 32,
    dtype: str = "float32",
) -> ProfileComparison:
    """Quantize ``block`` with each MX producer profile and compare the bytes with ``"ocp"``.

    Args:
        block: the values: a sequence or array (a 1-D block, or rows whose last axis is split
            into blocks), or the :class:`~pathlib.Path` of a ``.npy`` file. Rows are padded
            with +0.0 to whole blocks (the unlisted elements of a block are +0.0).
        elem: the MX element format (default E2M1, i.e. MXFP4).
        profiles: producer profiles to compare (default: every registered MX producer). The
            baseline ``"ocp"`` is always included, first.
        consumer: the consumer profile that decodes every result; default None decodes each
            producer's bytes with its default consumer (:mod:`mxformats.pairing`).
        block_size: elements per block.
        dtype: the input dtype given to the producers (``"float32"``, ``"bfloat16"``,
            ``"float16"``, ``"float64"``): producers that compute in the input's dtype may
            differ between them. Values that this dtype cannot hold are rounded to it, with
            a note.

    Returns:
        A :class:`ProfileComparison`.

    Example (triton-lang/triton issue #6054, "which is golden?")::

        >>> c = compare_profiles([6, 5, 0.25, 0.75], profiles=["torchao-ceil", "quark-triton"])
        >>> [(r.profile, r.scales, r.codes[:4].tolist()) for r in c.results]
        [('ocp', (127,), [7, 6, 0, 2]), ('torchao-ceil', (128,), [5, 4, 0, 1]), \
('quark-triton', (127,), [7, 7, 1, 2])]

    The ties 5 and 0.25 are where nearest-even (ocp, torchao, triton_kernels after PR #8110,
    Quark's export) and round-half-up (Quark's Triton path, old triton_kernels) part; CEIL
    (torchao-ceil) moves the scale up one step instead. ``print(c)`` shows it as a table.
    """
    from mxformats.pairing import default_consumer
    from mxformats.registry import get_profile_info
    from mxformats.schemes.mx import dequantize_mx, quantize_mx
    from mxformats.schemes.mx.producers import get_producer

    elem = get_format(elem)
    if elem.emax is None:
        raise ValueError(f"{elem.name} is not an MX element format")
    if block_size < 1 or (elem.bits == 4 and block_size % 2):
        raise ValueError(f"block_size must be a positive (for 4-bit elements, even) number, "
                         f"got {block_size}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    names = list(_mx_producers()) if profiles is None else list(profiles)
    for name in names:
        get_profile_info("mx", "producer", name)  # ValueError listing the valid names
    if consumer is not None:
        get_profile_info("mx", "consumer", consumer)
    names = [BASELINE, *(n for n in dict.fromkeys(names) if n != BASELINE)]

    rows = _load(block)
    shown = rows.shape[-1]
    width = -(-shown // block_size) * block_size
    padded = np.zeros((rows.shape[0], width), dtype=np.float64)
    padded[:, :shown] = rows
    x, rounded = _rounded(padded, dtype)
    seen = x.astype(np.float64)
    notes = [rounded] if rounded else []

    results = []
    baseline: ProfileResult | None = None
    for name in names:
        decoder = consumer or default_consumer("mx", name)
        given = _input_dtype(dtype, get_producer(name).dtypes)
        x_given = x
        if given != dtype:
            x_given, rounded = _rounded(padded, given)
            if rounded:
                notes.append(f"{name} was given {given} input: {rounded}")
        try:
            out = quantize_mx(x_given, elem, block_size=block_size, axis=-1, profile=name)
            codes, scales = np.asarray(out.codes), np.asarray(out.scales)
            decoded = dequantize_mx(out.codes, out.scales, elem, block_size=block_size,
                                    axis=-1, profile=decoder, dtype=np.float32)
        except (ValueError, TypeError, NotImplementedError) as err:
            results.append(ProfileResult(name, decoder, (), np.zeros(0, np.uint8),
                                         np.zeros(0), error=f"{type(err).__name__}: {err}",
                                         input_dtype=given))
            continue
        with np.errstate(invalid="ignore"):
            wide = np.asarray(decoded).astype(np.float64).ravel()
        result = ProfileResult(name, decoder, tuple(int(s) for s in scales.ravel()),
                               _unpack(codes, elem).ravel(), wide, input_dtype=given)
        if baseline is None and name == BASELINE:
            baseline = result
        elif baseline is not None:
            result = ProfileResult(
                name, decoder, result.scales, result.codes, result.decoded,
                scale_differs=tuple(int(i) for i in np.flatnonzero(
                    np.asarray(result.scales) != np.asarray(baseline.scales))),
                code_differs=tuple(int(i) for i in np.flatnonzero(
                    result.codes != baseline.codes)), input_dtype=given)
        results.append(result)
    if baseline is None:
        notes.append(f"the baseline {BASELINE!r} refused the input; nothing is flagged")
    return ProfileComparison(seen, shown, dtype, elem, block_size, BASELINE, tuple(results),
                             tuple(notes))


def _rounded(values: NDArray[np.float64], dtype: str) -> tuple[NDArray[Any], str]:
    """``values`` in ``dtype``, and a note naming the values that changed ("" if none)."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = values.astype(numpy_dtype(dtype))
        seen = x.astype(np.float64)
    changed = ~((seen == values) | (np.isnan(seen) & np.isnan(values)))
    if not changed.any():
        return x, ""
    i = int(np.flatnonzero(changed.ravel())[0])
    return x, (f"{int(changed.sum())} value(s) are not {dtype} numbers and were rounded to "
               f"{dtype}, e.g. {values.ravel()[i]!r} -> {seen.ravel()[i]!r}")


def _input_dtype(wanted: str, accepted: Sequence[np.dtype[Any]]) -> str:
    """``wanted`` when the producer takes it, else the first of :data:`_DTYPES_FALLBACK` it
    takes (``wanted`` again when none: the producer then refuses with its reason)."""
    if numpy_dtype(wanted) in accepted:
        return wanted
    return next((d for d in _DTYPES_FALLBACK if numpy_dtype(d) in accepted), wanted)

