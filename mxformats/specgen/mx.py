"""Spec pages and vectors for MX block scaling and its profiles, generated from the code.

Called by :mod:`mxformats.specgen`. Writes ``mx.md`` (the algorithm, the gaps of the OCP text and
how each profile fills them, the input classification, the divergence matrices, computed by
running :mod:`mxformats.schemes.mx`) and ``vectors/mx/<profile>.json``: the sources.md §6
vectors that target each profile, with expected bytes computed by the reference
(tests/test_mx_vectors.py checks them against the values the research executed), plus
``documentation-only.json``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from mxformats.arith import BF16
from mxformats.formats import E2M1, E4M3FN, Format
from mxformats.schemes.mx.consumers import CONSUMERS, MXConsumer
from mxformats.schemes.mx.producers import PRODUCERS, MXProducer

SCHEMA_VERSION = 1
BLOCK = 32


# -- the vectors (sources.md §6) ---------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A sources.md §6 block: its first values, the rest of the 32 elements +0.0."""

    number: int
    values: tuple[float, ...]
    title: str
    elem: Format = E2M1


NAN, INF = float("nan"), float("inf")
BLOCKS: dict[int, Block] = {
    b.number: b
    for b in (
        Block(1, (6.0, 5.0), "E2M1 tie 5.0 (RNE 4, half-up 6)"),
        Block(2, (6.0, 0.25), "E2M1 tie 0.25"),
        Block(3, (6.0, 1.25), "E2M1 tie 1.25"),
        Block(4, (6.0, 2.5), "E2M1 tie 2.5"),
        Block(5, (6.0, 0.75, 1.75, 3.5), "ties whose even neighbour is the upper one"),
        Block(6, (4.0, -0.0), "-0.0"),
        Block(7, (4.0, -0.25), "-0.25 (a tie to -0)"),
        Block(8, (4.0, -0.2), "-0.2 (rounds to -0)"),
        Block(9, (4.0, float.fromhex("0x1.000002p-2")), "0.25000003 (float32 0x3E800001)"),
        Block(10, (-5.0, 3.0, 2.9), "negative tie -5.0"),
        Block(11, (7.0, 1.0, 0.3, -2.9), "amax 7: FLOOR saturates"),
        Block(12, (6.5, 1.0, 0.76), "amax 6.5"),
        Block(13, (3.5, 1.0, 0.25), "amax 3.5 (significand 1.75)"),
        Block(14, (7.5, 1.0), "amax 7.5"),
        Block(15, (1.5, 0.125, 0.1875), "amax 1.5"),
        Block(16, (6.0, 5.0, 0.25, 0.75), "amax 6 with ties"),
        Block(17, (0.0, -0.0), "all zero, one -0.0"),
        Block(18, (NAN, 1.0), "NaN in the block"),
        Block(19, (INF, 1.0), "+Inf in the block"),
        Block(20, (2.0**-125, 2.0**-127), "tiny block"),
        Block(21, (float(np.float32(1e-38)), float(np.float32(5e-39))), "float32 subnormals"),
        Block(22, (float(np.float32(3e38)), 1.0), "huge block (3e38)"),
        Block(39, (480.0, 1.0, 17.0), "MXFP8 E4M3: amax 480, tie 17", E4M3FN),
        Block(40, (448.0, 1.0, 2.0**-10), "MXFP8 E4M3: tie 2^-10", E4M3FN),
        Block(41, (500.0, 1.0), "MXFP8 E4M3: amax 500", E4M3FN),
    )
}

_RNE_FLOOR_LIKE = (
    "ocp", "torchao-floor", "torchao-even", "torchao-rceil", "triton-round-up",
    "triton-round-down", "quark", "compressed-tensors",
)
_HALF_UP = ("microxcaling", "quark-triton")
_SCALE_RULES = (
    "ocp", "torchao-floor", "triton-round-down",  # FLOOR
    "torchao-even", "quark", "compressed-tensors",  # EVEN
    "torchao-ceil", "torchao-rceil", "triton-round-up",  # CEIL, RCEIL / ROUND_UP
)
_TORCHAO = ("torchao-floor", "torchao-ceil", "torchao-even", "torchao-rceil")
_TRITON = ("triton-round-up", "triton-round-down")

#: sources.md §6 vector -> (profiles run on float32 input, profiles run on bfloat16 input):
#: exactly the implementations the research names for it (its "Expected" column covers every
#: implementation not listed as divergent; amax-6 rows leave torchao CEIL out, it rescales).
TARGETS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    **{n: ((*_RNE_FLOOR_LIKE, *_HALF_UP), ("vllm", "quark-hip-qdq")) for n in (1, 2, 3, 4, 5)},
    **{n: ((*_RNE_FLOOR_LIKE, "torchao-ceil", *_HALF_UP), ("vllm",)) for n in (6, 7, 8)},
    9: ((*_RNE_FLOOR_LIKE, "torchao-ceil", *_HALF_UP), ()),
    10: ((*_RNE_FLOOR_LIKE, "torchao-ceil", *_HALF_UP), ("vllm",)),
    **{n: ((*_SCALE_RULES, "microxcaling"), ("vllm",)) for n in (11, 12, 14, 15)},
    13: ((*_SCALE_RULES, "microxcaling", "quark-triton"), ("vllm",)),
    16: (_SCALE_RULES, ("vllm",)),
    17: (("ocp", *_TORCHAO, *_TRITON, "quark", "compressed-tensors"), ("vllm",)),
    **{
        n: (("ocp", "microxcaling", *_TORCHAO, *_TRITON, "quark", "quark-triton",
             "compressed-tensors"), ("vllm",))
        for n in (18, 19, 20)
    },
    21: (("ocp", "torchao-floor", "torchao-rceil", *_TRITON, "quark"), ("vllm",)),
    22: (("ocp", "microxcaling", *_TORCHAO, *_TRITON, "quark", "compressed-tensors"), ("vllm",)),
    39: (("ocp", "microxcaling", *_TORCHAO, "triton-round-up"), ()),
    40: (("ocp", "microxcaling", *_TORCHAO, "triton-round-up"), ()),
    41: (("ocp", "torchao-floor", "torchao-even", "torchao-rceil", "triton-round-up"), ()),
}

#: (vector, profiles, input dtype), flattened from :data:`TARGETS`.
QUANTIZE_TARGETS: tuple[tuple[int, tuple[str, ...], str], ...] = tuple(
    (n, profiles, dtype)
    for n, (f32, bf16) in TARGETS.items()
    for profiles, dtype in ((f32, "float32"), (bf16, "bfloat16"))
    if profiles
)

#: Where each profile's expected values come from (sources.md §0 and §6).
SOURCES = {
    "ocp": "formats.md §6 'spec' column (OCP Algorithm 1, FLOOR, RNE, saturating); NaN/Inf "
    "blocks per this project's gap-filling",
    "torchao-floor": "executed: torchao 0.18.0 to_mx on CPU (formats.md §6; re-run here)",
    "torchao-ceil": "executed: torchao 0.18.0 to_mx on CPU (formats.md §6; re-run here)",
    "torchao-even": "executed: torchao 0.18.0 to_mx on CPU (formats.md §6; re-run here)",
    "torchao-rceil": "executed: torchao 0.18.0 to_mx on CPU (formats.md §6; re-run here)",
    "triton-round-up": "executed: triton_kernels downcast_to_mxfp_torch@018a674, ported",
    "triton-round-down": "executed: triton_kernels downcast_to_mxfp_torch@018a674, ported",
    "quark": "executed: Quark 0.13 export path on CPU (formats.md §6)",
    "quark-triton": "executed: Quark 0.13 downcast_to_mxfp_torch EVEN (formats.md §6)",
    "compressed-tensors": "executed: compressed-tensors 0.20.1 calculate_qparams + "
    "MXFP4PackedCompressor.compress on CPU (0x7F, not formats.md's 0xFF, for exponent 255)",
    "microxcaling": "executed: microxcaling _quantize_mx, Python path (formats.md §6); NaN "
    "blocks written as 0xFF with codes 0x00",
    "vllm": "emulated: vLLM mxfp4_quantize Triton kernel in torch (formats.md §3.7, §6)",
    "quark-hip-qdq": "source: fake_kernels.cuh fp16_to_fp4_simulate tie table (not executed)",
}


@dataclass(frozen=True)
class Decode:
    """A dequantization vector: logical codes (rest of the block 0x0) and one scale byte."""

    number: str
    codes: tuple[int, ...]
    scale: int
    profiles: tuple[str, ...]
    dtype: str
    source: str


DECODE_TARGETS: tuple[Decode, ...] = (
    Decode("47", (0x1, 0x2), 0x7F, ("ocp", "triton", "vllm-e8m0-to-f32"), "float32",
           "formats.md §6.8 #47: byte 0x21 is [0.5, 1.0]"),
    Decode("47", (0x1, 0x2), 0x7F, ("quark-triton", "compressed-tensors", "quark-hip-bf16"),
           "bfloat16", "formats.md §6.8 #47: byte 0x21 is [0.5, 1.0]"),
    Decode("48", (0x2,), 0x00, ("ocp", "triton"), "float32",
           "formats.md §6.8 #48: 0x00 is 2^-127 (float32 bits 0x00400000)"),
    Decode("48", (0x2,), 0x00, ("ocp", "triton", "compressed-tensors"), "bfloat16",
           "formats.md §6.8 #48 in bfloat16: 2^-127 is the subnormal 0x0040"),
    Decode("48", (0x2,), 0x00, ("quark-triton",), "bfloat16",
           "quark/torch/kernel/mx/triton.py L284: bits b << 7, so 0x00 is +0.0 (the naive "
           "decode formats.md #48 warns about; checkpoints.md §2.5)"),
    Decode("49", (0x1, 0x2), 0xFF, ("ocp", "triton", "quark-hip-fp16"), "float16",
           "formats.md §6.8 #49 (Quark HIP from source)"),
    Decode("49", (0x1, 0x2), 0xFF, ("quark-hip-bf16", "compressed-tensors"), "bfloat16",
           "formats.md §6.8 #49: bf16 powf gives +Inf; zero elements NaN"),
    Decode("50", (0x1,), 0x8F, ("ocp", "quark-hip-fp16"), "float16",
           "formats.md §6.8 #50 (Quark HIP from source)"),
    Decode("51", (0x7,), 0x66, ("ocp", "quark-hip-fp16"), "float16",
           "formats.md §6.8 #51 (Quark HIP from source)"),
    Decode("§4 sglang#25519", (0x2, 0x0), 0x86, ("vllm-e8m0-to-f32", "ocp"), "float32",
           "formats.md §4 / checkpoints.md §2.5: byte 134 (scale 128.0) becomes NaN"),
    Decode("§4 sglang#25519", (0x2, 0x0), 0xFF, ("vllm-e8m0-to-f32",), "float32",
           "formats.md §4: byte 255 becomes +Inf (zero elements NaN)"),
)

#: sources.md §6 MX vectors (and parts of vectors) no profile here reproduces.
DOCUMENTATION_ONLY: tuple[dict[str, str], ...] = (
    {"vector": "1-4, 13", "what": "triton-old (pre-PR #8110 ROUND_UP, round-half-up)",
     "result": "[7 7], [7 1], [7 3], [7 5]; #13 0x7F [6 2 1]",
     "why": "superseded triton_kernels code; quark-triton keeps that rounding"},
    {"vector": "9", "what": "vLLM mxfp4_quantize on float32 input (old sticky bit)",
     "result": "[6 0]", "why": "the kernel refuses float32; the stored kernel ORs the sticky bits"},
    {"vector": "11-22", "what": "ml_dtypes element cast + FLOOR scale",
     "result": "as 'spec'", "why": "not a producer; ml_dtypes has no MX quantizer"},
    {"vector": "39", "what": "FLOOR + ml_dtypes non-saturating E4M3 cast",
     "result": "0x7F [7F 38 58]", "why": "ml_dtypes' e4m3fn cast is non-saturating (NaN)"},
    {"vector": "47", "what": "ml_dtypes float4_e2m1fn viewing the packed byte 0x21",
     "result": "invalid (needs an unpacked 0x01)", "why": "ml_dtypes has no packed fp4 type"},
    {"vector": "48", "what": "naive b << 23 (TransformerEngine before PR #3262, Triton bf16 "
     "dot_scaled before PR #11624)", "result": "0.0", "why": "fixed bugs, not profiles; "
     "quark-triton still decodes this way"},
    {"vector": "18, 19", "what": "GPU Triton kernels (tl.max NaN semantics)",
     "result": "unknown", "why": "not executed (formats.md §7.3); the profiles follow the torch "
     "references"},
)


def _input_block(block: Block, dtype: str) -> np.ndarray:
    values = np.zeros(BLOCK)
    values[: len(block.values)] = block.values
    np_dtype = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    with np.errstate(over="ignore"):
        return values.astype(np.float32).astype(np_dtype)


def _hex(v: float) -> str:
    if np.isnan(v):
        return "-nan" if np.signbit(v) else "nan"
    return float(v).hex()


def quantize_case(number: int, profile: str, dtype: str) -> dict[str, object]:
    """One vector run through :func:`mxformats.quantize_mx`: input, scale byte, codes."""
    from mxformats.schemes.mx import quantize_mx, unpack_fp4

    block = BLOCKS[number]
    x = _input_block(block, dtype)
    codes, scales = quantize_mx(x, block.elem, profile=profile)
    logical = unpack_fp4(codes) if block.elem is E2M1 else codes
    width = (block.elem.bits + 3) // 4
    return {
        "vector": f"formats.md §6 #{number}",
        "title": block.title,
        "elem": block.elem.name,
        "dtype": dtype,
        "input": [_hex(float(v)) for v in x.astype(np.float64)],
        "scale": f"0x{int(scales[0]):02X}",
        "codes": [f"0x{int(c):0{width}X}" for c in logical],
    }


def _bits_hex(v: np.ndarray) -> list[str]:
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[v.dtype.itemsize]
    return [f"0x{int(b):0{2 * v.dtype.itemsize}X}" for b in v.view(uint)]


def decode_case(case: Decode, profile: str) -> dict[str, object]:
    """One decode vector run through :func:`mxformats.dequantize_mx`."""
    from mxformats.schemes.mx import dequantize_mx, pack_fp4

    codes = np.zeros(BLOCK, dtype=np.uint8)
    codes[: len(case.codes)] = case.codes
    dtype = BF16 if case.dtype == "bfloat16" else np.dtype(case.dtype)
    out = dequantize_mx(pack_fp4(codes), np.array([case.scale], dtype=np.uint8),
                        profile=profile, dtype=dtype)
    return {
        "vector": f"formats.md #{case.number}",
        "source": case.source,
        "elem": "e2m1",
        "dtype": case.dtype,
        "codes": [f"0x{int(c):X}" for c in codes],
        "scale": f"0x{case.scale:02X}",
        "expected_bits": _bits_hex(out),
        "expected": [_hex(float(v)) for v in out.astype(np.float64)],
    }


def _json(header: dict[str, object], sections: dict[str, list[dict[str, object]]]) -> str:
    import json

    parts = [json.dumps(header, indent=2)[:-2]]
    for name, cases in sections.items():
        rows = ",\n".join("    " + json.dumps(c, separators=(", ", ": ")) for c in cases)
        parts.append(f'  "{name}": [\n{rows}\n  ]')
    return ",\n".join(parts) + "\n}\n"


def vector_files() -> dict[str, str]:
    """``vectors/mx/<profile>.json`` for every profile with a targeted vector."""
    names = sorted({p for _, ps, _ in QUANTIZE_TARGETS for p in ps}
                   | {p for d in DECODE_TARGETS for p in d.profiles})
    files = {}
    for name in names:
        quantize = [quantize_case(n, name, dt) for n, ps, dt in QUANTIZE_TARGETS if name in ps]
        decode = [decode_case(d, name) for d in DECODE_TARGETS if name in d.profiles]
        header: dict[str, object] = {
            "schema_version": SCHEMA_VERSION,
            "profile": name,
            "generator": "python -m mxformats.specgen",
            "description": (
                "formats.md §6 vectors that target this profile. quantize: a 32-element block "
                "(hex floats of the given dtype) -> the E8M0 byte and the logical element codes "
                "(E2M1 packs element 2k in the low nibble). dequantize: logical codes and a "
                "scale byte -> the output's raw bits in dtype and its value."
            ),
        }
        if quantize:
            header["producer_source"] = SOURCES[name]
        sections: dict[str, list[dict[str, object]]] = {}
        if quantize:
            sections["quantize"] = quantize
        if decode:
            sections["dequantize"] = decode
        files[f"vectors/mx/{name}.json"] = _json(header, sections)
    files["vectors/mx/documentation-only.json"] = _json(
        {
            "schema_version": SCHEMA_VERSION,
            "generator": "python -m mxformats.specgen",
            "description": "formats.md §6 MX results that no profile reproduces: recorded, "
            "not asserted.",
        },
        {"cases": [dict(case) for case in DOCUMENTATION_ONLY]},
    )
    return files


# -- the divergence matrices ------------------------------------------------------------------

MATRIX_BLOCKS = (1, 2, 6, 7, 11, 13, 17, 18, 19, 20, 21, 22)


def _cell(producer: MXProducer, number: int) -> str:
    from mxformats.schemes.mx import quantize_mx, unpack_fp4

    block = BLOCKS[number]
    dtype = "float32" if np.dtype(np.float32) in producer.dtypes else "bfloat16"
    x = _input_block(block, dtype)
    codes, scales = quantize_mx(x, block.elem, profile=producer.name)
    logical = unpack_fp4(codes)[: len(block.values)]
    mark = "" if dtype == "float32" else "ᵇ"
    return f"{int(scales[0]):02X} [{' '.join(f'{int(c):X}' for c in logical)}]{mark}"


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def producer_matrix() -> str:
    header = ["profile", *[f"#{n}" for n in MATRIX_BLOCKS]]
    cells = {p.name: [_cell(p, n) for n in MATRIX_BLOCKS] for p in PRODUCERS.values()}
    rows = [[f"`{name}`", *_against_ocp(row, cells["ocp"], "ᵇ")] for name, row in cells.items()]
    legend = "; ".join(
        f"#{n} `[{', '.join(_short(v) for v in BLOCKS[n].values)}]`" for n in MATRIX_BLOCKS
    )
    return (f"Blocks (the rest of the 32 elements +0.0): {legend}.\n\n"
            "Each cell: the scale byte and the first codes, hex. **Bold**: other bytes than "
            "`ocp` writes (the cells `mxformats diff` highlights). ᵇ: bfloat16 input (the "
            "profile refuses float32).\n\n" + _table(header, rows))


def _against_ocp(row: list[str], ocp: list[str], marker: str = "") -> list[str]:
    """``row`` with every cell that differs from ``ocp``'s (``marker`` ignored) in bold."""
    return [cell if cell.removesuffix(marker) == base.removesuffix(marker) else f"**{cell}**"
            for cell, base in zip(row, ocp, strict=True)]


def _short(v: float) -> str:
    if np.isnan(v):
        return "NaN"
    if np.isinf(v):
        return "+Inf"
    if v != 0 and (abs(v) < 2**-10 or abs(v) > 2**20):
        significand, e = math.frexp(abs(v))  # exact, unlike np.log2's CPU-specific SIMD paths
        return f"2^{e - 1}" if significand == 0.5 else f"{v:.3g}"
    return "-0" if v == 0 and np.signbit(v) else f"{v:g}"


DECODE_MATRIX = (
    ("0x00, 1.0", 0x00, 0x2),
    ("0x7F, 6.0", 0x7F, 0x7),
    ("0x86, 1.0", 0x86, 0x2),
    ("0x8F, 0.5", 0x8F, 0x1),
    ("0x90, 6.0", 0x90, 0x7),
    ("0x66, 6.0", 0x66, 0x7),
    ("0xFE, 6.0", 0xFE, 0x7),
    ("0xFF, 1.0", 0xFF, 0x2),
    ("0xFF, 0.0", 0xFF, 0x0),
)


def _decode_cell(consumer: MXConsumer, byte: int, code: int) -> str:
    from mxformats.schemes.mx import dequantize_mx, pack_fp4

    codes = np.zeros(BLOCK, dtype=np.uint8)
    codes[0] = code
    out = dequantize_mx(pack_fp4(codes), np.array([byte], dtype=np.uint8),
                        profile=consumer.name, dtype=consumer.dtypes[0])
    return _short(float(out[0]))


def consumer_matrix() -> str:
    header = ["consumer (type)", *[label for label, _, _ in DECODE_MATRIX]]
    cells = {c.name: [_decode_cell(c, b, code) for _, b, code in DECODE_MATRIX]
             for c in CONSUMERS.values()}
    rows = [[f"`{c.name}` ({c.dtypes[0].name})", *_against_ocp(cells[c.name], cells["ocp"])]
            for c in CONSUMERS.values()]
    return ("Each column: a scale byte and one E2M1 element; each cell the decoded value in the "
            "consumer's first type. **Bold**: another value than `ocp` decodes.\n\n"
            + _table(header, rows))


# -- the page ---------------------------------------------------------------------------------


def _doc(fn: object) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split())


def _bullets(items: Iterable[str]) -> str:
    lines = [f"- {i}" for i in items]
    return "\n".join(lines) if lines else "- (none)"


def _producer_section(p: MXProducer) -> str:
    rule = p.scale_rule
    dtypes = ", ".join(d.name for d in p.dtypes)
    elems = ", ".join(f.name for f in p.elements)
    sizes = "any" if p.block_sizes is None else ", ".join(str(b) for b in p.block_sizes)
    rules_text = "; ".join(
        f"{k if k != '*' else 'all inputs'}: rounding {r.rounding}, zeros {r.zero_sign}, NaN "
        f"{r.nan_code}, Inf {r.inf_code}"
        for k, r in p.rules.items()
    )
    lines = [
        f"### `{p.name}` ({p.kind})\n",
        f"{p.description}\n",
        _table(["", ""], [
            ["reproduces", f"{p.library} {p.version}: `{p.function}`"],
            ["elements", elems],
            ["input types", dtypes + (f" ({p.dtype_reason})" if p.dtype_reason else "")],
            ["block size", sizes],
            ["short last block", "quantized on its own elements" if p.partial_blocks
             else "ValueError"],
            ["arithmetic", p.arithmetic],
            ["block maximum", "NaN-ignoring (__hmax)" if p.nan_ignoring_max
             else "NaN-propagating"],
            ["element rules", rules_text],
        ]),
        f"**Scale rule.** {_doc(rule)}\n",
        "**Defined** (reproduced exactly):\n",
        _bullets(p.defined) + "\n",
        "**Pinned** (behaviour observed on x86 that the producer leaves undefined):\n",
        _bullets(p.pinned) + "\n",
        "**Implementation-defined** (we return the documented value or raise):\n",
        _bullets(p.implementation_defined) + "\n",
    ]
    if p.notes:
        lines += ["**Notes.**\n", _bullets(p.notes) + "\n"]
    return "\n".join(lines)


def _consumer_section(c: MXConsumer) -> str:
    lines = [
        f"### `{c.name}` (consumer)\n",
        f"{c.description}\n",
        _table(["", ""], [
            ["reproduces", f"{c.library} {c.version}: `{c.function}`"],
            ["elements", ", ".join(f.name for f in c.elements)],
            ["arithmetic / output types", ", ".join(d.name for d in c.dtypes)],
            ["clamps to max finite", "yes" if c.clamp else "no"],
            ["0xFF forces NaN", "yes" if c.nan_on_ff else "no (by the scale's value)"],
        ]),
        f"**Scale decoding.** {_doc(c.scale)}\n",
    ]
    if c.notes:
        lines += ["**Notes.**\n", _bullets(c.notes) + "\n"]
    return "\n".join(lines)


_INTRO = """# MX block scaling and its profiles

<!-- Generated by `python -m mxformats.specgen` from mxformats/schemes/mx/
(__init__.py, scale_rules.py, elements.py, producers.py, consumers.py). Do not edit. -->

"MXFP4" is not one function. This page specifies the OCP algorithm, every gap its text leaves,
and, for each producer and consumer the project reproduces (a *profile*), how it fills each gap,
bit for bit. Tables marked "computed" are produced by running the reference, so they cannot
drift from it. Implementations: `mxformats.quantize_mx(x, elem, block_size=32, axis=-1,
profile=...)` and `mxformats.dequantize_mx(codes, scales, ..., profile=..., dtype=...)`.

## 1. The block (OCP MX v1.0 §5-§6)

An MX block is one E8M0 scale X and `k` elements P_i (k = 32 for every concrete format); the
value of element i is X × P_i. Elements: E2M1 (MXFP4), E2M3 and E3M2 (MXFP6), E4M3FN and E5M2
(MXFP8). Storage, as every producer here writes it:

- `codes`: uint8. E2M1 packs two codes per byte along the blocked axis, **element 2k in the low
  nibble, 2k+1 in the high nibble** (torch `float4_e2m1fn_x2`, torchao after pytorch/ao#3123,
  triton_kernels after triton#5197, Quark `Pack_fp4`, compressed-tensors; sources.md #47: codes
  [0x1, 0x2] pack to 0x21). Wider elements: one code per byte.
- `scales`: uint8 E8M0 bytes, the data's shape with the blocked axis divided by the block size
  (rounded up where a producer quantizes a short last block).

## 2. The algorithm (§6.3, Algorithm 1, as reproduced in arXiv:2310.10537)

```
shared_exp = floor(log2(max_i |V_i|)) - emax_elem
X = 2^shared_exp
P_i = quantize_to_element_format(V_i / X), clamping normal numbers
```

with emax_elem = 2 (E2M1, E2M3), 4 (E3M2), 8 (E4M3), 15 (E5M2); the scale clamped to the E8M0
range. Because V_max / X lies in [2^emax, 2^(emax+1)) but the element maximum is below
2^(emax+1) (6 < 8 for E2M1), FLOOR saturates the block maximum whenever its significand is at
least 1.75 (E2M1): the reason for the EVEN, CEIL and RCEIL rules below.

## 3. The gaps in the OCP text, and how each profile fills them

The OCP MX text available to us (through arXiv:2310.10537; sources.md §1.5, §7.1) does not say:

{gaps}
Every profile's input classification (§5, §6) says which of these behaviours are *defined*
(reproduced exactly), *pinned* (reproducing behaviour observed on x86 that the producer leaves
undefined) or *implementation-defined* (a documented value, or ValueError).

## 4. Divergence matrix: producers (computed)

{producer_matrix}
## 5. Producer and activation profiles

Scale rules are functions of the block's largest magnitude `amax` (NaN-propagating unless
stated); elements are `q = x * mult` (`mult` the producer's reciprocal of its scale, which can
differ from the byte it writes), rounded into the producer's arithmetic type, then to the
element by the reference codec with the element rules. The zero rules: `keep` (-0.0 and
negatives rounding to zero give -0), `positive` (every zero +0), `sign-function`
(`sign(q) * |round(q)|` with sign(±0) = +0: -0.0 gives +0, a negative value that rounds to
zero -0). Inputs with non-canonical NaN payloads are treated as the canonical quiet NaN with
their sign (implementation-defined everywhere).

{producers}
## 6. Consumers

A consumer decodes the byte into its arithmetic type, multiplies by the element (exact), rounds
the product once into that type, then applies its clamp and NaN rules. `dequantize_mx(...,
dtype=)` takes that type or any wider float type (exact widening). Every NaN output is the
canonical quiet NaN with the sign clear; the bits the real readers write for a NaN depend on the
device and the kernel path (compressed-tensors' bfloat16 0 × Inf on x86: 0xFFFF on torch's
vectorized path, 0x7FC0 on its scalar tail; NVIDIA GPUs: 0x7FFF), so a NaN's sign and payload
are implementation-defined for every consumer.

**Quark Triton and byte 0x00.** sources.md §3.9 lists 2^-127; sources.md §C2.5 says 0.0. The
code decides: `quark/torch/kernel/mx/triton.py` L284 (`dst_scale = (scale.to(tl.uint16) << 7)
.to(dst_dtype, bitcast=True)`, bfloat16) and L287 (`(scale.to(tl.uint32) << 23)` through float32
for float16) build the scale by bit shift, so 0x00 is +0.0 and the whole block decodes to zero;
L333 then forces NaN where the byte is 0xFF. The torch reference `upcast_from_mxfp_torch` (L861)
shifts the same way. Profile `quark-triton` (consumer) follows this.

### Consumer matrix (computed)

{consumer_matrix}
{consumers}
## 7. Vectors

`vectors/mx/<profile>.json` (`schema_version` {schema}): every sources.md §6 vector relevant to
MX (1-22, 39-41, 47-51) that targets the profile, each with its source (executed, ported,
emulated or derived from source) and the bytes this reference computes; tests/test_mx_vectors.py
asserts each against the value the research recorded. `vectors/mx/documentation-only.json`
lists the §6 results no profile reproduces.
"""


#: (gap, the ocp profile's decision, what the producers do): spec/mx.md §3.
GAPS: tuple[tuple[str, str, str], ...] = (
    ("(a) element rounding",
     "round to nearest, ties to even (every FP8 implementation and most FP4 ones do)",
     "RNE, except microxcaling (half away) and Quark Triton (half up)"),
    ("(b) NaN in a block",
     "a NaN block: scale 0xFF, every code 0x00 (the spec: a NaN X makes every element NaN)",
     "0xFF, 0x00 (NaN lost), 0x7F, 0xFE: see the matrix"),
    ("(c) ±Inf in a block",
     "a NaN block, like NaN: log2(Inf) has no E8M0 value, X never encodes Inf, and an element "
     "format without Inf must not turn Inf into a finite value silently; microxcaling, the "
     "authors' emulator, does the same",
     "a finite scale and ±max (torchao, Quark, vLLM), 0xFF (triton), 0x7F (compressed-tensors)"),
    ("(d) all-zero block",
     "log2(0) = -inf clamps to -127: scale 0x00; zeros keep their sign (-0.0 is 0x8)",
     "0x00, or 0x01 (Quark); -0 kept or dropped"),
    ("(e) tiny blocks (the clamp at -127)",
     "elements quantized against 2^-127 itself, so 0x00 decodes exactly",
     "torchao divides by 2^-126, Quark writes 0x01, triton ROUND_DOWN and torchao RCEIL flush"),
    ("(f) scale overflow (> 2^127)",
     "clamp to 0xFE, elements saturate (reachable only from float64 input)",
     "compressed-tensors writes exponent 255 (stored 0x7F) for amax >= 1.75·2^127"),
    ("(g) NaN element codes (E2M1 has no NaN)",
     "never needed: a NaN makes the block NaN",
     "0x3 torchao, 0x7 triton/Quark/vLLM, 0x0 or 0x8 compressed-tensors"),
    ("(h) sizes not divisible by 32", "ValueError",
     "triton, Quark, microxcaling and vLLM quantize a short last block"),
    ("(i) arithmetic type", "exact (the float64 value of the input)",
     "float32, or the input's own bf16/fp16 (compressed-tensors, Quark HIP)"),
    ("(j) decoding 0x00 and 0xFF", "0x00 = 2^-127, 0xFF = a NaN block",
     "0.0, +Inf, 2^15: see the consumer matrix"),
)


def mx_page() -> str:
    return _INTRO.format(
        gaps=_table(["gap", "`ocp` (this project's decision)", "what the producers do"],
                    [list(row) for row in GAPS]),
        producer_matrix=producer_matrix(),
        producers="\n".join(_producer_section(p) for p in PRODUCERS.values()),
        consumer_matrix=consumer_matrix(),
        consumers="\n".join(_consumer_section(c) for c in CONSUMERS.values()),
        schema=SCHEMA_VERSION,
    )


def pages() -> dict[str, str]:
    """Every file this module contributes to ``spec/``, by path relative to it."""
    return {"mx.md": mx_page(), **vector_files()}


__all__ = ["BLOCKS", "DECODE_TARGETS", "QUANTIZE_TARGETS", "TARGETS", "pages"]
