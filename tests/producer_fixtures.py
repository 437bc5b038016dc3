"""The producer checkpoints of tests/data/producers/, read with mxformats' strict reader."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType

import numpy as np

from mxformats.tensorfile import read_index, read_safetensors

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"


@cache
def checkpoint(name: str) -> Mapping[str, np.ndarray]:
    """Every tensor of a checkpoint, found through its index (a module may span shards).

    Cached for the session, so read-only (mapping and arrays): a test that wrote into it would
    change what every later test reads."""
    folder = PRODUCERS / name
    index = read_index(folder)
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(index.values())):
        tensors.update(read_safetensors(folder / shard))
    assert set(tensors) == set(index), f"{name}: index and shards disagree"
    for array in tensors.values():
        array.flags.writeable = False
    return MappingProxyType(tensors)
