"""``mxformats validate --source --device``: one module's reproduction on a torch device, by the
Triton kernels.

:class:`DevicePasses` answers what :class:`mxformats.fast.passes.CompiledPasses` answers, with
the same arguments and the same contract: the :class:`~mxformats.fast.moments.Moments` of the
checkpoint's tensors, decoded by the consumer, against the source weight, when every stored
byte is what the producer profile writes from that weight and every value is finite; None
otherwise, and the caller's numpy path computes the module (the same bytes and moments, and
the messages that say where they differ). On the device: the source and the checkpoint's
tensors are copied there (pinned host memory, on the pass's own stream), the profile's Triton
quantizer re-quantizes the source, the bytes are compared there, the consumer's Triton
dequantizer decodes them and :func:`.moments.moments` reduces the statistics; a yes or no
and the 112 lane totals come back.

The steps are each format's producer as its descriptor's ``produce`` writes it (the same
function of :mod:`mxformats.kernels.triton` the reference defines, by profile name), so no
format's arithmetic is restated here. With ``TRITON_INTERPRET=1`` the device ``cpu`` runs the
same kernels in Triton's interpreter (how CI tests this path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import torch
from numpy.typing import NDArray

from mxformats import codec
from mxformats.fast.moments import Moments
from mxformats.formats import E2M1
from mxformats.schemes import nvfp4 as reference_nvfp4
from mxformats.schemes import w4a8 as reference_w4a8
from mxformats.schemes.fp8_block import CONSUMERS as FP8_BLOCK_CONSUMERS
from mxformats.schemes.int4 import PRODUCERS as INT4_PRODUCERS

from . import fp8, fp8_block, int4, mx, nvfp4
from .int4 import FLOAT_KINDS, host_tensor
from .moments import moments

__all__ = ["DevicePasses"]

#: numpy dtype names of the torch dtypes the producers write
_NAMES = {torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64",
          torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: the errors by which a Triton front end refuses an input or a profile the reference takes
#: (NaN or Inf, a profile the kernels do not claim): the numpy path decides those modules
_REFUSED = (ValueError, TypeError, NotImplementedError)


def _tensors(record: Any) -> tuple[torch.Tensor, ...]:
    """The tensors of a reference record a Triton front end returns (typed with numpy arrays,
    holding the device's tensors)."""
    return tuple(record)


class DevicePasses:
    """The one-pass reproductions on ``device`` (a CUDA or ROCm device, or the CPU under
    ``TRITON_INTERPRET=1``). Methods as :class:`mxformats.fast.passes.CompiledPasses`'s."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _run(self, step: Callable[[], Moments | None]) -> Moments | None:
        """``step`` on this pass's stream (its copies and kernels overlap another worker's on
        the same device); None where a Triton front end refuses the input."""
        try:
            if self._stream is None:
                return step()
            with torch.cuda.stream(self._stream):
                found = step()
            self._stream.synchronize()
            return found
        except _REFUSED:
            return None

    def _to_device(self, a: NDArray[Any]) -> torch.Tensor:
        """``a`` on the device, its bytes unchanged (bfloat16 as torch's); through pinned host
        memory on a GPU, so the copy is asynchronous on the pass's stream."""
        t = host_tensor(a)
        if self.device.type == "cpu":
            return t
        return t.pin_memory().to(self.device, non_blocking=True)

    def _source(self, w: NDArray[Any]) -> torch.Tensor | None:
        """The 2-D float source on the device; None for a dtype the kernels do not take."""
        if w.ndim != 2 or w.dtype.name not in {_NAMES[d] for d in FLOAT_KINDS}:
            return None
        return self._to_device(w)

    def _same(self, ours: torch.Tensor, theirs: NDArray[Any]) -> bool:
        """Whether the checkpoint's ``theirs`` is ``ours``: dtype, shape and bytes, compared
        on the device."""
        if (_NAMES.get(ours.dtype) != theirs.dtype.name
                or tuple(ours.shape) != tuple(theirs.shape)):
            return False
        return bool(torch.equal(ours.contiguous(), self._to_device(theirs)))

    def reproduce_mxfp4(self, w: NDArray[Any], codes: NDArray[Any], scales: NDArray[Any],
                        profile: str, consumer: str | None) -> Moments | None:
        """MXFP4 (``quantize_mx`` of ``profile``; ``dequantize_mx`` of ``consumer``)."""
        def step() -> Moments | None:
            x = self._source(w)
            if x is None or consumer is None:
                return None
            ours, own_scales = _tensors(mx.quantize_mx(x, E2M1, profile=profile))
            if not (self._same(ours, codes) and self._same(own_scales, scales)):
                return None
            return moments(mx.dequantize_mx(ours, own_scales, E2M1, profile=consumer), x)
        return self._run(step)

    def reproduce_nvfp4(self, w: NDArray[Any], packed: NDArray[Any], scales: NDArray[Any],
                        global_scale: NDArray[Any], profile: str, consumer: str | None
                        ) -> Moments | None:
        """NVFP4 calibrated alone (``quantize_nvfp4`` of ``profile``: a module whose stored
        global scale is its fused sibling's differs, and the numpy path reads the sibling);
        decoded by ``consumer`` of the producer's global-scale form."""
        producer = reference_nvfp4.PRODUCERS.get(profile)
        reader = reference_nvfp4.CONSUMERS.get(consumer or "")
        if (producer is None or reader is None or reader.global_form != producer.global_form
                or scales.dtype != ml_dtypes.float8_e4m3fn):
            return None

        def step() -> Moments | None:
            x = self._source(w)
            if x is None:
                return None
            ours, own_scales, own_global = _tensors(nvfp4.quantize_nvfp4(x, profile=profile))
            pairs = ours.reshape(*ours.shape[:-1], -1, 2)
            both = pairs[..., 0] | (pairs[..., 1] << 4)  # element 2k in the low nibble
            if not (self._same(both, packed) and self._same(own_scales, scales.view(np.uint8))
                    and self._same(own_global, np.asarray(global_scale))):
                return None
            return moments(nvfp4.dequantize_nvfp4(ours, own_scales, own_global,
                                                  profile=consumer), x)
        return self._run(step)

    def reproduce_fp8_block(self, w: NDArray[Any], codes: NDArray[Any], scales: NDArray[Any],
                            block: tuple[int, int], profile: str,
                            consumer: str | None) -> Moments | None:
        """FP8 block (``quantize_fp8_block`` of ``profile`` in ``block`` tiles), decoded as
        vLLM's ``scaled_dequantize`` (every consumer of
        :data:`mxformats.schemes.fp8_block.CONSUMERS`)."""
        if consumer not in FP8_BLOCK_CONSUMERS:
            return None

        def step() -> Moments | None:
            x = self._source(w)
            if x is None:
                return None
            ours, own_scales = _tensors(fp8_block.quantize_fp8_block(x, block=block,
                                                                     profile=profile))
            if not (self._same(ours, codes) and self._same(own_scales, scales)):
                return None
            return moments(fp8_block.dequantize_fp8_block(ours, own_scales, block=block,
                                                          profile=profile), x)
        return self._run(step)

    def reproduce_int4(self, w: NDArray[Any], packed: NDArray[Any], scales: NDArray[Any],
                       group: int | None, profile: str, consumer: str | None
                       ) -> Moments | None:
        """INT4 (``quantize_int4`` of ``profile`` at ``group``, packed in its layout),
        decoded by ``consumer``."""
        producer = INT4_PRODUCERS.get(profile)
        if producer is None or consumer is None:
            return None

        def step() -> Moments | None:
            x = self._source(w)
            if x is None:
                return None
            q, s = _tensors(int4.quantize_int4(x, group_size=group, profile=profile))
            if not (self._same(int4.pack_int4(q, layout=producer.layout), packed)
                    and self._same(s, scales)):
                return None
            return moments(int4.dequantize_int4(q, s, group_size=group, profile=consumer), x)
        return self._run(step)

    def reproduce_w4a8(self, w: NDArray[Any], weight: NDArray[Any], weight_scale: NDArray[Any],
                       weight_scale_2: NDArray[Any], profile: str,
                       consumer: str | None) -> Moments | None:
        """Quark W4A8 (:func:`mxformats.schemes.w4a8.quantize_w4a8`'s two stages:
        ``quantize_fp8``, the FP8 codes decoded by the element format's table,
        ``quantize_int4`` per row, ``pack_int4``), decoded as vLLM folds the scales. The
        checkpoint's ``weight_scale`` is read as the compiled pass reads it: its first value
        as float32."""
        producer = reference_w4a8.PRODUCERS.get(profile)
        reader = reference_w4a8.CONSUMERS.get(consumer or "")
        if producer is None or reader is None or reader.layout != producer.layout \
                or weight_scale.size == 0:
            return None
        s1 = np.float32(weight_scale.reshape(-1)[0])
        table = codec.decode(producer.fp8_format, np.arange(256, dtype=np.uint8), np.float32)

        def step() -> Moments | None:
            x = self._source(w)
            if x is None:
                return None
            codes, scale = fp8.quantize_fp8(x, producer.fp8_format, profile=producer.fp8_profile)
            w1 = self._to_device(table)[codes.long()]
            q, s2 = _tensors(int4.quantize_int4(w1, group_size=None, axis=1,
                                                profile=producer.int4_profile))
            ours = int4.pack_int4(q, layout=producer.layout, axis=1)
            if not (self._same(ours, weight) and self._same(scale.reshape(1), s1.reshape(1))
                    and self._same(s2.reshape(-1).to(torch.float32), weight_scale_2)):
                return None
            return moments(fp8.dequantize_w4a8(ours, scale, s2.reshape(-1)), x)
        return self._run(step)
