"""compare_profiles: each MX producer profile's bytes for one block, against "ocp".

Expected bytes are the vectors of spec/sources.md §6 (numbers in comments).
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mxformats.compare import ProfileComparison, compare_profiles

ISSUE_6054 = [6, 5, 0.25, 0.75]  # vector 16: nearest-even vs round-half-up vs CEIL


@pytest.fixture(scope="module")
def issue_6054() -> ProfileComparison:
    return compare_profiles(ISSUE_6054)


def test_baseline_first_and_every_producer(issue_6054: ProfileComparison) -> None:
    from mxformats.registry import profiles

    producers = {p.name for p in profiles() if p.scheme == "mx" and p.kind == "producer"}
    names = [r.profile for r in issue_6054.results]
    assert names[0] == "ocp" and set(names) == producers


def test_issue_6054_block(issue_6054: ProfileComparison) -> None:
    ocp = issue_6054.result("ocp")
    assert ocp.scales == (0x7F,) and ocp.codes[:4].tolist() == [0x7, 0x6, 0x0, 0x2]
    assert ocp.decoded[:4].tolist() == [6.0, 4.0, 0.0, 1.0]
    assert not ocp.differs
    ceil = issue_6054.result("torchao-ceil")  # CEIL: 0x80 [5 4 0 1]
    assert ceil.scales == (0x80,) and ceil.codes[:4].tolist() == [0x5, 0x4, 0x0, 0x1]
    assert ceil.scale_differs == (0,) and ceil.code_differs == (0, 1, 3)
    floor = issue_6054.result("torchao-floor")
    assert not floor.differs
    half_up = issue_6054.result("quark-triton")  # round-half-up: [7 7 1 2]
    assert half_up.codes[:4].tolist() == [0x7, 0x7, 0x1, 0x2]
    assert half_up.code_differs == (1, 2)
    differing = issue_6054.differing()
    assert "torchao-ceil" in differing and "quark-triton" in differing
    assert "torchao-floor" not in differing and "ocp" not in differing


def test_even_scale_rule_block() -> None:
    c = compare_profiles([7.0, 1.0, 0.3, -2.9], profiles=["torchao-even", "quark"])  # vector 11
    assert [r.profile for r in c.results] == ["ocp", "torchao-even", "quark"]
    assert c.result("ocp").codes[:4].tolist() == [0x7, 0x2, 0x1, 0xD]
    for name in ("torchao-even", "quark"):
        r = c.result(name)
        assert r.scales == (0x80,) and r.codes[:4].tolist() == [0x6, 0x1, 0x0, 0xB]


def test_json(issue_6054: ProfileComparison) -> None:
    data = json.loads(issue_6054.json())
    assert data["schema_version"] == 1 and data["baseline"] == "ocp"
    assert data["block_size"] == 32 and len(data["input"]) == 32
    assert data["shown_elements"][:4] == [0, 1, 2, 3]
    ceil = next(p for p in data["profiles"] if p["profile"] == "torchao-ceil")
    assert ceil["scales"] == ["0x80"] and ceil["codes"][:2] == ["0x5", "0x4"]
    assert ceil["decoded"][0] == "0x1.8000000000000p+2"
    assert ceil["differs_from_baseline"] is True and ceil["code_differs"] == [0, 1, 3]


def test_table_highlights_differences(issue_6054: ProfileComparison) -> None:
    table = issue_6054.table()
    headers = [str(c.header) for c in table.columns]
    assert headers[:3] == ["profile", "≠ ocp", "scale"]
    assert headers[3].startswith("x[0]") and len(headers) == 3 + 4  # only the typed elements
    names = [str(cell) for cell in table.columns[0]._cells]
    row = names.index("torchao-ceil")
    assert str(table.columns[1]._cells[row]) == "yes"
    scale_cell = table.columns[2]._cells[row]
    assert str(scale_cell) == "0x80\n2^1" and "red" in str(scale_cell.spans[0].style)
    changed = table.columns[3]._cells[row]  # element 0: 6 -> 0x5 at scale 2 (ocp: 0x7)
    assert str(changed) == "0x5\n6" and "red" in str(changed.style)
    same = table.columns[5]._cells[row]  # element 2: 0.25 -> 0x0 in both
    assert str(same) == "0x0\n0" and not same.style
    text = str(issue_6054)
    assert "torchao-ceil" in text and "0x80" in text
    # vLLM's kernel takes bfloat16/float16 only: it is given bfloat16 and says so (issue 17).
    assert "vllm was given bfloat16 input (it does not take float32)" in text
    assert issue_6054.refused() == [] and "vllm" not in issue_6054.differing()
    assert issue_6054.result("vllm").input_dtype == "bfloat16"
    assert issue_6054.result("ocp").input_dtype == "float32"


def test_npy_file_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "w.npy"
    rows = np.zeros((2, 64), dtype=np.float32)
    rows[0, :4] = ISSUE_6054
    rows[1, 32] = 7.0
    np.save(path, rows)
    c = compare_profiles(path, profiles=["torchao-ceil"])
    assert c.result("ocp").scales == (0x7F, 0x00, 0x00, 0x7F)
    assert c.values.shape == (2, 64)


def test_dtype_rounding_note_and_bfloat16() -> None:
    c = compare_profiles([1.0000001, 6.0], profiles=["ocp"], dtype="bfloat16")
    assert c.dtype == "bfloat16"
    assert any("rounded to bfloat16" in n for n in c.notes)
    assert c.values[0, 0] == float(np.asarray(1.0000001).astype(ml_dtypes.bfloat16))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown mx producer profile 'nope'"):
        compare_profiles([1.0], profiles=["nope"])
    with pytest.raises(ValueError, match="not an MX element"):
        compare_profiles([1.0], elem="int4")
    with pytest.raises(ValueError, match="dtype"):
        compare_profiles([1.0], dtype="int8")
    with pytest.raises(ValueError, match="no values"):
        compare_profiles([])
    with pytest.raises(ValueError, match="floating-point"):
        compare_profiles(np.array(["a"]))


def test_docstring_examples() -> None:
    import doctest

    import mxformats.compare

    result = doctest.testmod(mxformats.compare, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0
