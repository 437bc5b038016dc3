"""Check a quantizer or dequantizer against the reference, byte for byte.

For kernel authors: hand :func:`check_quantizer` any function with the signature of
:func:`mxformats.quantize_mx` and it runs the function over

1. ``vectors``: the spec vectors of the profile (``spec/vectors/mx/<profile>.json``, computed
   in memory by :mod:`mxformats.specgen`, see :func:`load_vectors`; skipped with a note where
   the profile has none),
2. ``sweep``: every bfloat16 bit pattern (and every float16 one) laid out as blocks, in two
   layouts (consecutive patterns, and patterns strided across blocks so that each block mixes
   magnitudes),
3. ``boundary``: the TestFloat-style blocks of :func:`mxformats.testing.cases.mx_blocks`
   (ties at every scale, scale-rule boundaries, NaN/Inf/±0, tiny and huge blocks),
4. ``hypothesis``: batches of blocks drawn by
   :func:`mxformats.testing.cases.blocks_strategy`, shrunk on failure (skipped with a note
   when Hypothesis is not installed),

in each input dtype, compares the bytes it returns with the reference
(``mxformats.quantize_mx(..., profile=profile)``) and reports the **first** differing block:
its values as hex floats, the expected and returned scale byte and codes, and which source
found it. Inputs go in as batches of blocks (shape ``(blocks, block_size)``, blocks along
``axis``), so bugs that depend on a block's position show up too.

>>> from mxformats.testing import check_quantizer
>>> report = check_quantizer(my_kernel, profile="ocp")          # doctest: +SKIP
>>> report.ok                                                    # doctest: +SKIP
True
>>> report.raise_if_failed()   # in a test: AssertionError with the readable report
...                                                              # doctest: +SKIP

Functions may take and return numpy arrays or torch tensors: with ``torch_device="cuda"`` the
inputs are passed as torch tensors on that device (bfloat16 as ``torch.bfloat16``), and
returned tensors are brought back through numpy (uint8, int8, ``float8_e8m0fnu`` and
``float4_e2m1fn_x2`` bytes are read as raw bytes).

Layout: the checks in ``harness.checks``, the sources of cases in ``harness.sources``, the
report and its rendering in ``harness.report``; this package re-exports their public names
(and :class:`CheckError`, ``hex_value`` and ``load_function``, which ``mxformats check`` uses).
"""

from __future__ import annotations

from mxformats.testing.harness.checks import (
    check_dequantizer,
    check_int4_quantizer,
    check_quantizer,
)
from mxformats.testing.harness.checks import load_function as load_function
from mxformats.testing.harness.report import (
    SOURCES,
    BlockResult,
    CheckReport,
    Mismatch,
    SourceRun,
)
from mxformats.testing.harness.report import CheckError as CheckError
from mxformats.testing.harness.report import hex_value as hex_value
from mxformats.testing.harness.sources import find_vectors, load_vectors

__all__ = [
    "SOURCES",
    "BlockResult",
    "CheckReport",
    "Mismatch",
    "SourceRun",
    "check_dequantizer",
    "check_int4_quantizer",
    "check_quantizer",
    "find_vectors",
    "load_vectors",
]
