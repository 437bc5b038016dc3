"""Plausibility of the decoded magnitudes: is each quantized module's weight, as the loader
decodes it, of the size trained transformer weights have?

A scale of the wrong size passes every structural and per-block check: a DeepSeek-layout
``weight_scale_inv`` holding ``448 / amax`` instead of ``amax / 448`` (an inverted scale) is a
finite, positive float32 per tile, and the codes are tight against it; vLLM decodes every
weight about 10^5..10^6 times too large. Only the magnitude shows it.

**What is measured, and at which level.** Per module, from its scales alone (level
``scales``, and the same at ``full``): the largest magnitude each block can decode to, from
:meth:`~.descriptors.base.Descriptor.block_scales` (the block's scale, with the per-tensor
scale applied as the loader applies it, times the element format's largest magnitude: 448 for
E4M3, 6 for E2M1, 8 for INT4), and of those their maximum (the module's decoded max) and their
RMS. Every producer maps a block's amax onto the element maximum, so this bound *is* the
decoded max, within the tightness the full-level checks verify (``SCALE_NOT_TIGHT``,
``FP8_TILE_NOT_TIGHT``, ``NVFP4_BLOCK_NOT_TIGHT``: at most 2x). Measured on every producer
fixture (``tests/data/producers``), bound / true decoded max is 1.0 (FP8 block, NVFP4), at
most 1.14 (INT4, W4A8) and 1.5 (MXFP4). An orders-of-magnitude verdict gains nothing from the
codes, so the check needs no ``full`` read. At ``full`` the codes' RMS is
``EXPERT_RMS_OUTLIER``'s (a warning from 4x off the layer median), which leaves an expert this
check flags to this check's error.

**The bounds** (:data:`MAGNITUDE_MIN`, :data:`MAGNITUDE_MAX`, :data:`SIBLING_RATIO`):

- Published: the DeepSeek-V3.1 release's ``self_attn.o_proj.weight_scale_inv`` values
  listed in deepseek-ai/DeepSeek-V3 issue #961 span 2.02e-5 .. 5.17e-3, tile amaxes (× 448)
  of 9.0e-3 .. 2.3. DeepGEMM's ``per_block_cast_to_fp8``, which wrote the DeepSeek-V3 and
  Kimi-K2 FP8 releases, clamps a tile's amax at 1e-4 (:mod:`mxformats.schemes.fp8_block`,
  profile ``deepseek``): no real tile is meant to be smaller.
- Measured on the producer fixtures (random N(0, 0.02) weights, 1 % of rows five times
  wider): module decoded max 0.070 .. 0.385, decoded RMS 0.020 .. 0.027, every producer.
- A module's decoded max outside [1e-5, 1e3] is an error: 1e3 is over 400x the largest
  published tile amax, and the inverted DeepSeek scale of a tile of amax ``a`` decodes to
  ``448² / a``, above 8.7e4 for every published tile; 1e-5 is a decade under DeepGEMM's
  amax floor 1e-4 (the bound of its all-zero tiles, whose scale is ``1e-4 / 448``: a module
  of such tiles is all zero, not mis-scaled) and 900x under the smallest published tile. A
  module whose scales are all zero (an all-zero weight) or non-finite is left to the checks
  of those scales.
- An expert projection whose block RMS is :data:`SIBLING_RATIO` (100x) or more above the
  median of that projection over its layer's experts (at least 4 of them) is an
  error: the experts of one layer share one initialisation and one optimizer, and on the
  producer fixtures no expert's block RMS is more than 1.23x its siblings' median (FP8 block;
  1.03 to 1.06 for the 4-bit formats). Below its siblings, the scales cannot tell a
  mis-scaled module from an all-zero one, which the producers write with their smallest
  scales; the codes can, at ``full``.

One module gives one finding (the range when it is out of it, else its siblings), and none
when its own checks already gave an error (a NaN, negative or zero scale, an NVFP4 global
scale in the other convention, codes not tight against their scales: that error names the
cause); the modules of one root cause (an exporter that inverts every scale) are listed
(:class:`~.findings.Listing`): the first :data:`~.findings.MAX_LISTED`, then one summary.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.fast import scan as fast_scan

from .findings import MAX_LISTED, Finding, Level, Listing, Severity, declare

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .descriptors.base import Descriptor
    from .model import Checkpoint

__all__ = ["DECODED_MAGNITUDE", "MAGNITUDE_MAX", "MAGNITUDE_MIN", "SIBLING_RATIO", "Magnitude",
           "findings", "magnitude_from_json", "magnitude_to_json", "measure"]

#: A module's decoded max below this is implausible: a decade under DeepGEMM's tile amax
#: floor, which its all-zero tiles decode to.
MAGNITUDE_MIN = 1e-5
#: A module's decoded max above this is implausible.
MAGNITUDE_MAX = 1e3
#: An expert this many times above its siblings' median is implausible.
SIBLING_RATIO = 100.0
#: The fewest siblings (other experts of the layer with that projection) a comparison needs.
MIN_SIBLINGS = 3

DECODED_MAGNITUDE = declare(
    "DECODED_MAGNITUDE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=(f"a block decoding above {MAGNITUDE_MAX:g}",
                f"every block decoding below {MAGNITUDE_MIN:g}",
                f"an expert {SIBLING_RATIO:g}x its siblings"),
    formats=("quark-mxfp4", "quark-w4a8", "compressed-tensors-int4", "compressed-tensors-nvfp4",
             "compressed-tensors-fp8-block", "compressed-tensors-mixed", "modelopt-nvfp4",
             "modelopt-fp8-block", "modelopt-mixed", "fp8-block"),
    roles=("weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale"),
    dtypes=("U8", "F8_E4M3", "F32", "BF16", "F16"),
    meaning=f"A quantized module decodes, as its loader decodes it, to weights of implausible "
            f"size: its largest |value| bounded from its scales (block scale, with the per-tensor "
            f"scale applied, times the element format's largest value) is outside "
            f"[{MAGNITUDE_MIN:g}, {MAGNITUDE_MAX:g}], or an expert projection is "
            f"{SIBLING_RATIO:g}x or more above the median of that projection over its layer's "
            "experts. Typical cause: an inverted scale (a DeepSeek weight_scale_inv holding "
            "448/amax instead of amax/448 decodes every weight about 10^5..10^6 times too "
            "large).",
    fix="Check the exporter's scale convention against the loader's (multiplier or divisor, "
        "amax/qmax or its reciprocal) and re-export; validate with --source to compare with the "
        "BF16 weights.")

_EXPERT = re.compile(r"^(?P<layer>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<p>\w+)$")


@dataclass(frozen=True)
class Magnitude:
    """A module's decoded magnitude from its scales: ``amax`` (the largest magnitude it can
    decode to) and ``rms`` (the RMS of its blocks' largest |values|), over its ``blocks``
    finite blocks."""

    amax: float
    rms: float
    blocks: int


def _values(scales: NDArray[Any]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The distinct |values| of ``scales`` and how many times each occurs. A 1- or 2-byte
    dtype (E4M3, E8M0, BF16: the block scales of Kimi-size modules, up to 10^6 a module) is
    counted by bit pattern and each pattern decoded once; wider ones are decoded in place."""
    a = np.ascontiguousarray(scales).reshape(-1)
    if a.dtype.itemsize in (1, 2):
        bits = np.dtype(f"u{a.dtype.itemsize}")
        counts = fast_scan.pattern_counts(a)
        present = np.flatnonzero(counts)
        table = present.astype(bits).view(a.dtype).astype(np.float64)
        return np.abs(table), counts[present]
    return np.abs(a.astype(np.float64)), np.ones(a.size, np.int64)


def measure(desc: Descriptor, arrays: Mapping[str, NDArray[Any]]) -> Magnitude | None:
    """The :class:`Magnitude` of one module stored in ``desc``'s format (``arrays``: its
    scale tensors, as read at level ``scales``): its :meth:`block_scales
    <.descriptors.base.Descriptor.block_scales>` decoded, the finite ones times the factor.
    None where the format has no block bound, or no block or factor is finite (the scale
    checks report a NaN, infinite or zero scale)."""
    found = desc.block_scales(dict(arrays))
    if found is None:
        return None
    values, counts = _values(found[0])
    finite = np.isfinite(values)
    values, counts = values[finite], counts[finite]
    factor = abs(found[1])
    if not values.size or not math.isfinite(factor):
        return None
    top = float(values.max())
    with np.errstate(over="ignore"):
        amax = top * factor
        # the mean square relative to the largest: no overflow whatever the scales
        rel = float(np.sqrt(np.dot(counts, np.square(values / top)) / counts.sum())) \
            if top > 0 else 0.0
    if not math.isfinite(amax):
        return None
    return Magnitude(amax, rel * amax, int(counts.sum()))


def magnitude_to_json(m: Magnitude | None) -> list[float] | None:
    """``m`` as a task record holds it: ``[amax, rms, blocks]``."""
    return None if m is None else [m.amax, m.rms, m.blocks]


def magnitude_from_json(data: object) -> Magnitude | None:
    """The :class:`Magnitude` :func:`magnitude_to_json` wrote; ValueError for anything else."""
    if data is None:
        return None
    if not (isinstance(data, list) and len(data) == 3 and isinstance(data[2], int)
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                    and x >= 0 for x in data)):
        raise ValueError("a magnitude record is not [amax, rms, blocks]")
    return Magnitude(float(data[0]), float(data[1]), int(data[2]))


def _out_of_range(m: Magnitude) -> str:
    if m.amax > MAGNITUDE_MAX:
        return f"above {MAGNITUDE_MAX:g}"
    if 0 < m.amax < MAGNITUDE_MIN:
        return f"below {MAGNITUDE_MIN:g}"
    return ""


def _sibling_ratios(measured: Mapping[str, Magnitude]) -> dict[str, tuple[float, float, int]]:
    """Per expert projection 100x or more above its siblings: (its block RMS / the median of
    its layer's experts' block RMS for that projection, that median, how many siblings; the
    median over all of them, itself included, which one outlier among 4 or more does not
    move past the others). Not below: from the scales alone a module far
    under its siblings is an all-zero one, which the producers write with the smallest
    scales (DeepGEMM ``1e-4 / 448``, UE8M0 ``2^-22``); the codes tell them apart, at level
    ``full`` (EXPERT_ALL_ZERO, EXPERT_RMS_OUTLIER)."""
    groups: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for name, m in measured.items():
        match = _EXPERT.match(name)
        if match is not None and m.rms > 0:
            groups[(match["layer"], match["p"])][name] = m.rms
    out: dict[str, tuple[float, float, int]] = {}
    for members in groups.values():
        if len(members) <= MIN_SIBLINGS:
            continue
        names = list(members)
        rms = np.array([members[n] for n in names])
        median = float(np.exp(np.median(np.log(rms))))
        for i in np.flatnonzero(rms / median >= SIBLING_RATIO):
            out[names[i]] = (float(rms[i] / median), median, len(names) - 1)
    return out


def findings(ckpt: Checkpoint, measured: Mapping[str, Magnitude | None],
             weight_param: Mapping[str, str]) -> tuple[list[Finding], set[str]]:
    """DECODED_MAGNITUDE over the modules ``measured`` (module -> its :class:`Magnitude`:
    the modules whose own checks gave no error;
    ``weight_param``: module -> the parameter its codes are in, where the finding points),
    in module order, one per module, listed; and the names of the modules it flagged (the
    expert RMS check leaves those to it)."""
    have = {n: m for n, m in measured.items() if m is not None}
    siblings = _sibling_ratios(have)
    listing = Listing(MAX_LISTED)
    out: list[Finding] = []
    flagged: set[str] = set()
    for name in sorted(have):
        m = have[name]
        where = _out_of_range(m)
        if where:
            why = (f"decodes to a largest |value| of {m.amax:.4g}, {where}: trained "
                   f"transformer weights stay within [{MAGNITUDE_MIN:g}, {MAGNITUDE_MAX:g}] "
                   "(an inverted or mis-scaled scale)")
        elif name in siblings:
            ratio, median, count = siblings[name]
            why = (f"decodes {ratio:.3g}x the median block magnitude of that projection over "
                   f"its layer's {count + 1} experts ({m.rms:.4g} vs {median:.4g}): a scale of "
                   "another size than its siblings'")
        else:
            continue
        flagged.add(name)
        ref = ckpt.tensors.get(f"{name}.{weight_param.get(name, 'weight')}")
        out.extend(listing.add(Finding(
            DECODED_MAGNITUDE, f"{name}: {why}", None if ref is None else ref.file,
            None if ref is None else ref.name, None if ref is None else ref.begin,
            extra={"amax": m.amax, "block_rms": m.rms})))
    out.extend(listing.rest())
    return out, flagged
