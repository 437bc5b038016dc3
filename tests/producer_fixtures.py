"""The producer checkpoints of tests/data/producers/, read with mxformats' strict reader."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from mxformats.tensorfile import read_index, read_safetensors

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"


@cache
def checkpoint(name: str) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint, found through its index (a module may span shards)."""
    folder = PRODUCERS / name
    index = read_index(folder)
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(index.values())):
        tensors.update(read_safetensors(folder / shard))
    assert set(tensors) == set(index), f"{name}: index and shards disagree"
    return tensors
