"""The element formats: one frozen definition each.

Every fact about a format (its code table, ``max``, NaN codes, the spec page, the vectors) is
derived from the handful of parameters given here. Nothing else in the package types a number
such as 448 or 6.0. The normative text is ``spec/<name>.md``, generated from these definitions by
``python -m mxformats.specgen``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import ml_dtypes
import numpy as np

from mxformats import codec
from mxformats.containers import NATIVE_DTYPES, read_formats_with

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "E2M1",
    "E2M3",
    "E3M2",
    "E4M3FN",
    "E4M3FNUZ",
    "E5M2",
    "E8M0",
    "FORMATS",
    "FORMAT_ALIASES",
    "INT4",
    "NATIVE_DTYPES",
    "OVERFLOWS",
    "ROUNDINGS",
    "UINT4",
    "Format",
    "get_format",
]

Kind = Literal["float", "int", "exponent"]
# How the top of the code space is used (spec/README.md, "Special values"):
#   none:  every code is finite, both zeros exist (E2M1, E2M3, E3M2).
#   fn:    finite; the single all-ones magnitude S.1111.111 is NaN; no Inf (OFP8 E4M3).
#   fnuz:  finite; 0x80 (the would-be -0) is the only NaN; no -0, no Inf (AMD MI300 FP8).
#   ieee:  exponent all ones is Inf (mantissa 0) or NaN (mantissa != 0) (OFP8 E5M2).
#   e8m0:  all-ones code is NaN; no zero, no sign (the MX block scale).
Specials = Literal["none", "fn", "fnuz", "ieee", "e8m0"]

#: Rounding modes, by name. Element formats and integers take the first three, E8M0 its own five.
ROUNDINGS: tuple[str, ...] = (
    "nearest-even",
    "nearest-away",
    "toward-zero",
    "nearest-linear",
    "nearest-log",
    "floor",
    "ceil",
)
#: Overflow modes, by name. ``saturate`` clamps to ±max (the MX rule); ``nonsaturating`` is the
#: OFP8 alternative (E4M3FN → NaN, E5M2 → Inf, FNUZ → 0x80).
OVERFLOWS: tuple[str, ...] = ("saturate", "nonsaturating")

_ELEMENT_ROUNDINGS = ("nearest-even", "nearest-away", "toward-zero")
_E8M0_ROUNDINGS = ("nearest-even", "nearest-linear", "nearest-log", "floor", "ceil")


@dataclass(frozen=True, eq=False)
class Format:
    """A low-precision number format, defined by a few parameters.

    Attributes:
        name: the one lowercase name used in code, JSON, the CLI and the docs.
        kind: ``float`` (sign, exponent, mantissa), ``int`` (an integer, two's complement when
            ``signed``) or ``exponent`` (E8M0: a biased power of two, no sign, no mantissa).
        bits: width of a code. Codes are held in the low bits of a uint8.
        ebits: exponent field width (0 for integers).
        mbits: mantissa field width (0 for integers).
        bias: exponent bias; value of an E8M0 code ``b`` is ``2**(b - bias)``.
        signed: a sign bit (floats) or two's complement (integers).
        specials: how NaN, Inf and zero are encoded (see the ``Specials`` comment above).
        emax: OCP MX ``emax_elem``, the exponent of the largest normal value (None if not an MX
            element), used by the MX scale rule ``floor(log2(amax)) - emax``.
        title: a short human title. notes: normative remarks for the spec page.
        sources: where the definition comes from (cited on the spec page).
    """

    name: str
    kind: Kind
    bits: int
    title: str
    ebits: int = 0
    mbits: int = 0
    bias: int = 0
    signed: bool = True
    specials: Specials = "none"
    emax: int | None = None
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default=(), repr=False)

    # -- native dtypes elsewhere --------------------------------------------------------------

    @property
    def torch_dtype(self) -> Any:
        """The torch dtype holding this format's codes (``torch.float8_e4m3fn``; for E2M1
        ``torch.float4_e2m1fn_x2``, two codes a byte), or None where torch has none. Imports
        torch."""
        name = NATIVE_DTYPES[self.name][0]
        if name is None:
            return None
        import torch

        return getattr(torch, name)

    @property
    def ml_dtype(self) -> np.dtype[Any] | None:
        """The ml_dtypes numpy dtype of this format (``float8_e4m3fn``, ``float4_e2m1fn``,
        ``float6_e2m3fn``, ``int4``, ...), or None."""
        name = NATIVE_DTYPES[self.name][1]
        return None if name is None else np.dtype(getattr(ml_dtypes, name))

    @property
    def safetensors_dtype(self) -> str | None:
        """The safetensors header's dtype name (``F8_E4M3``, ``F4``, ``F8_E8M0``), or None."""
        return NATIVE_DTYPES[self.name][2]

    # -- the value table: the definition of the format --------------------------------------

    @cached_property
    def values(self) -> NDArray[np.float64]:
        """The exact value of every code ``0 .. 2**bits - 1`` (float64; NaN where a code is NaN).

        Spec: "Value formula" on each format page. Every value is exact in float32 as well.
        """
        codes = np.arange(1 << self.bits)
        if self.kind == "int":
            ints = codes - (1 << self.bits) * (codes >> (self.bits - 1)) if self.signed else codes
            as_float: NDArray[np.float64] = ints.astype(np.float64)
            return as_float
        if self.kind == "exponent":
            powers: NDArray[np.float64] = np.ldexp(1.0, codes - self.bias)
            powers[codes == (1 << self.bits) - 1] = np.nan
            return powers
        sign = (codes >> (self.bits - 1)) & 1 if self.signed else np.zeros_like(codes)
        exp = (codes >> self.mbits) & ((1 << self.ebits) - 1)
        man = codes & ((1 << self.mbits) - 1)
        # Normal: (2**mbits + m) * 2**(e - bias - mbits).
        # Subnormal (e == 0): m * 2**(1 - bias - mbits).
        significand = np.where(exp > 0, (1 << self.mbits) + man, man)
        vals: NDArray[np.float64] = np.ldexp(
            significand.astype(np.float64), np.maximum(exp, 1) - self.bias - self.mbits
        )
        vals = np.where(sign == 1, -vals, vals)
        exp_all_ones = exp == (1 << self.ebits) - 1
        man_all_ones = man == (1 << self.mbits) - 1
        if self.specials == "ieee":
            vals[exp_all_ones & (man == 0)] = np.copysign(np.inf, vals[exp_all_ones & (man == 0)])
            vals[exp_all_ones & (man != 0)] = np.nan
        elif self.specials == "fn":
            vals[exp_all_ones & man_all_ones] = np.nan
        elif self.specials == "fnuz":
            vals[codes == 1 << (self.bits - 1)] = np.nan
        return vals

    # -- derived metadata ---------------------------------------------------------------------

    @cached_property
    def max(self) -> float:
        """The largest finite value."""
        return float(np.max(self.values[np.isfinite(self.values)]))

    @cached_property
    def min(self) -> float:
        """The most negative finite value (``-max`` for sign-magnitude formats)."""
        return float(np.min(self.values[np.isfinite(self.values)]))

    @cached_property
    def min_normal(self) -> float | None:
        """The smallest positive normal value (for E8M0 the smallest, 2**-127); None for ints."""
        if self.kind == "int":
            return None
        if self.kind == "exponent":
            return float(np.ldexp(1.0, -self.bias))
        return float(np.ldexp(1.0, 1 - self.bias))

    @cached_property
    def min_subnormal(self) -> float | None:
        """The smallest positive subnormal value; None where the format has no subnormals."""
        if self.kind != "float":
            return None
        return float(np.ldexp(1.0, 1 - self.bias - self.mbits))

    @cached_property
    def nan_codes(self) -> tuple[int, ...]:
        """Every code that decodes to NaN."""
        return tuple(int(c) for c in np.flatnonzero(np.isnan(self.values)))

    @cached_property
    def inf_codes(self) -> tuple[int, ...]:
        """Every code that decodes to ±Inf."""
        return tuple(int(c) for c in np.flatnonzero(np.isinf(self.values)))

    @cached_property
    def signed_zero(self) -> bool:
        """Whether -0 exists (it decodes to -0.0 and is kept by encoding)."""
        zero = self.values == 0
        return bool(np.any(zero & np.signbit(self.values)))

    @cached_property
    def max_code(self) -> int:
        """The code of ``max`` (positive)."""
        return int(np.flatnonzero(self.values == self.max)[0])

    @property
    def roundings(self) -> tuple[str, ...]:
        """The rounding modes this format accepts in ``encode`` (spec/README.md, "Rounding")."""
        return _E8M0_ROUNDINGS if self.kind == "exponent" else _ELEMENT_ROUNDINGS

    @property
    def overflows(self) -> tuple[str, ...]:
        """The overflow modes this format accepts; ``nonsaturating`` only where NaN or Inf can
        stand for an overflow (OFP8 E4M3FN, E5M2 and E4M3FNUZ)."""
        if self.specials in ("fn", "fnuz", "ieee"):
            return OVERFLOWS
        return ("saturate",)

    @property
    def default_overflow(self) -> str:
        """``saturate`` for every format (the MX conversion rule, and what quantizers do)."""
        return "saturate"

    # -- the codec ----------------------------------------------------------------------------

    def decode(self, codes: ArrayLike, dtype: DTypeLike = np.float32) -> NDArray[np.generic]:
        """Decode codes (integers in ``0 .. 2**bits - 1``, low bits of a uint8) to values.

        Returns float32 by default: every value of every format here is exact in float32.
        ``dtype`` may also be float64, float16 or ``ml_dtypes.bfloat16``; values are then
        rounded to nearest-even into that type (E8M0 does not fit float16). NaN comes out as
        the canonical positive quiet NaN of the output type; -0 as -0.0. Spec: "Decoding".
        Containers as :func:`mxformats.codec.decode` (torch in, torch out; native codes).
        """
        return codec.decode(self, codes, dtype)

    def encode(
        self,
        x: object,
        *,
        rounding: str = "nearest-even",
        overflow: str | None = None,
        nan_code: int | None = None,
    ) -> NDArray[np.uint8]:
        """Encode values to codes with one rounding from the exact input value.

        ``x``: a float64, float32, float16 or bfloat16 array (numpy, ``ml_dtypes.bfloat16``,
        or a torch tensor), or Python floats. ``rounding`` is one of :attr:`roundings`;
        ``overflow`` one of :attr:`overflows` (default :attr:`default_overflow`).
        ``nan_code``: for formats without NaN, the code every NaN becomes (default: NaN
        raises ``ValueError``). Returns uint8 codes of ``x``'s shape. Spec: "Encoding".
        """
        return codec.encode(self, x, rounding=rounding, overflow=overflow, nan_code=nan_code)

    # -- integer helpers ----------------------------------------------------------------------

    def to_integers(self, codes: ArrayLike) -> NDArray[np.int8]:
        """INT4/UINT4 codes (nibbles 0..15) to their integer values as int8."""
        return self._require_int().decode(codes, np.float64).astype(np.int8)

    def from_integers(self, values: ArrayLike) -> NDArray[np.uint8]:
        """Integer values (INT4: -8..7, UINT4: 0..15) to codes; out of range raises ValueError."""
        fmt = self._require_int()
        v = np.asarray(values)
        if v.dtype.kind not in "iu":
            raise TypeError(f"{fmt.name}.from_integers takes integers, got dtype {v.dtype}")
        bad = (v < fmt.min) | (v > fmt.max)
        if np.any(bad):
            raise ValueError(
                f"{fmt.name}.from_integers: {v[bad].flat[0]} is outside "
                f"[{int(fmt.min)}, {int(fmt.max)}]"
            )
        return (v.astype(np.int64) & ((1 << fmt.bits) - 1)).astype(np.uint8)

    def _require_int(self) -> Format:
        if self.kind != "int":
            raise TypeError(f"{self.name} is not an integer format")
        return self

    def __repr__(self) -> str:
        return f"<format {self.name}>"


_OCP_MX = "OCP Microscaling Formats (MX) v1.0, 2023"
_OCP_OFP8 = "OCP 8-bit Floating Point Specification (OFP8) rev 1.0, 2023"
_SECONDARY = (
    "read through secondary sources: Rouhani et al., arXiv:2310.10537; PyTorch "
    "Float4_e2m1fn_x2.h; ml_dtypes; see spec/sources.md §0, §7"
)

E2M1 = Format(
    name="e2m1",
    title="E2M1 (FP4), the MXFP4 element",
    kind="float",
    bits=4,
    ebits=2,
    mbits=1,
    bias=1,
    emax=2,
    notes=(
        "No Inf and no NaN: overflow and ±Inf saturate to ±6.",
        "NaN has no code: encoding NaN raises ValueError unless an explicit `nan_code` is given "
        "(producers differ: ml_dtypes writes 0x8, torchao 0x3, Quark 0x7, compressed-tensors 0x0).",
        "Two 4-bit codes are packed per byte with element 0 in the low nibble (packing is "
        "specified with the MX block schemes).",
    ),
    sources=(f"{_OCP_MX}, §5.3.3 ({_SECONDARY})", "ml_dtypes float4_e2m1fn"),
)

E2M3 = Format(
    name="e2m3",
    title="E2M3 (FP6), an MXFP6 element",
    kind="float",
    bits=6,
    ebits=2,
    mbits=3,
    bias=1,
    emax=2,
    notes=("No Inf and no NaN: overflow and ±Inf saturate to ±7.5.",),
    sources=(f"{_OCP_MX}, FP6 element table ({_SECONDARY})", "ml_dtypes float6_e2m3fn"),
)

E3M2 = Format(
    name="e3m2",
    title="E3M2 (FP6), an MXFP6 element",
    kind="float",
    bits=6,
    ebits=3,
    mbits=2,
    bias=3,
    emax=4,
    notes=("No Inf and no NaN: overflow and ±Inf saturate to ±28.",),
    sources=(f"{_OCP_MX}, FP6 element table ({_SECONDARY})", "ml_dtypes float6_e3m2fn"),
)

E4M3FN = Format(
    name="e4m3fn",
    title="E4M3 (OFP8 'fn'), FP8 and an MXFP8 element",
    kind="float",
    bits=8,
    ebits=4,
    mbits=3,
    bias=7,
    specials="fn",
    emax=8,
    notes=(
        "S.1111.111 (0x7F, 0xFF) is NaN; there is no Inf, so the exponent field 1111 holds "
        "normal values up to 448 (OCP emax is 8, not the IEEE-style 7).",
        "`saturate` (default): finite overflow and ±Inf give ±448. `nonsaturating`: they give "
        "NaN with the input's sign (ml_dtypes' cast; torch >= 2.12 saturates).",
    ),
    sources=(f"{_OCP_OFP8} ({_SECONDARY}; onnx/onnx PR #4805)", "ml_dtypes float8_e4m3fn"),
)

E4M3FNUZ = Format(
    name="e4m3fnuz",
    title="E4M3 FNUZ (AMD MI300 FP8)",
    kind="float",
    bits=8,
    ebits=4,
    mbits=3,
    bias=8,
    specials="fnuz",
    emax=7,
    notes=(
        "0x80 is the only NaN; there is no -0 and no Inf. A negative value that rounds to "
        "zero, and -0.0, encode as 0x00.",
        "Same bits as E4M3FN mean half the value: the basis of vLLM's fn→fnuz normalisation "
        "(`mxformats.e4m3fn_to_fnuz`).",
        "`nonsaturating`: overflow, ±Inf and NaN give 0x80 (torch and ml_dtypes casts).",
    ),
    sources=(
        "StableHLO RFC 20230321-fp8_fnuz; LLVM APFloat S_Float8E4M3FNUZ",
        "AMD HIP docs 6.2 'fp8 numbers' (MI300 gfx94x supports FNUZ only)",
    ),
)

E5M2 = Format(
    name="e5m2",
    title="E5M2 (OFP8), FP8 and an MXFP8 element",
    kind="float",
    bits=8,
    ebits=5,
    mbits=2,
    bias=15,
    specials="ieee",
    emax=15,
    notes=(
        "IEEE-style specials: 0x7C/0xFC are ±Inf, 0x7D-0x7F/0xFD-0xFF are NaN. Encoding NaN "
        "writes the quiet NaN 0x7E (0xFE for a negative NaN).",
        "±Inf encodes as ±Inf in both overflow modes (ONNX Cast table); `saturate` clamps "
        "finite overflow to ±57344, `nonsaturating` gives ±Inf.",
    ),
    sources=(f"{_OCP_OFP8} ({_SECONDARY})", "ml_dtypes float8_e5m2"),
)

E8M0 = Format(
    name="e8m0",
    title="E8M0, the MX block scale",
    kind="exponent",
    bits=8,
    ebits=8,
    mbits=0,
    bias=127,
    signed=False,
    specials="e8m0",
    notes=(
        "All eight bits are exponent: code b means 2**(b - 127). No sign, no zero, no Inf.",
        "0x00 is 2**-127 (float32 bits 0x00400000, a subnormal), never 0.0; 0xFF is NaN. The "
        "fast decoder `b << 23` gets both wrong.",
        "Encoding has five named roundings because the ecosystem disagrees: `floor`, `ceil`, "
        "`nearest-linear` (midpoint `1.5·2**k`, ties up: torch and ml_dtypes), `nearest-even` "
        "(midpoint `1.5·2**k`, ties to the even code: ml_dtypes PR #398) and `nearest-log` "
        "(midpoint `√2·2**k`: Quark's round(log2)).",
        "Encoding ±0.0 gives 0x00 (the smallest scale), +Inf saturates to 0xFE, NaN gives "
        "0xFF, and a negative value raises ValueError.",
    ),
    sources=(
        f"{_OCP_MX}, p. 14 as cited by oneDNN PR #4218 ({_SECONDARY})",
        "ml_dtypes float8_e8m0fnu",
    ),
)

INT4 = Format(
    name="int4",
    title="INT4, signed two's complement",
    kind="int",
    bits=4,
    notes=(
        "A code is the 4-bit two's-complement nibble: 0x0-0x7 are 0..7, 0x8-0xF are -8..-1.",
        "Encoding rounds to an integer and saturates to [-8, 7]; NaN raises ValueError unless "
        "`nan_code` is given. (ml_dtypes' int4 cast truncates and wraps instead.)",
        "Storage layouts (compressed-tensors' q+8 offset, Quark's nibble order) are specified "
        "with the packings.",
    ),
    sources=("compressed-tensors 0.20 and AMD Quark 0.13 INT4 (spec/sources.md §5)",),
)

UINT4 = Format(
    name="uint4",
    title="UINT4, unsigned",
    kind="int",
    bits=4,
    signed=False,
    notes=("Encoding rounds to an integer and saturates to [0, 15].",),
    sources=("ml_dtypes uint4",),
)

#: Every format, by name, in the order the spec lists them.
FORMATS: dict[str, Format] = {
    f.name: f for f in (E2M1, E8M0, E4M3FN, E4M3FNUZ, E5M2, E2M3, E3M2, INT4, UINT4)
}


def _alias_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for fmt, names in NATIVE_DTYPES.items():
        table[fmt] = fmt
        for name in names:
            if name is not None:
                table.setdefault(name.lower(), fmt)
    return table


#: Every name :func:`get_format` takes, lower-cased -> the format's name.
FORMAT_ALIASES: dict[str, str] = _alias_table()


def get_format(name: object) -> Format:
    """Look a format up by its name (``"e2m1"``), its torch, ml_dtypes or safetensors dtype name
    (``"float8_e4m3fn"``, ``"torch.float8_e4m3fn"``, ``"F8_E4M3"``), in any case, or by such a
    dtype itself (``torch.float8_e4m3fn``, ``np.dtype(ml_dtypes.float8_e4m3fn)``); a
    :class:`Format` is returned as is. ValueError names the known formats."""
    if isinstance(name, Format):
        return name
    key = str(name).strip().lower().removeprefix("torch.")
    if key.startswith("<class '"):  # a scalar type such as ml_dtypes.float8_e4m3fn
        key = key.removeprefix("<class '").removesuffix("'>").rsplit(".", 1)[-1]
    try:
        return FORMATS[FORMAT_ALIASES[key]]
    except KeyError:
        raise ValueError(
            f"unknown format {name!r}; known formats: {', '.join(FORMATS)} (or their torch, "
            "ml_dtypes or safetensors names)"
        ) from None


# The containers decorator (below this module) reads format arguments with these.
read_formats_with(Format, get_format)
