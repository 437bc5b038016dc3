"""The FP8 block scale dtypes the validator accepts are the loaders': vLLM creates each block-scale
parameter float32 (``create_fp8_scale_parameter``, the MoE methods' ``create_weights``) and its
``weight_loader`` copies the file's tensor in with ``Tensor.copy_`` (``BasevLLMParameter.
_assert_and_load``): a dtype is accepted exactly when that copy keeps every value it can hold
(issue 26, section 2). The copy is run here with torch, as the loader runs it."""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
import torch

from mxformats.validate.descriptors import DESCRIPTORS
from mxformats.validate.descriptors.fp8_block import SCALE_DTYPES, FP8BlockDescriptor

FP8 = [d for d in DESCRIPTORS if isinstance(d, FP8BlockDescriptor)]
TORCH = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
         "F64": torch.float64}
NUMPY = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16, "F64": np.float64}


def _every_kind(dtype: str) -> np.ndarray:
    """Values of ``dtype`` at its edges (largest, smallest normal and subnormal) and a spread
    of ordinary scales, as float64."""
    info = ml_dtypes.finfo(NUMPY[dtype])
    rng = np.random.default_rng(26)
    ordinary = rng.uniform(1e-6, 1.0, 4096).astype(NUMPY[dtype])
    edges = np.array([float(info.max), float(info.smallest_normal),
                      float(info.smallest_subnormal), 1e-4 / 448, 2.0**-22, 2.0**-7],
                     dtype=NUMPY[dtype])
    return np.concatenate([ordinary, edges]).astype(np.float64)


def _loaded_exactly(dtype: str) -> bool:
    """Whether the loader's float32 parameter holds, after ``param.data.copy_(loaded)``,
    exactly the values the file stored in ``dtype`` (raw float64 bits compared)."""
    stored = torch.from_numpy(_every_kind(dtype)).to(TORCH[dtype])
    param = torch.empty(stored.shape, dtype=torch.float32)
    param.data.copy_(stored)
    return bool(torch.equal(param.to(torch.float64).view(torch.int64),
                            stored.to(torch.float64).view(torch.int64)))


@pytest.mark.parametrize("desc", FP8, ids=lambda d: d.format.value)
def test_accepted_scale_dtypes_are_those_the_loader_copies_exactly(
        desc: FP8BlockDescriptor) -> None:
    assert desc.loader_scale_dtype == "F32"
    assert "create_weights" in desc.loader_scale_source
    accepted = desc.scale_dtypes()
    assert accepted[0] == desc.scale_dtype
    assert set(accepted) == {d for d in TORCH if _loaded_exactly(d)}
    assert set(accepted) <= set(SCALE_DTYPES)
    spec = desc.expected_tensors(SimpleNamespace(quant_config={}), 256, 384)  # type: ignore[arg-type]
    assert spec[desc.scale_name][0] == accepted


@pytest.mark.parametrize("desc", FP8, ids=lambda d: d.format.value)
def test_note_only_where_the_dtype_rounds_the_producers_scales(
        desc: FP8BlockDescriptor) -> None:
    """A note (QUANT_DTYPE_UNUSUAL) for a dtype that cannot hold the producer's scales, with
    the bound BF16 or F16 rounding puts on the decoded weights; none for the producer's own
    dtype or a wider one."""
    for dtype in desc.scale_dtypes():
        note = desc.dtype_note(desc.scale_name, dtype)
        producer = _every_kind(desc.scale_dtype)
        with np.errstate(over="ignore"):  # BF16's largest overflows F16: that rounds too
            rounds = not np.array_equal(producer.astype(NUMPY[dtype]).astype(np.float64),
                                        producer)
        assert (note is not None) == rounds, (dtype, note)
        if note is not None:
            bits = SCALE_DTYPES[dtype][0]
            assert f"2^-{bits}" in note
            # the bound holds for every scale in the dtype's normal range
            info = ml_dtypes.finfo(NUMPY[dtype])
            normal = producer[(producer >= float(info.smallest_normal))
                              & (producer <= float(info.max))]
            moved = np.abs(normal.astype(NUMPY[dtype]).astype(np.float64) - normal) / normal
            assert moved.max() <= 2.0**-bits
    assert desc.dtype_note("weight", "BF16") is None
