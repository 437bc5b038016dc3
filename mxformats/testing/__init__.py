"""Testing tools for quantizer and kernel authors.

* :func:`check_quantizer`, :func:`check_dequantizer`, :func:`check_int4_quantizer`
  (:mod:`mxformats.testing.harness`): run your function over the spec vectors, exhaustive
  sweeps, boundary blocks and Hypothesis cases, compare its bytes with the reference, and
  report the first input where they differ::

      from mxformats.testing import check_quantizer
      check_quantizer(my_quantize_mx, profile="ocp").raise_if_failed()

* :mod:`mxformats.testing.cases`: the TestFloat-style boundary generator behind them
  (values, MX blocks, INT4 groups, Hypothesis strategies), usable on its own.
* :func:`make_kimi_checkpoint` (:mod:`mxformats.testing.checkpoints`): tiny checkpoints laid
  out like the producers' (imported on first use).
"""

from __future__ import annotations

from typing import Any

from mxformats.testing.harness import (
    CheckReport,
    Mismatch,
    check_dequantizer,
    check_int4_quantizer,
    check_quantizer,
)

__all__ = [
    "CHECKPOINT_FORMATS",
    "CheckReport",
    "Mismatch",
    "bf16_twin_path",
    "check_dequantizer",
    "check_int4_quantizer",
    "check_quantizer",
    "make_kimi_checkpoint",
]

_CHECKPOINT_NAMES = ("CHECKPOINT_FORMATS", "bf16_twin_path", "default_recipe",
                     "make_kimi_checkpoint")


def __getattr__(name: str) -> Any:
    # The checkpoint writer is imported on first use: the harness does not need it.
    if name in _CHECKPOINT_NAMES:
        from mxformats.testing import checkpoints

        return getattr(checkpoints, name)
    raise AttributeError(f"module 'mxformats.testing' has no attribute {name!r}")
