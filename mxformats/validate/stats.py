"""Statistics of the numbers checks, below the format descriptors: pure functions over numpy
arrays (``e8m0_stats``, ``mx_tightness``, ...) and the per-tensor findings the descriptors
(:mod:`~mxformats.validate.descriptors`) build from them; the checks of the group ``numbers``
are declared here. :mod:`~mxformats.validate.numbers` runs them over a checkpoint.

**Scale tightness** is a source-free invariant of the producers, measured on the producer
fixtures (``tests/data/producers``) and on every ``quantize_mx`` / ``quantize_int4`` /
``quantize_w4a8`` profile (``tests/test_validate_numbers.py``):

- MXFP4: the largest |code| of each non-zero block is ≥ 4.0 when the scale rule is floor or
  "even" (Quark, OCP, vLLM, compressed-tensors, torchao floor/even), ≥ 3.0 for round-up
  (triton round-up, torchao rceil) and ≥ 2.0 for torchao's ``ceil``; blocks whose scale sits at
  the exponent clamp (byte ≤ 1 or ≥ 254) are exempt.
- INT4 (compressed-tensors, group 32) and W4A8 (Quark, per row): every group / row holding a
  non-zero code has a code of magnitude ≥ 7 (scale = amax / 7.5), except where the scale sits
  at Quark's float32-eps floor.

A wrong group size, axis or nibble packing breaks the invariant without a source.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from mxformats.fast import scan as fast_scan
from mxformats.fast.histogram import byte_counts, first_byte_in
from mxformats.formats import E2M1
from mxformats.schemes.int4 import unpack_int4
from mxformats.tensorfile import DTYPES

from .findings import Finding, Level, Severity, declare
from .parallel import INTERNAL_ERROR  # noqa: F401 (declared first: the order of CHECKS)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .model import Checkpoint, CodeStats, Module, TensorRef

__all__ = [
    "E8M0_WINDOW",
    "W4A8_SCALE2_MAX",
    "W4A8_SCALE2_TOLERANCE",
    "code_histogram",
    "e8m0_stats",
    "expert_rms_outliers",
    "fp4_peaks",
    "int4_group_tightness",
    "mx_tightness",
    "nonfinite_count",
    "scale_value_stats",
    "w4a8_row_tightness",
    "w4a8_scale2_severity",
]


#: The formats whose weight scales are E8M0 bytes (stored U8): Quark MXFP4.
_E8M0_FORMATS = ("quark-mxfp4",)
#: The formats holding float scale tensors (FP8 block and INT4 scales, NVFP4 global and
#: activation scales, W4A8's two stages), and those tensors' roles and dtypes.
_FLOAT_SCALE_FORMATS = ("quark-w4a8", "compressed-tensors-int4", "compressed-tensors-nvfp4",
                       "compressed-tensors-fp8-block", "compressed-tensors-mixed",
                       "modelopt-nvfp4", "modelopt-fp8-block", "modelopt-mixed", "fp8-block")
_FLOAT_SCALE_ROLES = ("weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale",
                     "input_scale", "input_global_scale")
_FLOAT_DTYPES = ("F32", "BF16", "F16")
E8M0_NAN = declare(
    "E8M0_NAN", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("byte 0xFF",), formats=_E8M0_FORMATS, roles=("weight_scale",), dtypes=("U8",),
    meaning="An E8M0 scale byte is 0xFF: NaN per OCP; Quark/vLLM decode the whole block as NaN.",
    fix="Re-quantize the module; no producer writes 0xFF (old Quark log2(0) bug).")
E8M0_ZERO = declare(
    "E8M0_ZERO", severity=Severity.WARNING, level=Level.SCALES, group="numbers",
    conditions=("byte 0x00",), formats=_E8M0_FORMATS, roles=("weight_scale",), dtypes=("U8",),
    meaning="An E8M0 scale byte is 0x00: 2^-127 per OCP but 0.0 in vLLM's bf16 emulation.",
    fix="Check the block is meant to be zero; new Quark writes byte 1 for all-zero blocks.")
E8M0_RANGE = declare(
    "E8M0_RANGE", severity=Severity.WARNING, level=Level.SCALES, group="numbers",
    conditions=("below the window", "above the window"), formats=_E8M0_FORMATS,
    roles=("weight_scale",), dtypes=("U8",),
    meaning="E8M0 scale bytes outside the plausible window for weights (2^-40 .. 2^8).",
    fix="Look for a scale encoding with another bias or garbage scale bytes; re-quantize.")
SCALE_NONFINITE = declare(
    "SCALE_NONFINITE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("NaN", "+Inf", "-Inf"), formats=_FLOAT_SCALE_FORMATS, roles=_FLOAT_SCALE_ROLES,
    dtypes=_FLOAT_DTYPES,
    meaning="An INT4 or FP8 scale is NaN or infinite: the whole group / row / tensor decodes to "
            "NaN.",
    fix="Re-quantize the module from its source.")
SCALE_NEGATIVE = declare(
    "SCALE_NEGATIVE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("negative",), formats=_FLOAT_SCALE_FORMATS, roles=_FLOAT_SCALE_ROLES,
    dtypes=_FLOAT_DTYPES,
    meaning="A scale is negative (no observer writes one): the weights' signs flip.",
    fix="Re-quantize the module from its source.")
SCALE_ZERO = declare(
    "SCALE_ZERO", severity=Severity.WARNING, level=Level.SCALES, group="numbers",
    conditions=("zero",), formats=_FLOAT_SCALE_FORMATS, roles=_FLOAT_SCALE_ROLES,
    dtypes=_FLOAT_DTYPES,
    meaning="A scale is zero: the group / row / tensor is silently zeroed (an error for W4A8, "
            "where vLLM asserts on it, and for an NVFP4 scale vLLM divides by: a ModelOpt "
            "input_scale, a compressed-tensors global scale; the result is Inf).",
    fix="Check the weights are meant to be zero; otherwise re-quantize.")
W4A8_SCALE2_MAX = 448.0 / 7.5
#: Relative tolerance of max(weight_scale_2) around :data:`W4A8_SCALE2_MAX`.
W4A8_SCALE2_TOLERANCE = 1e-3
W4A8_SCALE2 = declare(
    "W4A8_SCALE2_MAX", severity=Severity.WARNING, level=Level.SCALES, group="numbers",
    conditions=("max below 448/7.5", "max above 448/7.5"), formats=("quark-w4a8",),
    roles=("weight_scale_2",), dtypes=("F32",),
    meaning="max(weight_scale_2) of a W4A8 tensor is not 448/7.5 within 1e-3: the row holding the "
            "global amax must map to FP8 448 (above 448/7.5·(1+1e-3) it is an error).",
    fix="Check the FP8 stage used amax/448 and the INT4 stage amax/7.5 (not /7).")
ROUTER_BIAS_DTYPE = declare(
    "ROUTER_BIAS_DTYPE", severity=Severity.WARNING, level=Level.SCALES, group="numbers",
    conditions=("stored as BF16", "stored as F16"), roles=("e_score_correction_bias",),
    meaning="The router's e_score_correction_bias is not F32: routing drifts when it is rounded.",
    fix="Keep the bias in float32 as the source checkpoint has it.")
ROUTER_BIAS_NONFINITE = declare(
    "ROUTER_BIAS_NONFINITE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("NaN", "+Inf", "-Inf"), roles=("e_score_correction_bias",),
    meaning="The router's e_score_correction_bias holds NaN or Inf: routing is broken.",
    fix="Copy the bias from the source checkpoint.")
TENSOR_NONFINITE = declare(
    "TENSOR_NONFINITE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("NaN", "+Inf", "-Inf"), roles=("weight",), dtypes=("BF16", "F16", "F32"),
    meaning="A floating-point tensor holds NaN or Inf (small tensors at level scales, all at "
            "full).",
    fix="Copy the tensor from the source checkpoint.")
#: The formats whose packed 4-bit codes the tightness, zero-row and single-code checks read
#: (:func:`packed_code_findings`: Quark MXFP4 and W4A8, compressed-tensors INT4, alone or in a
#: mixed checkpoint), those codes' roles and dtypes (NVFP4's are NVFP4_BLOCK_NOT_TIGHT's).
_PACKED_FORMATS = ("quark-mxfp4", "quark-w4a8", "compressed-tensors-int4",
                   "compressed-tensors-mixed")
_PACKED_ROLES = ("weight", "weight_packed")
_PACKED_DTYPES = ("U8", "I32")
SCALE_NOT_TIGHT = declare(
    "SCALE_NOT_TIGHT", severity=Severity.ERROR, level=Level.FULL, group="numbers",
    conditions=("every code far below the bound",), formats=_PACKED_FORMATS,
    roles=_PACKED_ROLES, dtypes=_PACKED_DTYPES,
    meaning="Blocks / groups / rows whose largest code falls short of what the scale rule "
            "implies: a wrong group size, axis, nibble packing or scale decode.",
    fix="Re-quantize with the producer's group size, axis and packing.")
CODE_HISTOGRAM = declare(
    "CODE_HISTOGRAM", severity=Severity.INFO, level=Level.FULL, group="numbers",
    meaning="Histogram of the 4-bit codes of the quantized weights (evenly spaced rows, at most "
            "64 KiB per tensor), in the JSON finding's extras: 16 counts per kind, fp4 by code "
            "0..15, int4 by value + 8.",
    fix="Nothing to fix: provenance (e.g. INT4 -8 present means min-max re-quantization).")
FINGERPRINT = declare(
    "FINGERPRINT", severity=Severity.INFO, level=Level.SCALES, group="numbers",
    meaning="Which producer, recipe or calibration the numbers point to (the JSON finding's "
            "extras list each): INT4 codes that never use -8 (QAT: Kimi's official INT4 uses 15 "
            "of 16 codes), one activation scale shared by every expert of a layer (one "
            "calibration value per layer, or experts never routed during calibration), gate and "
            "up sharing one global scale, power-of-two FP8 block scales nobody declared, E2M1 -0 "
            "kept or never written, and the scale of all-zero FP8 tiles (1e-4/448 DeepGEMM, 2^-7 "
            "llm-compressor, 2^-22 UE8M0) and NVFP4 blocks (1.0 ModelOpt, 0.125 "
            "compressed-tensors).",
    fix="Nothing to fix: provenance.")
ROW_ALL_ZERO = declare(
    "ROW_ALL_ZERO", severity=Severity.WARNING, level=Level.FULL, group="numbers",
    conditions=("the first row zero",), formats=_PACKED_FORMATS, roles=_PACKED_ROLES,
    dtypes=_PACKED_DTYPES,
    meaning="Output rows whose codes are all zero: dead output channels.",
    fix="Check the source rows; a copy or merge bug zeroes whole rows.")
TENSOR_SINGLE_CODE = declare(
    "TENSOR_SINGLE_CODE", severity=Severity.WARNING, level=Level.FULL, group="numbers",
    conditions=("one nonzero code everywhere", "zero everywhere", "+0 and -0 mixed"),
    formats=_PACKED_FORMATS, roles=_PACKED_ROLES, dtypes=_PACKED_DTYPES,
    only={"+0 and -0 mixed": ("quark-mxfp4",)},
    meaning="A quantized weight uses a single code value (e.g. all zero).",
    fix="Re-quantize the module; the weight carries no information.")
EXPERT_ALL_ZERO = declare(
    "EXPERT_ALL_ZERO", severity=Severity.WARNING, level=Level.FULL, group="numbers",
    conditions=("every projection of an expert zero",), formats=_PACKED_FORMATS,
    roles=_PACKED_ROLES, dtypes=_PACKED_DTYPES,
    meaning="Every projection of a routed expert is all zero.",
    fix="Check the expert was written (a missing tensor loads as zeros in vLLM).")
EXPERT_RMS_OUTLIER = declare(
    "EXPERT_RMS_OUTLIER", severity=Severity.WARNING, level=Level.FULL, group="numbers",
    conditions=("an expert 8x above its layer's median", "an expert 8x below it"),
    formats=_PACKED_FORMATS, roles=("weight_scale", "weight_scale_2"),
    dtypes=("U8", "F32", "BF16"),
    meaning="An expert projection's dequantized RMS is an outlier within its layer (robust z > 6 "
            "and at least 4x off the median).",
    fix="Compare the expert with its source; a wrong scale decode or copy shows here.")
EXPERT_DUPLICATE = declare(
    "EXPERT_DUPLICATE", severity=Severity.WARNING, level=Level.FULL, group="numbers",
    conditions=("an expert's tensors copied from another's",), formats=_PACKED_FORMATS,
    roles=_PACKED_ROLES, dtypes=_PACKED_DTYPES,
    meaning="Two experts of a layer are byte-identical: a copy bug or an undesired merge.",
    fix="Re-export the layer from its source.")

#: Plausible E8M0 bytes for weight scales (byte 0/1 and 0xFF are handled separately).
E8M0_WINDOW = (127 - 40, 127 + 8)
_F32_EPS = float(np.finfo(np.float32).eps)
_E2M1_ABS = np.abs(E2M1.values.astype(np.float64))

#: How a packed 4-bit weight is laid out: ``mx-fp4`` (E2M1 codes, an E8M0 scale per 32: Quark
#: MXFP4), ``int4-row`` (two's-complement nibbles, one scale per row: Quark W4A8),
#: ``int4-group`` (offset-binary q+8, a scale per 32: compressed-tensors INT4).
Packing = Literal["mx-fp4", "int4-row", "int4-group"]
#: MXFP4 tightness bound by Quark ``scale_calculation_mode`` / rule name.
MX_TIGHT = {"even": 4.0, "floor": 4.0, "round-up": 3.0, "rceil": 3.0, "ceil": 2.0}


# -- pure functions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Count:
    """How many elements matched, and the flat index of the first (or -1)."""

    n: int
    first: int = -1

    @staticmethod
    def of(mask: NDArray[np.bool_]) -> Count:
        flat = mask.reshape(-1)
        n = int(np.count_nonzero(flat))
        return Count(n, int(np.argmax(flat)) if n else -1)


def e8m0_stats(scales: NDArray[Any]) -> dict[str, Count]:
    """E8M0 bytes: ``nan`` (0xFF), ``zero`` (0x00), ``range`` (outside :data:`E8M0_WINDOW`,
    bytes 0, 1 and 0xFF not counted: byte 1 is Quark's all-zero block). Counted from the
    tensor's byte histogram (one pass); a class is searched for its first byte only when it
    occurs."""
    b = np.asarray(scales).view(np.uint8)
    counts = byte_counts(b)
    lo, hi = E8M0_WINDOW
    outside = np.zeros(len(counts), dtype=bool)
    outside[2:lo] = True
    outside[hi + 1:0xFF] = True

    def count(members: NDArray[np.bool_]) -> Count:
        n = int(counts[members].sum())
        return Count(n, first_byte_in(b, members)) if n else Count(0)

    return {
        "nan": count(np.arange(len(counts)) == 0xFF),
        "zero": count(np.arange(len(counts)) == 0),
        "range": count(outside),
    }


def scale_value_stats(scales: NDArray[Any]) -> dict[str, Count]:
    """Float scales: ``nonfinite``, ``negative``, ``zero`` (NaN is only ``nonfinite``)."""
    s = np.asarray(scales).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return {
            "nonfinite": Count.of(~np.isfinite(s)),
            "negative": Count.of(s < 0),
            "zero": Count.of(s == 0),
        }


_EXP_MASK = {2: (np.uint16, 0x7F80), 4: (np.uint32, 0x7F800000)}


def nonfinite_count(values: NDArray[Any]) -> Count:
    """NaN/Inf elements of a float array (any float dtype, ml_dtypes included); BF16 and F32
    are tested on their exponent bits (no conversion)."""
    a = np.asarray(values)
    if a.dtype == np.float16:
        return Count.of((a.view(np.uint16) & 0x7C00) == 0x7C00)
    if a.dtype.kind == "V" or a.dtype.name == "bfloat16" or a.dtype == np.float32:
        view, mask = _EXP_MASK[a.dtype.itemsize]
        m = view(mask)
        return Count.of((a.view(view) & m) == m)
    return Count.of(~np.isfinite(a.astype(np.float64)))


def _luts() -> dict[str, tuple[NDArray[np.uint8], NDArray[np.float32], NDArray[np.int64]]]:
    """Per byte (two 4-bit codes): the larger magnitude (E2M1 magnitude index 0..7, or |q|),
    the sum of squared values, and each nibble's histogram bin."""
    b = np.arange(256)
    lo, hi = b & 0xF, b >> 4
    out = {}
    mag = np.arange(16) & 7
    out["fp4"] = (np.maximum(mag[lo], mag[hi]).astype(np.uint8),
                  (_E2M1_ABS[lo] ** 2 + _E2M1_ABS[hi] ** 2).astype(np.float32), np.arange(16))
    for kind, q in (("int4-ct", np.arange(16) - 8),
                    ("int4-quark", np.where(np.arange(16) >= 8, np.arange(16) - 16,
                                            np.arange(16)))):
        out[kind] = (np.maximum(np.abs(q[lo]), np.abs(q[hi])).astype(np.uint8),
                     (q[lo] ** 2 + q[hi] ** 2).astype(np.float32), q + 8)
    return out


_LUT = _luts()


@dataclass(frozen=True)
class ByteStats:
    """Per group: the largest magnitude (``gmax``) and the sum of squared code values
    (``gsq``); ``hist``: the 16-bin code histogram (fp4: code; int4: q + 8)."""

    gmax: NDArray[np.uint8]
    gsq: NDArray[np.float64]
    hist: NDArray[np.int64]


def byte_stats(packed: NDArray[Any], kind: str, group_bytes: int | None) -> ByteStats:
    """:class:`ByteStats` of a packed 4-bit weight ``[O, ...]`` read as bytes (``kind``:
    ``fp4``, ``int4-ct``, ``int4-quark``), ``group_bytes`` bytes per group (None: per row).
    Nibble order inside a group does not matter, so no unpacking is needed."""
    top, sq, bins = _LUT[kind]
    w = np.ascontiguousarray(packed)
    rows = w.view(np.uint8).reshape(w.shape[0], -1)
    g = rows.shape[1] if group_bytes is None else group_bytes
    if g == 0 or rows.shape[1] % g:
        raise ValueError(f"rows of {rows.shape[1]} bytes do not split into groups of {g}")
    gmax = top[rows].reshape(rows.shape[0], -1, g).max(axis=-1)
    gsq = sq[rows].reshape(rows.shape[0], -1, g).sum(axis=-1, dtype=np.float64)
    return ByteStats(gmax, gsq, _nibble_histogram(np.bincount(rows.reshape(-1), minlength=256),
                                                  bins))


def _nibble_histogram(counts: NDArray[Any], bins: NDArray[np.int64]) -> NDArray[np.int64]:
    """The 16-bin code histogram from the 256 byte counts: each byte's two nibbles, nibble
    ``v`` in bin ``bins[v]``."""
    square = counts.reshape(16, 16)  # [hi, lo]
    nib = square.sum(axis=0) + square.sum(axis=1)
    hist = np.zeros(16, np.int64)
    np.add.at(hist, bins, nib)
    return hist


def fp4_peaks(packed: NDArray[Any], group_bytes: int
              ) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """:class:`ByteStats`' ``gmax`` and ``hist`` of a whole packed E2M1 weight ``[O, ...]``
    (NVFP4), without the sums of squares: in one compiled pass
    (:func:`mxformats.fast.scan.scan_nibbles`) where numba runs, else :func:`byte_stats`;
    the same answers, and the same ValueError for rows that do not split into groups."""
    w = np.ascontiguousarray(packed)
    rows = w.view(np.uint8).reshape(w.shape[0], -1)
    scanned = fast_scan.scan_nibbles(rows, group_bytes, fast_scan.E2M1_CODES, histogram=True)
    if scanned is None or scanned.counts is None:
        st = byte_stats(rows, "fp4", group_bytes)
        return st.gmax, st.hist
    return scanned.peaks, _nibble_histogram(scanned.counts, _LUT["fp4"][2])


#: E2M1 magnitude index of a bound (4.0 -> 6, 3.0 -> 5, 2.0 -> 4).
def _mx_index(bound: float) -> int:
    return int(np.searchsorted(_E2M1_ABS[:8], bound))


def mx_block_max(codes: NDArray[np.uint8], block: int = 32) -> NDArray[np.float64]:
    """Largest |E2M1 value| per block of a packed ``[O, I/2]`` MXFP4 weight: ``[O, I/block]``."""
    c = np.asarray(codes, dtype=np.uint8)
    per_byte = np.maximum(_E2M1_ABS[c & 0xF], _E2M1_ABS[c >> 4])
    rows = per_byte.reshape(c.shape[0], -1)
    half = block // 2
    if rows.shape[1] % half:
        raise ValueError(f"row of {2 * rows.shape[1]} codes is not a multiple of {block}")
    result: NDArray[np.float64] = rows.reshape(rows.shape[0], -1, half).max(axis=-1)
    return result


def mx_tightness(codes: NDArray[np.uint8], scales: NDArray[Any], bound: float = 4.0) -> Count:
    """Non-zero MXFP4 blocks of 32 whose largest |code| is below ``bound`` (flat block index);
    blocks at the exponent clamp (byte ≤ 1 or ≥ 254) are exempt. The path :func:`run` uses."""
    return module_stats("mx-fp4", {"weight": np.asarray(codes, np.uint8),
                                             "weight_scale": np.asarray(scales)}, bound)[1]


def int4_group_tightness(q: NDArray[Any], scales: NDArray[Any] | None = None,
                         group: int = 32) -> Count:
    """Groups (flat index over ``[O, I/group]``) holding a non-zero code but none of magnitude
    ≥ 7; groups whose scale is at/below float32 eps are exempt."""
    a = np.abs(np.asarray(q, dtype=np.int16))
    if a.shape[-1] % group:
        raise ValueError(f"{a.shape[-1]} columns are not a multiple of group {group}")
    m = a.reshape(a.shape[0], -1, group).max(axis=-1)
    bad = (m > 0) & (m < 7)
    if scales is not None:
        s = np.asarray(scales).astype(np.float64).reshape(m.shape)
        bad &= ~(np.abs(s) <= _F32_EPS)
    return Count.of(bad)


def w4a8_row_tightness(q: NDArray[Any], scale_2: NDArray[Any] | None = None) -> Count:
    """W4A8 rows holding a non-zero code but none of magnitude ≥ 7 (rows at the eps floor
    exempt)."""
    m = np.abs(np.asarray(q, dtype=np.int16)).max(axis=-1)
    bad = (m > 0) & (m < 7)
    if scale_2 is not None:
        bad &= ~(np.asarray(scale_2, dtype=np.float64).reshape(-1) <= _F32_EPS * (1 + 1e-6))
    return Count.of(bad)


def w4a8_scale2_severity(top: float) -> Severity | None:
    """The verdict on max(weight_scale_2) of a W4A8 tensor: None within 1e-3 (relative) of
    :data:`W4A8_SCALE2_MAX`, a warning below, an error above (no row can then map to FP8 448).

    Why 448/7.5: Quark's FP8 stage maps the tensor's amax to 448 (``calculate_qmin_qmax`` gives
    e4m3 ±448, ``quark/torch/quantization/utils.py:117`` in ``amd-quark==0.13``), and its
    symmetric INT4 stage divides each row's amax by ``(quant_max - quant_min) / 2 = 7.5``
    (``quark/torch/quantization/observer/observer.py:280``), so the row holding the amax gets
    448/7.5 (measured on the producer fixture, tests/data/producers/README.md)."""
    if abs(top / W4A8_SCALE2_MAX - 1) <= W4A8_SCALE2_TOLERANCE:
        return None
    return Severity.ERROR if top > W4A8_SCALE2_MAX else Severity.WARNING


def code_histogram(codes: NDArray[Any], kind: str) -> NDArray[np.int64]:
    """16-bin histogram: ``kind`` ``fp4`` (packed E2M1 bytes, bin = code 0..15) or ``int4``
    (int8 values in [-8, 7], bin = value + 8)."""
    c = np.asarray(codes)
    if kind == "fp4":
        b = c.view(np.uint8).reshape(-1)
        return np.bincount(b & 0xF, minlength=16) + np.bincount(b >> 4, minlength=16)
    return np.bincount((c.astype(np.int64) + 8).reshape(-1), minlength=16)


def expert_rms_outliers(rms: dict[int, float], z: float = 6.0, ratio: float = 4.0
                        ) -> list[tuple[int, float]]:
    """Experts whose log2 RMS lies more than ``z`` robust deviations (MAD) from the median and
    at least ``ratio`` off it; returns (expert, rms / median). The logarithms are Python's
    (``math.log2``): numpy's ``log2`` rounds differently on different CPUs (its SIMD paths),
    which would move a verdict at the threshold."""
    if len(rms) < 3:
        return []
    ids = sorted(rms)
    lv = np.array([math.log2(max(rms[i], 1e-300)) for i in ids], dtype=np.float64)
    med = float(np.median(lv))
    mad = float(np.median(np.abs(lv - med))) * 1.4826
    out = []
    for i, x in zip(ids, lv, strict=True):
        dev = abs(x - med)
        if dev >= math.log2(ratio) and (mad == 0 or dev / mad > z):
            out.append((i, float(2.0 ** (x - med))))
    return out


# -- decoding helpers -----------------------------------------------------------------------


# -- wiring ---------------------------------------------------------------------------------


def _at(ref: TensorRef, index: int, itemsize: int | None = None) -> int:
    size = DTYPES[ref.dtype].itemsize if itemsize is None else itemsize
    return ref.begin + max(index, 0) * size


def finding(check: Any, ref: TensorRef, message: str, index: int = 0,
             itemsize: int | None = None, severity: Severity | None = None,
             **extra: object) -> Finding:
    return Finding(check, f"{ref.name}: {message}", ref.file, ref.name,
                   _at(ref, index, itemsize), severity=severity, extra=dict(extra))


def where(shape: tuple[int, ...], index: int) -> str:
    if not shape:
        return "[]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(index, shape)) + "]"


def mx_scale_mode(ckpt: Checkpoint) -> str | None:
    """Quark's ``scale_calculation_mode`` of the weights (``global_quant_config.weight``), or
    None when the config does not set it."""
    weight = (ckpt.quant_config or {}).get("global_quant_config", {})
    spec = weight.get("weight") if isinstance(weight, dict) else None
    mode = spec.get("scale_calculation_mode") if isinstance(spec, dict) else None
    return None if mode is None else str(mode)


def mx_bound(ckpt: Checkpoint) -> float:
    mode = mx_scale_mode(ckpt)
    return MX_TIGHT.get(mode, 4.0) if mode is not None else 4.0


def e8m0_findings(ref: TensorRef, s: NDArray[Any]) -> Iterator[Finding]:
    """E8M0_NAN / E8M0_ZERO / E8M0_RANGE on one E8M0 scale tensor."""
    st = e8m0_stats(s)
    if st["nan"].n:
        yield finding(E8M0_NAN, ref, f"{st['nan'].n} byte(s) 0xFF, first at "
                      f"{where(s.shape, st['nan'].first)}", st["nan"].first)
    if st["zero"].n:
        yield finding(E8M0_ZERO, ref, f"{st['zero'].n} byte(s) 0x00, first at "
                      f"{where(s.shape, st['zero'].first)}", st["zero"].first)
    if st["range"].n:
        i = st["range"].first
        yield finding(E8M0_RANGE, ref, f"{st['range'].n} byte(s) outside "
                      f"{E8M0_WINDOW[0]}..{E8M0_WINDOW[1]}, first "
                      f"{int(s.reshape(-1)[i])} at {where(s.shape, i)}", i)


def scale_findings(ref: TensorRef, s: NDArray[Any],
                   zero_severity: Severity | None = None) -> Iterator[Finding]:
    """SCALE_NONFINITE / SCALE_NEGATIVE / SCALE_ZERO on one float scale tensor
    (``zero_severity`` overrides SCALE_ZERO's warning)."""
    st = scale_value_stats(s)
    for key, check, severity in (("nonfinite", SCALE_NONFINITE, None),
                                 ("negative", SCALE_NEGATIVE, None),
                                 ("zero", SCALE_ZERO, zero_severity)):
        c = st[key]
        if c.n:
            yield finding(check, ref, f"{c.n} {key} value(s), first at "
                          f"{where(s.shape, c.first)}", c.first, severity=severity)


def w4a8_scale2_findings(ref: TensorRef, s: NDArray[Any]) -> Iterator[Finding]:
    """W4A8_SCALE2_MAX on a finite ``weight_scale_2``."""
    if not s.size or scale_value_stats(s)["nonfinite"].n:
        return
    top = float(np.max(s))
    severity = w4a8_scale2_severity(top)
    if severity is not None:
        above = severity is Severity.ERROR
        yield finding(W4A8_SCALE2, ref, f"max {top:.6g}, expected {W4A8_SCALE2_MAX:.6g}"
                      + (" (above the bound: an error)" if above else ""),
                      int(np.argmax(s)), severity=severity)


_ONES = 0x1111111111111111
_EIGHTS = 0x8888888888888888
#: Rows of a weight that feed the code histogram and the RMS: at most this many bytes.
STATS_BYTES = 1 << 16
#: uint64 words per SWAR chunk (256 KiB: temporaries stay in cache).
_CACHE_WORDS = 1 << 15


def _flags(words: NDArray[np.uint64], kind: str, bound_index: int = 6
           ) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """SWAR over 16 nibbles per word: (bit 0 of each nibble set where the value is non-zero,
    bit 0 set where the magnitude reaches the tightness bound). fp4: E2M1 magnitude index
    ``>= bound_index``; int4 (two's complement nibbles): ``|q| >= 7``."""
    x = words ^ np.uint64(_EIGHTS) if kind == "int4-ct" else words  # offset -> two's compl.
    one = np.uint64(_ONES)
    a = x >> np.uint64(1)
    b = x >> np.uint64(2)
    if kind == "fp4":
        nz = x | a
        nz |= b
        nz &= one
        if bound_index >= 7:  # 6.0: index 111
            hi = x & a
            hi &= b
        elif bound_index == 6:  # 4.0: 11x
            hi = a & b
        elif bound_index == 5:  # 3.0: 1x1, 11x
            hi = x | a
            hi &= b
        elif bound_index == 4:  # 2.0: 1xx
            hi = b
        else:  # 1.5: 1xx or 011
            hi = x & a
            hi |= b
        hi &= one
        return nz, hi
    c = x >> np.uint64(3)
    nz = x | a
    nz |= b
    nz |= c
    nz &= one
    seven = x & a
    seven &= b
    seven &= ~c
    eight = ~b
    eight &= ~a
    eight &= c
    seven |= eight
    seven &= one
    return nz, seven


#: Per packing: how its 4-bit codes' magnitudes read (the compiled pass's parameter) and the
#: magnitude from which a unit is tight for the integer packings (|q| >= 7).
_MAGNITUDES: dict[str, fast_scan.NibbleMagnitude] = {
    "mx-fp4": fast_scan.E2M1_CODES, "int4-row": fast_scan.TWOS_COMPLEMENT,
    "int4-group": fast_scan.OFFSET_BINARY}
_INT4_TIGHT = 7


def module_stats(packing: Packing, arrays: dict[str, NDArray[Any]], bound: float = 4.0,
                 group: int | None = 32
                 ) -> tuple[ByteStats, Count, float, int, Count, bool, int | None]:
    """Stats of a quantized module: (byte stats of the sampled rows, tightness violations,
    dequantized sum of squares and element count of the sampled rows, all-zero rows, single
    code, the weight's :func:`~mxformats.fast.scan.checksum` where the pass computed it, else
    None). Tightness, zero rows and the single-code test read every byte: in one compiled pass
    (:func:`mxformats.fast.scan.scan_nibbles`, which also gives the checksum) where numba runs,
    else SWAR over uint64 words, with the same answers; the histogram and RMS read at most
    :data:`STATS_BYTES` of evenly spaced rows. ``group``: ``int4-group``'s elements per scale,
    a multiple of 32 (None: one per row). ValueError when the shapes do not fit the format."""
    wp = "weight_packed" if "weight_packed" in arrays else "weight"
    w = np.ascontiguousarray(arrays[wp])
    rows = w.view(np.uint8).reshape(w.shape[0], -1)
    nrow, row_bytes = rows.shape
    # 32-element (16-byte) groups per scale: the SWAR flags are per 32 elements
    per = 1 if packing != "int4-group" or group is None else max(1, group // 32)
    if (row_bytes % 16 and packing != "int4-row") or row_bytes % 8 or (
            group is not None and group % 32) or (row_bytes // 16) % per:
        return _module_stats_slow(packing, arrays, bound, group)
    per_row = packing == "int4-row"
    bidx = _mx_index(bound)
    scanned = fast_scan.scan_nibbles(rows, row_bytes if per_row else 16, _MAGNITUDES[packing])
    digest = None
    if scanned is not None:
        nzg = scanned.peaks > 0
        hig = scanned.peaks >= (bidx if packing == "mx-fp4" else _INT4_TIGHT)
        single, digest = scanned.same, scanned.checksum
    else:
        kind = {"mx-fp4": "fp4", "int4-group": "int4-ct"}.get(packing, "int4")
        nzg, hig, single = _swar_flags(rows.view(np.uint64), kind, per_row, bidx)
    if packing == "mx-fp4" and not np.any(nzg):
        single = True
    zero_rows = Count.of(~np.any(nzg, axis=1))
    step = max(1, -(-w.nbytes // STATS_BYTES))
    if packing == "mx-fp4":
        sc = np.asarray(arrays["weight_scale"]).view(np.uint8)
        if nzg.shape != sc.shape:
            raise ValueError(f"codes give {nzg.shape} blocks, scales are {sc.shape}")
        bad = Count.of(nzg & ~hig & (sc > 1) & (sc < 254))
        st = byte_stats(rows[::step], "fp4", 16)
        sumsq = float((st.gsq * np.ldexp(1.0, 2 * (sc[::step].astype(np.int32) - 127))).sum())
        return st, bad, sumsq, 2 * st.gmax.size * 16, zero_rows, single, digest
    if packing == "int4-row":
        s2 = np.asarray(arrays["weight_scale_2"], dtype=np.float64).reshape(-1)
        s1 = float(np.asarray(arrays["weight_scale"], dtype=np.float64).reshape(-1)[0])
        if nrow != s2.shape[0]:
            raise ValueError(f"{nrow} rows but {s2.shape[0]} row scales")
        bad = Count.of(nzg[:, 0] & ~hig[:, 0] & ~(s2 <= _F32_EPS * (1 + 1e-6)))
        st = byte_stats(rows[::step], "int4-quark", None)
        sumsq = float((st.gsq[:, 0] * s2[::step] ** 2).sum()) * s1 * s1
        return st, bad, sumsq, 2 * rows[::step].size, zero_rows, single, digest
    sc = np.asarray(arrays["weight_scale"]).astype(np.float64)
    cols = int(np.asarray(arrays["weight_shape"]).reshape(-1)[-1]) if "weight_shape" in arrays \
        else 8 * w.shape[-1]
    if cols != 2 * row_bytes:
        return _module_stats_slow(packing, arrays, bound, group)
    per = nzg.shape[1] if group is None else per
    nz_group = np.any(nzg.reshape(nrow, -1, per), axis=-1)
    hi_group = np.any(hig.reshape(nrow, -1, per), axis=-1)
    if nz_group.shape != sc.shape:
        raise ValueError(f"codes give {nz_group.shape} groups, scales are {sc.shape}")
    bad = Count.of(nz_group & ~hi_group & ~(np.abs(sc) <= _F32_EPS))
    st = byte_stats(rows[::step], "int4-ct", 16)
    sumsq = float((st.gsq * np.repeat(sc[::step], per, axis=-1) ** 2).sum())
    return st, bad, sumsq, 2 * rows[::step].size, zero_rows, single, digest


def _swar_flags(words: NDArray[np.uint64], kind: str, per_row: bool, bound_index: int
                ) -> tuple[NDArray[np.bool_], NDArray[np.bool_], bool]:
    """The numpy pass of :func:`module_stats`: per 32 codes (per row with ``per_row``), whether
    one is non-zero and whether one reaches the tightness bound, and whether every 4-bit code
    equals the first; SWAR over the uint64 words ``[R, W]``, in cache-sized chunks of rows."""
    nrow = words.shape[0]
    ncol = 1 if per_row else words.shape[1] // 2
    nzg = np.empty((nrow, ncol), dtype=bool)
    hig = np.empty((nrow, ncol), dtype=bool)
    block = max(1, _CACHE_WORDS // max(words.shape[1], 1))  # rows per cache-sized chunk
    for r in range(0, nrow, block):
        nz, hi = _flags(words[r:r + block], kind, bound_index)
        if per_row:
            nzg[r:r + block, 0] = np.bitwise_or.reduce(nz, axis=1) != 0
            hig[r:r + block, 0] = np.bitwise_or.reduce(hi, axis=1) != 0
        else:
            nzg[r:r + block] = (nz[:, 0::2] | nz[:, 1::2]) != 0
            hig[r:r + block] = (hi[:, 0::2] | hi[:, 1::2]) != 0
    first = words.reshape(-1)[:1]
    single = bool(np.all(words == first)) and bool(
        first.size and (int(first[0]) & 0xF) * _ONES == int(first[0]))
    return nzg, hig, single


def _module_stats_slow(packing: Packing, arrays: dict[str, NDArray[Any]], bound: float,
                       group: int | None = 32) -> tuple[ByteStats, Count, float, int, Count,
                                                        bool, int | None]:
    """Byte-table path for rows that do not split into whole 64-bit words / padded groups."""
    if packing == "mx-fp4":
        w, sc = arrays["weight"], np.asarray(arrays["weight_scale"]).view(np.uint8)
        st = byte_stats(w, "fp4", 16)
        if st.gmax.shape != sc.shape:
            raise ValueError(f"codes give {st.gmax.shape} blocks, scales are {sc.shape}")
        bad = Count.of((st.gmax > 0) & (st.gmax < _mx_index(bound)) & (sc > 1) & (sc < 254))
        sumsq = float((st.gsq * np.ldexp(1.0, 2 * (sc.astype(np.int32) - 127))).sum())
        n = 2 * w.size
    elif packing == "int4-row":
        w = arrays["weight"]
        s2 = np.asarray(arrays["weight_scale_2"], dtype=np.float64).reshape(-1)
        s1 = float(np.asarray(arrays["weight_scale"], dtype=np.float64).reshape(-1)[0])
        st = byte_stats(w, "int4-quark", None)
        m = st.gmax[:, 0]
        if m.shape != s2.shape:
            raise ValueError(f"{m.shape[0]} rows but {s2.shape[0]} row scales")
        bad = Count.of((m > 0) & (m < 7) & ~(s2 <= _F32_EPS * (1 + 1e-6)))
        sumsq, n = float((st.gsq[:, 0] * s2 * s2).sum()) * s1 * s1, 8 * w.size
    else:
        w = arrays["weight_packed"]
        cols = 8 * w.shape[-1]
        if "weight_shape" in arrays:
            cols = int(np.asarray(arrays["weight_shape"]).reshape(-1)[-1])
        sc = np.asarray(arrays["weight_scale"]).astype(np.float64)
        q = unpack_int4(w, layout="compressed-tensors", size=cols)
        size = cols if group is None else group
        bad = int4_group_tightness(q, sc if sc.size * size == q.size else None, size)
        padded = np.zeros((q.shape[0], -(-cols // size) * size), np.int8)
        padded[:, :cols] = q
        st = byte_stats(pack_rows(padded), "int4-ct", size // 2)
        gsq = st.gsq[:, :sc.shape[-1]] if st.gsq.shape[-1] >= sc.shape[-1] else st.gsq
        sumsq, n = float((gsq * sc[:, :gsq.shape[-1]] ** 2).sum()), w.shape[0] * cols
    zero_rows = Count.of(st.gmax.max(axis=-1) == 0)
    distinct = np.flatnonzero(st.hist)
    if packing == "mx-fp4":
        distinct = np.unique(distinct & 7)
    return st, bad, sumsq, n, zero_rows, len(distinct) <= 1, None


def pack_rows(q: NDArray[np.int8]) -> NDArray[np.int32]:
    """compressed-tensors packing of int8 rows (a multiple of 8 long)."""
    from mxformats.schemes.int4 import pack_int4

    return pack_int4(q, layout="compressed-tensors")


def packed_code_findings(ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                         stats: CodeStats, packing: Packing, weight_param: str,
                         bound: float = 4.0, group: int | None = 32) -> Iterator[Finding]:
    """The code checks of the packed 4-bit formats (MXFP4, W4A8, INT4; ``packing`` says
    which layout; ``group``: INT4's elements per scale, None per row): tightness, the
    single-code and all-zero-row tests, the histogram, RMS and the pass's checksum (into
    ``stats``)."""
    ref, w = module.tensors[weight_param], arrays[weight_param]
    st, tight, sumsq, n, zero_rows, single, stats.checksum = module_stats(packing, arrays,
                                                                      bound, group)
    stats.rms = float(np.sqrt(sumsq / max(n, 1)))
    kind = "fp4" if packing == "mx-fp4" else "int4"
    stats.hist[kind] = stats.hist.get(kind, np.zeros(16, np.int64)) + st.hist
    row_bytes = w.nbytes // max(w.shape[0], 1)
    if packing == "int4-group":
        groups = 1 if group is None else max(1, row_bytes // (group // 2))
    else:
        groups = max(1, {"int4-row": 1}.get(packing, row_bytes // 16))
    unit = {"mx-fp4": "block", "int4-row": "row"}.get(
        packing, "group"
    )
    if tight.n:
        row, g = divmod(tight.first, groups)
        at = row * row_bytes + g * (row_bytes // groups)
        yield finding(SCALE_NOT_TIGHT, ref, f"{tight.n} non-zero {unit}(s) whose largest code "
                       f"is below the producer's bound (first: row {row}, {unit} {g})", at, 1)
    if single:
        yield finding(TENSOR_SINGLE_CODE, ref, "every code has the same value"
                       + (" (zero)" if zero_rows.n == w.shape[0] else ""))
    elif zero_rows.n:
        yield finding(ROW_ALL_ZERO, ref, f"{zero_rows.n} all-zero row(s), first row "
                       f"{zero_rows.first}", zero_rows.first * row_bytes, 1)
