"""The layout group's shortcut (``layout._settled``): a group of expected modules of one
signature (every routed expert's gate and up projections, say) shown finding-free at once
gives exactly the findings of judging each module alone, also when one expert of a layer is
odd. The reference is the same run with the shortcut off (``_settled`` always False)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mxformats.testing.sparse import KIMI_K26_TEXT, LAYOUTS, write_full_size_layout
from mxformats.validate import files, layout
from mxformats.validate.findings import Finding, Level
from mxformats.validate.model import Checkpoint, Module, Options

SMALL = {**KIMI_K26_TEXT, "num_hidden_layers": 3, "n_routed_experts": 8, "vocab_size": 4096}
OPTS = Options(level=Level.STRUCTURE, workers=1)
#: the odd expert: one of layer 1's (layers 1 and 2 are MoE)
ODD = "model.layers.1.mlp.experts.3.up_proj"


def _scale(mod: Module) -> str:
    return min(p for p, r in mod.tensors.items() if p != "weight" and len(r.shape) == 2)


def _retyped(ckpt: Checkpoint, mod: Module) -> dict[str, Any]:
    p = _scale(mod)
    return {**mod.tensors, p: mod.tensors[p]._replace(dtype="F64")}


def _reshaped(ckpt: Checkpoint, mod: Module) -> dict[str, Any]:
    p = _scale(mod)
    ref = mod.tensors[p]
    return {**mod.tensors, p: ref._replace(shape=(ref.shape[0] + 1, *ref.shape[1:]))}


def _scale_dropped(ckpt: Checkpoint, mod: Module) -> dict[str, Any]:
    return {p: r for p, r in mod.tensors.items() if p != _scale(mod)}


def _extra_tensor(ckpt: Checkpoint, mod: Module) -> dict[str, Any]:
    w = mod.tensors["weight"]
    return {**mod.tensors, "weight_zero_point": w._replace(name=f"{ODD}.weight_zero_point")}


def _stored_bf16(ckpt: Checkpoint, mod: Module) -> dict[str, Any]:
    shape = ckpt.expected[ODD].shape
    assert shape is not None
    return {"weight": mod.tensors["weight"]._replace(dtype="BF16", shape=shape)}


def _excluded(ckpt: Checkpoint, mod: Module) -> dict[str, Any]:
    ckpt.exclude = [*ckpt.exclude, ODD]
    return dict(mod.tensors)


#: each makes the odd expert differ from its group in one way (returning its new tensors)
ODDITIES: dict[str, Callable[[Checkpoint, Module], dict[str, Any]]] = {
    "scale_dtype": _retyped,
    "scale_shape": _reshaped,
    "scale_missing": _scale_dropped,
    "tensor_unexpected": _extra_tensor,
    "stored_bf16": _stored_bf16,
    "excluded": _excluded,
}
#: the finding each oddity gives the odd expert
EXPECTED_CHECK = {
    "scale_dtype": "QUANT_DTYPE",
    "scale_shape": "QUANT_SHAPE",
    "scale_missing": "QUANT_TENSOR_MISSING",
    "tensor_unexpected": "QUANT_TENSOR_UNEXPECTED",
    "stored_bf16": "NOT_EXCLUDED_UNQUANTIZED",
    "excluded": "EXCLUDED_QUANTIZED",
}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    return {fmt: write_full_size_layout(root / fmt, shards=3, text=SMALL, fmt=fmt)["path"]
            for fmt in LAYOUTS}


def _findings(ckpt: Checkpoint) -> list[Finding]:
    return list(layout.run(ckpt, OPTS))


def _one_by_one(ckpt: Checkpoint, monkeypatch: pytest.MonkeyPatch) -> list[Finding]:
    with monkeypatch.context() as m:
        m.setattr(layout, "_settled", lambda *args: False)
        return _findings(ckpt)


@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_clean_layout_settles_the_expert_groups(fmt: str, layouts: dict[str, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut is taken (the expert groups settle), and changes nothing."""
    ckpt = files.load(layouts[fmt], OPTS).ckpt
    assert ckpt is not None
    expectations = layout._Expectations(ckpt, OPTS)
    left = list(layout._unsettled(ckpt, layout._descriptor(ckpt), expectations))
    assert not [e.name for e in left if e.kind == "expert"]
    assert len(left) < len(ckpt.expected) / 2
    assert _findings(ckpt) == _one_by_one(ckpt, monkeypatch)


@pytest.mark.parametrize("oddity", sorted(ODDITIES))
@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_one_odd_expert_gets_exactly_its_findings(fmt: str, oddity: str,
                                                  layouts: dict[str, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = files.load(layouts[fmt], OPTS).ckpt
    assert ckpt is not None
    ckpt.modules[ODD] = Module(ODD, ODDITIES[oddity](ckpt, ckpt.modules[ODD]))
    found = _findings(ckpt)
    assert found == _one_by_one(ckpt, monkeypatch)
    odd = [f for f in found if f.tensor is not None and f.tensor.startswith(f"{ODD}.")]
    # a BF16 expert loads where the format needs no exclude entry for it (DeepSeek's FP8)
    assert ckpt.descriptor is not None
    quiet = oddity == "stored_bf16" and not ckpt.descriptor.needs_exclude_entries
    expected = [] if quiet else [EXPECTED_CHECK[oddity]]
    assert [f.check.id for f in odd] == expected, [f.message for f in found]
