"""``mxformats.text``: the exact and short renderings of values and codes, against values
written out by hand (the spec files they generate are no oracle for them)."""

from __future__ import annotations

import math

import pytest

from mxformats.formats import E2M1, E4M3FN
from mxformats.text import code_hex, fields, hex_float, layout, short_float


@pytest.mark.parametrize(("value", "short", "exact"), [
    (0.0, "0", "0x0.0p+0"),
    (-0.0, "-0", "-0x0.0p+0"),
    (math.nan, "NaN", "nan"),
    (math.inf, "+Inf", "inf"),
    (-math.inf, "-Inf", "-inf"),
    (448.0, "448", "0x1.c000000000000p+8"),
    (0.3, "0.3", "0x1.3333333333333p-2"),
    # the power-of-two form on both sides of its bounds, 2^-10 and 2^20
    (2.0**-10, "0.0009765625", "0x1.0000000000000p-10"),
    (2.0**-11, "2^-11", "0x1.0000000000000p-11"),
    (-3 * 2.0**-12, "-1.5·2^-11", "-0x1.8000000000000p-11"),
    (2.0**20 - 1, "1048575", "0x1.ffffe00000000p+19"),
    (2.0**20, "2^20", "0x1.0000000000000p+20"),
    (1.5 * 2**20, "1.5·2^20", "0x1.8000000000000p+20"),
])
def test_short_and_exact_floats(value: float, short: str, exact: str) -> None:
    assert short_float(value) == short
    assert hex_float(value) == exact


def test_codes_layouts_and_fields() -> None:
    assert (code_hex(E4M3FN, 0x7E), code_hex(E2M1, 7)) == ("0x7E", "0x7")
    assert (layout(E4M3FN), layout(E2M1)) == ("S EEEE MMM", "S EE M")
    assert (fields(E4M3FN, 0x7E), fields(E2M1, 7)) == ("0.1111.110", "0.11.1")
