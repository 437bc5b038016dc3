"""What the FP8 block formats share: E4M3FN codes ``[O, I]`` with one float scale per 128×128
tile on the ceil grid ``[ceil(O/128), ceil(I/128)]``, and the checks on their numbers.

Numeric invariants of every producer (mxformats/schemes/fp8_block.py, spec/fp8-block.md, and
the producer fixtures in tests/data/producers):

- the largest |code| of a tile reaches the top binade (magnitude ≥ 256, exponent field 1111)
  unless the tile is all zero or its amax sat below the producer's floor (DeepGEMM clamps the
  tile maximum at 1e-4); with ``ue8m0`` scales, rounded up to a power of two, a tile's amax
  maps into (224, 448], so its largest |code| is at least 224 (E4M3 0x76);
- an all-zero tile carries the producer's fingerprint scale: ``1e-4/448`` (DeepSeek, DeepGEMM),
  ``2^-22`` (``ue8m0``), ``bf16 eps = 2^-7`` (compressed-tensors);
- ``ue8m0`` scales are exact powers of two (DeepGEMM ``ceil_to_ue8m0``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats import fast
from mxformats.fast import scan as fast_scan
from mxformats.fast.passes import COMPILED, OnePass
from mxformats.formats import E4M3FN
from mxformats.schemes.fp8_block import PRODUCERS, quantize_fp8_block

from ..findings import Level, Severity, declare
from ..stats import Count, finding, scale_findings, where
from .base import Descriptor, TensorSpec, cdiv

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

    from ..findings import Finding
    from ..model import Checkpoint, CodeStats, Module

__all__ = ["FP8BlockDescriptor", "tile_flags"]

#: The FP8 block formats (DeepSeek, compressed-tensors, ModelOpt), and the mixed-precision
#: ones whose members include one (compressed-tensors FP8_BLOCK groups, ModelOpt FP8_PB_WO).
_FP8_FORMATS = ("compressed-tensors-fp8-block", "compressed-tensors-mixed", "modelopt-fp8-block",
                "modelopt-mixed", "fp8-block")
FP8_TILE_NOT_TIGHT = declare(
    "FP8_TILE_NOT_TIGHT", severity=Severity.ERROR, level=Level.FULL, group="numbers",
    conditions=("largest |code| 240, the binade below 256",
                "largest |code| 208, scales powers of two"),
    formats=_FP8_FORMATS, roles=("weight",), dtypes=("F8_E4M3",),
    meaning="FP8 block tiles whose largest |code| stays below the top binade (256): every producer "
            "maps a tile's amax to 448, so a wrong tile size, a transposed scale grid or a scale "
            "from another tensor shows here (ue8m0 scales, rounded up to a power of two, map it "
            "into (224, 448]: the bound is 224 where the config declares them or every scale of "
            "the module is a power of two). All-zero tiles and tiles at the producer's amax floor "
            "are exempt.",
    fix="Re-quantize with 128x128 tiles on the [ceil(O/128), ceil(I/128)] grid.")
FP8_ZERO_TILE_SCALE = declare(
    "FP8_ZERO_TILE_SCALE", severity=Severity.WARNING, level=Level.FULL, group="numbers",
    conditions=("a tile of zero codes with the module's scales",),
    formats=("compressed-tensors-fp8-block", "compressed-tensors-mixed", "fp8-block"),
    roles=("weight",), dtypes=("F8_E4M3",),
    meaning="An all-zero FP8 tile whose scale is not the fingerprint of the producer the config "
            "claims (1e-4/448 for DeepSeek/DeepGEMM, 2^-22 with ue8m0 scales, declared or "
            "recognised, 2^-7 for compressed-tensors), rounded to the scale's dtype: another "
            "writer, or scales that do not belong to these codes.",
    fix="Check which tool wrote the file; re-quantize with the claimed producer.")
FP8_SCALE_NOT_POW2 = declare(
    "FP8_SCALE_NOT_POW2", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("one scale above a power of two, ue8m0 declared",), formats=("fp8-block",),
    roles=("weight_scale_inv",), dtypes=("F32", "BF16", "F16"),
    meaning="A checkpoint that declares ue8m0 scales (scale_fmt: ue8m0) holds a scale that is not "
            "an exact power of two: DeepGEMM's UE8M0 kernels read only the exponent.",
    fix="Round the scales up to powers of two (DeepGEMM ceil_to_ue8m0) and re-quantize the codes.")

#: E4M3FN exponent field 1111: magnitudes 256..448 (0x7F, NaN, is excluded by the caller).
_TOP = 0x78
#: E4M3FN 224 (exponent 1110, mantissa 110): the least largest |code| of a ``ue8m0`` tile,
#: whose power-of-two scale ``2^ceil(log2(amax/448))`` maps its amax into (224, 448]
_TOP_UE8M0 = 0x76
_MAG = 0x7F
#: The tile every producer profile quantizes in and vLLM decodes (``FP8BlockDescriptor``'s
#: ``produce``, ``dequantize`` and compiled ``--source`` pass)
TILE = (128, 128)

#: The float dtypes of a block scale in a file -> (its significand bits, the implicit bit
#: included; the dtypes whose every value it holds exactly). vLLM creates every FP8
#: block-scale parameter float32 (``create_fp8_scale_parameter``,
#: ``Fp8MoEMethod.create_weights``, ``ModelOptFp8PbWoLinearMethod.create_weights``; SGLang's
#: ``Fp8LinearMethod`` and ``Fp8MoEMethod.create_weights`` too,
#: ``python/sglang/srt/layers/quantization/fp8.py`` @ d94a1535) and its
#: ``weight_loader`` copies the file's tensor in with
#: ``Tensor.copy_``, which casts any float dtype (``BasevLLMParameter._assert_and_load``,
#: ``_ColumnvLLMParameter``'s loaders, ``FusedMoE._load_w13``): a dtype the parameter's
#: dtype holds loads exactly what the file stores (F64 would be rounded: not accepted).
SCALE_DTYPES: dict[str, tuple[int, frozenset[str]]] = {
    "F32": (24, frozenset({"F32", "BF16", "F16"})),
    "BF16": (8, frozenset({"BF16"})),
    "F16": (11, frozenset({"F16"})),
}
_VLLM_PARAMS = ("vllm-project/vllm vllm/model_executor/layers/quantization/utils/fp8_utils.py "
                "(create_fp8_scale_parameter: torch.float32), vllm/model_executor/parameter.py "
                "(BasevLLMParameter._assert_and_load: self.data.copy_(loaded_weight)) @ "
                "1436674bcb3f46f4c960d09334cf7dd1534943ca")


def all_pow2(scales: NDArray[Any]) -> bool:
    """Whether every scale is a finite, positive, exact power of two: the UE8M0 rounding
    (DeepGEMM ``ceil_to_ue8m0``) the fingerprint and the tightness check both recognise."""
    v = np.asarray(scales).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mant, _ = np.frexp(v)
    return bool(v.size) and bool(np.all(np.isfinite(v) & (v > 0) & (mant == 0.5)))


def tile_flags(codes: NDArray[Any], block: tuple[int, int], least: int = _TOP
               ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Per tile of an E4M3FN code array ``[O, I]`` (uint8 or float8 view): (holds a non-zero
    code, holds a code whose magnitude byte is at least ``least``: by default one in the top
    binade). Partial edge tiles count their real elements. A tile larger than the array (a
    block size from an untrusted config) is one tile of the whole array: the padding never
    exceeds the array's own size. One compiled pass over the codes where numba runs
    (:func:`mxformats.fast.scan.scan_tiles`: each tile's largest magnitude byte), else numpy
    over the zero-padded tiles; the same answers."""
    c = np.ascontiguousarray(codes).view(np.uint8)
    rows, cols = c.shape
    bm, bn = min(block[0], max(rows, 1)), min(block[1], max(cols, 1))
    peaks = fast_scan.scan_tiles(c, (bm, bn), _MAG)  # one compiled pass, where numba runs
    if peaks is not None:
        return peaks != 0, peaks >= least
    grid = (cdiv(rows, bm), cdiv(cols, bn))
    padded = np.zeros((grid[0] * bm, grid[1] * bn), np.uint8)
    padded[:rows, :cols] = c
    t = padded.reshape(grid[0], bm, grid[1], bn)
    mag = t & _MAG
    nonzero = np.any(mag != 0, axis=(1, 3))
    top = np.any(mag >= least, axis=(1, 3))
    return nonzero, top


@cache
def zero_tile_scale(profile: str) -> float:
    """The scale producer ``profile`` (a key of :data:`PRODUCERS`) writes for an all-zero tile
    of BF16 weights, computed with the reference codec."""
    zero = np.zeros((1, 1), dtype=ml_dtypes.bfloat16)
    return float(np.asarray(quantize_fp8_block(zero, block=(1, 1), profile=profile).scales)
                 .astype(np.float64)[0, 0])


@cache
def zero_tile_producers() -> dict[float, str]:
    """The scale each FP8 block producer profile writes for an all-zero tile of BF16 weights
    (:func:`zero_tile_scale`) -> the profiles (library, version) that write it:
    ``1e-4/448`` DeepGEMM's ``per_block_cast_to_fp8`` (the DeepSeek-V3 / Kimi-K2 releases),
    ``2^-22`` its UE8M0 rounding, ``2^-7`` llm-compressor's bf16 eps, ``2e-4/448`` the first
    converted to e4m3fnuz."""
    found: dict[float, list[str]] = {}
    for name, profile in PRODUCERS.items():
        found.setdefault(zero_tile_scale(name), []).append(
            f"{name} ({profile.library} {profile.version})")
    return {value: "; ".join(names) for value, names in found.items()}


class FP8BlockDescriptor(Descriptor):
    """An FP8 block format: ``scale_name`` and the reference ``profile`` differ per producer."""

    scale_name = "weight_scale_inv"
    #: the dtype the producer writes its scales in
    scale_dtype = "F32"
    #: the dtype of the loader's scale parameter (a key of :data:`SCALE_DTYPES`), and the
    #: loader code that creates it and whose weight_loader casts the file's scales into it
    loader_scale_dtype = "F32"
    loader_scale_source = _VLLM_PARAMS
    numeric = True
    quantizer = staticmethod(fast.quantize_fp8_block)
    scheme = "fp8-block"
    #: the producer profile that writes this format with power-of-two scales (its zero
    #: tiles' fingerprint is accepted where the data shows them undeclared); None: none
    ue8m0_variant: str | None = None
    #: the amax below which the producer clamps (tiles there are exempt from tightness)
    amax_floor: float | None = None
    error_threshold = 0.05
    #: vLLM ``Fp8MoEMethod.create_weights`` raises "The output_size of gate's and up's weight
    #: = N is not divisible by weight quantization block_n = 128" and ``validate_fp8_block_shape``
    #: the same for Linear partitions (``vllm/model_executor/layers/quantization/fp8.py``,
    #: commit 1436674bcb3f46f4c960d09334cf7dd1534943ca): Kimi's 2048-wide experts allow TP ≤ 16
    tp_multiple = 128

    def fingerprints(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                     ) -> Iterator[str]:
        """Every scale an exact power of two while the config declares no ``ue8m0``: the file
        was written with UE8M0 rounding (DeepGEMM's ``scale_fmt: ue8m0``, DeepSeek-V3.1 style)
        and the declaration was dropped."""
        scales = [found[self.scale_name] for found in arrays.values() if self.scale_name in found]
        if not scales or self.ue8m0(ckpt) or not all(map(all_pow2, scales)):
            return
        count = sum(s.size for s in scales)
        yield (f"all {count} {self.scale_name} values are exact powers of two, yet the config "
               "declares no ue8m0 scale_fmt: a UE8M0-rounding producer (DeepGEMM scale_fmt "
               "ue8m0); its tiles are judged with the ue8m0 tightness bound")

    def block(self, ckpt: Checkpoint) -> tuple[int, int]:
        """The tile shape (128×128 unless the config says otherwise)."""
        return (128, 128)

    def ue8m0(self, ckpt: Checkpoint) -> bool:
        """Whether the config declares power-of-two (UE8M0) scales."""
        return False

    def scale_dtypes(self) -> tuple[str, ...]:
        """The scale dtypes the loader accepts: the producer's first, then every other dtype
        its weight_loader casts into the :attr:`loader_scale_dtype` parameter exactly (source:
        :attr:`loader_scale_source`; :data:`SCALE_DTYPES`)."""
        held = SCALE_DTYPES[self.loader_scale_dtype][1]
        return (self.scale_dtype, *(d for d in SCALE_DTYPES if d != self.scale_dtype
                                    and d in held))

    def dtype_note(self, param: str, dtype: str) -> str | None:
        """Scales in a dtype that cannot hold every value of the producer's: the loader reads
        them exactly, but rounding the producer's scales to ``dtype`` moved each decoded
        weight by up to ``2^-p`` of its value (``p``: the dtype's significand bits; F16's
        subnormals, below 2^-14, lose more). None for the producer's dtype and wider ones."""
        if param != self.scale_name or dtype not in SCALE_DTYPES or \
                self.scale_dtype in SCALE_DTYPES[dtype][1]:
            return None
        bits = SCALE_DTYPES[dtype][0]
        return (f"{self.detail} writes {self.scale_dtype}; the loader casts {dtype} into its "
                f"{self.loader_scale_dtype} parameter exactly, but rounding the scales to "
                f"{dtype} moved each decoded weight by up to 2^-{bits} "
                f"({100 * 2.0**-bits:.2g} %) of its value"
                + (" (more below 2^-14, where F16 is subnormal)" if dtype == "F16" else ""))

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        bo, bi = self.block(ckpt)
        return {
            "weight": (("F8_E4M3",), ((out, inp),)),
            self.scale_name: (self.scale_dtypes(), ((cdiv(out, bo), cdiv(inp, bi)),)),
        }

    def fingerprint(self) -> float | None:
        """The scale the producer writes for an all-zero tile, which is also the scale of a
        tile at its amax floor (None: not known)."""
        return zero_tile_scale(self.profile or "")

    def marks(self, declared: bool, recognised: bool, dtype: np.dtype[Any]) -> list[float]:
        """The zero-tile scales a module may carry, rounded to its scale ``dtype``: the
        claimed producer's (:meth:`fingerprint`), and its :attr:`ue8m0_variant`'s where every
        scale of the module is a power of two the config does not declare (``recognised``)."""
        own = self.fingerprint()
        found = [] if own is None else [own]
        if recognised and not declared and self.ue8m0_variant is not None:
            found.append(zero_tile_scale(self.ue8m0_variant))
        return [float(np.asarray(m).astype(dtype).astype(np.float64)) for m in found]

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        ref, s = module.tensors[self.scale_name], arrays[self.scale_name]
        yield from scale_findings(ref, s)
        if self.ue8m0(ckpt):
            v = np.asarray(s).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                mant, _ = np.frexp(v)
            bad = Count.of(np.isfinite(v) & (v > 0) & (mant != 0.5))
            if bad.n:
                yield finding(FP8_SCALE_NOT_POW2, ref, f"{bad.n} scale(s) not a power of two, "
                              f"first {float(v.reshape(-1)[bad.first])!r} at "
                              f"{where(s.shape, bad.first)}", bad.first)

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        wref, codes = module.tensors["weight"], arrays["weight"]
        stored = np.asarray(arrays[self.scale_name])
        scales = stored.astype(np.float64)
        declared = self.ue8m0(ckpt)
        recognised = all_pow2(stored)
        ue8m0 = declared or recognised
        nonzero, top = tile_flags(codes, self.block(ckpt), _TOP_UE8M0 if ue8m0 else _TOP)
        if nonzero.shape != scales.shape:
            return  # the layout checks report the grid
        usable = np.isfinite(scales) & (scales > 0)
        marks = self.marks(declared, recognised, stored.dtype)
        # the floor's scale is the zero tile's: amax_floor / 448, rounded up under ue8m0
        at_floor = (scales <= max(marks) * (1 + 1e-6)) if self.amax_floor is not None and \
            marks else np.zeros_like(usable)
        loose = Count.of(nonzero & ~top & usable & ~at_floor)
        if loose.n:
            yield finding(FP8_TILE_NOT_TIGHT, wref, f"{loose.n} non-zero tile(s) whose largest "
                          f"|code| is below {224 if ue8m0 else 256} (first tile "
                          f"{where(scales.shape, loose.first)})")
        stats.count_zero_blocks(scales[~nonzero], zero_tile_producers(), "all-zero FP8 tiles")
        if not marks:
            return
        odd = Count.of(~nonzero & usable & ~np.isin(scales, marks))
        if odd.n:
            sref = module.tensors[self.scale_name]
            said = " or ".join(map(repr, marks))
            yield finding(FP8_ZERO_TILE_SCALE, sref, f"{odd.n} all-zero tile(s) with scale "
                          f"{scales.reshape(-1)[odd.first]!r}, not the {self.profile!r} "
                          f"fingerprint {said} (first tile {where(scales.shape, odd.first)})",
                          odd.first)

    def block_scales(self, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], float]:
        """The tile scales and 448 (E4M3FN's largest value): vLLM's ``scaled_dequantize``
        multiplies each tile's codes by its scale (an e4m3fnuz target doubles the scale and
        halves the codes: the same values)."""
        return np.asarray(arrays[self.scale_name]), E4M3FN.max

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        codes, scales = self.quantizer(w, block=TILE, profile=self.profile or "")
        return {"weight": codes.view(ml_dtypes.float8_e4m3fn), self.scale_name: scales}

    def reproduce_in_one_pass(self, module: str, w: NDArray[Any],
                              arrays: dict[str, NDArray[Any]], passes: OnePass = COMPILED
                              ) -> Moments | None:
        """The compiled FP8 block pass (:func:`mxformats.fast.reproduce_fp8_block.
        reproduce_fp8_block`) in :data:`TILE` tiles, as :meth:`produce` quantizes: for codes
        stored as :meth:`produce` writes them (float8_e4m3fn) and the scales as they are
        stored (another dtype or shape: None, and the numpy path says where they differ)."""
        codes, scales = arrays.get("weight"), arrays.get(self.scale_name)
        if (self.profile is None or codes is None or scales is None
                or codes.dtype != ml_dtypes.float8_e4m3fn):
            return None
        return passes.reproduce_fp8_block(w, codes.view(np.uint8), scales, TILE,
                                          self.profile, self.consumer)

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        """vLLM's ``scaled_dequantize``: ``dequantize_fp8_block`` is the ``vllm`` consumer,
        the only one, which the pairing table names for every producer (:attr:`consumer`);
        the producer profile only picks the code format."""
        codes = np.ascontiguousarray(arrays["weight"]).view(np.uint8)
        d = fast.dequantize_fp8_block(codes, arrays[self.scale_name], block=TILE,
                                      profile=self.profile or "")
        return d
