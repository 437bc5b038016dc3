"""The decoded values of one checkpoint tensor: :func:`read_tensor`.

Built on the validator's reader: :func:`mxformats.validate.files.load` reads the config, the
index and the shard headers (strictly, as ``mxformats validate`` does, with the same format
detection), :meth:`~mxformats.validate.model.Checkpoint.read` reads the module's tensors, and
the module is decoded with the consumer that reads what the config's producer writes
(:mod:`mxformats.pairing`), unless a consumer is named.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.containers import numpy_dtype

if TYPE_CHECKING:
    from numpy.typing import DTypeLike, NDArray

__all__ = ["read_tensor"]


def read_tensor(
    path: str | os.PathLike[str], name: str, *, consumer: str | None = None,
    dtype: DTypeLike = np.float32,
) -> NDArray[Any]:
    """The values of tensor ``name`` in the checkpoint at ``path`` (its folder, or one of its
    ``.safetensors`` files), decoded with its scales.

    ``name``: a quantized module's weight (``...experts.0.down_proj.weight``) or the module
    (``...down_proj``): its codes are decoded with its scales, as the consumer of the producer
    profile the ``quantization_config`` names does (Quark MXFP4 -> ``quark-hip-bf16``,
    compressed-tensors INT4 -> ``compressed-tensors``, Quark W4A8 -> vLLM's folded scales,
    FP8 block -> vLLM's ``scaled_dequantize``), or as ``consumer`` does. Any other tensor (a
    BF16 weight, a scale itself) is returned as stored. ``dtype`` (numpy, ml_dtypes or torch
    spelling) is the decoded values' type. ValueError when the folder cannot be read, KeyError
    for a tensor it does not hold."""
    from mxformats.pairing import consumer_for

    from .validate.files import load
    from .validate.findings import Level
    from .validate.identify import SCHEMES
    from .validate.model import Format, Options
    from .validate.reproduce import PROFILES, dequantize

    root = Path(path)
    loaded = load(root.parent if root.is_file() else root, Options(level=Level.STRUCTURE))
    ckpt = loaded.ckpt
    if ckpt is None:
        raise ValueError(f"cannot read the checkpoint {path}: {loaded.fatal}")
    module_name = name.removesuffix(".weight")
    module = ckpt.modules.get(module_name)
    if (name in ckpt.tensors and not name.endswith(".weight")) or module is None \
            or not module.quantized:
        if name not in ckpt.tensors:
            raise KeyError(f"{name!r} is not a tensor or module of {path}")
        return ckpt.read(name)  # stored as is: a BF16 weight, a scale
    arrays = {p: ckpt.read(f"{module_name}.{p}") for p in module.tensors}
    out = numpy_dtype(dtype)
    if ckpt.format is Format.FP8_BLOCK:
        from mxformats.schemes.fp8_block import dequantize_fp8_block

        block = (ckpt.quant_config or {}).get("weight_block_size") or (128, 128)
        return dequantize_fp8_block(arrays["weight"].view(np.uint8), arrays["weight_scale_inv"],
                                    block=tuple(block), profile="deepseek", dtype=out)
    if ckpt.format not in PROFILES:
        raise ValueError(f"{name}: the checkpoint's format {ckpt.format.value} is not one "
                         "mxformats decodes")
    scheme, producer = SCHEMES[ckpt.format], PROFILES[ckpt.format]
    chosen = consumer_for(scheme, consumer or producer)
    if "weight_shape" in arrays:
        cols = int(arrays["weight_shape"].reshape(-1)[-1])
    else:
        cols = arrays["weight"].shape[-1] * (8 if arrays["weight"].dtype == np.int32 else 2)
    values = dequantize(ckpt.format, arrays, cols,
                        consumer=None if scheme == "w4a8" else chosen)
    return values.astype(out)
