"""``mxformats.testing.sparse``: every full-size layout it writes (here cut to 3 layers × 8
experts) is a checkpoint the validator takes at ``--level structure`` in the declared format,
with nothing wrong but the modules a shard boundary splits, and shards of the declared size."""

from __future__ import annotations

from pathlib import Path

import pytest

from mxformats.testing.sparse import KIMI_K26_TEXT, LAYOUTS, write_full_size_layout
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.runner import exit_code, validate

SMALL = {**KIMI_K26_TEXT, "num_hidden_layers": 3, "n_routed_experts": 8, "vocab_size": 4096}
#: The validator's format name for each layout.
FORMAT = {"quark-mxfp4": "quark-mxfp4", "fp8-block-deepseek": "fp8-block",
          "modelopt-nvfp4": "modelopt-nvfp4"}


@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_layout_validates_clean_at_structure(fmt: str, tmp_path: Path) -> None:
    info = write_full_size_layout(tmp_path / fmt, shards=3, text=SMALL, fmt=fmt)
    report = validate(info["path"], Options(level=Level.STRUCTURE, workers=1))
    assert report.format == FORMAT[fmt]
    assert exit_code(report) == 0
    assert {f.check.id for f in report.findings} <= {"MODULE_SPLIT"}, [
        f.to_json() for f in report.findings]
    shards = sorted(Path(info["path"]).glob("*.safetensors"))
    assert len(shards) == info["shards"] == 3
    assert sum(s.stat().st_size for s in shards) == info["declared_bytes"]
