"""``--source DIR``: re-quantize each quantized module from the checkpoint the quantizer read.

Sources, in the forms the real pipelines use:

- **BF16** (``<module>.weight`` BF16): fed to the producer profile as is;
- **compressed-tensors INT4** (Moonshot's K2-Thinking/K2.5/K2.6 releases): decompressed
  bit-exactly as compressed-tensors does (``q.to(scale.dtype) * scale``, one BF16 rounding),
  which is what Quark's ``_recover_compressed_tensors_weights`` feeds its quantizer.

- **DeepSeek FP8-block** (K2-Instruct: E4M3FN ``weight`` with float32 ``weight_scale_inv`` per
  128×128 block): decompressed as DeepSeek's ``weight_dequant`` does, ``bf16(float32(x) * s)``
  (:func:`dequantize_fp8_block`).

Profiles: Quark MXFP4 → ``quantize_mx(profile="quark")``; Quark W4A8 →
``quantize_w4a8(profile="quark")``; compressed-tensors INT4 → ``quantize_int4(group_size=G,
profile="compressed-tensors")`` with the config's group G (``None`` per channel) packed in its
layout, ``weight_shape`` I64.

For each module: reproduced (every tensor byte-identical) or not (the first differing element
per tensor), and the dequantized weight's relative error and SQNR against the source.
``--sample N`` checks N modules per layer, chosen by the sha256 of their names (deterministic,
spread over experts and projections).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.fast.moments import Moments
from mxformats.fast.passes import COMPILED, OnePass
from mxformats.formats import E4M3FN
from mxformats.schemes.int4 import dequantize_int4, unpack_int4
from mxformats.tensorfile import DTYPES, ErrorKind, TensorFileError, read_index, read_json

from .checkmodule import CheckModule, PerModule
from .device import passes_for
from .findings import MAX_LISTED, Check, Finding, Level, Listing, Severity, declare
from .numbers import quantized_modules, read_module
from .parallel import internal
from .readers import LocalReader

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .descriptors.base import Descriptor
    from .model import Checkpoint, Module, Options

__all__ = ["NONFINITE_JSON", "Claim", "ModuleReproduction", "ModuleResult", "Source",
           "chosen_modules", "combine", "json_float", "module_reproduction", "prepare",
           "reproduce_module", "run", "sample_modules"]


REPRO_SUMMARY = declare(
    "REPRO_SUMMARY", severity=Severity.INFO, level=Level.STRUCTURE, group="reproduction",
    meaning="Reproduction from --source: which profile, N of M quantized tensors byte-identical, "
            "error statistics (the report's reproduction block); where vLLM decodes a module "
            "otherwise than the file says (an NVFP4 module with its fused partner's global "
            "scale), that decode's error beside the file's own.",
    fix="Nothing to fix.")
#: The formats a producer profile reproduces from ``--source`` (not ModelOpt FP8 block).
_REPRODUCED = ("quark-mxfp4", "quark-w4a8", "compressed-tensors-int4", "compressed-tensors-nvfp4",
               "compressed-tensors-fp8-block", "compressed-tensors-mixed", "modelopt-nvfp4",
               "modelopt-mixed", "fp8-block")
REPRO_MISMATCH = declare(
    "REPRO_MISMATCH", severity=Severity.ERROR, level=Level.STRUCTURE, group="reproduction",
    conditions=("a code changed", "a scale changed",
                "a Quark recipe no profile reproduces (floor)",
                "bytes of a recipe the config does not name (Four-Over-Six)"),
    formats=_REPRODUCED,
    only={"a Quark recipe no profile reproduces (floor)": ("quark-mxfp4",),
          "bytes of a recipe the config does not name (Four-Over-Six)": ("modelopt-nvfp4",
                                                                           "modelopt-mixed")},
    roles=("weight", "weight_packed", "weight_scale", "weight_scale_inv", "weight_scale_2",
           "weight_global_scale"),
    dtypes=("U8", "I32", "F8_E4M3", "F32", "BF16"),
    meaning="A quantized tensor differs from what the producer profile the checkpoint claims (its "
            "quantization_config's producer) writes from the source: an error. A warning, once, "
            "where the config names a recipe no profile reproduces (Quark MXFP4 "
            "scale_calculation_mode floor or ceil): its modules are then judged by their error "
            "against the source alone; and once where modules of a mixed-precision checkpoint are "
            "of a format no profile reproduces (ModelOpt FP8_PB_WO): those are not compared.",
    fix="Check the source is the one the quantizer read, and the producer version and recipe.")
REPRO_ERROR_HIGH = declare(
    "REPRO_ERROR_HIGH", severity=Severity.WARNING, level=Level.STRUCTURE, group="reproduction",
    conditions=("every scale 1.3x: relative error within 0.5", "every scale 4x: relative "
                "error beyond 0.5", "a NaN scale: no finite error"),
    formats=_REPRODUCED,
    # E8M0 scales move by powers of two alone
    only={"every scale 1.3x: relative error within 0.5": _REPRODUCED[1:]},
    roles=("weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale"),
    dtypes=("U8", "F8_E4M3", "F32", "BF16"),
    meaning="A module the profile does not reproduce has a dequantized relative error against the "
            "source above the format's threshold (MXFP4 0.15, INT4 g32 0.15, W4A8 0.25): a "
            "warning while it stays within the family's normal range (0.5), an error beyond it or "
            "when not finite; info where the profile reproduces the bytes (the producer's own "
            "error).",
    fix="Look for clipped scales or a wrong scale decode in that module.")
REPRO_UNCORRELATED = declare(
    "REPRO_UNCORRELATED", severity=Severity.ERROR, level=Level.STRUCTURE, group="reproduction",
    conditions=("the codes in reverse order", "every code zero"), formats=_REPRODUCED,
    roles=("weight", "weight_packed"), dtypes=("U8", "I32", "F8_E4M3"),
    meaning="The dequantized weight correlates with the source below 0.9 (a constant, e.g. "
            "all-zero, weight against a varying source counts as 0): wrong nibble order, axis or "
            "scale decode, or another tensor. Info where the claimed profile reproduces the bytes "
            "(a source varying by less than a quantization step gives a constant weight from a "
            "right producer too).",
    fix="Re-quantize the module from the source.")
REPRO_SOURCE_MISSING = declare(
    "REPRO_SOURCE_MISSING", severity=Severity.WARNING, level=Level.STRUCTURE, group="reproduction",
    conditions=("the module absent from the source", "the source weight transposed",
                "a NaN source weight, the bytes unclaimed (floor)"),
    formats=_REPRODUCED, roles=("weight", "weight_packed"), dtypes=("U8", "I32", "F8_E4M3"),
    only={"a NaN source weight, the bytes unclaimed (floor)": ("quark-mxfp4",)},
    meaning="A quantized module has no usable weight in --source (absent, unreadable, a symlink "
            "out of it, another shape than the config implies or, for a module the config does "
            "not describe, than its stored tensors are written for, another dtype), or a fused "
            "sibling the producer calibrated it with has none (NVFP4 gate and up share one amax); "
            "or its bytes are not claimed (REPRO_MISMATCH warning) and the source weight holds NaN "
            "or Inf, which leaves no error statistic to judge it by. The module is not verified: a "
            "warning, and REPRO_NOTHING_VERIFIED where no module is.",
    fix="Point --source at the checkpoint the quantizer read.")
REPRO_SOURCE_UNSUPPORTED = declare(
    "REPRO_SOURCE_UNSUPPORTED",
    severity=Severity.ERROR, level=Level.STRUCTURE, group="reproduction",
    conditions=("a source quantized otherwise (AWQ)", "no source folder"), formats=_REPRODUCED,
    meaning="--source is not a checkpoint in a form this tool decompresses (BF16, "
            "compressed-tensors INT4 or DeepSeek FP8-block).",
    fix="Pass the BF16, compressed-tensors INT4 or FP8-block checkpoint the quantizer read.")
REPRO_NOTHING_VERIFIED = declare(
    "REPRO_NOTHING_VERIFIED", severity=Severity.ERROR, level=Level.STRUCTURE, group="reproduction",
    conditions=("a source holding none of the modules", "a format no profile reproduces"),
    formats=(*_REPRODUCED, "bf16", "modelopt-fp8-block"),
    only={"a source holding none of the modules": _REPRODUCED,
          "a format no profile reproduces": ("bf16", "modelopt-fp8-block")},
    meaning="--source verified no module: the source holds no usable weight of this checkpoint's "
            "modules (the first one's reason is given), the checkpoint has no quantized module "
            "with a producer profile to reproduce, or the source is the checkpoint's own folder.",
    fix="Point --source at the checkpoint the quantizer read, or drop --source.")

#: The upper end of a 4-bit family's normal relative error (SQNR 6 dB): the producers give
#: 0.10-0.13 on N(0, 0.02) weights (tests/test_validate_reproduce.py), and round-to-nearest
#: INT4 with scale amax/7.5 cannot exceed sqrt(32)/15 = 0.38 on any g32 group. Beyond it the
#: weight is not a quantization of its source: REPRO_ERROR_HIGH is an error.
ERROR_LIMIT = 0.5
_LAYER = re.compile(r"\.layers\.(\d+)\.")


class _SourceReader(LocalReader):
    """The source folder's reader, keeping the header of the shard it read last: a module's
    weight and its fused siblings' sit in one shard, and a task reads its modules in shard
    order, so each shard's header is parsed about once per task instead of once per tensor
    (11 ms for a 3,000-tensor header, and up to seconds for the 100 MB a header may hold)."""

    def __init__(self, root: Path, allow: tuple[Path, ...] = ()) -> None:
        super().__init__(root, allow)
        self._last: tuple[str, tuple[dict[str, Any], int]] | None = None

    def header(self, name: str) -> tuple[dict[str, Any], int]:
        if self._last is None or self._last[0] != name:
            self._last = (name, super().header(name))
        return self._last[1]


class Source:
    """A source checkpoint folder: BF16, or compressed-tensors INT4 decompressed on read.

    Untrusted input like the checkpoint: its config, index and shards are read only where
    they resolve under ``folder`` (or its Hugging Face cache repo, or an ``allow`` root, as
    ``--allow-symlink-root`` allows for the checkpoint); a config that is not a JSON object
    is read as no config, and a ``quant_method`` that is not a string is a form this tool
    does not decompress."""

    def __init__(self, folder: Path, allow: tuple[Path, ...] = ()) -> None:
        self.folder = Path(folder)
        self.reader = _SourceReader(self.folder, allow)  # what every tensor is read through
        self._inside: dict[str, bool] = {}  # shard -> whether it resolves under the roots
        for name in ("config.json", "model.safetensors.index.json", "model.safetensors"):
            self._check_inside(name)
        self.index = read_index(self.folder)
        try:
            config = read_json(self.folder / "config.json")  # regular files only: no FIFO
        except (OSError, ValueError, RecursionError):
            config = {}
        qc = _object(config).get("quantization_config") or _object(
            _object(config).get("text_config")).get("quantization_config")
        method = qc.get("quant_method") if isinstance(qc, dict) else None
        if method is not None and not isinstance(method, str):
            self.kind = f"quant_method {method!r:.60}"
        else:
            self.kind = {None: "bf16", "compressed-tensors": "compressed-tensors-int4",
                         "fp8": "fp8-block"}.get(method, str(method))
        if self.kind == "compressed-tensors-int4" and (
                not isinstance(qc, dict) or qc.get("format") != "pack-quantized"):
            self.kind = f"compressed-tensors {qc.get('format') if isinstance(qc, dict) else ''}"

    def _check_inside(self, name: str) -> None:
        """OSError when file ``name`` of the folder resolves outside what may be read (a
        symlink out of the folder); checked once per file."""
        inside = self._inside.get(name)
        if inside is None:
            inside = self._inside[name] = not self.reader.escapes(name)
        if not inside:
            raise OSError(f"{name} resolves outside --source ({self.reader.resolved(name)}); "
                          "pass --allow-symlink-root for a trusted store")

    @property
    def supported(self) -> bool:
        return self.kind in ("bf16", "compressed-tensors-int4", "fp8-block")

    def declared(self, name: str) -> tuple[str, tuple[int, ...]] | None:
        """The dtype (numpy's name) and shape tensor ``name``'s shard header declares for
        it, read from the header alone; None when the index does not name it."""
        if name not in self.index:
            return None
        shard = self.index[name]
        self._check_inside(shard)
        entry = self.reader.header(shard)[0].get(name)
        if entry is None:
            raise TensorFileError(shard, "no such tensor in the file",
                                  kind=ErrorKind.NO_SUCH_TENSOR, tensor=name)
        return DTYPES[entry["dtype"]].name, tuple(entry["shape"])

    def _read(self, name: str) -> NDArray[Any]:
        shard = self.index[name]
        self._check_inside(shard)
        return self.reader.tensor(shard, name)

    def weight(self, module: str) -> NDArray[Any] | None:
        """The BF16 weight of ``module`` as the quantizer saw it (None when absent)."""
        if self.kind == "fp8-block" and f"{module}.weight_scale_inv" in self.index:
            return dequantize_fp8_block(
                self._read(f"{module}.weight"), self._read(f"{module}.weight_scale_inv")
            )
        if f"{module}.weight" in self.index:
            w = self._read(f"{module}.weight")
            return w if w.dtype in (np.dtype(ml_dtypes.bfloat16), np.float16, np.float32) \
                else None
        if self.kind == "compressed-tensors-int4" and f"{module}.weight_packed" in self.index:
            packed = self._read(f"{module}.weight_packed")
            scale = self._read(f"{module}.weight_scale")
            cols = packed.shape[-1] * 8
            if f"{module}.weight_shape" in self.index:
                cols = _columns(self._read(f"{module}.weight_shape"))
            q = unpack_int4(packed, layout="compressed-tensors", size=cols)
            return dequantize_int4(q, scale, group_size=_group(cols, scale),
                                   profile="compressed-tensors", dtype=scale.dtype)
        return None


def _group(cols: int, scale: NDArray[Any]) -> int:
    """The group size of an INT4 source module: its columns per scale (32, 64, 128, or all of
    them per channel), as its ``[out, cols / group]`` ``weight_scale`` says; ValueError when
    the scales do not divide the row."""
    groups = scale.shape[-1] if scale.ndim else 0
    if groups == 0 or cols % groups:
        raise ValueError(f"weight_scale {list(scale.shape)} does not divide {cols} columns "
                         "into groups")
    return cols // groups


def _columns(weight_shape: NDArray[Any]) -> int:
    """The input size a compressed-tensors ``weight_shape`` gives: its last entry.
    compressed-tensors writes ``torch.tensor(weight.shape)``, int64 ``[out, in]``
    (``compressed_tensors/compressors/pack_quantized/base.py``, 0.20.1); ValueError for an
    empty or non-integer one (a float one cannot be a ``torch.Size``)."""
    if weight_shape.dtype.kind not in "iu" or weight_shape.size == 0:
        raise ValueError(f"weight_shape {weight_shape.dtype}{list(weight_shape.shape)} is not "
                         "an integer shape")
    return int(weight_shape.reshape(-1)[-1])


def _object(value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a config of another shape)."""
    return value if isinstance(value, dict) else {}


def dequantize_fp8_block(
    weight: NDArray[Any], scale_inv: NDArray[Any], block: int = 128
) -> NDArray[Any]:
    """A DeepSeek FP8-block weight (K2-Instruct) as BF16, bit-exactly as it is decompressed.

    ``weight``: E4M3FN ``[O, I]`` (``ml_dtypes.float8_e4m3fn``, or its uint8 codes);
    ``scale_inv``: float32 ``[ceil(O/block), ceil(I/block)]``. DeepSeek-V3's
    ``inference/kernel.py::weight_dequant`` (used by ``fp8_cast_bf16.py``, which the BF16
    conversions of these checkpoints run) multiplies in float32 and stores to bfloat16:
    ``bf16(float32(x) * s)``, two roundings, reproduced here.
    """
    codes = np.asarray(weight)
    if codes.dtype == np.uint8:
        values = E4M3FN.decode(codes)
    elif codes.dtype == np.dtype(ml_dtypes.float8_e4m3fn):
        values = E4M3FN.decode(codes.view(np.uint8))
    else:
        raise ValueError(f"an FP8-block weight is E4M3FN, not {codes.dtype}")
    s = np.asarray(scale_inv, dtype=np.float32)
    rows, cols = values.shape
    if s.shape != (-(-rows // block), -(-cols // block)):
        raise ValueError(f"weight_scale_inv {s.shape} does not tile a {values.shape} weight "
                         f"in {block}x{block} blocks")
    per_element = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:rows, :cols]
    product = values.astype(np.float32) * per_element  # float32 multiply, rounded once
    return product.astype(ml_dtypes.bfloat16)


@dataclass
class ModuleResult:
    """One module's reproduction: per tensor identical or the first difference, and stats."""

    module: str
    identical: dict[str, bool] = field(default_factory=dict)
    first_mismatch: dict[str, str] = field(default_factory=dict)
    rel_error: float = math.nan
    sqnr_db: float = math.nan
    correlation: float = math.nan
    #: where the serving engine decodes the module otherwise than the file says
    #: (:meth:`Descriptor.engine_arrays`: an NVFP4 module with its fused partner's global
    #: scale), what it does, and the relative error and SQNR of that decode against the source
    engine_decode: str = ""
    engine_rel_error: float = math.nan
    engine_sqnr_db: float = math.nan


def _bits(value: NDArray[Any]) -> str:
    """One element as its raw bit pattern (``0x78``, ``0x3a1c9c7e``), with its value for floats:
    the comparison is of bytes, so the message shows bytes."""
    raw = int.from_bytes(value.tobytes(), "little")
    text = f"0x{raw:0{2 * value.dtype.itemsize}x}"
    if value.dtype.kind in "fV":  # numpy and ml_dtypes floats
        text += f" ({float(value.astype(np.float64)[0])!r})"
    return text


def _first_difference(ours: NDArray[Any], theirs: NDArray[Any]) -> str:
    """``element [i, j]: expected 0x78, found 0x79 (n of m elements differ)``, or the dtype and
    shape when those differ."""
    if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
        return (f"expected {ours.dtype}{list(ours.shape)}, found "
                f"{theirs.dtype}{list(theirs.shape)}")
    a = np.ascontiguousarray(ours).reshape(ours.size, -1).view(np.uint8)
    b = np.ascontiguousarray(theirs).reshape(theirs.size, -1).view(np.uint8)
    differs = np.any(a != b, axis=1)
    i = int(np.argmax(differs))
    where = list(map(int, np.unravel_index(i, ours.shape))) if ours.shape else []
    return (f"element {where}: expected {_bits(ours.reshape(-1)[i:i + 1])}, found "
            f"{_bits(theirs.reshape(-1)[i:i + 1])} ({int(np.count_nonzero(differs))} of "
            f"{ours.size} elements differ)")


def reproduce_module(desc: Descriptor, module: str, w: NDArray[Any],
                     arrays: dict[str, NDArray[Any]],
                     ours: dict[str, NDArray[Any]] | None = None) -> ModuleResult:
    """Compare a checkpoint module (``arrays``: parameter -> array) with what the producer
    writes from source weight ``w`` (``ours`` when already produced, e.g. with its fused
    sibling's amax)."""
    result = ModuleResult(module)
    ours = desc.produce(w) if ours is None else ours
    for p, mine in ours.items():
        theirs = arrays.get(p)
        if theirs is None:
            result.identical[p] = False
            result.first_mismatch[p] = "absent from the checkpoint"
            continue
        same = (mine.dtype == theirs.dtype and mine.shape == theirs.shape
                and mine.tobytes() == np.ascontiguousarray(theirs).tobytes())
        result.identical[p] = same
        if not same:
            result.first_mismatch[p] = _first_difference(mine, theirs)
    _measure(result, desc, arrays, w)
    return result


def _measure(result: ModuleResult, desc: Descriptor, arrays: dict[str, NDArray[Any]],
             w: NDArray[Any]) -> None:
    """``result``'s relative error, SQNR and correlation: ``arrays`` decoded against source
    weight ``w``. Left NaN where they do not decode to ``w``'s shape."""
    try:
        d = np.asarray(desc.dequantize(arrays, w.shape[-1]))
    except (ValueError, TypeError):
        return  # the layout checks report the shapes; the bytes already differ
    if d.shape != w.shape:
        return
    _with_moments(result, Moments.of(d, w))


def _with_moments(result: ModuleResult, stats: Moments | None) -> None:
    """Set ``result``'s relative error, SQNR and correlation from ``stats`` (None: the
    dequantized weight holds NaN/Inf)."""
    if stats is None:  # NaN/Inf decoded (E8M0 0xFF, a scale Inf): no statistic
        result.rel_error, result.sqnr_db = math.inf, -math.inf
        return
    if not stats.source_finite:  # the source's NaN/Inf: no statistic, the bytes alone judge
        return
    result.rel_error, result.sqnr_db = error_figures(stats)
    if stats.source_varies:  # a constant source has no correlation to judge
        # A constant weight (an all-zero expert) carries nothing of a varying source: 0, not
        # the NaN a correlation of a constant gives, which every comparison would let through.
        result.correlation = stats.correlation if stats.weight_varies else 0.0


def error_figures(stats: Moments) -> tuple[float, float]:
    """The relative error ‖d − x‖ / ‖x‖ and the SQNR 20·log10(‖x‖ / ‖d − x‖) dB of the sums
    ``stats`` (an all-zero source: relative error 0 when ``d`` is zero too, else infinite; no
    error: SQNR infinite)."""
    err, ref = math.sqrt(stats.error_squares), math.sqrt(stats.source_squares)
    return (err / ref if ref else (0.0 if err == 0 else math.inf),
            20 * math.log10(ref / err) if err and ref else math.inf)


def figures(d: NDArray[Any], x: NDArray[Any]) -> tuple[float, float]:
    """:func:`error_figures` of ``d`` against ``x`` (the sums of ``--source``'s figures,
    :meth:`~mxformats.fast.moments.Moments.of`): infinite error and -infinite SQNR when ``d``
    holds a NaN or an infinity, NaN for both when ``x`` does. ``mxformats compare`` uses it."""
    stats = Moments.of(d, x)
    if stats is None:
        return math.inf, -math.inf
    if not stats.source_finite:
        return math.nan, math.nan
    return error_figures(stats)


def sample_modules(names: list[str], n: int | None) -> list[str]:
    """``n`` modules per layer (all when ``n`` is None), chosen by the sha256 of the name."""
    if n is None:
        return sorted(names)
    by_layer: dict[str, list[str]] = defaultdict(list)
    for name in names:
        m = _LAYER.search(name)
        by_layer[m.group(1) if m else ""].append(name)
    out: list[str] = []
    for group in by_layer.values():
        group.sort(key=lambda s: hashlib.sha256(s.encode()).hexdigest())
        out += group[:max(n, 0)]
    return sorted(out)


def _params(desc: Descriptor, module: Module) -> tuple[str, ...]:
    return tuple(p for p in desc.reproduce_params() if p in module.tensors)


@dataclass(frozen=True)
class Claim:
    """What every module's reproduction needs besides the module: the open ``source``, the
    ``profile`` the checkpoint claims and, where its recipe is one no profile reproduces, why
    (``unclaimed``; "" when the profile's bytes are claimed: :func:`claimed_profile`)."""

    source: Source
    profile: str
    unclaimed: str
    #: where each module's one pass runs (``--device``: :func:`.device.passes_for`)
    passes: OnePass = COMPILED


def prepare(ckpt: Checkpoint, opts: Options) -> Claim | Finding | None:
    """The :class:`Claim` reproduction works under; None without ``--source``; the one
    finding that stops it where the format has no profile or the source cannot be read."""
    if opts.source is None:
        return None
    desc = ckpt.descriptor
    if desc is None or desc.profile is None:
        return Finding(REPRO_NOTHING_VERIFIED, f"--source: {ckpt.format.value} has no producer "
                       "profile to reproduce")
    profile, unclaimed = claimed_profile(ckpt)
    try:
        source = Source(Path(opts.source), opts.allow_symlink_root)
    except (OSError, TensorFileError) as exc:
        return Finding(REPRO_SOURCE_UNSUPPORTED, f"--source {opts.source}: {exc}")
    if not source.supported:
        return Finding(REPRO_SOURCE_UNSUPPORTED, f"--source {opts.source} is {source.kind}")
    local = ckpt.reader is None or isinstance(ckpt.reader, LocalReader)
    if local and Path(ckpt.root).resolve() == source.reader.root:
        # FP8-block, for one, re-quantizes its own decoded weights to the same bytes
        return Finding(REPRO_NOTHING_VERIFIED, f"--source {opts.source} is the checkpoint "
                       "itself: re-quantizing its own decoded weights verifies nothing")
    return Claim(source, profile, unclaimed, passes_for(opts.device))


def source_usage_error(ckpt: Checkpoint, opts: Options) -> str | None:
    """Why ``--source`` can verify nothing whatever it holds, a usage error (exit 2): a
    source quantized in the checkpoint's own format (a copy of it, in any folder, or the
    folder itself). Decompressing it and re-quantizing with the same profile gives the
    checkpoint's bytes back (an FP8 block amax maps to 448 again), so "N of N identical"
    would say nothing about the quantizer. A source in another format is the one the
    quantizer may have read (an NVFP4 export of the FP8 release). None: no ``--source``, one
    this check cannot open (:func:`prepare` reports that), or another format."""
    if opts.source is None:
        return None
    try:
        kind = Source(Path(opts.source), opts.allow_symlink_root).kind
    except (OSError, TensorFileError):
        return None
    if kind != "bf16" and kind == ckpt.format.value:
        return (f"--source {opts.source} is itself a {kind} checkpoint, as the one checked: "
                "re-quantizing its decoded weights gives its own bytes back and verifies "
                "nothing; pass the BF16 (or other-format) checkpoint the quantizer read")
    return None


def chosen_modules(ckpt: Checkpoint, opts: Options) -> list[str]:
    """The quantized modules ``--source`` compares (``--sample`` of them), in name order."""
    return sample_modules([m.name for m in quantized_modules(ckpt)], opts.sample)


@dataclass
class ModuleReproduction:
    """What reproducing one module gives (:func:`module_reproduction`), picklable so that it
    can be computed in another process or on another machine: its REPRO_MISMATCH /
    REPRO_ERROR_HIGH / REPRO_UNCORRELATED ``findings`` (listed or counted when combined),
    its ``result`` (None: not compared), or ``missing`` (its REPRO_SOURCE_MISSING), or
    ``unprofiled`` (its format, which no profile reproduces); ``unrecognised``: the recipe its
    bytes show where the config names none. All None: the module could not be read (the
    files checks report it)."""

    module: str
    findings: list[Finding] = field(default_factory=list)
    result: ModuleResult | None = None
    missing: Finding | None = None
    unprofiled: str | None = None
    unrecognised: str | None = None


def module_reproduction(ckpt: Checkpoint, claim: Claim, module: Module) -> ModuleReproduction:
    """Re-quantize one module from ``claim.source`` and compare it with the checkpoint's bytes,
    reading only this module's tensors (memory bounded by the module). An exception becomes
    the module's INTERNAL_ERROR."""
    out = ModuleReproduction(module.name)
    try:
        _reproduce_into(ckpt, claim, module, out)
    except Exception as exc:
        out.findings = [internal(f"module {module.name}", exc, tensor=module.name)]
    return out


def _reproduce_into(ckpt: Checkpoint, claim: Claim, module: Module,
                    out: ModuleReproduction) -> None:
    desc = ckpt.descriptor
    assert desc is not None
    name = module.name
    own = desc.for_module(ckpt, name)
    if own.profile is None:  # a mixed checkpoint's member with no profile (FP8_PB_WO)
        out.unprofiled = own.format.value
        return
    params = _params(own, module)
    wref = module.tensors[params[0]]

    siblings: list[str] = []  # those the producer may have calibrated this module with

    def fused(other: str) -> NDArray[Any] | None:
        """The source weight of ``other`` where the producer may have calibrated it with this
        module (``other`` is quantized in this module's format), else None."""
        sibling = ckpt.modules.get(other)
        if sibling is None or desc.for_module(ckpt, other) is not own or not own.quantized(
                sibling):
            return None
        siblings.append(other)
        try:
            return _source_weight(ckpt, claim.source, other)
        except _Unusable as exc:
            raise _Unusable(f"its fused sibling {other}, whose weight the producer calibrates "
                            f"it with: {exc}") from None

    try:
        w = _source_weight(ckpt, claim.source, name)
        arrays = read_module(ckpt, module, params)
        if arrays is None:
            return  # unreadable: the files checks report it
        produced, r = _produced_and_compared(own.for_arrays(arrays), name, w, arrays, fused,
                                             siblings, claim.passes)
    except _Unusable as exc:
        out.missing = Finding(REPRO_SOURCE_MISSING, f"{name}: {exc}", wref.file, wref.name,
                              wref.begin)
        return
    except (ValueError, TypeError) as exc:
        out.missing = Finding(REPRO_SOURCE_MISSING, f"{name}: cannot re-quantize the source "
                              f"weight {w.dtype}{list(w.shape)} ({exc})", wref.file,
                              wref.name, wref.begin)
        return
    # a module the profile reproduces is claimed whatever its bytes look like
    recipe = claim.unclaimed or (own.unclaimed_tensors(arrays, produced) if r.first_mismatch
                                 else "")
    if recipe and r.first_mismatch and math.isnan(r.rel_error):
        # other bytes expected, and no error statistic to judge the module by instead
        why = ("its tensors do not decode to the source weight's shape"
               if np.isfinite(w).all() else "the source weight holds NaN or Inf")
        out.missing = Finding(REPRO_SOURCE_MISSING, f"{name}: not judged: its bytes are not "
                              f"claimed ({recipe}) and {why}, so it has no error statistic",
                              wref.file, wref.name, wref.begin)
        return
    out.result = r
    engine = own.engine_arrays(ckpt, name, arrays)
    if engine is not None:
        seen = ModuleResult(name)
        _measure(seen, own, engine[0], w)
        r.engine_decode, r.engine_rel_error, r.engine_sqnr_db = (
            engine[1], seen.rel_error, seen.sqnr_db)
    if recipe and not claim.unclaimed:
        out.unrecognised = recipe
    mismatches = {} if recipe else r.first_mismatch  # unclaimed: other bytes expected
    for p, msg in mismatches.items():
        ref = module.tensors.get(p, wref)
        out.findings.append(Finding(REPRO_MISMATCH, f"{name}.{p} not reproduced by profile "
                                    f"{claim.profile!r}: {msg}", ref.file, ref.name, ref.begin))
    verdict = _numeric_verdict(own, r, claimed=not recipe)
    if verdict is not None:
        check, severity, message = verdict
        out.findings.append(Finding(check, f"{name}: {message}", wref.file, wref.name,
                                    wref.begin, severity=severity))


class _Unusable(Exception):
    """The source holds no weight of a module the producer could have read (the message says
    why): its REPRO_SOURCE_MISSING."""


def _produced_and_compared(
        own: Descriptor, name: str, w: NDArray[Any], arrays: dict[str, NDArray[Any]],
        fused: Callable[[str], NDArray[Any] | None], siblings: list[str],
        passes: OnePass = COMPILED) -> tuple[dict[str, NDArray[Any]], ModuleResult]:
    """What the producer writes for module ``name`` from ``w``, and the comparison of the
    checkpoint's ``arrays`` with it. ``fused`` reads a sibling's source weight and records
    it in ``siblings`` (:meth:`Descriptor.produce_module`); ``passes`` runs the one-pass
    reproduction first (:func:`_compiled_pass`).

    A module calibrated with its siblings (NVFP4 gate and up, one amax) may have been
    calibrated alone by another recipe of the same producer: llm-compressor's
    ``model_free_ptq`` does not fuse routed experts (measured: tests/data/producers/README.md),
    and vLLM warns of ModelOpt files whose gate and up have different ``weight_scale_2`` and
    loads them with gate's (vllm-project/vllm
    ``vllm/model_executor/layers/quantization/modelopt.py``
    ``ModelOptNvFp4FusedMoE.process_weights_after_loading`` @ 00155cd; NVFP4_GATE_UP_SCALE
    reports what that does to up). So where the fused bytes differ, or a sibling cannot be
    read, the module calibrated alone (:meth:`Descriptor.produce`) is compared, and its
    bytes are claimed when every tensor is identical. :class:`_Unusable` when the sibling
    cannot be read and the module alone differs (the bytes cannot be told right or wrong)."""
    compiled = _compiled_pass(own, name, w, arrays, passes)
    if compiled is not None:
        return compiled
    unusable: _Unusable | None = None
    try:
        produced: dict[str, NDArray[Any]] | None = own.produce_module(name, w, fused)
    except _Unusable as exc:
        produced, unusable = None, exc
    r = None if produced is None else reproduce_module(own, name, w, arrays, produced)
    if siblings and (r is None or r.first_mismatch):
        alone = own.produce(w)
        r_alone = reproduce_module(own, name, w, arrays, alone)
        if not r_alone.first_mismatch:
            return alone, r_alone
    if produced is None or r is None:
        assert unusable is not None
        raise unusable
    return produced, r


def _compiled_pass(own: Descriptor, name: str, w: NDArray[Any], arrays: dict[str, NDArray[Any]],
                   passes: OnePass) -> tuple[dict[str, NDArray[Any]], ModuleResult] | None:
    """The module reproduced by its descriptor's one pass on ``passes`` (compiled on the CPU,
    or on the ``--device``: :meth:`~.descriptors.base.Descriptor.reproduce_in_one_pass`), as
    :func:`_produced_and_compared` returns it, when the format has one and it finds every byte
    equal and every value finite; else None, and the numpy path computes the module (the same
    bytes and moments, and the messages that say where they differ). Every tensor equal: the
    checkpoint's own are what the producer writes."""
    stats = own.reproduce_in_one_pass(name, w, arrays, passes)
    if stats is None:
        return None
    params = own.produced_params()
    result = ModuleResult(name, identical=dict.fromkeys(params, True))
    _with_moments(result, stats)
    return {p: arrays[p] for p in params}, result


def _source_weight(ckpt: Checkpoint, source: Source, name: str) -> NDArray[Any]:
    """The source weight of module ``name`` as the quantizer read it. :class:`_Unusable` when
    it is absent or unreadable, or when its shape is not the module's ``[out, in]`` (a
    transposed or truncated source weight is not what the producer read, so the bytes it
    gives say nothing of the checkpoint's): the shape the checkpoint's config implies, or,
    for a module the config does not describe, one whose tensors in the module's format are
    the shapes the checkpoint stores (:func:`_stored_as`)."""
    expected = ckpt.expected.get(name)
    shape = None if expected is None or expected.shape is None else tuple(expected.shape)

    def check(dtype: str, found: tuple[int, ...]) -> None:
        if shape is not None and found != shape:
            raise _Unusable(f"the source weight is {dtype}{list(found)}, the config implies "
                            f"{list(shape)} for this module")
        stored = _stored_as(ckpt, name, found) if shape is None else None
        if stored:
            raise _Unusable(f"the source weight is {dtype}{list(found)}, but the checkpoint "
                            f"stores {stored} (the config does not describe this module)")

    try:
        # a ``weight`` (BF16, or FP8-block codes) of another shape is not read at all: its
        # header says so, and it may be far larger than the module
        declared = source.declared(f"{name}.weight")
        if declared is not None:
            check(*declared)
        w = source.weight(name)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # TypeError: a scale's dtype
        raise _Unusable(str(exc)) from None
    if w is None:
        raise _Unusable("no weight in the source")
    check(str(w.dtype), tuple(w.shape))
    return w


def _stored_as(ckpt: Checkpoint, name: str, shape: tuple[int, ...]) -> str:
    """The first tensor of checkpoint module ``name`` whose stored shape is not one its
    format writes for a weight of ``shape`` (:meth:`Descriptor.expected_tensors`), as
    ``name.param [shape]``; "" when every one is (or there is nothing to compare)."""
    module, desc = ckpt.modules.get(name), ckpt.descriptor
    if module is None or desc is None:
        return ""
    if len(shape) != 2:
        ref = next(iter(module.tensors.values()))
        return f"{ref.name} {list(ref.shape)}"
    spec = desc.for_module(ckpt, name).expected_tensors(ckpt, shape[0], shape[1])
    for param, (_, shapes) in spec.items():
        stored = module.tensors.get(param)
        if stored is not None and stored.shape not in shapes:
            return f"{stored.name} {list(stored.shape)}"
    return ""


def run(ckpt: Checkpoint, opts: Options,
        outcomes: Sequence[ModuleReproduction] | None = None) -> Iterator[Finding]:
    """Reproduction findings when ``opts.source`` is given.

    The checkpoint's quantization_config names its producer, and ``--source`` names what that
    producer read: together they claim the producer profile of :data:`PROFILES`, so a tensor
    whose bytes differ is an error (REPRO_MISMATCH), and a run that verified no module at all
    is one too (REPRO_NOTHING_VERIFIED), never OK. Where the config names a recipe no profile
    reproduces (:func:`claimed_profile`), one REPRO_MISMATCH warning says so and each module is
    judged by :func:`_numeric_verdict` alone; so is a module whose bytes differ and show such a
    recipe the config cannot name (:meth:`Descriptor.unclaimed_tensors`: ModelOpt's NVFP4 Four
    Over Six). Per check, the first :data:`MAX_LISTED` modules are listed and the rest counted
    in one finding.

    ``outcomes``: :func:`module_reproduction` of every :func:`chosen_modules` module, already
    computed (the runner's tasks, in any order); computed here, in this thread, when None.
    """
    claim = prepare(ckpt, opts)
    if claim is None:
        return
    if isinstance(claim, Finding):
        yield claim
        return
    modules = {m.name: m for m in quantized_modules(ckpt)}
    chosen = sample_modules(list(modules), opts.sample)
    if outcomes is None:
        outcomes = [module_reproduction(ckpt, claim, modules[name]) for name in chosen]
    yield from combine(ckpt, opts, claim, len(modules), chosen, outcomes)


def combine(ckpt: Checkpoint, opts: Options, claim: Claim, total: int, chosen: Sequence[str],
            outcomes: Sequence[ModuleReproduction]) -> Iterator[Finding]:
    """The reproduction findings from the per-module ``outcomes`` of the ``chosen`` modules
    (``total`` quantized): the modules' findings in module order through one listing, the
    summaries, and the REPRO_SUMMARY block. Depends only on the outcomes, never on the order
    in which they were computed."""
    desc = ckpt.descriptor
    assert desc is not None
    by_name = {o.module: o for o in outcomes}
    results: list[ModuleResult] = []
    missing: list[Finding] = []
    listed = Listing(MAX_LISTED, " (the reproduction block has every module)")
    unprofiled: list[tuple[str, str]] = []  # (module, its format) where no profile exists
    #: (module, why) where the bytes show a recipe the config does not name and no profile has
    unrecognised: list[tuple[str, str]] = []
    for o in (by_name[name] for name in chosen if name in by_name):
        if o.unprofiled is not None:
            unprofiled.append((o.module, o.unprofiled))
        if o.missing is not None:
            missing.append(o.missing)
        if o.result is not None:
            results.append(o.result)
        if o.unrecognised:
            unrecognised.append((o.module, o.unrecognised))
        for f in o.findings:
            yield from listed.add(f)
    if chosen and not results and len(missing) == len(chosen):
        # one finding for the one cause, with the first module's reason (absent, a symlink
        # out of the folder, another shape...), which the per-module findings would have said
        yield Finding(REPRO_NOTHING_VERIFIED, f"--source {opts.source}: the source holds no "
                      f"usable weight of this checkpoint's modules ({len(chosen)} looked for; "
                      f"first {missing[0].message})")
    else:
        for f in missing:
            yield from listed.add(f)
        if not results:
            yield Finding(REPRO_NOTHING_VERIFIED, f"--source {opts.source}: no module was "
                          f"compared ({total} quantized, {len(chosen)} chosen)")
    yield from listed.rest()
    if unprofiled:
        yield Finding(REPRO_MISMATCH, f"bytes not verified: {len(unprofiled)} module(s) (e.g. "
                      f"{unprofiled[0][0]}) are {unprofiled[0][1]}, which no producer profile "
                      "reproduces", severity=Severity.WARNING)
    if unrecognised:
        yield Finding(REPRO_MISMATCH, f"bytes not verified: {len(unrecognised)} module(s) (e.g. "
                      f"{unrecognised[0][0]}) hold {unrecognised[0][1]}; each is judged by its "
                      "error and correlation against the source", severity=Severity.WARNING)
    if claim.unclaimed and results:
        yield Finding(REPRO_MISMATCH, f"bytes not verified: {claim.unclaimed}; each module is "
                      "judged by its error and correlation against the source",
                      severity=Severity.WARNING)
    yield _summary(desc, claim.profile, claim.source, results, total,
                   claimed=not claim.unclaimed)


def claimed_profile(ckpt: Checkpoint) -> tuple[str, str]:
    """The producer profile the checkpoint's quantization_config claims, and "" — or, where its
    recipe is one no profile reproduces, the nearest profile and why its bytes cannot be
    claimed."""
    profile = ckpt.descriptor.profile if ckpt.descriptor is not None else None
    if profile is None:
        return "", f"{ckpt.format.value} has no producer profile"
    return profile, ckpt.descriptor.unclaimed(ckpt) if ckpt.descriptor is not None else ""


def _numeric_verdict(desc: Descriptor, r: ModuleResult, claimed: bool = True
                     ) -> tuple[Check, Severity, str] | None:
    """REPRO_UNCORRELATED or REPRO_ERROR_HIGH for one module, with its severity, or None.

    A module the ``claimed`` profile reproduces byte for byte is the producer's own output: its
    error is reported as info. Otherwise the error is a warning while within the family's
    normal range (:data:`ERROR_LIMIT`) and an error beyond it (where a profile is claimed, a
    REPRO_MISMATCH error already fails the run; this says how far off the numbers are).
    """
    reproduced = claimed and bool(r.identical) and all(r.identical.values())
    own = " (the profile writes these bytes)" if reproduced else ""
    if r.correlation < 0.9:  # NaN (constant source) is judged by the error alone
        # A source varying by less than a quantization step (a near-constant block) gives a
        # constant weight, correlation 0, from a right producer too: info when it did.
        return REPRO_UNCORRELATED, Severity.INFO if reproduced else Severity.ERROR, (
            f"correlation {r.correlation:.3f} with the source{own}")
    if not r.rel_error > desc.error_threshold:  # NaN: not decoded, the mismatch says why
        return None
    severity = (Severity.INFO if reproduced else Severity.WARNING
                if r.rel_error <= ERROR_LIMIT else Severity.ERROR)
    return REPRO_ERROR_HIGH, severity, (f"relative error {r.rel_error:.3f}, SQNR "
                                        f"{r.sqnr_db:.1f} dB{own}")


#: The strings a NaN or an infinity is written as in JSON: protobuf's JSON mapping of
#: ``double`` (https://protobuf.dev/programming-guides/json/), since JSON has no such numbers
#: (RFC 8259, section 6): Python's ``json`` writes bare ``NaN``/``Infinity``, which
#: JavaScript's ``JSON.parse`` rejects and jq turns into null and 1.8e308.
NONFINITE_JSON = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_float(x: float) -> float | str:
    """``x`` for the JSON report: itself when finite, else its :data:`NONFINITE_JSON`
    string."""
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"


def _summary(desc: Descriptor, profile: str, source: Source, results: list[ModuleResult],
             total: int, claimed: bool) -> Finding:
    tensors = sum(len(r.identical) for r in results)
    identical = sum(sum(r.identical.values()) for r in results)
    modules_ok = sum(all(r.identical.values()) for r in results)
    errs = np.array([r.rel_error for r in results if math.isfinite(r.rel_error)])
    sq = np.array([r.sqnr_db for r in results if math.isfinite(r.sqnr_db)])
    stats = ""
    if errs.size:
        stats = (f"; relative error median {float(np.median(errs)):.4f} max "
                 f"{float(errs.max()):.4f}")
    if sq.size:
        stats += f"; SQNR median {float(np.median(sq)):.1f} dB min {float(sq.min()):.1f} dB"
    stats += _engine_statistics(results)
    block = {
        "profile": profile,
        "profile_claimed": claimed,
        "source": str(source.folder),
        "source_format": source.kind,
        "modules_checked": len(results),
        "modules_total": total,
        "modules_reproduced": modules_ok,
        "tensors": tensors,
        "identical": identical,
        "first_mismatches": [
            {"tensor": f"{r.module}.{p}", "message": m}
            for r in results for p, m in r.first_mismatch.items()][:100],
        "per_module": [_per_module(r) for r in results],
    }
    return Finding(REPRO_SUMMARY, f"profile {profile!r}{'' if claimed else ' (not claimed)'} "
                   f"({desc.format.value}) from {source.kind} "
                   f"source: {identical} of {tensors} tensors identical, {modules_ok} of "
                   f"{len(results)} modules reproduced ({total} quantized){stats}",
                   extra={"reproduction": block})


def _per_module(r: ModuleResult) -> dict[str, Any]:
    """One module's entry of the reproduction block's ``per_module``: with ``engine_decode``,
    ``engine_rel_error`` and ``engine_sqnr_db`` where the engine decodes it otherwise than
    the file says (:attr:`ModuleResult.engine_decode`)."""
    out: dict[str, Any] = {"module": r.module, "identical": all(r.identical.values()),
                           "rel_error": json_float(r.rel_error), "sqnr_db": json_float(r.sqnr_db)}
    if r.engine_decode:
        out.update(engine_decode=r.engine_decode,
                   engine_rel_error=json_float(r.engine_rel_error),
                   engine_sqnr_db=json_float(r.engine_sqnr_db))
    return out


def _engine_statistics(results: list[ModuleResult]) -> str:
    """The summary's words on the modules vLLM decodes otherwise than the file says: how
    many, and their relative error as vLLM decodes them beside the file's own; "" when
    none."""
    seen = [r for r in results if r.engine_decode]
    if not seen:
        return ""

    def spread(values: list[float]) -> str:
        finite = np.array([v for v in values if math.isfinite(v)])
        if not finite.size:
            return "not finite"
        return f"median {float(np.median(finite)):.4f} max {float(finite.max()):.4f}"

    return (f"; as vLLM decodes them, {len(seen)} module(s) with another module's scale "
            f"(e.g. {seen[0].module} {seen[0].engine_decode}): relative error "
            f"{spread([r.engine_rel_error for r in seen])} (the file's own: "
            f"{spread([r.rel_error for r in seen])})")


def applies(ckpt: Checkpoint, opts: Options) -> bool:
    """Whether reproduction runs: ``--source`` is given (a claim it cannot work under is its
    one finding, :func:`prepare`)."""
    return opts.source is not None


def _compared(ckpt: Checkpoint, opts: Options, claim: Claim | Finding | None) -> list[str]:
    """The modules reproduction compares: :func:`chosen_modules`, under a claim."""
    return chosen_modules(ckpt, opts) if isinstance(claim, Claim) else []


def _module_reproduction(ckpt: Checkpoint, opts: Options, claim: Claim | Finding | None,
                         module: Module) -> ModuleReproduction:
    assert isinstance(claim, Claim)  # only the modules of _compared are checked
    return module_reproduction(ckpt, claim, module)


def _source_files(claim: Claim | Finding | None) -> tuple[Path, Mapping[str, str]] | None:
    """The ``--source`` folder and the shard of each source tensor, under a claim."""
    return (claim.source.folder, claim.source.index) if isinstance(claim, Claim) else None


#: Reproduction as the runner and the tasks run it: per module (:func:`module_reproduction`),
#: then :func:`run` over the outcomes.
CHECK = CheckModule("reproduce", run, applies, PerModule(
    "reproduction", prepare, _compared, _module_reproduction, run, _source_files),
    usage_error=source_usage_error)
