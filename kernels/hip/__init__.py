"""HIP kernels, byte-identical to the numpy reference: one source, three ways to run it.

Same names and arguments as the reference (``profile=`` included), torch tensors in and out.
CPU tensors run the kernels compiled with g++ against the project's CPU runtime
(``hip_cpu.h``) under AddressSanitizer and UBSan, in a driver subprocess; CUDA tensors run them
compiled by nvcc (NVIDIA, through ``hip_nvidia.h``) or, on ROCm PyTorch, by hipcc
(:mod:`mxformats.kernels.hip.rocm`). The MX argument checks, layout and per-profile constants
come from :mod:`mxformats.kernels.mx_plan`, the INT4, W4A8 and FP8 argument checks from
:mod:`mxformats.kernels.int4_plan` and :mod:`mxformats.kernels.fp8_plan`, all shared with the
Triton backend.

- :func:`quantize_mx`, :func:`dequantize_mx`: every profile the plan describes
  (:data:`SUPPORTED`), E2M1 and E4M3FN elements, power-of-two blocks up to 256 (spec/mx.md);
- :func:`dequantize_int4`: compressed-tensors group scales (spec/int4-schemes.md);
- :func:`dequantize_w4a8`: Quark W4A8 as vLLM folds its scales (spec/w4a8.md);
- :func:`quantize_fp8`: Quark's static per-tensor FP8 and vLLM's dynamic one;
  :func:`e4m3fn_to_fnuz` (spec/e4m3fnuz.md);
- :func:`quantize_fp8_block`, :func:`dequantize_fp8_block`: FP8 block scaling, every profile
  the plan of :mod:`mxformats.kernels.fp8_block_plan` describes (spec/fp8-block.md);
- :func:`quantize_nvfp4`, :func:`dequantize_nvfp4`: NVFP4, every producer and consumer the plan
  of :mod:`mxformats.kernels.nvfp4_plan` describes (spec/nvfp4.md).

Float64 data to quantize raises NotImplementedError (those kernels read at most 32-bit
floats); the dequantizers take float64 scales and write float64 on request.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from mxformats.arith import require_finite
from mxformats.formats import E2M1, E4M3FN, Format
from mxformats.schemes import fp8 as fp8_reference
from mxformats.schemes import fp8_block as fp8_block_reference
from mxformats.schemes import int4 as int4_reference
from mxformats.schemes import nvfp4 as nvfp4_reference
from mxformats.schemes.mx.consumers import CONSUMERS
from mxformats.schemes.mx.producers import PRODUCERS

from .. import calls, fp8_plan, int4_plan
from .. import fp8_block_plan as block_plans
from .. import mx_plan as plans
from .. import nvfp4_plan as nvfp4_plans
from ..mx_plan import KERNEL_ELEMENTS, QuantizedMX
from ._device import CpuDriver, Executor, KernelError, SharedLibrary

__all__ = [
    "SUPPORTED",
    "KernelError",
    "dequantize_fp8_block",
    "dequantize_int4",
    "dequantize_mx",
    "dequantize_nvfp4",
    "dequantize_w4a8",
    "e4m3fn_to_fnuz",
    "quantize_fp8",
    "quantize_fp8_block",
    "quantize_mx",
    "quantize_nvfp4",
]

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_mx": tuple((fmt.name, name) for name, producer in PRODUCERS.items()
                         for fmt in KERNEL_ELEMENTS if plans.quantize_claims(producer, fmt)),
    "dequantize_mx": tuple((fmt.name, name) for name in CONSUMERS for fmt in KERNEL_ELEMENTS
                           if plans.dequantize_claims(name, fmt)),
    "dequantize_int4": tuple(("int4", name) for name, record in int4_reference.CONSUMERS.items()
                             if int4_plan.dequantize_claims(record)),
    "dequantize_w4a8": (("w4a8", "vllm"),),
    "quantize_fp8": tuple((fmt.name, name) for name, record in fp8_reference.FP8_PROFILES.items()
                          if fp8_plan.quantize_claims(record) for fmt in record.formats),
    "e4m3fn_to_fnuz": (("e4m3fn", "vllm"),),
    "quantize_fp8_block": tuple((record.code_format.name, name)
                                for name, record in fp8_block_reference.PROFILES.items()
                                if block_plans.quantize_claims(record)),
    "dequantize_fp8_block": tuple((record.code_format.name, name)
                                  for name, record in fp8_block_reference.PROFILES.items()),
    "quantize_nvfp4": tuple(("e2m1", name) for name, record in nvfp4_reference.PRODUCERS.items()
                            if nvfp4_plans.quantize_claims(record)),
    "dequantize_nvfp4": tuple(("e2m1", name) for name, record in nvfp4_reference.CONSUMERS.items()
                              if nvfp4_plans.dequantize_claims(record)),
}

#: The kernels' dtype numbers (mxf::Dtype in mx_numerics.h).
_DTYPE_IDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.float64: 3}
#: The dtypes the kernels read as data to quantize.
_INPUT_IDS = {dtype: i for dtype, i in _DTYPE_IDS.items() if dtype != torch.float64}
#: This backend's name in the shared argument checks' messages.
KERNELS = "HIP"
#: The largest MX block the quantize kernel reduces inside one wave (32 lanes x 8 elements).
MAX_BLOCK_SIZE = 256


@functools.cache
def _cpu_driver() -> CpuDriver:
    return CpuDriver()


@functools.cache
def _nvidia_library(arch: str) -> SharedLibrary:
    from ._build import nvidia_library

    return SharedLibrary(nvidia_library(arch))


def _executor(device: torch.device) -> Executor:
    """The CPU driver for CPU tensors; the GPU build for CUDA tensors (ROCm or NVIDIA)."""
    if device.type == "cpu":
        return _cpu_driver()
    if device.type == "cuda" and torch.version.hip:
        from .rocm import library

        return library()
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return _nvidia_library(f"sm_{major}{minor}")
    raise NotImplementedError(f"the HIP kernels run on cpu and cuda tensors, not {device.type}")


@functools.lru_cache(maxsize=64)
def _table_on(plan: Any, device: torch.device) -> torch.Tensor:
    """A plan's scale table as an int32 tensor on ``device`` (plans are cached singletons)."""
    return torch.from_numpy(np.ascontiguousarray(plan.scale_table).reshape(-1)).to(device)


# -- MX ---------------------------------------------------------------------------------------


def _layout_dtype_id(layout: plans.FloatLayout) -> int:
    """The kernels' dtype number of a plan's float32 / bfloat16 / float16 layout."""
    return {23: 0, 7: 1, 10: 2}[layout.mbits]


def _quantize_rules(plan: plans.QuantizePlan) -> list[int]:
    """The plan's fields in the order of ``rules`` in mx_quantize.hip."""
    return [plan.elem.bits, plan.elem.mbits, plan.elem.bias, plan.elem.max_code,
            int(plan.nan_ignoring_max), int(plan.round_away), plan.zero_sign,
            plan.arith_zero_exp, *plan.inf_codes, *plan.nan_codes,
            int(plan.generated_nan_negative), int(plan.factor_nan_wins)]


def quantize_mx(x: torch.Tensor, elem: Format | str = E2M1, *, block_size: int = 32,
                axis: int = -1, profile: str = "ocp") -> QuantizedMX:
    """Quantize ``x`` to MX blocks along ``axis`` exactly as ``mxformats.quantize_mx`` with
    the same profile does (spec/mx.md).

    ``x``: a float32, bfloat16 or float16 tensor, any shape and strides. Profiles:
    :data:`SUPPORTED` ``["quantize_mx"]``; another registered profile, float64 input or a block
    over 256 elements raises ``NotImplementedError``. Returns ``(codes, scales)``, uint8
    tensors on ``x``'s device laid out as the reference's.
    """
    call = plans.prepare_quantize(x, elem, block_size=block_size, axis=axis, profile=profile,
                                  claims=SUPPORTED["quantize_mx"])
    if block_size > MAX_BLOCK_SIZE:
        raise NotImplementedError(f"the HIP MX kernels take blocks of at most {MAX_BLOCK_SIZE} "
                                  f"elements, not {block_size}")
    rows, n = call.source.shape
    if rows and n:
        plan = call.plan
        device = call.source.device
        _executor(device).run(
            "quantize_mx",
            [_layout_dtype_id(plan.source), rows, n, block_size, *_quantize_rules(plan)],
            [call.source, _table_on(plan, device)], [call.codes, call.scales])
    return call.finish()


def dequantize_mx(codes: torch.Tensor, scales: torch.Tensor | None = None,
                  elem: Format | str = E2M1, *, block_size: int = 32, axis: int = -1,
                  profile: str = "ocp", dtype: Any = torch.float32) -> torch.Tensor:
    """Decode MX blocks exactly as ``mxformats.dequantize_mx`` with the same consumer
    profile does (spec/mx.md, "Consumers").

    ``codes``/``scales``: uint8 tensors as :func:`quantize_mx` returns them. ``dtype``: torch
    float32, bfloat16 or float16 (the consumer's own type or an exactly wider one). Profiles:
    :data:`SUPPORTED` ``["dequantize_mx"]``. Returns a tensor of ``dtype`` on the codes' device.
    """
    call = plans.prepare_dequantize(codes, scales, elem, block_size=block_size, axis=axis,
                                    profile=profile, dtype=dtype,
                                    claims=SUPPORTED["dequantize_mx"])
    rows, n = call.out.shape
    if rows and n:
        plan = call.plan
        rules = [plan.elem.bits, plan.elem.ebits, plan.elem.mbits, plan.elem.bias,
                 plan.elem.specials, _layout_dtype_id(plan.own), _layout_dtype_id(plan.out),
                 int(plan.clamp), int(plan.nan_on_ff)]
        device = call.out.device
        _executor(device).run("dequantize_mx", [rows, n, block_size, *rules],
                              [call.codes, call.scales, _table_on(plan, device)], [call.out])
    return call.finish()


# -- INT4 and W4A8 ----------------------------------------------------------------------------


def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, *, group_size: int | None = 32,
                    axis: int = -1, profile: str = "compressed-tensors",
                    dtype: Any = np.float32) -> torch.Tensor:
    """``q × scale`` as ``mxformats.dequantize_int4`` computes it: rounded once into the
    consumer's type (compressed-tensors: the scale's dtype; quark: float32, the scale first
    cast to float32), then into ``dtype`` (spec/int4-schemes.md, "Dequantization").

    ``q``: an integer tensor of values in [-8, 7]; ``scales``: a float tensor (float64
    included), ``q``'s shape with ``axis`` divided by ``group_size`` (1 for None, per channel).
    """
    int4_plan.check_int4_call("dequantize_int4", profile, group_size, SUPPORTED["dequantize_int4"],
                         KERNELS)
    values = int4_plan.as_int8(q, "dequantize_int4", ValueError, KERNELS, check_int8=True)
    s = calls.require_tensor(scales, "scales", KERNELS)
    calls.require_kernel_float(s.dtype, "dequantize_int4 scales", _DTYPE_IDS, KERNELS)
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    ax, n, size = int4_plan.check_group_scales(values, s, group_size, axis)
    if int4_plan.dequantize_plan(profile).float32_product:  # Quark: float32 × the float32 scale
        s = s.to(torch.float32)
    moved = values.movedim(ax, -1)
    lead = tuple(moved.shape[:-1])
    q2d = moved.contiguous().reshape(-1, n)
    s2d = s.movedim(ax, -1).contiguous().reshape(q2d.shape[0], -1)
    out = torch.empty((q2d.shape[0], n), dtype=out_dtype, device=values.device)
    if out.numel():
        _executor(values.device).run("dequantize_int4",
                                     [_DTYPE_IDS[s.dtype], _DTYPE_IDS[out_dtype], q2d.shape[0],
                                      n, size],
                                     [q2d, s2d], [out])
    result: torch.Tensor = out.reshape(*lead, n).movedim(-1, ax).contiguous()
    return result


def dequantize_w4a8(weight: torch.Tensor, weight_scale: torch.Tensor,
                    weight_scale_2: torch.Tensor, *, dtype: Any = np.float32) -> torch.Tensor:
    """``q × float32(s2 × s1)`` per output row, as ``mxformats.dequantize_w4a8`` (vLLM's
    fold; spec/w4a8.md, "Dequantization").

    ``weight``: int32 ``[O, W]`` in Quark's nibble order (8 W columns out); ``weight_scale``:
    one float32; ``weight_scale_2``: float32 ``[O]``.
    """
    w, s1, s2 = int4_plan.check_w4a8_args(weight, weight_scale, weight_scale_2, KERNELS)
    rows, words = w.shape
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    out = torch.empty((rows, 8 * words), dtype=out_dtype, device=w.device)
    if out.numel():
        _executor(w.device).run(
            "dequantize_w4a8",
            [_DTYPE_IDS[out_dtype], rows, words, *int4_reference.NIBBLE_ORDER["quark"],
             int4_reference.NIBBLE_OFFSET["quark"]],
            [w.view(torch.int32), s1.reshape(1), s2], [out])
    return out


# -- FP8 --------------------------------------------------------------------------------------

def _fp8_target(elem: Format, plan: fp8_plan.Fp8Plan) -> list[int]:
    """The fields of mxf::Fp8Target (fp8_cast.hip), from the format's definition and the
    profile's plan (its record in mxformats.schemes.fp8): ``dynamic`` is vLLM's reciprocal
    arithmetic."""
    return [elem.ebits, elem.mbits, elem.bias, elem.max_code, _f32_bits(plan.limit),
            _f32_bits(plan.zero_scale), int(elem.signed_zero), int(plan.reciprocal)]


def quantize_fp8(x: torch.Tensor, fmt: Format | str = E4M3FN, *,
                 profile: str = "static") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor FP8 as ``mxformats.quantize_fp8`` (spec/w4a8.md, "FP8 per-tensor"):
    Quark ``static`` (``s = amax / fmt.max``, ``codes = fmt(clamp(dtype(x / s)))``) and vLLM's
    ``vllm-fnuz``, ``dynamic-fn``, ``dynamic-fnuz`` (``fmt(clamp(x * (1 / s), ±M))``).

    ``x``: float32, bfloat16 or float16, any shape. Returns ``(codes, scale)``: uint8 of
    ``x``'s shape and a float32 0-d tensor. NaN/±Inf inputs to ``static`` raise ValueError as
    the reference does. Profiles: :data:`SUPPORTED` ``["quantize_fp8"]``.
    """
    elem, plan = fp8_plan.check_fp8_args(fmt, profile, SUPPORTED["quantize_fp8"], KERNELS)
    t = calls.require_tensor(x, "quantize_fp8", KERNELS)
    dtype_id = calls.require_kernel_float(t.dtype, "quantize_fp8", _INPUT_IDS, KERNELS)
    source = t.contiguous().reshape(-1)
    codes = torch.empty(source.shape, dtype=torch.uint8, device=t.device)
    scale = torch.empty((), dtype=torch.float32, device=t.device)
    amax_bits = torch.empty(1, dtype=torch.int32, device=t.device)
    _executor(t.device).run("quantize_fp8", [dtype_id, source.numel(), *_fp8_target(elem, plan)],
                            [source], [codes, scale, amax_bits])
    if plan.refuse_non_finite and int(amax_bits.item()) >= 0x7F800000:  # as the reference
        require_finite(
            source.cpu().float().numpy(), f"quantize_fp8(profile={profile!r})")
    return codes.reshape(t.shape), scale


def e4m3fn_to_fnuz(codes: torch.Tensor,
                   scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's MI300 normalisation, as ``mxformats.conversions.e4m3fn_to_fnuz``: the same bits
    read as E4M3FNUZ (0x80 becomes 0x00) and every float32 scale doubled (spec/e4m3fnuz.md)."""
    c, s = fp8_plan.check_fnuz_args(codes, scale, KERNELS)
    codes_out = torch.empty_like(c, memory_format=torch.contiguous_format)
    scale_out = torch.empty_like(s, memory_format=torch.contiguous_format)
    if c.numel() or s.numel():
        _executor(c.device).run("e4m3fn_to_fnuz", [c.numel(), s.numel()], [c, s],
                                [codes_out, scale_out])
    return codes_out, scale_out


# -- FP8 block scaling ------------------------------------------------------------------------


def _f32_bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The numpy dtype of a torch dtype (``ml_dtypes`` bfloat16; numpy's TypeError for one it
    lacks)."""
    name = plans.float_dtype_name(dtype)
    return fp8_block_reference.BF16 if name == "bfloat16" else np.dtype(name)


def _block_rules(plan: block_plans.FP8BlockPlan) -> list[int]:
    """The plan's fields in the order of ``rules`` in fp8_block.hip."""
    scale = plan.scale_dtype
    zero_scale = plan.zero_scale or 0.0
    zero_bits = int(np.asarray(zero_scale, scale).view(f"u{scale.itemsize}"))
    element = plan.element
    return [_NUMPY_DTYPE_IDS[scale.name], _NUMPY_DTYPE_IDS[plan.quotient_dtype.name],
            _f32_bits(plan.fmt_max), int(plan.has_floor), _f32_bits(plan.amax_floor),
            _f32_bits(plan.max_over_amax_floor), int(plan.power_of_two_scale),
            int(plan.zero_scale is not None), zero_bits, plan.multiplier,
            int(plan.clamp_to_max), element.ebits, element.mbits, element.bias,
            element.max_code, fp8_block_reference.NAN_CODE, int(plan.fnuz)]


#: The kernels' dtype numbers by numpy dtype name.
_NUMPY_DTYPE_IDS = {str(dtype).removeprefix("torch."): i for dtype, i in _DTYPE_IDS.items()}


def quantize_fp8_block(x: torch.Tensor, *, block: tuple[int, int] = (128, 128),
                       profile: str = "deepseek") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a 2-D weight to FP8 with one scale per ``block`` tile exactly as
    ``mxformats.schemes.fp8_block.quantize_fp8_block`` with the same profile does
    (spec/fp8-block.md; the profile's choices come from its record through
    :func:`mxformats.kernels.fp8_block_plan.quantize_plan`).

    ``x``: a float16, bfloat16 or float32 ``[M, N]`` tensor, any strides (read contiguous).
    Returns ``(codes, scales)``: uint8 ``[M, N]`` and ``[ceil(M / bm), ceil(N / bn)]`` in the
    profile's scale dtype, on ``x``'s device. Raises what the reference raises for bad
    arguments."""
    t = calls.require_tensor(x, "quantize_fp8_block", KERNELS)
    dtype = _numpy_dtype(t.dtype)
    bm, bn = block_plans.check_quantize_args(tuple(t.shape), dtype, block, profile)
    plan = block_plans.quantize_plan(profile, dtype)
    rows, cols = t.shape
    codes = torch.empty((rows, cols), dtype=torch.uint8, device=t.device)
    scales = torch.empty(fp8_block_reference.scale_grid((rows, cols), (bm, bn)),
                         dtype=getattr(torch, plan.scale_dtype.name), device=t.device)
    _executor(t.device).run("quantize_fp8_block",
                            [_DTYPE_IDS[t.dtype], rows, cols, bm, bn, *_block_rules(plan)],
                            [t.contiguous()], [codes, scales])
    return codes, scales


def dequantize_fp8_block(codes: torch.Tensor, scales: torch.Tensor, *,
                         block: tuple[int, int] = (128, 128), profile: str = "deepseek",
                         dtype: Any = torch.float32) -> torch.Tensor:
    """The bytes of ``mxformats.schemes.fp8_block.dequantize_fp8_block`` (vLLM's
    ``scaled_dequantize``: each code times its tile's scale, both as float32, one float32
    rounding, then one rounding to ``dtype``: float32, bfloat16, float16 or float64, torch or
    numpy). ``codes``: a uint8 ``[M, N]`` tensor; ``scales``: float32, bfloat16 or float16,
    one per tile (``[ceil(M / bm), ceil(N / bn)]``). The profile picks the code format."""
    c = calls.require_tensor(codes, "dequantize_fp8_block", KERNELS)
    s = calls.require_tensor(scales, "dequantize_fp8_block", KERNELS)
    layout, (bm, bn), _ = block_plans.check_dequantize_args(
        tuple(c.shape), str(c.dtype).removeprefix("torch."), tuple(s.shape), block, profile)
    scale_id = calls.require_kernel_float(s.dtype, "dequantize_fp8_block scales", _INPUT_IDS,
                                         KERNELS)
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    out = torch.empty(tuple(c.shape), dtype=out_dtype, device=c.device)
    if out.numel():
        _executor(c.device).run(
            "dequantize_fp8_block",
            [scale_id, _DTYPE_IDS[out_dtype], *c.shape, bm, bn, layout.ebits, layout.mbits,
             layout.bias, layout.specials],
            [c, s], [out])
    return out


# -- NVFP4 ------------------------------------------------------------------------------------

#: At most this many work-groups in pass 1 of the NVFP4 tensor maximum (each takes 2048
#: elements per round); the bytes do not depend on it.
AMAX_GROUPS = 1024
_AMAX_GROUP_ELEMENTS = 256 * 8


def _nvfp4_rules(plan: nvfp4_plans.NVFP4QuantizePlan) -> list[int]:
    """The plan's fields in the order of ``rules`` in nvfp4.hip."""
    element, scale = plan.element, plan.scale
    return [_NUMPY_DTYPE_IDS[plan.arithmetic.name], int(plan.inverse_global),
            _f32_bits(plan.six_m), _f32_bits(plan.amax_floor), int(plan.has_nonfinite_global),
            _f32_bits(plan.nonfinite_global), _f32_bits(plan.scale_floor),
            _f32_bits(plan.scale_clamp), _f32_bits(plan.zero_block_scale),
            int(plan.zero_after_cast), plan.nan_scale_byte, plan.element_nan_code,
            element.ebits, element.mbits, element.bias, element.max_code, scale.ebits,
            scale.mbits, scale.bias, scale.max_code, _f32_bits(nvfp4_reference.E2M1_MAX)]


def quantize_nvfp4(x: torch.Tensor, *, axis: int = -1, profile: str = "modelopt",
                   global_amax: float | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to NVFP4 along ``axis`` exactly as ``mxformats.quantize_nvfp4`` with the
    same producer profile does (spec/nvfp4.md; the profile's choices come from its record
    through :func:`mxformats.kernels.nvfp4_plan.quantize_plan`).

    ``x``: float32, bfloat16 or float16, any shape and strides, a multiple of 16 along
    ``axis``. ``global_amax``: the tensor maximum the global scale is computed from (default
    ``max|x|``, a deterministic two-pass reduction). Returns ``(codes, scales, global_scale)``:
    uint8 E2M1 codes of ``x``'s shape (one per byte), uint8 E4M3FN scales (``axis`` divided by
    16), the float32 global scale in the shape the profile's checkpoint stores. Raises what the
    reference raises (ValueError for NaN or ±Inf in ``x``)."""
    t = calls.require_tensor(x, "quantize_nvfp4", KERNELS)
    dtype = _numpy_dtype(t.dtype)
    ax = nvfp4_plans.check_quantize_args(tuple(t.shape), dtype, axis, profile)
    plan = nvfp4_plans.quantize_plan(profile, dtype)
    try:
        amax = nvfp4_plans.check_global_amax(global_amax, dtype)
        refused: ValueError | None = None
    except ValueError as err:  # raised after the data's own check, as the reference orders them
        amax, refused = None, err
    moved = t.movedim(ax, -1)
    source = moved.contiguous().reshape(-1)
    count = source.numel()
    groups = max(1, min(AMAX_GROUPS, -(-count // _AMAX_GROUP_ELEMENTS)))
    device = t.device
    codes = torch.empty(count, dtype=torch.uint8, device=device)
    scales = torch.empty(count // nvfp4_reference.BLOCK, dtype=torch.uint8, device=device)
    global_scale = torch.empty(1, dtype=torch.float32, device=device)
    amax_bits = torch.empty(1, dtype=torch.int32, device=device)
    partials = torch.empty(groups, dtype=torch.int32, device=device)
    if refused is None and amax is None and not count:  # np.max of nothing, as the reference
        raise ValueError("quantize_nvfp4: the maximum of an empty tensor is undefined; pass "
                         "global_amax")
    _executor(device).run(
        "quantize_nvfp4",
        [_DTYPE_IDS[t.dtype], count, groups, int(amax is not None), _f32_bits(amax or 0.0),
         *_nvfp4_rules(plan)],
        [source], [codes, scales, global_scale, amax_bits, partials])
    if int(amax_bits.item()) >= 0x7F800000:  # |x| bits: NaN or ±Inf somewhere
        raise ValueError(f"quantize_nvfp4(profile={profile!r}): the input holds NaN or ±Inf, "
                         "which the reference refuses")
    if refused is not None:
        raise refused
    scale_shape = (*moved.shape[:-1], moved.shape[-1] // nvfp4_reference.BLOCK)
    return (codes.reshape(moved.shape).movedim(-1, ax).contiguous(),
            scales.reshape(scale_shape).movedim(-1, ax).contiguous(),
            global_scale.reshape(plan.global_shape))


def dequantize_nvfp4(codes: torch.Tensor, scales: torch.Tensor | None = None,
                     global_scale: torch.Tensor | None = None, *, axis: int = -1,
                     profile: str | None = None, packed: bool = False,
                     dtype: Any = torch.float32) -> torch.Tensor:
    """Decode NVFP4 weights exactly as ``mxformats.dequantize_nvfp4`` with the same consumer
    profile does (spec/nvfp4.md, "Consumers"), then round once to ``dtype`` (float32,
    bfloat16, float16, float64).

    ``codes``: one E2M1 code per element, or two per byte (element 2k low) with ``packed``;
    ``scales``: uint8 E4M3FN, one per 16 along ``axis``; ``global_scale``: one stored value."""
    c = calls.require_tensor(codes, "dequantize_nvfp4", KERNELS)
    if scales is None or global_scale is None:
        raise ValueError("dequantize_nvfp4 needs scales and global_scale")
    s = calls.require_tensor(scales, "dequantize_nvfp4 scales", KERNELS)
    g = calls.require_tensor(global_scale, "dequantize_nvfp4 global_scale", KERNELS)
    ax, plan = nvfp4_plans.check_dequantize_args(
        tuple(c.shape), _numpy_dtype(c.dtype), tuple(s.shape), _numpy_dtype(s.dtype),
        g.numel(), axis=axis, profile=profile, packed=packed)
    if c.numel() and (int(c.min()) < 0 or int(c.max()) > (0xFF if packed else 0xF)):
        raise ValueError("packed fp4 codes are bytes (0..255)" if packed
                         else "codes must be 4-bit E2M1 codes (0..15)")
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    moved = c.movedim(ax, -1)
    shape = (*moved.shape[:-1], moved.shape[-1] * (2 if packed else 1))
    out = torch.empty(shape, dtype=out_dtype, device=c.device)
    if out.numel():
        element, scale = plan.element, plan.scale
        _executor(c.device).run(
            "dequantize_nvfp4",
            [int(packed), out.numel(), _DTYPE_IDS[out_dtype], plan.global_op, element.ebits,
             element.mbits, element.bias, element.specials, scale.ebits, scale.mbits,
             scale.bias, scale.specials],
            [moved.contiguous().to(torch.uint8), s.movedim(ax, -1).contiguous(),
             g.reshape(1).to(torch.float32)], [out])
    return out.movedim(-1, ax).contiguous()
