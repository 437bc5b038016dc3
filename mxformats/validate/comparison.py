"""``mxformats compare A B [--source SRC]``: two quantized checkpoints of one model, module by
module.

Each module that either checkpoint quantizes is decoded on both sides as the serving engine
does (:meth:`~.descriptors.base.Descriptor.dequantize`, the decoder ``--source``'s figures
use; a side that keeps the module unquantized gives its BF16 ``weight``), one module at a time,
through each checkpoint's reader (so ``hf://`` reads only that module's tensors): memory is
bounded by the largest module (two decoded copies, and the source weight with ``--source``).

Per module: ``distance`` = ‖A − B‖ / ‖B‖ and its SQNR, with the sums of
:func:`~.reproduce.figures` (float64, in fixed pieces: the same figures on any machine); with
``--source``, each side's relative error against the source weight (the statistic of
``validate --source``) and which side is closer (``A``, ``B``, or ``tie`` when the two are
equal). A summary per projection kind (``down_proj``, ``gate_proj``...) gives medians, maxima
and counts.

Two checkpoints whose configs imply different modules or shapes are not two quantizations of
one model: :class:`CompareError` (exit 2).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .findings import Level
from .grid import position
from .model import Checkpoint, Options
from .numbers import read_module
from .reproduce import Source, figures, json_float

__all__ = ["CompareError", "Comparison", "ModuleComparison", "compare", "to_json"]


class CompareError(Exception):
    """The two checkpoints cannot be compared (unreadable, of different architectures, an
    unusable source): the message says why; the command exits 2."""


@dataclass
class ModuleComparison:
    """One module's figures (NaN where not computed); ``problem``: why it was not compared."""

    module: str
    distance: float = math.nan
    distance_sqnr_db: float = math.nan
    a_error: float = math.nan
    b_error: float = math.nan
    a_sqnr_db: float = math.nan
    b_sqnr_db: float = math.nan
    problem: str | None = None

    @property
    def closer(self) -> str | None:
        """``A`` or ``B``, the side with the smaller relative error against the source,
        ``tie`` when they are equal; None without both errors."""
        if math.isnan(self.a_error) or math.isnan(self.b_error):
            return None
        if self.a_error < self.b_error:
            return "A"
        return "B" if self.b_error < self.a_error else "tie"


@dataclass
class Comparison:
    a: str
    b: str
    a_format: str
    b_format: str
    source: str | None
    modules: list[ModuleComparison] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every module was compared."""
        return all(m.problem is None for m in self.modules)


def _open(root: str, allow: tuple[Path, ...]) -> Checkpoint:
    from .files import load

    loaded = load(root, Options(level=Level.STRUCTURE, allow_symlink_root=allow))
    if loaded.ckpt is None or loaded.fatal is not None:
        raise CompareError(f"cannot read {root}: {loaded.fatal}")
    if loaded.ckpt.descriptor is None:
        raise CompareError(f"{root}: no quantization format mxformats decodes")
    return loaded.ckpt


def _shapes(ckpt: Checkpoint) -> dict[str, tuple[int, ...] | None]:
    return {name: e.shape for name, e in ckpt.expected.items() if e.linear}


def _same_model(a: Checkpoint, b: Checkpoint, a_root: str, b_root: str) -> None:
    """CompareError unless both configs imply the same linear modules with the same
    shapes."""
    sa, sb = _shapes(a), _shapes(b)
    if not sa or not sb:
        raise CompareError("cannot tell the architecture of "
                           f"{a_root if not sa else b_root} from its config")
    if sa == sb:
        return
    only = sorted(sa.keys() ^ sb.keys())
    if only:
        side = a_root if only[0] in sa else b_root
        raise CompareError(f"architectures differ: {only[0]} exists only in {side} "
                           f"({len(only)} module(s) in one only)")
    name = next(n for n in sorted(sa) if sa[n] != sb[n])
    raise CompareError(f"architectures differ: {name} is {list(sa[name] or ())} in {a_root}, "
                       f"{list(sb[name] or ())} in {b_root}")


def decoded(ckpt: Checkpoint, name: str) -> NDArray[Any]:
    """Module ``name``'s weight as the engine sees it: decoded by its format's descriptor
    when quantized, else the stored float ``weight``. ValueError when it cannot be read or
    decoded."""
    module = ckpt.modules[name]
    desc = ckpt.descriptor
    assert desc is not None
    expected = ckpt.expected.get(name)
    shape = None if expected is None else expected.shape
    if module.quantized:
        arrays = read_module(ckpt, module, tuple(module.tensors))
        if arrays is None:
            raise ValueError("its tensors cannot be read")
        try:
            d = np.asarray(desc.for_module(ckpt, name).dequantize(
                arrays, shape[-1] if shape else 0))
        except (KeyError, NotImplementedError, TypeError) as exc:
            raise ValueError(f"cannot be decoded ({exc})") from None
    else:
        if "weight" not in module.tensors:
            raise ValueError("no weight")
        d = ckpt.read(module.tensors["weight"].name)
        if d.dtype.kind not in "f" and d.dtype.name != "bfloat16":
            raise ValueError(f"an unquantized weight of dtype {d.dtype.name}")
    if shape is not None and tuple(d.shape) != tuple(shape):
        raise ValueError(f"decodes to {list(d.shape)}, the config implies {list(shape)}")
    return d


def compare(a_root: str, b_root: str, source: Path | None = None,
            allow: tuple[Path, ...] = ()) -> Comparison:
    """Compare checkpoints ``a_root`` and ``b_root`` (folders or ``hf://``) module by module
    (see the module docstring). CompareError when they cannot be."""
    a, b = _open(a_root, allow), _open(b_root, allow)
    _same_model(a, b, a_root, b_root)
    src = None
    if source is not None:
        src = Source(source, allow)
        if not src.supported:
            raise CompareError(f"--source {source} is {src.kind}, not a form mxformats reads "
                               "(bf16, compressed-tensors INT4, FP8 block)")
    out = Comparison(a_root, b_root, a.format.value, b.format.value,
                     None if source is None else str(source))
    names = sorted(n for n in a.modules.keys() & b.modules.keys()
                   if a.modules[n].quantized or b.modules[n].quantized)
    for name in names:
        out.modules.append(_module(a, b, src, name))
    return out


def _module(a: Checkpoint, b: Checkpoint, src: Source | None, name: str) -> ModuleComparison:
    m = ModuleComparison(name)
    try:
        da = decoded(a, name)
        db = decoded(b, name)
    except (ValueError, OSError) as exc:
        m.problem = str(exc)
        return m
    m.distance, m.distance_sqnr_db = figures(da, db)
    if src is None:
        return m
    try:
        x = src.weight(name)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        m.problem = f"the source weight cannot be read ({exc})"
        return m
    if x is None or tuple(x.shape) != tuple(da.shape):
        m.problem = "no source weight of the module's shape"
        return m
    m.a_error, m.a_sqnr_db = figures(da, x)
    m.b_error, m.b_sqnr_db = figures(db, x)
    return m


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def summary(c: Comparison) -> dict[str, dict[str, Any]]:
    """Per projection kind: modules, distance median and max, and with the source each
    side's median error and how often each is closer."""
    groups: dict[str, list[ModuleComparison]] = defaultdict(list)
    for m in c.modules:
        if m.problem is None:
            groups[position(m.module)[2]].append(m)
    out: dict[str, dict[str, Any]] = {}
    for proj, ms in sorted(groups.items()):
        d = [m.distance for m in ms]
        row: dict[str, Any] = {"modules": len(ms), "distance_median": json_float(_median(d)),
                               "distance_max": json_float(max(d))}
        if c.source is not None:
            closer = [m.closer for m in ms]
            row.update({"a_error_median": json_float(_median([m.a_error for m in ms])),
                        "b_error_median": json_float(_median([m.b_error for m in ms])),
                        "a_closer": closer.count("A"), "b_closer": closer.count("B"),
                        "tied": closer.count("tie")})
        out[proj] = row
    return out


def to_json(c: Comparison) -> dict[str, Any]:
    """The JSON report of ``mxformats compare`` (non-finite figures as strings, as the
    validate report writes them)."""
    modules = []
    for m in c.modules:
        row: dict[str, Any] = {"module": m.module}
        if m.problem is not None:
            row["problem"] = m.problem
        row.update({"distance": json_float(m.distance),
                    "distance_sqnr_db": json_float(m.distance_sqnr_db)})
        if c.source is not None:
            row.update({"a_error": json_float(m.a_error), "b_error": json_float(m.b_error),
                        "a_sqnr_db": json_float(m.a_sqnr_db),
                        "b_sqnr_db": json_float(m.b_sqnr_db), "closer": m.closer})
        modules.append(row)
    return {"a": {"checkpoint": c.a, "format": c.a_format},
            "b": {"checkpoint": c.b, "format": c.b_format},
            "source": c.source, "complete": c.complete, "summary": summary(c),
            "modules": modules}
