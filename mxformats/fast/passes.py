"""Where a module's one-pass ``--source`` reproduction runs: the interface the format
descriptors call (:class:`OnePass`), and its compiled CPU implementation (:data:`COMPILED`).

Every method answers the :class:`~mxformats.fast.moments.Moments` of a module's stored tensors,
decoded by the consumer, against its source weight, when every stored byte is what the
producer profile writes and every value is finite; None otherwise (the caller's numpy path
then computes the module and says where it differs). :data:`COMPILED` is the numba passes of
:mod:`mxformats.fast`; ``mxformats.kernels.triton.reproduce.DevicePasses`` the same on a torch
device (``mxformats validate --device``). Both give the same moments bits
(:mod:`mxformats.fast.moments` defines them), so a report does not depend on which ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mxformats.fast.reproduce import reproduce_mxfp4
from mxformats.fast.reproduce_fp8_block import reproduce_fp8_block
from mxformats.fast.reproduce_int4 import reproduce_int4, reproduce_w4a8
from mxformats.fast.reproduce_nvfp4 import reproduce_nvfp4

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

__all__ = ["COMPILED", "CompiledPasses", "OnePass"]


class OnePass(Protocol):
    """One module's reproduction per format, as the descriptors call it."""

    def reproduce_mxfp4(self, w: NDArray[Any], codes: NDArray[Any], scales: NDArray[Any],
                        profile: str, consumer: str | None) -> Moments | None: ...

    def reproduce_nvfp4(self, w: NDArray[Any], packed: NDArray[Any], scales: NDArray[Any],
                        global_scale: NDArray[Any], profile: str, consumer: str | None
                        ) -> Moments | None: ...

    def reproduce_fp8_block(self, w: NDArray[Any], codes: NDArray[Any], scales: NDArray[Any],
                            block: tuple[int, int], profile: str,
                            consumer: str | None) -> Moments | None: ...

    def reproduce_int4(self, w: NDArray[Any], packed: NDArray[Any], scales: NDArray[Any],
                       group: int | None, profile: str, consumer: str | None
                       ) -> Moments | None: ...

    def reproduce_w4a8(self, w: NDArray[Any], weight: NDArray[Any], weight_scale: NDArray[Any],
                       weight_scale_2: NDArray[Any], profile: str,
                       consumer: str | None) -> Moments | None: ...


class CompiledPasses:
    """The compiled CPU passes (each None without numba)."""

    reproduce_mxfp4 = staticmethod(reproduce_mxfp4)
    reproduce_nvfp4 = staticmethod(reproduce_nvfp4)
    reproduce_fp8_block = staticmethod(reproduce_fp8_block)
    reproduce_int4 = staticmethod(reproduce_int4)
    reproduce_w4a8 = staticmethod(reproduce_w4a8)


#: The passes a run without ``--device`` uses.
COMPILED: OnePass = CompiledPasses()
