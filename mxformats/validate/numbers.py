"""Numeric checks: scale bytes and values, NaN/Inf, scale tightness, codes and per-expert stats.

Level ``scales`` reads every scale tensor and every small tensor (router biases, norms);
level ``full`` reads every byte, module by module and in bounded chunks (ranged reads of a
tensor's span through the checkpoint's reader: a folder or a Hub repo), and adds the checks
that need the codes.

The checks are pure functions over numpy arrays (:mod:`~mxformats.validate.stats`, with the
per-tensor findings the format descriptors build from them), wired into :func:`run` here.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.fast import scan as fast_scan
from mxformats.fast.histogram import byte_counts, counted_once
from mxformats.tensorfile import DTYPES

from . import layout, plausibility
from .checkmodule import CheckModule, PerModule
from .device import scan_for
from .findings import MAX_LISTED, Finding, Level, Listing, Severity, listed
from .model import CodeStats
from .parallel import internal
from .stats import (
    CODE_HISTOGRAM,
    EXPERT_ALL_ZERO,
    EXPERT_DUPLICATE,
    EXPERT_RMS_OUTLIER,
    FINGERPRINT,
    ROUTER_BIAS_DTYPE,
    ROUTER_BIAS_NONFINITE,
    SCALE_NOT_TIGHT,
    TENSOR_NONFINITE,
    expert_rms_outliers,
    finding,
    nonfinite_count,
    where,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .model import Checkpoint, Module, Options, TensorRef

__all__ = [
    "CHUNK_BYTES",
    "SCALE_BINS",
    "ModuleNumbers",
    "applies",
    "combine",
    "module_numbers",
    "run",
    "scale_histogram",
]

#: Tensors of at most this many bytes are "small" (read at level ``scales``).
SMALL_BYTES = 1 << 20
#: Scale tensors up to this many elements (global and per-tensor scales) are kept for the
#: checks across modules (:meth:`Descriptor.layer_findings`).
SMALL_ELEMENTS = 16
#: Bytes per chunk when scanning big tensors.
CHUNK_BYTES = 32 << 20
_FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")
_EXPERT = re.compile(r"^(?P<layer>.*\.layers\.\d+\.mlp\.experts)\.(?P<e>\d+)\.(?P<p>\w+)$")


#: Bins of a scale histogram (:func:`scale_histogram`).
SCALE_BINS = 256
#: The smallest binary exponent an ``exponent`` histogram tells apart (bin 0; the largest,
#: bin 255, is ``EXPONENT_LOW + 255``).
EXPONENT_LOW = -128


def scale_histogram(a: NDArray[Any]) -> tuple[str, NDArray[np.int64]] | None:
    """The distribution of a scale tensor in :data:`SCALE_BINS` int64 counts, and how it is
    binned: ``"byte"`` for a 1-byte dtype (E8M0 exponent bytes, E4M3 block scales, uint8):
    bin ``b`` counts the elements whose raw byte is ``b``; ``"exponent"`` for a float dtype
    (FP8-block and INT4 float scales, global scales): bin ``e - EXPONENT_LOW`` counts the
    elements whose :func:`numpy.frexp` exponent is ``e`` (value = m·2^e, 0.5 <= |m| < 1),
    clipped to the bins; zero, NaN and the infinities count at exponent 0, as frexp gives.
    A 2-byte dtype is counted by bit pattern (:func:`mxformats.fast.scan.pattern_counts`) and
    each of the 65536 patterns binned once (float64 weights: exact below 2**53 elements).
    None for any other dtype (integer scales)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.dtype.itemsize == 1:
        return "byte", byte_counts(flat)
    if flat.dtype.kind != "f" and flat.dtype.name != "bfloat16":
        return None
    counts = None
    if flat.dtype.itemsize == 2:  # BF16 / F16: each bit pattern binned once, by its count
        counts = fast_scan.pattern_counts(flat)
        flat = np.arange(counts.size, dtype=np.uint16).view(flat.dtype)
    _, exp = np.frexp(flat.astype(np.float32))
    index = np.clip(exp.astype(np.int64) - EXPONENT_LOW, 0, SCALE_BINS - 1)
    return "exponent", np.bincount(index, weights=counts, minlength=SCALE_BINS).astype(np.int64)


# -- wiring ---------------------------------------------------------------------------------


def quantized_modules(ckpt: Checkpoint) -> list[Module]:
    """The modules carrying the format's weight and scale tensors, in name order, those the
    layout check refuses left out (:func:`~.layout.decodable`: a tensor of another dtype or
    shape, whose QUANT_DTYPE or QUANT_SHAPE is the module's one finding)."""
    desc = ckpt.descriptor
    if desc is None:
        return []
    return layout.decodable(ckpt, [m for name, m in sorted(ckpt.modules.items())
                                   if desc.for_module(ckpt, name).quantized(m)])


def read_module(ckpt: Checkpoint, module: Module, params: tuple[str, ...]
                ) -> dict[str, NDArray[Any]] | None:
    """The named tensors of a module, or None if one cannot be read."""
    try:
        return {p: ckpt.read(module.tensors[p].name) for p in params}
    except (ValueError, OSError, KeyError):
        return None


def iter_chunks(ckpt: Checkpoint, ref: TensorRef, chunk_bytes: int = CHUNK_BYTES
                ) -> Iterator[tuple[int, NDArray[Any]]]:
    """(first element index, 1-D chunk) over a tensor's span, each chunk one read of at most
    ``chunk_bytes`` through the checkpoint's reader (:meth:`Checkpoint.read_bytes`)."""
    dtype = DTYPES[ref.dtype]
    count = ref.nbytes // dtype.itemsize
    step = max(1, chunk_bytes // dtype.itemsize)
    for start in range(0, count, step):
        stop = min(count, start + step)
        raw = ckpt.read_bytes(ref, start * dtype.itemsize, stop * dtype.itemsize)
        yield start, np.frombuffer(raw, dtype=dtype)


def _nonfinite_scan(ckpt: Checkpoint, ref: TensorRef, check: Any = TENSOR_NONFINITE
                    ) -> Finding | None:
    total, first = 0, -1
    for start, chunk in iter_chunks(ckpt, ref):
        c = nonfinite_count(chunk)
        if c.n and first < 0:
            first = start + c.first
        total += c.n
    if not total:
        return None
    return finding(check, ref, f"{total} NaN/Inf value(s), first at {where(ref.shape, first)}",
                    first)


@dataclass
class ModuleNumbers:
    """What the numbers checks of one quantized module give (:func:`module_numbers`):
    picklable, so that it can be computed in another process or on another machine.

    ``findings``: the module's own findings, in the order the checks yield them; ``small``:
    its scale arrays of at most :data:`SMALL_ELEMENTS` elements, for the checks across
    modules (None: the module could not be read); ``hist`` and ``zero_blocks``: what its code
    checks counted; ``scale_hist``: per scale param, how its values are binned and its
:func:`scale_histogram` counts (level ``scales`` and above, for the HTML report's per-layer
scale distributions); ``expert``: for a routed expert's projection, its weight's checksum key
    (:func:`mxformats.fast.scan.checksum` and the byte count, 8 bytes each, little-endian),
    dequantized RMS and whether it is all zero (None otherwise); ``magnitude``: its decoded
    magnitude from its scales (:func:`.plausibility.measure`)."""

    module: str
    findings: list[Finding] = field(default_factory=list)
    small: dict[str, NDArray[Any]] | None = None
    hist: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    zero_blocks: dict[str, int] = field(default_factory=dict)
    scale_hist: dict[str, tuple[str, NDArray[np.int64]]] = field(default_factory=dict)
    expert: tuple[bytes, float, bool] | None = None
    magnitude: plausibility.Magnitude | None = None


def module_params(ckpt: Checkpoint, opts: Options, module: Module) -> tuple[str, ...]:
    """The tensors of ``module`` its numbers checks read, in the order they read them: its
    scales and small tensors (``scales``), and its packed weight (``full``) last."""
    desc = ckpt.descriptor
    assert desc is not None
    own = desc.for_module(ckpt, module.name)
    params_here = tuple(p for p in (*own.scale_params, *own.small_params)
                        if p in module.tensors)
    return (*params_here, own.weight_param) if opts.at_least(Level.FULL) else params_here


def module_numbers(ckpt: Checkpoint, opts: Options, module: Module) -> ModuleNumbers:
    """The numbers checks of one quantized module at ``opts.level``: its descriptor's scale
    checks (``scales``) and code checks (``full``), reading only this module's tensors (the
    memory a call needs is bounded by the module). An exception becomes the module's
    INTERNAL_ERROR naming it (its findings so far are dropped; the other modules go on)."""
    out = ModuleNumbers(module.name)
    try:
        with counted_once():  # each scale tensor's bytes counted once, by all its checks
            out.findings = list(_module_checks(ckpt, opts, module, out))
    except Exception as exc:
        out.findings = [internal(f"module {module.name}", exc, tensor=module.name)]
    return out


def _module_checks(ckpt: Checkpoint, opts: Options, module: Module, out: ModuleNumbers
                   ) -> Iterator[Finding]:
    desc = ckpt.descriptor
    assert desc is not None
    full = opts.at_least(Level.FULL)
    own = desc.for_module(ckpt, module.name)
    wp = own.weight_param
    arrays = read_module(ckpt, module, module_params(ckpt, opts, module))
    if arrays is None:
        return  # unreadable: the files checks report it
    out.small = {p: a for p, a in arrays.items() if a.size <= SMALL_ELEMENTS}
    out.magnitude = plausibility.measure(own, arrays)
    for p in own.scale_params:
        if p in arrays and (binned := scale_histogram(arrays[p])) is not None:
            out.scale_hist[p] = binned
    yield from own.scale_findings(ckpt, module, arrays)
    if not full:
        return
    stats = CodeStats()
    try:
        with fast_scan.on_device(scan_for(opts.device)):  # --device: the scan's pass there
            found = list(own.code_findings(ckpt, module, arrays, stats))
    except ValueError as exc:  # shapes the layout checks report; say why we skipped
        ref = module.tensors[wp]
        yield Finding(SCALE_NOT_TIGHT, f"{ref.name}: codes not checked ({exc})", ref.file,
                      ref.name, ref.begin, severity=Severity.INFO)
        return
    yield from found
    out.hist, out.zero_blocks = dict(stats.hist), dict(stats.zero_blocks)
    if stats.rms is None or _EXPERT.match(module.name) is None:
        return
    w = arrays[wp]
    if stats.checksum is not None:
        digest = stats.checksum
    else:
        with fast_scan.on_device(scan_for(opts.device)):
            digest = fast_scan.checksum(w)
    key = digest.to_bytes(8, "little") + w.nbytes.to_bytes(8, "little")
    out.expert = (key, stats.rms, stats.rms == 0.0)


#: Where every module's numbers findings are, for the summary of those not listed
#: (:func:`combine`).
_RECORDED = " (the JSON report's task records hold every module's findings)"


def applies(ckpt: Checkpoint, opts: Options) -> bool:
    """Whether the numbers checks run: a verified format at level ``scales`` or above."""
    return ckpt.descriptor is not None and ckpt.numeric and opts.at_least(Level.SCALES)


def run(ckpt: Checkpoint, opts: Options,
        outcomes: Sequence[ModuleNumbers] | None = None) -> Iterator[Finding]:
    """The numbers checks at ``opts.level`` (nothing at ``structure`` or for formats whose
    numbers are not verified): per module the descriptor's scale checks (``scales``) and code
    checks (``full``), then the checks across modules.

    ``outcomes``: the per-module results already computed (:func:`module_numbers` of every
    :func:`quantized_modules` module, in any order: the runner's tasks); computed here, in
    this thread, when None."""
    if not applies(ckpt, opts):
        return
    modules = quantized_modules(ckpt)
    if outcomes is None:
        outcomes = [module_numbers(ckpt, opts, m) for m in modules]
    yield from combine(ckpt, opts, modules, outcomes)


def combine(ckpt: Checkpoint, opts: Options, modules: Sequence[Module],
            outcomes: Sequence[ModuleNumbers]) -> Iterator[Finding]:
    """The numbers findings from the per-module ``outcomes``: each module's findings in
    module order, then the checks across modules (sibling scales, router biases and float
    tensors, experts, histogram, fingerprints). The result depends only on the outcomes,
    never on the order in which they were computed.

    One root cause repeats in every module (a producer that writes 0xFF scale bytes, or zero
    NVFP4 block scales, does it everywhere: one finding per module would be tens of thousands
    for a Kimi-size checkpoint), so the modules' findings go through one :class:`Listing`:
    per check the first :data:`MAX_LISTED` in module order, then one summary with the worst
    severity of the rest (an error past the first ten still fails the run). Nothing is lost:
    the summary's ``extra["unlisted"]`` holds each finding it counts (:class:`Listing`), and
    the runner also writes each module's findings into the JSON report's task records
    (``tasks[].result.numbers[].findings``, :func:`~mxformats.validate.resume.record`), which
    the summary's note names. The router-bias, float-tensor and expert findings are listed
    the same way, with no note; the descriptor's sibling checks list their own."""
    desc = ckpt.descriptor
    assert desc is not None
    full = opts.at_least(Level.FULL)
    by_name = {o.module: o for o in outcomes}
    ordered = [by_name[m.name] for m in modules if m.name in by_name]
    in_modules = {t.name for m in modules for t in m.tensors.values()}
    hist: dict[str, NDArray[np.int64]] = {}
    zero_blocks: dict[str, int] = {}
    experts: dict[str, dict[int, dict[str, tuple[bytes, float, bool]]]] = defaultdict(dict)
    small: dict[str, dict[str, NDArray[Any]]] = {}
    per_module = Listing(MAX_LISTED, _RECORDED)
    for o in ordered:
        for f in o.findings:
            yield from per_module.add(f)
        if o.small is not None:
            small[o.module] = o.small
        for k, v in o.hist.items():
            hist[k] = hist.get(k, np.zeros(16, np.int64)) + v
        for said, n in o.zero_blocks.items():
            zero_blocks[said] = zero_blocks.get(said, 0) + n
        match = _EXPERT.match(o.module)
        if o.expert is not None and match is not None:
            experts[match["layer"]].setdefault(int(match["e"]), {})[match["p"]] = o.expert
    yield from per_module.rest()
    yield from desc.layer_findings(ckpt, small)
    implausible, flagged = plausibility.findings(
        ckpt, {o.module: o.magnitude for o in ordered if not any(
            f.effective_severity is Severity.ERROR for f in o.findings)},
        {m.name: desc.for_module(ckpt, m.name).weight_param for m in modules})
    yield from implausible
    across = _bias_and_float_findings(ckpt, in_modules, full)
    yield from listed(chain(across, _expert_findings(ckpt, experts, flagged)) if full
                      else across)
    prints = list(desc.fingerprints(ckpt, small))
    if full:
        if hist:
            yield Finding(CODE_HISTOGRAM, "code histogram: " + "; ".join(
                f"{k} {list(map(int, v))}" for k, v in sorted(hist.items())),
                extra={k: [int(x) for x in v] for k, v in hist.items()})
        int4 = hist.get("int4")
        if int4 is not None and int4.sum() and not int4[0]:
            prints.append(f"INT4 codes never use -8 ({int(int4.sum())} sampled codes, "
                          f"{int(np.count_nonzero(int4))} of 16 values): quantization-aware "
                          "training, as Kimi's official INT4 releases")
        prints.extend(negative_zero_fingerprint(hist.get("fp4")))
        prints.extend(f"{n} {said}" for said, n in sorted(zero_blocks.items()))
    if prints:
        yield Finding(FINGERPRINT, "; ".join(prints), extra={"fingerprints": prints})


def negative_zero_fingerprint(fp4: NDArray[np.int64] | None) -> list[str]:
    """How the producer writes a negative value that rounds to zero, from the E2M1 code
    histogram (code 0 is +0, code 8 is -0): with the sign kept (ModelOpt and llm-compressor
    NVFP4, torch's and ml_dtypes' E2M1 casts, torchao's MX) or as +0 (Quark's MXFP4 export).
    Measured on the producer fixtures (tests/data/producers/README.md). Silent when the
    histogram holds no zero or no negative code, where neither can show."""
    if fp4 is None or not fp4.sum():
        return []
    total, minus_zero = int(fp4.sum()), int(fp4[8])
    if minus_zero:
        return [f"E2M1 -0 (code 8) in {minus_zero} of {total} sampled codes: the producer "
                "keeps the sign of a negative value that rounds to zero (ModelOpt, "
                "llm-compressor, torchao; not Quark)"]
    if fp4[0] and fp4[9:].sum():
        return [f"no E2M1 -0 (code 8) among {total} sampled codes, {int(fp4[0])} of them "
                "zero and some negative: the producer writes every zero as +0 (Quark's MXFP4 "
                "export)"]
    return []


def _bias_and_float_findings(ckpt: Checkpoint, skip: set[str], full: bool
                             ) -> Iterator[Finding]:
    for name, ref in sorted(ckpt.tensors.items()):
        if name in skip or ref.file in ckpt.unreadable:
            continue
        if name.endswith("mlp.gate.e_score_correction_bias"):
            if ref.dtype != "F32":
                yield finding(ROUTER_BIAS_DTYPE, ref, f"stored as {ref.dtype}, not F32")
            if ref.dtype in _FLOAT_DTYPES:
                try:
                    f = _nonfinite_scan(ckpt, ref, ROUTER_BIAS_NONFINITE)
                except (ValueError, OSError):
                    continue
                if f is not None:
                    yield f
            continue
        if ref.dtype not in _FLOAT_DTYPES or ".weight_scale" in name or name.endswith(
                ("_scale", "_scale_2")):
            continue
        if full or ref.nbytes <= SMALL_BYTES:
            try:
                f = _nonfinite_scan(ckpt, ref)
            except (ValueError, OSError):
                continue
            if f is not None:
                yield f


def _expert_findings(ckpt: Checkpoint,
                     experts: dict[str, dict[int, dict[str, tuple[bytes, float, bool]]]],
                     implausible: set[str]) -> Iterator[Finding]:
    """EXPERT_ALL_ZERO, EXPERT_DUPLICATE and EXPERT_RMS_OUTLIER per layer; an outlier whose
    magnitude DECODED_MAGNITUDE already reports (``implausible``) is its finding alone."""
    desc = ckpt.descriptor
    for layer, by_expert in sorted(experts.items()):
        def ref_of(e: int, proj: str, layer: str = layer) -> TensorRef:
            module = f"{layer}.{e}.{proj}"
            own = desc.for_module(ckpt, module) if desc is not None else None
            return ckpt.tensors[f"{module}.{own.weight_param if own else 'weight'}"]

        for e, projs in sorted(by_expert.items()):
            if projs and all(z for _, _, z in projs.values()):
                p = sorted(projs)[0]
                yield finding(EXPERT_ALL_ZERO, ref_of(e, p), f"expert {e}: every projection "
                               "is all zero")
        seen: dict[tuple[tuple[str, bytes], ...], int] = {}
        for e, projs in sorted(by_expert.items()):
            key = tuple(sorted((p, d) for p, (d, _, _) in projs.items()))
            if key in seen and _same_bytes(ckpt, [(ref_of(e, p).name, ref_of(seen[key], p).name)
                                                  for p in projs]):
                p = sorted(projs)[0]
                yield finding(EXPERT_DUPLICATE, ref_of(e, p),
                               f"expert {e} is byte-identical to expert {seen[key]}")
            else:
                seen[key] = e
        projections = sorted({p for projs in by_expert.values() for p in projs})
        for proj in projections:
            rms = {e: projs[proj][1] for e, projs in by_expert.items() if proj in projs}
            for e, r in expert_rms_outliers(rms):
                if f"{layer}.{e}.{proj}" in implausible:
                    continue
                yield finding(EXPERT_RMS_OUTLIER, ref_of(e, proj),
                               f"RMS {rms[e]:.4g} is {r:.3g}x the layer median of {proj}")


def _same_bytes(ckpt: Checkpoint, pairs: list[tuple[str, str]]) -> bool:
    """Confirm a checksum match byte for byte."""
    try:
        return all(ckpt.read(a).tobytes() == ckpt.read(b).tobytes() for a, b in pairs)
    except (ValueError, OSError):
        return False


def _no_state(ckpt: Checkpoint, opts: Options) -> None:
    """The numbers checks need nothing prepared besides the checkpoint."""


def _checked(ckpt: Checkpoint, opts: Options, state: None) -> list[str]:
    """The modules the numbers checks look at: every quantized one, where they run."""
    return [m.name for m in quantized_modules(ckpt)] if applies(ckpt, opts) else []


def _module_numbers(ckpt: Checkpoint, opts: Options, state: None, module: Module
                    ) -> ModuleNumbers:
    return module_numbers(ckpt, opts, module)


#: The numbers checks as the runner and the tasks run them: per module
#: (:func:`module_numbers`), then :func:`run` over the outcomes.
def _reads(ckpt: Checkpoint, opts: Options, modules: Sequence[str]) -> Iterator[TensorRef]:
    """The tensors the numbers checks of ``modules`` read, in the order they read them: what
    a task asks ahead (:attr:`.checkmodule.PerModule.ahead`)."""
    for name in modules:
        tensors = ckpt.modules[name].tensors
        yield from (tensors[p] for p in module_params(ckpt, opts, ckpt.modules[name])
                    if p in tensors)


CHECK = CheckModule("numbers", run, applies, PerModule(
    "numbers", _no_state, _checked, _module_numbers, run, ahead=_reads))
