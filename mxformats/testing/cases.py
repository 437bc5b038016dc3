"""TestFloat-style boundary cases for element formats and MX blocks.

The generator follows TestFloat 3's ``genCases``: a table of interesting **exponents** (zero and
subnormal, the smallest normal, around 1, around the element format's largest value and just
beyond it, around the input type's largest finite value, Inf/NaN) is crossed with a table of
**significand patterns** (0, 1, all ones, every single bit, runs of ones from the top and from
the bottom), both signs, plus seeded random values. Three knobs control a run:

``level``
    1 (default): the tables above. 2: every exponent of the input type and each pattern ±1.
    Higher levels only add cases.
``seed``
    Seeds every random choice (default 1). Equal arguments give equal cases, byte for byte.
``n``
    How many seeded random values (or blocks) to add; it can only add cases.

On top of values, :func:`mx_blocks` builds whole MX blocks: ties of the element format at each
scale, block maxima on the boundaries of the scale rules (significands 1.75, 1.9375 and powers
of two, with their neighbours), NaN/Inf/±0 blocks, all-zero blocks, tiny blocks (2^-125 ..
2^-149) and huge ones (near 2^127), plus random blocks. :func:`values_strategy` and
:func:`blocks_strategy` are Hypothesis strategies built on the same tables (Hypothesis is a test
extra and is imported only when they are called).

Inputs come in the three types quantizers see: ``"float32"``, ``"bfloat16"`` (ml_dtypes) and
``"float16"``. Every value is built as a bit pattern of that type, so nothing is rounded on the
way in.

>>> from mxformats.testing.cases import boundary_values, mx_blocks
>>> v = boundary_values("bfloat16")
>>> v.dtype.name, len(v) == len(boundary_values("bfloat16"))
('bfloat16', True)
>>> blocks = mx_blocks(block_size=32, dtype="float32")
>>> blocks.values.shape[1], blocks.labels[0].split(":")[0]
(32, 'ties')
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.formats import E2M1, Format

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DTYPES",
    "Blocks",
    "blocks_strategy",
    "boundary_values",
    "exponent_table",
    "float_dtype",
    "int4_group_strategy",
    "int4_groups",
    "mx_blocks",
    "significand_patterns",
    "values_strategy",
]

#: The input types, by name: (exponent bits, mantissa bits, numpy dtype, unsigned view).
_LAYOUTS: dict[str, tuple[int, int, Any, Any]] = {
    "float32": (8, 23, np.float32, np.uint32),
    "bfloat16": (8, 7, ml_dtypes.bfloat16, np.uint16),
    "float16": (5, 10, np.float16, np.uint16),
}
#: The names accepted as ``dtype`` here and in :mod:`mxformats.testing.harness`.
DTYPES: tuple[str, ...] = tuple(_LAYOUTS)


def float_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype of an input type name (``"bfloat16"`` is ``ml_dtypes.bfloat16``)."""
    try:
        result: np.dtype[Any] = np.dtype(_LAYOUTS[name][2])
    except KeyError:
        raise ValueError(f"unknown input dtype {name!r}; valid: {', '.join(DTYPES)}") from None
    return result


def _layout(dtype: str) -> tuple[int, int, int, Any, Any]:
    """(ebits, mbits, bias, numpy dtype, unsigned view dtype) of an input type."""
    float_dtype(dtype)  # validates
    ebits, mbits, np_dtype, view = _LAYOUTS[dtype]
    return ebits, mbits, (1 << (ebits - 1)) - 1, np_dtype, view


def _from_bits(bits: Iterable[int] | NDArray[Any], dtype: str) -> NDArray[Any]:
    _, _, _, np_dtype, view = _layout(dtype)
    as_int = bits if isinstance(bits, np.ndarray) else np.fromiter(bits, dtype=np.int64)
    result: NDArray[Any] = np.asarray(as_int, dtype=np.int64).astype(view).view(np_dtype)
    return result


def _bits(values: NDArray[Any], dtype: str) -> NDArray[np.int64]:
    _, _, _, np_dtype, view = _layout(dtype)
    result: NDArray[np.int64] = np.asarray(values, dtype=np_dtype).view(view).astype(np.int64)
    return result


def _unique(values: NDArray[Any], dtype: str) -> NDArray[Any]:
    """Drop repeated bit patterns, keeping the first of each (deterministic order)."""
    _, first = np.unique(_bits(values, dtype), return_index=True)
    result: NDArray[Any] = values[np.sort(first)]
    return result


# -- the tables ---------------------------------------------------------------------------------


def exponent_table(dtype: str = "float32", *, elem: Format | None = E2M1, level: int = 1
                   ) -> list[int]:
    """The biased exponents of ``dtype`` that :func:`boundary_values` uses.

    Level 1: 0 (zero and subnormals), 1 and 2 (smallest normals), bias-1..bias+1 (around 1),
    the two largest finite exponents, the all-ones exponent (Inf/NaN), and, when ``elem`` is
    given, the exponents around ``elem``'s largest value and just beyond it (at scale 1) and of
    its smallest subnormal. Level 2 and above: every exponent.
    """
    ebits, _, bias, _, _ = _layout(dtype)
    top = (1 << ebits) - 1
    if level >= 2:
        return list(range(top + 1))
    table = {0, 1, 2, bias - 1, bias, bias + 1, top - 2, top - 1, top}
    if elem is not None and elem.emax is not None:
        table |= {bias + elem.emax + d for d in (-1, 0, 1, 2)}
        if elem.min_subnormal is not None:
            sub = int(np.frexp(elem.min_subnormal)[1]) - 1
            table |= {bias + sub - 1, bias + sub}
    return sorted(e for e in table if 0 <= e <= top)


def significand_patterns(mbits: int, *, level: int = 1) -> list[int]:
    """Mantissa-field patterns of width ``mbits``, as TestFloat crosses them with exponents.

    0, 1, all ones, every single bit, runs of ones from the top (``1100..0``) and from the
    bottom (``0..0011``). Level 2 and above add each pattern plus and minus one.
    """
    full = (1 << mbits) - 1
    patterns = {0, 1, full}
    patterns |= {1 << k for k in range(mbits)}
    patterns |= {full ^ ((1 << (mbits - k)) - 1) for k in range(1, mbits + 1)}  # top runs
    patterns |= {(1 << k) - 1 for k in range(1, mbits + 1)}  # bottom runs
    if level >= 2:
        patterns |= {p + d for p in patterns for d in (-1, 1)}
    return sorted(p for p in patterns if 0 <= p <= full)


def boundary_values(
    dtype: str = "float32",
    *,
    elem: Format | None = E2M1,
    level: int = 1,
    seed: int = 1,
    n: int | None = None,
) -> NDArray[Any]:
    """Boundary values of ``dtype``: :func:`exponent_table` × :func:`significand_patterns` ×
    both signs, then ``n`` seeded random values (default ``256 * level``).

    Half the random values take an exponent from the table and random significand bits, the
    other half are uniformly random bit patterns (TestFloat's weighted random). Returns a 1-D
    array of ``dtype`` (``ml_dtypes.bfloat16`` for ``"bfloat16"``), repeated bit patterns
    removed, in a deterministic order.

    >>> import numpy as np
    >>> v = boundary_values("float32", level=1)
    >>> bool(np.isnan(v).any() and np.isinf(v).any() and (v == np.float32(2.0**-149)).any())
    True
    """
    if level < 1:
        raise ValueError(f"level must be >= 1, got {level}")
    ebits, mbits, _, _, _ = _layout(dtype)
    exponents = exponent_table(dtype, elem=elem, level=level)
    patterns = significand_patterns(mbits, level=level)
    e = np.asarray(exponents, dtype=np.int64)[:, None]
    m = np.asarray(patterns, dtype=np.int64)[None, :]
    magnitude = ((e << mbits) | m).ravel()
    sign = 1 << (ebits + mbits)
    deterministic = np.concatenate([magnitude, magnitude | sign])
    count = 256 * level if n is None else n
    if count < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    half = count // 2
    table_exp = rng.choice(np.asarray(exponents, dtype=np.int64), size=half)
    weighted = (
        (rng.integers(0, 2, size=half, dtype=np.int64) << (ebits + mbits))
        | (table_exp << mbits)
        | rng.integers(0, 1 << mbits, size=half, dtype=np.int64)
    )
    uniform = rng.integers(0, 1 << (1 + ebits + mbits), size=count - half, dtype=np.int64)
    bits = np.concatenate([deterministic, weighted, uniform])
    return _unique(_from_bits(bits, dtype), dtype)


# -- MX blocks ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Blocks:
    """A batch of MX blocks: ``values`` has shape ``(count, block_size)``; ``labels[i]`` says
    what block ``i`` is, as ``"family: detail"``."""

    values: NDArray[Any]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or len(self.labels) != self.values.shape[0]:
            raise ValueError("Blocks: values must be (count, block_size) with one label each")

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def __iter__(self) -> Iterator[tuple[str, NDArray[Any]]]:
        yield from zip(self.labels, self.values, strict=True)

    def family(self, name: str) -> Blocks:
        """Only the blocks whose label starts with ``name:``."""
        keep = [i for i, label in enumerate(self.labels) if label.split(":")[0] == name]
        return Blocks(self.values[keep], tuple(self.labels[i] for i in keep))

    @property
    def families(self) -> tuple[str, ...]:
        """The family names, in order of first appearance."""
        return tuple(dict.fromkeys(label.split(":")[0] for label in self.labels))


class _Builder:
    """Collects blocks as float64 lists, then rounds them once to the input type."""

    def __init__(self, block_size: int, dtype: str) -> None:
        self.block_size = block_size
        self.dtype = dtype
        self.rows: list[NDArray[np.float64]] = []
        self.labels: list[str] = []

    def add(self, label: str, values: Sequence[float] | NDArray[np.float64]) -> None:
        """A block with ``values`` first and +0.0 after them (cut to ``block_size``)."""
        row = np.zeros(self.block_size, dtype=np.float64)
        v = np.asarray(values, dtype=np.float64)[: self.block_size]
        row[: v.size] = v
        self.rows.append(row)
        self.labels.append(label)

    def add_chunked(self, label: str, head: Sequence[float], rest: Sequence[float]) -> None:
        """As many blocks as it takes to hold ``rest``, each starting with ``head``."""
        room = self.block_size - len(head)
        if room <= 0:
            self.add(label, head)
            return
        chunks = [rest[i : i + room] for i in range(0, len(rest), room)] or [[]]
        for k, chunk in enumerate(chunks):
            part = f" (part {k + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            self.add(label + part, [*head, *chunk])

    def build(self) -> Blocks:
        _, _, _, np_dtype, _ = _layout(self.dtype)
        if not self.rows:
            return Blocks(np.zeros((0, self.block_size), dtype=np_dtype), ())
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.stack(self.rows).astype(np_dtype)
        # Drop blocks that the input type made identical to an earlier one (e.g. fp16 flushes).
        seen: set[bytes] = set()
        keep = []
        for i, row in enumerate(values):
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                keep.append(i)
        return Blocks(values[keep], tuple(self.labels[i] for i in keep))


def _next(x: float, dtype: str, direction: int) -> float:
    """The neighbour of ``x`` in ``dtype`` towards +Inf (direction 1) or -Inf (-1)."""
    _, _, _, np_dtype, _ = _layout(dtype)
    with np.errstate(over="ignore"):
        v = np.asarray([x], dtype=np_dtype)
    if not np.isfinite(v[0]):
        return float(v[0])
    bits = int(_bits(v, dtype)[0])
    sign = 1 << (8 * v.itemsize - 1)
    if bits & ~sign == 0:  # ±0
        step = 1 if direction > 0 else sign | 1
        return float(_from_bits([step], dtype)[0])
    magnitude_up = (bits & sign == 0) == (direction > 0)
    return float(_from_bits([bits + (1 if magnitude_up else -1)], dtype)[0])


def _around(x: float, dtype: str) -> list[float]:
    """``x`` and its two neighbours in ``dtype``."""
    return [x, _next(x, dtype, -1), _next(x, dtype, 1)]


def _positive_values(elem: Format) -> NDArray[np.float64]:
    v = elem.values[np.isfinite(elem.values)]
    result: NDArray[np.float64] = np.unique(np.abs(v))
    return result


def _midpoints(elem: Format) -> list[float]:
    v = _positive_values(elem)
    return [float(m) for m in (v[:-1] + v[1:]) / 2]


def _scale_exponents(dtype: str, level: int) -> list[int]:
    """Scale exponents tried: the ends of E8M0's range and a few in the middle, clipped to
    what the input type can reach."""
    _, mbits, bias, _, _ = _layout(dtype)
    low = 1 - bias - mbits  # smallest subnormal exponent of the input type
    high = bias
    table = {-127, -126, -125, -124, -100, -64, -2, -1, 0, 1, 2, 64, 100, 123, 124, 125, 126}
    if level >= 2:
        table |= set(range(-127, 128, 7))
    table |= {low, low + 1, low + mbits, 1 - bias, 2 - bias, high - 3, high - 2, high - 1}
    return sorted(s for s in table if low - 2 <= s <= high and -127 <= s <= 127)


def _tie_blocks(b: _Builder, elem: Format, dtype: str, level: int) -> None:
    """Ties (midpoints of neighbouring element values) at each scale, and their neighbours.

    The block maximum is ``elem.max * 2**s``, so the OCP scale is ``2**s`` and the scaled
    elements land exactly on the midpoints.
    """
    assert elem.emax is not None
    mids = _midpoints(elem)
    top = float(ml_dtypes.finfo(float_dtype(dtype)).max)
    for s in _scale_exponents(dtype, level):
        scale = 2.0**s
        anchor = elem.max * scale
        if anchor > top:
            continue
        rest: list[float] = []
        for m in mids:
            x = m * scale
            rest += [x, -x]
            if level >= 1 and len(mids) <= 16:
                rest += [_next(x, dtype, -1), _next(x, dtype, 1)]
        b.add_chunked(f"ties: element midpoints at scale 2^{s}", [anchor], rest)
        if level >= 2:
            b.add_chunked(f"ties: midpoints under a power-of-two max at scale 2^{s}",
                          [2.0**elem.emax * scale], rest)


def _scale_boundary_blocks(b: _Builder, elem: Format, dtype: str, level: int) -> None:
    """Block maxima on the boundaries of the scale rules, and one ulp either side.

    FLOOR moves at powers of two; EVEN rounds the significand of amax up at 1.75 (E2M1) or
    1.9375 (E4M3); CEIL moves just above a power of two; RCEIL/round-up move where
    ``amax / elem.max`` crosses a power of two.
    """
    assert elem.emax is not None
    significands = [1.0, 1.5, 1.75, 1.8125, 1.875, 1.9375, elem.max / 2.0**elem.emax]
    _, mbits, bias, _, _ = _layout(dtype)
    exponents = sorted({1 - bias - 1, 1 - bias, 2 - bias, -1, 0, 1, elem.emax, elem.emax + 1,
                        bias - 2, bias - 1, bias})
    if level >= 2:
        exponents = sorted(set(exponents) | set(range(1 - bias - mbits, bias + 1, 5)))
    mids = _midpoints(elem)
    for e in exponents:
        for sig in dict.fromkeys(significands):
            amax = sig * 2.0**e
            # Element midpoints at the FLOOR scale 2^(e - emax), below amax.
            below = [m for m in mids if m < sig * 2.0**elem.emax]
            fill = [m * 2.0 ** (e - elem.emax) for m in below[:: max(1, len(below) // 8)]]
            for k, a in enumerate(_around(amax, dtype)):
                where = ("", ", one ulp below", ", one ulp above")[k]
                b.add(f"scale-boundaries: amax {sig}·2^{e}{where}", [a, -a / 3, *fill])
                b.add(f"scale-boundaries: negative amax -{sig}·2^{e}{where}", [-a, a / 2, *fill])


def _special_blocks(b: _Builder, elem: Format) -> None:
    """NaN, Inf and signed-zero blocks in the positions that trip implementations."""
    nan, inf = float("nan"), float("inf")
    top = elem.max
    b.add("specials: all +0.0", [])
    b.add("specials: all -0.0", [-0.0] * b.block_size)
    b.add("specials: +0.0 and -0.0 alternating", [0.0, -0.0] * (b.block_size // 2))
    b.add("specials: -0.0 beside a maximum", [top, -0.0])
    b.add("specials: NaN first", [nan, 1.0])
    b.add("specials: NaN last", [1.0] + [0.0] * (b.block_size - 2) + [nan])
    b.add("specials: negative NaN", [-nan, 1.0])
    b.add("specials: all NaN", [nan] * b.block_size)
    b.add("specials: +Inf", [inf, 1.0])
    b.add("specials: -Inf", [-inf, 1.0])
    b.add("specials: +Inf and -Inf", [inf, -inf, 2.0])
    b.add("specials: NaN and +Inf", [nan, inf, 1.0])
    b.add("specials: +Inf last", [0.5] + [0.0] * (b.block_size - 2) + [inf])
    b.add("specials: NaN beside a tiny value", [nan, 2.0**-130])


def _reference_blocks(b: _Builder, elem: Format) -> None:
    """The MXFP4 blocks of spec/sources.md §6.1-6.3 (vectors 1-22)."""
    if elem.name != "e2m1":
        return
    tiny_bits = float(np.frombuffer(np.uint32(0x3E800001).tobytes(), np.float32)[0])
    blocks: list[tuple[int, list[float]]] = [
        (1, [6, 5.0]), (2, [6, 0.25]), (3, [6, 1.25]), (4, [6, 2.5]), (5, [6, 0.75, 1.75, 3.5]),
        (6, [4, -0.0]), (7, [4, -0.25]), (8, [4, -0.2]), (9, [4, tiny_bits]),
        (10, [-5.0, 3.0, 2.9]), (11, [7.0, 1.0, 0.3, -2.9]), (12, [6.5, 1.0, 0.76]),
        (13, [3.5, 1.0, 0.25]), (14, [7.5, 1.0]), (15, [1.5, 0.125, 0.1875]),
        (16, [6, 5, 0.25, 0.75]), (17, [0.0, -0.0]), (18, [float("nan"), 1.0]),
        (19, [float("inf"), 1.0]), (20, [2.0**-125, 2.0**-127]), (21, [1e-38, 5e-39]),
        (22, [3e38, 1.0]),
    ]
    for number, block in blocks:
        b.add(f"reference: sources.md §6 #{number}", block)


def _tiny_blocks(b: _Builder, elem: Format, dtype: str) -> None:
    """Blocks whose maximum is 2^-125 .. 2^-149: the bottom of E8M0 and float32's subnormals."""
    b.add("tiny: [2^-125, 2^-127]", [2.0**-125, 2.0**-127])
    b.add("tiny: [1e-38, 5e-39]", [1e-38, 5e-39])
    b.add("tiny: all 2^-149", [2.0**-149] * b.block_size)
    b.add("tiny: 1.75·2^-126 and its fractions", [1.75 * 2.0**-126, 2.0**-127, -(2.0**-128)])
    mids = _midpoints(elem)
    for k in range(125, 150):
        amax = 2.0**-k
        b.add(f"tiny: amax 2^-{k}", [amax, -amax / 2, amax / 4, *(m * amax / elem.max
                                                                    for m in mids[:8])])
        b.add(f"tiny: amax 1.75·2^-{k}", [1.75 * amax, 0.75 * amax, -0.25 * amax])
    _, mbits, bias, _, _ = _layout(dtype)
    smallest = 2.0 ** (1 - bias - mbits)
    b.add(f"tiny: smallest {dtype} subnormal", [smallest, -smallest])
    b.add(f"tiny: largest {dtype} subnormal",
          [2.0 ** (1 - bias) - smallest, 2.0 ** (1 - bias)])


def _huge_blocks(b: _Builder, elem: Format, dtype: str) -> None:
    """Blocks near the top of the input type: 2^127 and the largest finite value."""
    top = float(ml_dtypes.finfo(float_dtype(dtype)).max)
    _, _, bias, _, _ = _layout(dtype)
    b.add("huge: [3e38, 1.0]", [3e38, 1.0])
    b.add(f"huge: largest finite {dtype}", [top, 1.0, -top / 2])
    b.add(f"huge: all largest finite {dtype}", [top] * b.block_size)
    for sig in (1.0, 1.5, 1.75, 1.9375):
        amax = sig * 2.0**bias
        b.add(f"huge: amax {sig}·2^{bias}", [amax, -amax / 4, 6.0, -(2.0**-126)])
        b.add(f"huge: amax {sig}·2^{bias}, one ulp below", [_next(amax, dtype, -1), 1.0])
    b.add(f"huge: amax 2^{bias} with element ties",
          [2.0**bias, *(m * 2.0 ** (bias - (elem.emax or 0)) for m in _midpoints(elem)[:16])])


def _random_blocks(b: _Builder, elem: Format, dtype: str, level: int, seed: int,
                   n: int | None) -> None:
    """Seeded random blocks: a random block exponent, elements spread below it, some exactly
    on element midpoints at the block's scale, an occasional special value."""
    count = 64 * level if n is None else n
    if count < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng([seed, 0x6D78])
    _, mbits, bias, _, _ = _layout(dtype)
    mids = np.asarray(_midpoints(elem))
    for i in range(count):
        e = int(rng.integers(1 - bias - mbits, bias + 1))
        spread = rng.integers(0, 12, size=b.block_size)
        values = rng.uniform(1.0, 2.0, size=b.block_size) * np.exp2(e - spread)
        values *= rng.choice([-1.0, 1.0], size=b.block_size)
        on_tie = rng.random(b.block_size) < 0.3
        scale = 2.0 ** (e - (elem.emax or 0))
        values[on_tie] = rng.choice(mids, size=int(on_tie.sum())) * scale
        special = rng.random(b.block_size) < 0.01
        values[special] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=int(special.sum()))
        b.add(f"random: block {i} (seed {seed}, exponent {e})", values)


def mx_blocks(
    elem: Format = E2M1,
    *,
    block_size: int = 32,
    dtype: str = "float32",
    level: int = 1,
    seed: int = 1,
    n: int | None = None,
    families: Sequence[str] | None = None,
) -> Blocks:
    """MX blocks around every boundary an MX quantizer has, for element format ``elem``.

    Families (label prefixes), in this order:

    ``ties``
        every midpoint of neighbouring ``elem`` values (both signs, with their ``dtype``
        neighbours) at each scale 2^s, the block maximum being ``elem.max * 2**s``.
    ``scale-boundaries``
        block maxima with significands 1.0, 1.5, 1.75, 1.8125, 1.875, 1.9375 and
        ``elem.max / 2**emax``, one ulp either side, at small, middle and large exponents.
    ``reference``
        the MXFP4 vectors 1-22 of the reference (E2M1 only).
    ``specials``
        NaN, ±Inf and ±0 in different positions; all-zero blocks.
    ``tiny``
        maxima 2^-125 .. 2^-149 and the input type's subnormals.
    ``huge``
        maxima near 2^127 and the input type's largest finite value.
    ``values``
        :func:`boundary_values` laid out in order, ``block_size`` at a time.
    ``random``
        ``n`` seeded random blocks (default ``64 * level``).

    ``families`` selects some of them. Values are rounded once to ``dtype``; blocks that
    became identical to an earlier one are dropped.

    >>> b = mx_blocks(families=["specials"])
    >>> "specials: NaN first" in b.labels
    True
    """
    if elem.emax is None:
        raise ValueError(f"{elem.name} is not an MX element format")
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    if level < 1:
        raise ValueError(f"level must be >= 1, got {level}")
    known = ("ties", "scale-boundaries", "reference", "specials", "tiny", "huge", "values",
             "random")
    chosen = known if families is None else tuple(families)
    unknown = [f for f in chosen if f not in known]
    if unknown:
        raise ValueError(f"unknown block families {unknown}; valid: {', '.join(known)}")
    b = _Builder(block_size, dtype)
    for family in known:
        if family not in chosen:
            continue
        if family == "ties":
            _tie_blocks(b, elem, dtype, level)
        elif family == "scale-boundaries":
            _scale_boundary_blocks(b, elem, dtype, level)
        elif family == "specials":
            _special_blocks(b, elem)
        elif family == "reference":
            _reference_blocks(b, elem)
        elif family == "tiny":
            _tiny_blocks(b, elem, dtype)
        elif family == "huge":
            _huge_blocks(b, elem, dtype)
        elif family == "values":
            values = boundary_values(dtype, elem=elem, level=level, seed=seed, n=0)
            with np.errstate(invalid="ignore"):  # signalling NaNs widen quietly
                wide = values.astype(np.float64)
            for start in range(0, values.size, block_size):
                b.add(f"values: boundary values {start}..{start + block_size - 1}",
                      wide[start : start + block_size])
        else:
            _random_blocks(b, elem, dtype, level, seed, n)
    return b.build()


# -- Hypothesis strategies ----------------------------------------------------------------------


def values_strategy(
    dtype: str = "float32", *, elem: Format | None = E2M1, level: int = 1, seed: int = 1
) -> Any:
    """A Hypothesis strategy for single ``dtype`` values (numpy scalars of that type).

    Draws a boundary value (:func:`boundary_values`) or any bit pattern of the type, so
    shrinking moves towards the boundary table's first entries.

    >>> from hypothesis import given
    >>> @given(values_strategy("bfloat16"))
    ... def test(v): assert v.dtype.name == "bfloat16"
    >>> test()
    """
    from hypothesis import strategies as st

    ebits, mbits, _, _, _ = _layout(dtype)
    table = boundary_values(dtype, elem=elem, level=level, seed=seed, n=0)
    any_bits = st.integers(0, (1 << (1 + ebits + mbits)) - 1).map(
        lambda bits: _from_bits([bits], dtype)[0]
    )
    return st.one_of(st.sampled_from(list(table)), any_bits)



def _cast(values: Sequence[float] | NDArray[np.float64], np_dtype: Any) -> NDArray[Any]:
    """Values (exact float64) rounded once to the strategy's input dtype."""
    with np.errstate(over="ignore"):
        result: NDArray[Any] = np.asarray(values, dtype=np.float64).astype(np_dtype)
    return result


def _patch(row: NDArray[Any], edits: list[tuple[int, float]], np_dtype: Any) -> NDArray[Any]:
    """``row`` with the values at the given positions replaced, in the input dtype."""
    with np.errstate(invalid="ignore"):
        out = row.astype(np.float64)
    for i, v in edits:
        out[i] = v
    return _cast(out, np_dtype)

def blocks_strategy(
    elem: Format = E2M1,
    *,
    block_size: int = 32,
    dtype: str = "float32",
    level: int = 1,
    seed: int = 1,
) -> Any:
    """A Hypothesis strategy for one MX block: a ``(block_size,)`` array of ``dtype``.

    Three kinds of draws: a block of :func:`mx_blocks` as is; such a block with a few
    positions overwritten by boundary values (NaN, Inf, ±0, subnormals, huge values among
    them); and a block built from a drawn exponent with each element an element-format value
    or midpoint at that block's scale, a neighbour of one, or a boundary value.

    >>> from hypothesis import given
    >>> @given(blocks_strategy(block_size=8))
    ... def test(block): assert block.shape == (8,)
    >>> test()
    """
    from hypothesis import strategies as st

    if elem.emax is None:
        raise ValueError(f"{elem.name} is not an MX element format")
    _, mbits, bias, np_dtype, _ = _layout(dtype)
    base = mx_blocks(elem, block_size=block_size, dtype=dtype, level=level, seed=seed, n=0)
    rows = [base.values[i] for i in range(len(base))]
    table = [float(v) for v in boundary_values(dtype, elem=elem, level=level, seed=seed, n=0)]
    grid = sorted({*(float(v) for v in _positive_values(elem)), *_midpoints(elem)})

    cast = functools.partial(_cast, np_dtype=np_dtype)
    patch = functools.partial(_patch, np_dtype=np_dtype)

    patched = st.builds(
        patch,
        st.sampled_from(rows),
        st.lists(st.tuples(st.integers(0, block_size - 1), st.sampled_from(table)), max_size=4),
    )
    element = st.one_of(
        st.tuples(st.sampled_from(grid), st.sampled_from([0, -1, 1]), st.booleans()),
        st.sampled_from(table).map(lambda v: (v, None, False)),
    )

    def compose(e: int, parts: list[tuple[float, int | None, bool]]) -> NDArray[Any]:
        scale = 2.0 ** (e - elem.emax) if elem.emax is not None else 1.0
        out = []
        for v, step, negative in parts:
            if step is None:  # a boundary value, as is
                out.append(v)
                continue
            x = v * scale
            x = _next(x, dtype, step) if step else x
            out.append(-x if negative else x)
        return cast(out)

    composed = st.builds(
        compose,
        st.integers(1 - bias - mbits, bias),
        st.lists(element, min_size=block_size, max_size=block_size),
    )
    return st.one_of(st.sampled_from(rows).map(np.copy), patched, composed)


# -- INT4 groups ---------------------------------------------------------------------------------

#: Symmetric INT4 maps a group's amax to 7.5 (compressed-tensors and Quark: scale = amax / 7.5).
_INT4_AMAX_STEPS = 7.5


def _int4_ties(b: _Builder, dtype: str, level: int) -> None:
    """Groups whose scale is exactly 2^e (amax = 7.5·2^e), with every half-integer k + 0.5
    (k = -8..7) at that scale and its ``dtype`` neighbours."""
    _, mbits, bias, _, _ = _layout(dtype)
    exponents = sorted({1 - bias - mbits + 4, 1 - bias, -10, -4, -1, 0, 1, 4, 10, bias - 4})
    if level >= 2:
        exponents = sorted(set(exponents) | set(range(1 - bias, bias - 3, 9)))
    for e in exponents:
        scale = 2.0**e
        halves = [(k + 0.5) * scale for k in range(-8, 8)]
        inner = halves[1:-1]  # neighbours of ±7.5·2^e would move amax off the anchor
        rest = [*halves, *(_next(x, dtype, -1) for x in inner),
                *(_next(x, dtype, 1) for x in inner)]
        b.add_chunked(f"ties: k+0.5 at scale 2^{e}", [_INT4_AMAX_STEPS * scale], rest)
        b.add_chunked(f"ties: k+0.5 at scale 2^{e}, negative amax",
                      [-_INT4_AMAX_STEPS * scale], rest)


def _int4_reference(b: _Builder) -> None:
    """The INT4 cases of spec/sources.md §6.7 (vectors 42 and 43): where x / s
    and x · (1/s) round differently."""
    amax = 0.9083542823791504
    b.add("reference: sources.md §6.7 #42 (x = -amax)", [amax, -amax, 0.5 * amax])
    s = 0.1012464091181755
    b.add("reference: sources.md §6.7 #43", [s * _INT4_AMAX_STEPS, 0.15186960995197296])


def int4_groups(
    *,
    group_size: int = 32,
    dtype: str = "float32",
    level: int = 1,
    seed: int = 1,
    n: int | None = None,
) -> Blocks:
    """Groups for symmetric INT4 quantizers (scale = amax / 7.5), shape ``(count, group_size)``.

    Families: ``ties`` (scales that are powers of two, every k + 0.5 and its neighbours),
    ``reference`` (the divide-versus-reciprocal cases), then the ``specials``, ``tiny``,
    ``huge``, ``values`` and ``random`` families of :func:`mx_blocks`.

    >>> g = int4_groups(group_size=16)
    >>> g.values.shape[1], g.families[:2]
    (16, ('ties', 'reference'))
    """
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    b = _Builder(group_size, dtype)
    _int4_ties(b, dtype, level)
    _int4_reference(b)
    ties = b.build()
    rest = mx_blocks(E2M1, block_size=group_size, dtype=dtype, level=level, seed=seed, n=n,
                     families=["specials", "tiny", "huge", "values", "random"])
    return Blocks(np.concatenate([ties.values, rest.values]), ties.labels + rest.labels)


def int4_group_strategy(
    *, group_size: int = 32, dtype: str = "float32", level: int = 1, seed: int = 1
) -> Any:
    """A Hypothesis strategy for one INT4 group (a ``(group_size,)`` array of ``dtype``): a
    group of :func:`int4_groups`, one with a few positions replaced by boundary values, or
    one built from a drawn scale 2^e with elements on k + 0.5, their neighbours or boundary
    values."""
    from hypothesis import strategies as st

    _, mbits, bias, np_dtype, _ = _layout(dtype)
    base = int4_groups(group_size=group_size, dtype=dtype, level=level, seed=seed, n=0)
    rows = [base.values[i] for i in range(len(base))]
    table = [float(v) for v in boundary_values(dtype, elem=None, level=level, seed=seed, n=0)]

    cast = functools.partial(_cast, np_dtype=np_dtype)
    patch = functools.partial(_patch, np_dtype=np_dtype)

    def compose(e: int, amax_first: bool, parts: list[tuple[int, int]]) -> NDArray[Any]:
        scale = 2.0**e
        out = [_next((k + 0.5) * scale, dtype, step) if step else (k + 0.5) * scale
               for k, step in parts]
        if amax_first:
            out[0] = _INT4_AMAX_STEPS * scale
        return cast(out)

    patched = st.builds(
        patch, st.sampled_from(rows),
        st.lists(st.tuples(st.integers(0, group_size - 1), st.sampled_from(table)), max_size=4))
    composed = st.builds(
        compose, st.integers(1 - bias - mbits + 4, bias - 4), st.booleans(),
        st.lists(st.tuples(st.integers(-8, 7), st.sampled_from([0, -1, 1])),
                 min_size=group_size, max_size=group_size))
    return st.one_of(st.sampled_from(rows).map(np.copy), patched, composed)
