"""Fast CPU paths for large arrays, byte-identical to the references they stand in for.

Each function has its reference's signature (plus ``threads``, the most threads it may use,
where it uses threads; the dequantizers, :func:`pack_int4`, :func:`unpack_int4`,
:func:`quantize_int4`, :func:`quantize_fp8` and :func:`encode` take it from the reference
itself, defaults included) and returns the same bytes. Inputs outside a fast path go
to the reference itself, so every call is defined exactly as the reference defines it, errors
included. Verified by ``tests/test_fast.py`` (the harness's ``check_quantizer`` /
``check_dequantizer`` / ``check_int4_quantizer`` and exhaustive sweeps over the classes each
table is built on); measured in ``docs/benchmarks.md``.

- :func:`quantize_mx` (:func:`mxformats.quantize_mx`): E2M1 blocks of 32, profiles ``ocp``
  and ``quark`` (with Quark's short last block), float32 / bfloat16 / float16 input.
- :func:`dequantize_mx` (:func:`mxformats.dequantize_mx`): E2M1, consumer ``ocp``, float32.
- :func:`encode` (:func:`mxformats.codec.encode`): E4M3FN, E4M3FNUZ, E5M2 from float32 /
  bfloat16 / float16, every rounding and overflow mode; :func:`decode`
  (:func:`mxformats.codec.decode`): 8-bit formats (FP8, E8M0), every output type.
- :func:`pack_int4`, :func:`unpack_int4` (:mod:`mxformats.schemes.int4`): layouts
  ``compressed-tensors`` and ``quark``, whole words.
- :func:`dequantize_int4` (:func:`mxformats.dequantize_int4`): both profiles, float32
  output.
- :func:`quantize_int4` (:func:`mxformats.quantize_int4`): both profiles (compressed-tensors,
  Quark), per group or per channel, float32 / bfloat16 input; the scales are the reference's,
  each quotient one float32 operation and a table lookup.
- :func:`quantize_fp8` (:func:`mxformats.schemes.fp8.quantize_fp8`): the producer profile
  ``static`` (Quark's per-tensor stage), float32 / bfloat16 input.
- :func:`quantize_w4a8` (:func:`mxformats.schemes.w4a8.quantize_w4a8`): the reference's
  stages (:func:`~mxformats.schemes.w4a8.quantize_w4a8_with`) done by the fast paths;
  :func:`dequantize_w4a8` (:func:`mxformats.schemes.w4a8.dequantize_w4a8`): vLLM's folded
  scales, float32 output.
- :func:`quantize_fp8_block` (:func:`mxformats.schemes.fp8_block.quantize_fp8_block`): every
  profile; the reference on cache-sized pieces of whole tiles, on threads, with the element
  cast by :func:`encode`.
- :func:`quantize_nvfp4` (:func:`mxformats.schemes.nvfp4.quantize_nvfp4`): both profiles; the
  block maxima from the float32 bits, the scales the reference's
  (:func:`~mxformats.schemes.nvfp4.nvfp4_scales`), the E2M1 codes of the float32 quotients a
  table lookup.
- :func:`dequantize_fp8_block` (:func:`mxformats.schemes.fp8_block.dequantize_fp8_block`):
  every profile, partial edge tiles, float32 output.
- :func:`dequantize_nvfp4` (:func:`mxformats.schemes.nvfp4.dequantize_nvfp4`): every consumer,
  packed or one code a byte, any axis, float32 output.

Threads: ``threads`` (default :func:`workers`: the environment variable ``MXFORMATS_THREADS``
when set, else the CPUs this process may run on). A process pool that runs one task per core
sets ``MXFORMATS_THREADS=1`` in its workers; every fast path the validator's descriptors call
(:attr:`mxformats.validate.descriptors.base.Descriptor.quantizer`) then runs on one thread.
``REFERENCES`` maps each fast path to its reference.

How. A float32 value's code depends only on its top bits and on whether the rest
is zero: the class index ``(bits >> k) | (any of the low k bits set)`` rounds to odd at
``mbits + 2`` mantissa bits, which keeps everything a rounding to ``mbits`` bits looks at. One
table lookup per value then gives the code; each table is built by running the reference's own
encoder on one member of every class. The quotient tables (:func:`int4_table`,
:func:`fp8_table`) keep 9 mantissa bits: a producer that rounds its float32 quotient to
bfloat16 and then to an integer or an FP8 code is one lookup. MX scales come from the integer
exponent field of the block maximum and scaling is one float32 multiply by a power of two
(exact wherever it matters, see ``_quantize_rows``). Blocks holding NaN or ±Inf, which every
profile treats its own way, are recomputed by the reference (blocks are independent). Work is
cut into cache-sized chunks with preallocated scratch, handed to threads in tasks of a few
chunks (numpy releases the GIL in these loops). The byte views assume little-endian words; on
a big-endian machine every call goes to the reference.

Layout: a module per scheme (``mxformats.fast.mx``, ``.nvfp4``, ``.int4``, ``.fp8``,
``.fp8_block``, ``.w4a8``); the element codec and the tables over float32 classes in
``.codec``; chunk sizes, threads and the input readers every path shares in ``.chunks``. One
decorator, ``.fallback.fast_path``, gives each path its reference's signature and owns the
fallback: a path returns ``FALLBACK`` for an input it does not compute, and the decorator calls
the reference with the caller's arguments (always, on a big-endian machine). This package
re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mxformats import codec as reference_codec
from mxformats.fast.chunks import THREADS_VARIABLE, workers
from mxformats.fast.codec import code_table, decode, encode
from mxformats.fast.fp8 import fp8_table, quantize_fp8
from mxformats.fast.fp8_block import dequantize_fp8_block, quantize_fp8_block
from mxformats.fast.int4 import (
    dequantize_int4,
    int4_table,
    pack_int4,
    quantize_int4,
    unpack_int4,
)
from mxformats.fast.mx import QUANTIZE_PROFILES, dequantize_mx, element_table, quantize_mx
from mxformats.fast.nvfp4 import dequantize_nvfp4, nvfp4_code_table, quantize_nvfp4
from mxformats.fast.w4a8 import dequantize_w4a8, quantize_w4a8
from mxformats.schemes import fp8 as reference_fp8
from mxformats.schemes import fp8_block as reference_fp8_block
from mxformats.schemes import int4 as reference_int4
from mxformats.schemes import mx as reference_mx
from mxformats.schemes import nvfp4 as reference_nvfp4
from mxformats.schemes import w4a8 as reference_w4a8

__all__ = [
    "QUANTIZE_PROFILES", "REFERENCES", "THREADS_VARIABLE", "code_table", "decode",
    "dequantize_fp8_block", "dequantize_int4", "dequantize_mx", "dequantize_nvfp4",
    "dequantize_w4a8",
    "element_table", "encode", "fp8_table", "int4_table", "nvfp4_code_table", "pack_int4",
    "quantize_fp8", "quantize_fp8_block", "quantize_int4", "quantize_mx", "quantize_nvfp4",
    "quantize_w4a8", "unpack_int4", "workers",
]

#: Each fast path and the reference whose bytes it returns (tests and benchmarks swap them).
REFERENCES: dict[Callable[..., Any], Callable[..., Any]] = {
    quantize_mx: reference_mx.quantize_mx, dequantize_mx: reference_mx.dequantize_mx,
    quantize_nvfp4: reference_nvfp4.quantize_nvfp4,
    dequantize_nvfp4: reference_nvfp4.dequantize_nvfp4,
    encode: reference_codec.encode, decode: reference_codec.decode,
    pack_int4: reference_int4.pack_int4, unpack_int4: reference_int4.unpack_int4,
    quantize_int4: reference_int4.quantize_int4, dequantize_int4: reference_int4.dequantize_int4,
    quantize_fp8: reference_fp8.quantize_fp8, quantize_w4a8: reference_w4a8.quantize_w4a8,
    dequantize_w4a8: reference_w4a8.dequantize_w4a8,
    quantize_fp8_block: reference_fp8_block.quantize_fp8_block,
    dequantize_fp8_block: reference_fp8_block.dequantize_fp8_block,
}
