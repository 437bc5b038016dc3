"""sources.md §6.4-6.5 (vectors 23-38): element conversions as the research executed them.

Each case names its targets: this package's encoder in a named mode (asserted), ml_dtypes 0.6.0
(asserted against the installed library), and torch 2.14.1 / torch <= 2.11 (what the research
executed or read; documentation-only here, where torch 2.13 is installed). Called by
:mod:`mxformats.specgen`.
"""

from __future__ import annotations

import numpy as np

from mxformats.conversions import e4m3fn_to_fnuz
from mxformats.formats import E4M3FN, get_format
from mxformats.text import SCHEMA_VERSION, code_hex, hex_float, json_file

_INF, _NAN = float("inf"), float("nan")
_ML = {"library": "ml_dtypes", "version": "0.6.0"}
_TORCH = {"library": "torch", "version": "2.14.1", "documentation_only": True}
_TORCH_OLD = {"library": "torch", "version": "<=2.11", "documentation_only": True}

# (vector, format, input, {our mode: code}, {library target: code}) typed from sources.md §6.4-6.5.
_E8M0_MODE = ("nearest-linear", "saturate")
_CASES: tuple[tuple[str, str, float, dict[tuple[str, str], int], list[tuple[dict, int]]], ...] = (
    ("23", "e8m0", 0.0, {_E8M0_MODE: 0x00}, [(_TORCH, 0x00), (_ML, 0xFF)]),
    ("24", "e8m0", -1.0, {}, [(_TORCH, 0x7F), (_ML, 0xFF)]),
    ("25", "e8m0", 3.0, {_E8M0_MODE: 0x81, ("nearest-even", "saturate"): 0x80},
     [(_TORCH, 0x81), (_ML, 0x81)]),
    ("26", "e8m0", 0.75, {_E8M0_MODE: 0x7F, ("nearest-even", "saturate"): 0x7E},
     [(_TORCH, 0x7F), (_ML, 0x7F)]),
    ("27", "e8m0", 1.5 * 2.0**127, {_E8M0_MODE: 0xFE}, [(_TORCH, 0xFF), (_ML, 0xFF)]),
    ("28", "e8m0", 2.0**-128, {_E8M0_MODE: 0x00}, [(_TORCH, 0x00), (_ML, 0x00)]),
    ("29", "e8m0", _INF, {_E8M0_MODE: 0xFE}, [(_TORCH, 0xFF), (_ML, 0xFF)]),
    ("29", "e8m0", _NAN, {_E8M0_MODE: 0xFF}, [(_TORCH, 0xFF), (_ML, 0xFF)]),
    ("30", "e4m3fn", 464.0, {("nearest-even", "saturate"): 0x7E,
                             ("nearest-even", "nonsaturating"): 0x7E},
     [(_TORCH, 0x7E), (_TORCH_OLD, 0x7E), (_ML, 0x7E)]),
    ("30", "e4m3fnuz", 464.0, {("nearest-even", "nonsaturating"): 0x80}, [(_ML, 0x80)]),
    ("31", "e4m3fn", 470.0, {("nearest-even", "saturate"): 0x7E,
                             ("nearest-even", "nonsaturating"): 0x7F},
     [(_TORCH, 0x7E), (_TORCH_OLD, 0x7F), (_ML, 0x7F)]),
    ("31", "e4m3fnuz", 470.0, {("nearest-even", "nonsaturating"): 0x80}, [(_ML, 0x80)]),
    ("32", "e4m3fn", _INF, {("nearest-even", "saturate"): 0x7E,
                            ("nearest-even", "nonsaturating"): 0x7F},
     [(_TORCH, 0x7E), (_TORCH_OLD, 0x7F), (_ML, 0x7F)]),
    ("32", "e4m3fnuz", _INF, {("nearest-even", "nonsaturating"): 0x80}, [(_ML, 0x80)]),
    ("33", "e4m3fn", _NAN, {("nearest-even", "saturate"): 0x7F},
     [(_TORCH, 0x7F), (_TORCH_OLD, 0x7F), (_ML, 0x7F)]),
    ("33", "e4m3fnuz", _NAN, {("nearest-even", "nonsaturating"): 0x80}, [(_ML, 0x80)]),
    ("34", "e4m3fn", 248.0, {("nearest-even", "saturate"): 0x78}, [(_TORCH, 0x78), (_ML, 0x78)]),
    ("34", "e4m3fnuz", 248.0, {("nearest-even", "nonsaturating"): 0x80,
                               ("nearest-even", "saturate"): 0x7F}, [(_ML, 0x80)]),
    ("35", "e4m3fn", -0.0, {("nearest-even", "saturate"): 0x80}, [(_TORCH, 0x80), (_ML, 0x80)]),
    ("35", "e4m3fnuz", -0.0, {("nearest-even", "saturate"): 0x00}, [(_ML, 0x00)]),
    ("36", "e4m3fn", 2.0**-10, {("nearest-even", "saturate"): 0x00},
     [(_TORCH, 0x00), (_ML, 0x00)]),
    ("36", "e4m3fnuz", 2.0**-10, {("nearest-even", "saturate"): 0x01}, [(_ML, 0x01)]),
    ("37", "e5m2", 61439.0, {("nearest-even", "nonsaturating"): 0x7B,
                             ("nearest-even", "saturate"): 0x7B}, [(_ML, 0x7B)]),
    ("37", "e5m2", 61440.0, {("nearest-even", "nonsaturating"): 0x7C,
                             ("nearest-even", "saturate"): 0x7B}, [(_ML, 0x7C)]),
    ("37", "e5m2", 70000.0, {("nearest-even", "nonsaturating"): 0x7C}, [(_ML, 0x7C)]),
)


def element_cases() -> list[dict[str, object]]:
    cases: list[dict[str, object]] = []
    for vector, name, x, ours, theirs in _CASES:
        fmt = get_format(name)
        targets: list[dict[str, object]] = []
        for (rounding, overflow), code in ours.items():
            got = int(fmt.encode(x, rounding=rounding, overflow=overflow))
            if got != code:  # the research's value is the contract: never write a wrong vector
                raise AssertionError(f"#{vector} {name} {x!r}: mxformats gives {got:#x}")
            targets.append({"target": {"format": name, "rounding": rounding,
                                       "overflow": overflow}, "expected": code_hex(fmt, code)})
        if not ours:
            targets.append({"target": {"format": name}, "expected": "error"})
        targets += [{"target": t, "expected": code_hex(fmt, c)} for t, c in theirs]
        cases.append({"id": f"#{vector}", "format": name, "input": hex_float(x),
                      "results": targets})
    return cases


def fnuz_case() -> dict[str, object]:
    """#38: vLLM's e4m3fn -> e4m3fnuz bit trick (``mxformats.e4m3fn_to_fnuz``)."""
    codes = np.array([0x80, 0x7E, 0x7F, 0x01], dtype=np.uint8)
    out, scale = e4m3fn_to_fnuz(codes, np.float32(1.0))
    values = get_format("e4m3fnuz").decode(out).astype(np.float32) * scale
    expected = [0x00, 0x7E, 0x7F, 0x01]
    if out.tolist() != expected:
        raise AssertionError(f"#38: e4m3fn_to_fnuz gives {out.tolist()}")
    return {
        "id": "#38",
        "target": {"function": "mxformats.e4m3fn_to_fnuz", "mirrors": "vLLM 0.33 "
                   "normalize_e4m3fn_to_e4m3fnuz"},
        "codes": [code_hex(E4M3FN, int(c)) for c in codes],
        "expected_codes": [code_hex(E4M3FN, c) for c in expected],
        "expected_scale": hex_float(float(scale)),
        "expected_values": [hex_float(float(v)) for v in values],
        "note": "0x7F (NaN) becomes 240, x2 = 480: NaN is lost",
    }


def pages() -> dict[str, str]:
    header = {
        "schema_version": SCHEMA_VERSION,
        "op": "encode",
        "generator": "python -m mxformats.specgen",
        "description": (
            "formats.md §6.4-6.5, vectors 23-38: element conversions. Each result names its "
            "target: this package's encoder in a mode, a library and version (asserted against "
            "ml_dtypes 0.6.0), or documentation_only (torch 2.14.1 and <= 2.11 as the research "
            "executed or read them). 'error': the input has no encoding and is refused."
        ),
    }
    return {"vectors/research/elements.json": json_file(header, [*element_cases(), fnuz_case()])}
