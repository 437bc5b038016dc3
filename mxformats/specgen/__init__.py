"""Generate ``spec/`` (pages and vectors) from the format definitions and the reference codec.

    python -m mxformats.specgen            # rewrite spec/
    python -m mxformats.specgen --check    # exit 1 if spec/ differs from what would be written

Every table and every expected code in ``spec/`` is computed here by running the reference, so
the spec cannot drift from it; the prose that is not per-format lives in ``_OVERVIEW``.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mxformats._version import __version__
from mxformats.formats import FORMATS, OVERFLOWS, ROUNDINGS, Format
from mxformats.text import (
    SCHEMA_VERSION,
    code_hex,
    fields,
    hex_float,
    json_file,
    layout,
    short_float,
    table,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray


def formula(fmt: Format) -> str:
    if fmt.kind == "int":
        if fmt.signed:
            return f"two's complement: code c means c if c < {1 << (fmt.bits - 1)}, else c - 16."
        return "code c means the integer c."
    if fmt.kind == "exponent":
        return f"code b means 2^(b - {fmt.bias}) for b in 0x00..0xFE; 0xFF is NaN."
    return (
        f"(-1)^S × 2^(E - {fmt.bias}) × (1 + M/{1 << fmt.mbits}) if E > 0 (normal); "
        f"(-1)^S × 2^{1 - fmt.bias} × (M/{1 << fmt.mbits}) if E = 0 (subnormal)."
    )


# -- encode cases --------------------------------------------------------------------------------


def _neighbours(m: float) -> Iterator[tuple[float, str]]:
    """``m`` and one float64 and one float32 ulp either side (the double-rounding traps)."""
    yield m, ""
    yield float(np.nextafter(m, -np.inf)), ", next float64 below"
    yield float(np.nextafter(m, np.inf)), ", next float64 above"
    m32 = np.float32(m)
    if float(m32) == m and np.isfinite(m32):
        yield float(np.nextafter(m32, np.float32(-np.inf))), ", next float32 below"
        yield float(np.nextafter(m32, np.float32(np.inf))), ", next float32 above"


def distinct_values(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """The finite entries of ``values``, each float64 bit pattern once, in IEEE 754 totalOrder
    (ascending, -0.0 just before +0.0): the same array whatever order ``values`` come in and
    whatever sort numpy dispatches to for the CPU. (``np.unique`` of floats keeps whichever of
    -0.0 and +0.0 its CPU-specific sort happens to put first.) The sort is over integer keys,
    where equal keys are identical bits."""
    bits = values[np.isfinite(values)].astype(np.float64).view(np.uint64)
    negative = bits >> np.uint64(63) == 1
    # totalOrder as unsigned integers: negatives reversed below, positives above the sign bit.
    keys = np.unique(np.where(negative, ~bits, bits | np.uint64(1 << 63)))
    high = keys >> np.uint64(63) == 1
    result: NDArray[np.float64] = np.where(high, keys & ~np.uint64(1 << 63), ~keys).view(
        np.float64)
    return result


def _float64_bits(x: float) -> int:
    return int(np.float64(x).view(np.uint64))


def encode_inputs(fmt: Format) -> list[tuple[float, str]]:
    """The boundary inputs of ``fmt``: every midpoint of neighbouring values and its
    neighbours, every value (-0.0 included where the format has it, labelled with its own
    code), the overflow boundary, zeros, infinities, NaN, subnormals. Built from bit patterns
    only (:func:`distinct_values`), so the result does not depend on the CPU."""
    values = distinct_values(fmt.values)
    code_of: dict[int, int] = {}
    for code, value in enumerate(fmt.values):
        code_of.setdefault(_float64_bits(value), code)  # the first code of each bit pattern

    def name(v: float) -> str:
        return code_hex(fmt, code_of[_float64_bits(v)])

    # The distinct numbers: +0.0 stands for both zeros between the negative and positive values.
    numbers = values[(values != 0) | ~np.signbit(values)]
    cases: list[tuple[float, str]] = []
    for lo, hi in pairwise(numbers):
        pair = f"{name(lo)}|{name(hi)}"
        for x, tag in _neighbours((float(lo) + float(hi)) / 2):
            cases.append((x, f"linear midpoint {pair}{tag}"))
        if fmt.kind == "exponent":
            log_mid = float(lo) * float(np.sqrt(2.0))
            cases.append((log_mid, f"float64 just above the log midpoint {pair}"))
            cases.append((float(np.nextafter(log_mid, 0)), f"float64 just below log midpoint {pair}"))
    for v in values:
        cases.append((float(v), f"value of {name(v)}"))
    top = float(numbers[-1])
    gap = top - float(numbers[-2])
    beyond = top + gap if fmt.kind != "exponent" else 2 * top
    for sign in (1.0, -1.0):
        for x, tag in _neighbours(sign * (top + beyond) / 2):
            cases.append((x, f"overflow boundary{tag}"))
        cases.append((sign * beyond, "first value beyond max"))
        cases.append((sign * 2.0**100, "far beyond max"))
        cases.append((sign * np.inf, "infinity"))
    tiny = fmt.min_subnormal or fmt.min_normal or 1.0
    specials = [
        (0.0, "+0"),
        (-0.0, "-0"),
        (np.nan, "NaN"),
        (-np.nan, "negative NaN"),
        (2.0**-149, "smallest float32 subnormal"),
        (-(2.0**-149), "negative smallest float32 subnormal"),
        (2.0**-1074, "smallest float64 subnormal"),
        (-tiny / 4, "negative value that rounds to zero"),
        (float(np.float32(2.0**-126) * np.float32(0.75)), "float32 subnormal 0.75·2^-126"),
    ]
    cases.extend(specials)
    unique: dict[int, tuple[float, str]] = {}
    for x, why in cases:
        unique.setdefault(_float64_bits(x), (float(x), why))
    return sorted(unique.values(), key=lambda c: (np.isnan(c[0]), c[0], np.signbit(c[0])))


def modes(fmt: Format) -> list[tuple[str, str]]:
    return [(r, o) for r in fmt.roundings for o in fmt.overflows]


def expected_code(fmt: Format, x: float, rounding: str, overflow: str) -> str:
    try:
        code = int(fmt.encode(np.float64(x), rounding=rounding, overflow=overflow))
    except ValueError:
        return "error"
    return code_hex(fmt, code)


# -- files ------------------------------------------------------------------------------------


def decode_vectors(fmt: Format) -> str:
    decoded = fmt.decode(np.arange(1 << fmt.bits))
    bits = decoded.view(np.uint32)
    cases = [
        {
            "code": code_hex(fmt, c),
            "value": hex_float(float(fmt.values[c])),
            "float32_bits": f"0x{int(bits[c]):08X}",
        }
        for c in range(1 << fmt.bits)
    ]
    header = {
        "schema_version": SCHEMA_VERSION,
        "format": fmt.name,
        "op": "decode",
        "generator": "python -m mxformats.specgen",
        "description": (
            "Every code: its exact value (hex float; nan for NaN) and the float32 bits a "
            "decoder must produce (NaN as the canonical 0x7FC00000)."
        ),
    }
    return json_file(header, cases)


def encode_vectors(fmt: Format) -> str:
    mode_list = modes(fmt)
    cases = [
        {
            "input": hex_float(x),
            "why": why,
            "expected": [expected_code(fmt, x, r, o) for r, o in mode_list],
        }
        for x, why in encode_inputs(fmt)
    ]
    header = {
        "schema_version": SCHEMA_VERSION,
        "format": fmt.name,
        "op": "encode",
        "generator": "python -m mxformats.specgen",
        "description": (
            "Inputs are exact float64 values (hex floats; nan, inf). expected[i] is the code "
            "under modes[i], or 'error' where the input has no encoding and must be refused."
        ),
        "modes": [{"rounding": r, "overflow": o} for r, o in mode_list],
    }
    return json_file(header, cases)


SPECIAL_INPUTS: tuple[tuple[str, float], ...] = (
    ("NaN", np.nan),
    ("-NaN", -np.nan),
    ("+Inf", np.inf),
    ("-Inf", -np.inf),
    ("-0.0", -0.0),
    ("-2^-149 (rounds to zero)", -(2.0**-149)),
    ("2^100 (finite overflow)", 2.0**100),
)


def specialtable(fmt: Format) -> str:
    mode_list = modes(fmt)
    header = ["input", *[f"{r}, {o}" for r, o in mode_list]]
    rows = [
        [label, *[expected_code(fmt, x, r, o) for r, o in mode_list]]
        for label, x in SPECIAL_INPUTS
    ]
    return table(header, rows)


def format_page(fmt: Format) -> str:
    sign = "sign bit" if fmt.signed and fmt.kind != "int" else "two's complement"
    params = [
        ["name", f"`{fmt.name}`"],
        ["bits", str(fmt.bits)],
        ["layout", f"`{layout(fmt)}`" + (f" ({sign})" if fmt.signed else " (no sign)")],
    ]
    if fmt.kind != "int":
        params += [["exponent bits / mantissa bits", f"{fmt.ebits} / {fmt.mbits}"]]
        params += [["bias", str(fmt.bias)]]
    params += [["max", f"{short_float(fmt.max)} (`{hex_float(fmt.max)}`, code "
                f"{code_hex(fmt, fmt.max_code)})"]]
    if fmt.min_normal is not None:
        params += [["min normal", f"{short_float(fmt.min_normal)} (`{hex_float(fmt.min_normal)}`)"]]
    if fmt.min_subnormal is not None:
        params += [["min subnormal",
                    f"{short_float(fmt.min_subnormal)} (`{hex_float(fmt.min_subnormal)}`)"]]
    if fmt.emax is not None:
        params += [["OCP emax (emax_elem)", str(fmt.emax)]]
    nan = ", ".join(code_hex(fmt, c) for c in fmt.nan_codes) or "none"
    inf = ", ".join(code_hex(fmt, c) for c in fmt.inf_codes) or "none"
    params += [["NaN codes", nan], ["Inf codes", inf], ["signed zero", "yes" if fmt.signed_zero
                                                        else "no"]]
    params += [["roundings", ", ".join(f"`{r}`" for r in fmt.roundings)]]
    params += [["overflows", ", ".join(f"`{o}`" for o in fmt.overflows)
                + f" (default `{fmt.default_overflow}`)"]]

    code_rows = []
    for c in range(1 << fmt.bits):
        v = float(fmt.values[c])
        code_rows.append([code_hex(fmt, c), f"`{fields(fmt, c)}`", short_float(v),
                          f"`{hex_float(v)}`"])
    out = [
        f"# {fmt.title}\n",
        "<!-- Generated by `python -m mxformats.specgen` from mxformats/formats.py. "
        "Do not edit. -->\n",
        "Normative. The keywords MUST and MAY are as in RFC 2119. The rules shared by every "
        "format (rounding, overflow, NaN output) are in [README.md](README.md).\n",
        "## Parameters\n",
        table(["", ""], params),
        "## Value formula\n",
        formula(fmt) + "\n",
        "## Notes\n",
        "\n".join(f"- {n}" for n in fmt.notes) + "\n",
        "## Code table\n",
        "Every code, its fields and its exact value. A decoder MUST produce exactly these values "
        "(NaN as the canonical quiet NaN).\n",
        table(["code", "fields", "value", "hex"], code_rows),
        "## Special inputs\n",
        "Codes an encoder MUST produce, per rounding and overflow mode (`error`: the input has "
        "no encoding and MUST be refused unless the caller names a code).\n",
        specialtable(fmt),
        "## Vectors\n",
        f"[`vectors/{fmt.name}/decode.json`](vectors/{fmt.name}/decode.json) (every code) and "
        f"[`vectors/{fmt.name}/encode.json`](vectors/{fmt.name}/encode.json) (every midpoint "
        "with its float64 and float32 neighbours, every value, the overflow boundary, zeros, "
        "infinities, NaN, subnormals; every mode).\n",
        "## Sources\n",
        "\n".join(f"- {s}" for s in fmt.sources) + "\n",
    ]
    return "\n".join(out)


_OVERVIEW = """\
# mxformats specification: element formats

<!-- Generated by `python -m mxformats.specgen` from mxformats/formats.py. Do not edit. -->

This folder is the normative definition of the number formats that quantized Mixture-of-Experts
checkpoints ship in. The words MUST and MAY are as in RFC 2119. Every table and vector here is
generated from the reference implementation (`mxformats/formats.py`, `mxformats/codec.py`) and
checked in CI against an independent exact-arithmetic oracle (`tests/oracle.py`), against
ml_dtypes and torch (every known disagreement asserted), and against the committed files.

## Formats

{formats}

## Schemes built on the formats

- [`mx.md`](mx.md): MX block scaling, the gaps in the OCP text, every producer's and consumer's
  profile, the input classification and the divergence matrices.
- [`profiles.md`](profiles.md): every profile and the function it reproduces.
- [`int4-layouts.md`](int4-layouts.md) and [`int4-schemes.md`](int4-schemes.md): INT4 word
  layouts with bit diagrams, and each producer's INT4 arithmetic.
- [`w4a8.md`](w4a8.md): the Quark W4A8 progressive scheme (FP8 per-tensor, then INT4
  per-channel).
- [`fp8-block.md`](fp8-block.md): FP8 block scaling (E4M3, one scale per 128 × 128 tile), each
  producer's profile, the special tiles and the divergence matrix.
- [`nvfp4.md`](nvfp4.md): NVFP4 (E2M1, an E4M3 scale per 16, a float32 global scale), the
  ModelOpt and compressed-tensors profiles, vLLM's readers and the divergence matrix.

## Sources

[`sources.md`](sources.md) (written by hand) lists the primary sources every page and vector
cites: the OCP specifications by section, each library by release or commit, path and line.

## Codes

A code is the bit pattern of one element, held in the low bits of a byte (`uint8`). Packing
several codes per byte or word is a separate, per-producer matter.

## Decoding

A decoder MUST produce the exact value from the format's code table. Every value of every format
here is exact in float32. Decoding into a narrower type (float16, bfloat16) rounds that exact value
to nearest, ties to even. A NaN code MUST decode to the canonical quiet NaN with the sign bit clear
(float32 `0x7FC00000`, float16 `0x7E00`, bfloat16 `0x7FC0`, float64 `0x7FF8000000000000`). A
negative-zero code MUST decode to -0.0. E8M0 `0x00` MUST decode to 2^-127 (float32 bits
`0x00400000`), never 0.0.

## Encoding

An encoder takes the **exact** input value (a float64, float32, float16 or bfloat16 value) and
MUST round it **once** to the target. Converting a float64 input to float32 first is a double
rounding and is not conforming (the vectors hold inputs one float64 ulp either side of every
midpoint to catch it). Subnormal inputs are ordinary values: an encoder MUST NOT flush them.

### Rounding

| mode | formats | definition |
|---|---|---|
| `nearest-even` | all | the nearest representable value; a tie goes to the even code (last bit 0). For E8M0 the midpoint between 2^k and 2^(k+1) is 1.5·2^k. |
| `nearest-away` | floats, integers | the nearest; a tie goes to the larger magnitude (the "half-up" rule of microxcaling and Quark's Triton path). |
| `toward-zero` | floats, integers | the nearest value not larger in magnitude (truncation). |
| `nearest-linear` | E8M0 | midpoint 1.5·2^k, ties up (torch and ml_dtypes casts). |
| `nearest-log` | E8M0 | midpoint √2·2^k (round(log2 x)); no input is a tie. |
| `floor` | E8M0 | 2^floor(log2 x) (the OCP MX scale rule). |
| `ceil` | E8M0 | 2^ceil(log2 x). |

Rounding is decided with an unbounded exponent range; overflow is decided after it.

### Overflow

A finite input overflows when its rounded magnitude exceeds `max`.

- `saturate` (default for every format; the MX rule): the result is ±max. ±Inf inputs also give
  ±max, except in E5M2, which has an Inf and encodes ±Inf as ±Inf.
- `nonsaturating` (OFP8; E4M3FN, E4M3FNUZ and E5M2 only): overflow and ±Inf give E4M3FN NaN with
  the input's sign (0x7F/0xFF), E5M2 ±Inf (0x7C/0xFC), E4M3FNUZ its NaN 0x80.
- Under `toward-zero` a finite input never overflows: the result is ±max (IEEE 754 §7.4).

A combination that means nothing (e.g. `nonsaturating` for E2M1, INT4 or E8M0, `floor` for E2M1)
MUST be refused.

### Special inputs

- **NaN**: E4M3FN gives 0x7F (0xFF for a NaN with the sign bit set), E5M2 the quiet NaN 0x7E
  (0xFE), E4M3FNUZ 0x80, E8M0 0xFF. E2M1, E2M3, E3M2, INT4 and UINT4 have no NaN: an encoder MUST
  refuse NaN unless the caller names the code it becomes (producers differ: 0x8 ml_dtypes, 0x3
  torchao, 0x7 Quark, 0x0 compressed-tensors).
- **-0.0** and negative values that round to zero keep the sign where the format has -0 (E2M1
  0x8, E4M3FN and E5M2 0x80, E2M3 and E3M2 0x20). E4M3FNUZ has no -0 (0x80 is its NaN): they give
  0x00. Integers give 0.
- **E8M0** has no zero and no sign: ±0 gives 0x00 (the smallest scale), values below 2^-127 clamp
  to 0x00, values above 2^127 clamp to 0xFE, +Inf gives 0xFE, and negative values MUST be refused.
- **Integers** round to an integer with the rounding mode and saturate to [-8, 7] (INT4, code =
  4-bit two's complement) or [0, 15] (UINT4).

## Modes by format

Each cell lists the valid overflow modes for that rounding; the default is **bold**.

{modes}

## Vectors

`vectors/<format>/decode.json` and `vectors/<format>/encode.json`, `schema_version` {schema}.
Inputs are exact float64 values written as hex floats (`0x1.8000000000000p-1`; `inf`, `-inf`,
`nan`, `-nan`), which C (`strtod`), Python (`float.fromhex`) and most languages parse exactly.
Encode files list `modes` once; `expected[i]` is the code under `modes[i]`, or `error`. Codes are
hex strings. The files are regenerated by `python -m mxformats.specgen`; CI fails if they differ.

## Sources

The OCP MX v1.0 and OFP8 rev 1.0 texts were not available to us as primary documents; citations of
them are secondary, through Rouhani et al., arXiv:2310.10537 (which reproduces MX §6.3 Algorithm
1), implementer code that cites section numbers (PyTorch `Float4_e2m1fn_x2.h` for §5.3.3, oneDNN
PR #4218 for the E8M0 page) and the ONNX float8 discussion (onnx/onnx PR #4805, #7085). Where the
OCP text leaves a case open (NaN into E2M1, E8M0 ties, zero into E8M0), the decision above is ours
and is stated as such.
"""


def overview() -> str:
    formats = table(
        ["name", "title", "bits", "max", "NaN", "Inf", "-0"],
        [
            [f"[`{f.name}`]({f.name}.md)", f.title, str(f.bits), short_float(f.max),
             "yes" if f.nan_codes else "no", "yes" if f.inf_codes else "no",
             "yes" if f.signed_zero else "no"]
            for f in FORMATS.values()
        ],
    )
    mode_rows = []
    for f in FORMATS.values():
        cells = []
        for r in ROUNDINGS:
            if r not in f.roundings:
                cells.append("–")
                continue
            names = [f"**{o}**" if (o == f.default_overflow and r == "nearest-even") else o
                     for o in OVERFLOWS if o in f.overflows]
            cells.append(", ".join(names))
        mode_rows.append([f"`{f.name}`", *cells])
    modes_table = table(["format", *[f"`{r}`" for r in ROUNDINGS]], mode_rows)
    return _OVERVIEW.format(formats=formats, modes=modes_table, schema=SCHEMA_VERSION)


def profiles_page() -> str:
    """``profiles.md``: every registered profile and what it reproduces, and the default
    consumer of every producer."""
    from mxformats import pairing
    from mxformats.registry import profiles

    rows = [
        [f"`{p.name}`", p.scheme, p.kind, f"{p.library} {p.version}", f"`{p.function}`",
         p.description]
        for p in profiles()
    ]
    return "\n".join([
        "# Profiles\n",
        "<!-- Generated by `python -m mxformats.specgen` from the profile registry. "
        "Do not edit. -->\n",
        "A profile names one implementation's choices (scale rule, tie rounding, arithmetic "
        "dtype, NaN, Inf, zero and tiny blocks, packing, decoding), so that `profile=\"quark\"` "
        "means the bytes that implementation writes or reads. Producers write checkpoints, "
        "consumers decode them, activation profiles are dynamic activation quantizers.\n",
        table(["profile", "scheme", "kind", "source", "function", "description"], rows),
        "\n## Default consumers\n",
        "A round trip through one profile name decodes with the consumer that reads what the "
        "producer writes: `dequantize_mx(quantize_mx(x, profile=P))` uses P's default consumer, "
        "and so does `dequantize_mx(codes, scales, profile=P)` when P names a producer; naming "
        "a consumer overrides it (`mxformats.pairing`, which cites the loader code behind each "
        "pairing).\n",
        pairing.render_markdown(),
    ])


def generate() -> dict[str, str]:
    """Every file of ``spec/``, by relative path."""
    from mxformats.specgen import fp8_block as spec_fp8_block
    from mxformats.specgen import int4 as spec_int4
    from mxformats.specgen import mx as spec_mx
    from mxformats.specgen import nvfp4 as spec_nvfp4
    from mxformats.specgen import research as spec_research

    files = {"README.md": overview(), "profiles.md": profiles_page()}
    for fmt in FORMATS.values():
        files[f"{fmt.name}.md"] = format_page(fmt)
        files[f"vectors/{fmt.name}/decode.json"] = decode_vectors(fmt)
        files[f"vectors/{fmt.name}/encode.json"] = encode_vectors(fmt)
    files.update(spec_mx.pages())
    files.update(spec_int4.pages())
    files.update(spec_fp8_block.pages())
    files.update(spec_nvfp4.pages())
    files.update(spec_research.pages())
    return files


def write(out: Path) -> None:
    for rel, text in generate().items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def check(spec_dir: Path) -> list[str]:
    """The generated files that differ from, or are missing in, ``spec_dir``."""
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp))
        return [
            rel for rel in sorted(generate())
            if not (spec_dir / rel).is_file()
            or not filecmp.cmp(Path(tmp) / rel, spec_dir / rel, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mxformats.specgen",
        description="Regenerate spec/ from the format definitions, or check it is current.",
    )
    parser.add_argument("--out", type=Path, default=Path("spec"), help="spec folder (default: spec)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the folder is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = check(args.out)
        for rel in stale:
            print(f"stale: {args.out / rel}", file=sys.stderr)
        if stale:
            print("run `python -m mxformats.specgen` and commit the result", file=sys.stderr)
            return 1
        print(f"{args.out}: {len(generate())} files current (mxformats {__version__})")
        return 0
    write(args.out)
    print(f"wrote {len(generate())} files under {args.out}")
    return 0

