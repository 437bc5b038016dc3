"""Block-scaled quantization schemes, each producer's variant a record.

A *profile* here is data, never a branch on its name: the arithmetic dtype, reciprocal or
division, the eps floor or clamp, the format maximum, the layout and the stored form of each
scale. Kernels and fast paths derive their plans from these records.

- :mod:`mxformats.schemes.mx`: MX (OCP Microscaling: an E8M0 scale per 32 elements).
- :mod:`mxformats.schemes.int4`: INT4 group quantization and its packed layouts.
- :mod:`mxformats.schemes.fp8`: FP8 per-tensor quantization (Quark static, vLLM dynamic).
- :mod:`mxformats.schemes.w4a8`: the Quark W4A8 progressive scheme (FP8, then INT4).
- :mod:`mxformats.schemes.nvfp4`: NVFP4 (E2M1 elements, an E4M3 scale per 16, an FP32 global
  scale).
- :mod:`mxformats.schemes.fp8_block`: FP8 block scaling (E4M3 elements, one float scale per
  tile, 128×128 by default).
"""
