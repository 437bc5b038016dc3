"""The decoded values of one checkpoint tensor: :func:`read_tensor`.

Built on the validator's reader: :func:`mxformats.validate.files.load` reads the config, the
index and the shard headers (strictly, as ``mxformats validate`` does, with the same format
detection), :meth:`~mxformats.validate.model.Checkpoint.read` reads the module's tensors, and
the format's descriptor (:mod:`mxformats.validate.descriptors`) decodes them with its
``Descriptor.consumer``: the default consumer of the producer the config names, from the
pairing table (:mod:`mxformats.pairing`).
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
    path: str | os.PathLike[str], name: str, *, dtype: DTypeLike = np.float32,
) -> NDArray[Any]:
    """The values of tensor ``name`` in the checkpoint at ``path`` (its folder, or one of its
    ``.safetensors`` files), decoded with its scales.

    ``name``: a quantized module's weight (``...experts.0.down_proj.weight``) or the module
    (``...down_proj``): its codes are decoded with its scales by the consumer the pairing table
    (``spec/profiles.md``) names for the producer of the format the ``quantization_config``
    declares, the same one ``mxformats inspect`` prints and ``--source`` measures against:
    Quark MXFP4 by ``quark-hip-bf16`` (vLLM's emulation calls Quark's ``dq_mxfp4``),
    compressed-tensors INT4 by compressed-tensors' ``decompress``, Quark W4A8 by vLLM's folded
    scales, FP8 block by vLLM's ``scaled_dequantize``, NVFP4 by its vLLM scheme. Any other
    tensor (a BF16 weight, a scale itself) is returned as stored. ``dtype`` (numpy, ml_dtypes
    or torch spelling) is the decoded values' type. ValueError when the folder cannot be read
    or its format has no decoder, KeyError for a tensor it does not hold."""
    from .validate.files import load
    from .validate.findings import Level
    from .validate.model import Options

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
    if ckpt.descriptor is None:
        raise ValueError(f"{name}: the checkpoint's format has no decoder")
    descriptor = ckpt.descriptor.for_module(ckpt, module_name)
    arrays = {p: ckpt.read(f"{module_name}.{p}") for p in module.tensors}
    codes = arrays[descriptor.weight_param]
    if "weight_shape" in arrays:
        cols = int(arrays["weight_shape"].reshape(-1)[-1])
    else:  # packed INT32 words hold eight codes, packed bytes two (FP8 bytes: one)
        cols = codes.shape[-1] * {4: 8, 1: 2 if codes.dtype == np.uint8 else 1}.get(
            codes.dtype.itemsize, 1)
    try:
        values = descriptor.dequantize(arrays, cols)
    except NotImplementedError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return np.asarray(values).astype(numpy_dtype(dtype))
