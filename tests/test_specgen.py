"""``python -m mxformats.specgen --check``: the CI step that keeps spec/ equal to the code. Its
file comparison and exit code are tested on a small stand-in for the generated files, so a
check that misses an edited or a deleted file, or exits 0 on a stale folder, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from mxformats import specgen

FILES = {"a.md": "alpha\n", "vectors/b.json": "{}\n", "c.md": "gamma\n"}


@pytest.fixture
def spec_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder written by ``specgen.main`` with ``generate`` returning :data:`FILES`."""
    monkeypatch.setattr(specgen, "generate", lambda: dict(FILES))
    assert specgen.main(["--out", str(tmp_path)]) == 0
    assert {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()} == set(FILES)
    return tmp_path


def test_check_passes_a_current_folder(spec_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert specgen.check(spec_dir) == []
    assert specgen.main(["--check", "--out", str(spec_dir)]) == 0
    assert "3 files current" in capsys.readouterr().out


def test_check_names_an_edited_and_a_missing_file(
    spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (spec_dir / "a.md").write_text("alphA\n")  # same size, one byte differs
    (spec_dir / "vectors" / "b.json").unlink()
    (spec_dir / "extra.md").write_text("not generated\n")  # not generated: not checked
    assert specgen.check(spec_dir) == ["a.md", "vectors/b.json"]
    assert specgen.main(["--check", "--out", str(spec_dir)]) == 1
    err = capsys.readouterr().err
    assert f"stale: {spec_dir / 'a.md'}" in err and f"stale: {spec_dir / 'vectors/b.json'}" in err
