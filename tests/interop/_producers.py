"""Run the real producers on the CPU and hand back their output in mxformats' byte layout.

Each wrapper calls the producer's own code, unchanged, as its checkpoint writer calls it, and
returns numpy arrays laid out like mxformats' results:

* MX: ``(codes, scales)``, both uint8; E2M1 codes two per byte along the last axis with element
  2k in the low nibble (``mxformats.schemes.mx.pack_fp4``), wider elements one code per byte (FP6 in
  the low six bits); ``scales`` are E8M0 bytes, one per block of 32 along the last axis.
* INT4: packed int32 words as the producer writes them, its scales, and (where the wrapper can
  get them without re-deriving anything) the int8 values.

Inputs are numpy arrays of float32 or ``ml_dtypes.bfloat16``; they reach the producer as torch
tensors of the same dtype (a BF16 checkpoint's weights stay BF16). The modules are imported
lazily: tests call ``conftest.requires`` first, so a missing package skips locally and fails
under ``CI=true``.

Sources are cited by the installed file and line (torchao 0.18.0, compressed-tensors 0.20.1,
amd-quark 0.13, llm-compressor 0.14 for the observer compressed-tensors leaves to its caller).
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BLOCK = 32


# -- numpy <-> torch, bytes ---------------------------------------------------------------------


def to_torch(x: np.ndarray) -> Any:
    """``x`` as a torch tensor of the same dtype (bfloat16 through its bits: no rounding)."""
    import torch

    x = np.ascontiguousarray(x)
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    if x.dtype not in (F32, F16):
        raise TypeError(f"the interop inputs are float32, bfloat16 or float16, got {x.dtype}")
    return torch.from_numpy(x.copy())


def from_torch(t: Any) -> np.ndarray:
    """A torch tensor as numpy, keeping bfloat16 as ``ml_dtypes.bfloat16``; float8 types (no
    numpy equivalent in torch) come back as their bytes, uint8."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.is_floating_point() and t.element_size() == 1:
        return t.view(torch.uint8).numpy().copy()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16).copy()
    return t.numpy().copy()


def as_bytes(t: Any) -> np.ndarray:
    """The bytes of a one-byte torch tensor (uint8, float8_*, float8_e8m0fnu) as uint8."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.element_size() != 1:
        raise TypeError(f"expected a one-byte dtype, got {t.dtype}")
    return t.view(torch.uint8).numpy().copy()


# -- torchao 0.18.0 to_mx -----------------------------------------------------------------------

TORCHAO_MODES = {
    "torchao-floor": "FLOOR",
    "torchao-ceil": "CEIL",
    "torchao-even": "EVEN",
    "torchao-rceil": "RCEIL",
}


def torchao_elem_dtype(elem_name: str) -> Any:
    """The ``elem_dtype`` torchao's ``to_mx`` takes for an mxformats element format name."""
    import torch
    from torchao.prototype.mx_formats import constants

    return {
        "e2m1": torch.float4_e2m1fn_x2,
        "e4m3fn": torch.float8_e4m3fn,
        "e5m2": torch.float8_e5m2,
        "e2m3": constants.DTYPE_FP6_E2M3,
        "e3m2": constants.DTYPE_FP6_E3M2,
    }[elem_name]


def torchao_to_mx(x: np.ndarray, elem_name: str, profile: str) -> tuple[np.ndarray, np.ndarray]:
    """``torchao.prototype.mx_formats.mx_tensor.to_mx(x, elem, 32, mode)`` (mx_tensor.py L214).

    The data comes back as torchao returns it: E2M1 packed by ``kernels.pack_uint4``
    (``data[::2] | data[1::2] << 4``, element 0 low: already our layout), FP6 one unpacked code
    per byte (``f32_to_f6_*_unpacked``), FP8 as float8 tensors (viewed as bytes). The scale is a
    ``float8_e8m0fnu`` tensor, viewed as bytes.
    """
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    mode = ScaleCalculationMode[TORCHAO_MODES[profile]]
    scale, data = to_mx(to_torch(x), torchao_elem_dtype(elem_name), BLOCK, mode)
    return as_bytes(data), as_bytes(scale)


# -- compressed-tensors 0.20.1 ------------------------------------------------------------------


def _ct_group_min_max(t: Any, group_size: int) -> tuple[Any, Any]:
    """The weight observer compressed-tensors leaves to llm-compressor.

    llm-compressor 0.14 ``observers/min_max.py`` L71-72 (``memoryless_minmax``, the observer of
    the fixture's ``recipe.yaml``): ``torch.amin`` / ``torch.amax`` over each group, in the
    weight's dtype (NaN propagates).
    """
    import torch

    g = t.unflatten(-1, (t.shape[-1] // group_size, group_size))
    return torch.amin(g, dim=-1), torch.amax(g, dim=-1)


def ct_mxfp4(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """compressed-tensors ``mxfp4-pack-quantized``, as llm-compressor writes a weight.

    ``calculate_qparams`` (quantization/utils/helpers.py L52: ``generate_mx_scales``,
    ``round_to_quantized_type_dtype`` to uint8, ``maybe_convert_from_mx_exp`` back to a float
    ``2**(e-127)`` in the weight dtype) on the observer's min/max, then
    ``MXFP4PackedCompressor.compress`` (compressors/nvfp4/base.py: ``quantize_and_pack_fp4`` →
    on CPU ``quantize`` + ``pack_fp4_to_uint8``; compressors/mxfp4/base.py ``_compress_scale`` →
    ``compress_mx_scale``). Returns ``(weight_packed, weight_scale)``; ``x`` is 2-D.
    """
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import MXFP4
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    scheme = QuantizationScheme(targets=["Linear"], weights=MXFP4["weights"])
    t = to_torch(x)
    lo, hi = _ct_group_min_max(t, scheme.weights.group_size)
    scale, zero_point = calculate_qparams(lo, hi, scheme.weights)
    out = MXFP4PackedCompressor.compress(
        {"weight": t, "weight_scale": scale, "weight_zero_point": zero_point}, scheme
    )
    return as_bytes(out["weight_packed"]), as_bytes(out["weight_scale"])


def ct_int4_args(group_size: int = 32) -> Any:
    """The fixture's ``recipe.yaml`` weights: int4, symmetric, strategy group, group_size 32."""
    from compressed_tensors.quantization import QuantizationArgs

    return QuantizationArgs(
        num_bits=4, type="int", symmetric=True, strategy="group", group_size=group_size,
        dynamic=False, observer="memoryless_minmax",
    )


def ct_int4(x: np.ndarray, group_size: int = 32) -> dict[str, np.ndarray]:
    """compressed-tensors ``pack-quantized`` INT4, as llm-compressor writes a weight.

    ``calculate_qparams`` (helpers.py L88: ``max_val_pos / (bit_range / 2)`` in the weight
    dtype, zeros → eps) on the observer's group min/max, then
    ``PackedQuantizationCompressor.compress`` (``quantize(..., dtype=torch.int8)`` →
    forward_helpers.py L523 ``_quantize``: ``x / scale`` in the weight dtype, clamp, round;
    then ``pack_to_int32``). Returns ``weight_packed`` (int32), ``weight_scale`` (the weight
    dtype), ``weight_shape`` and, from the same call chain, ``q`` (int8).
    """
    import torch
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    args = ct_int4_args(group_size)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    t = to_torch(x)
    lo, hi = _ct_group_min_max(t, group_size)
    scale, zero_point = calculate_qparams(lo, hi, args)
    out = PackedQuantizationCompressor.compress(
        {"weight": t, "weight_scale": scale, "weight_zero_point": zero_point}, scheme
    )
    q = quantize(x=t, scale=scale, zero_point=zero_point, args=args, dtype=torch.int8)
    return {
        "weight_packed": from_torch(out["weight_packed"]),
        "weight_scale": from_torch(out["weight_scale"]),
        "weight_shape": from_torch(out["weight_shape"]),
        "q": from_torch(q),
    }


def ct_nvfp4(x: np.ndarray, global_amax: float | None = None) -> dict[str, np.ndarray]:
    """compressed-tensors ``nvfp4-pack-quantized``, as llm-compressor ``oneshot`` writes a weight.

    The global scale: ``generate_gparam`` (quantization/utils/helpers.py L324) on the weight's
    min/max in its dtype (llm-compressor's observer; ``global_amax`` replaces both by
    ``∓global_amax`` in that dtype, as a fused gate/up pair shares one). Then
    ``calculate_qparams`` (helpers.py L52) with that ``global_scale`` on the group min/max, and
    ``NVFP4PackedCompressor.compress`` (compressors/nvfp4/base.py: ``quantize_and_pack_fp4`` →
    on CPU ``quantize`` + ``pack_fp4_to_uint8``; ``_compress_scale`` → float8_e4m3fn).
    Returns ``weight_packed``, ``weight_scale`` (bytes) and ``weight_global_scale``; ``x`` 2-D.
    """
    import torch
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    scheme = QuantizationScheme(targets=["Linear"], weights=NVFP4["weights"])
    t = to_torch(x)
    if global_amax is None:
        lo_all, hi_all = torch.amin(t), torch.amax(t)
    else:
        hi_all = torch.tensor(global_amax, dtype=t.dtype)
        lo_all = -hi_all
    global_scale = generate_gparam(lo_all, hi_all)
    lo, hi = _ct_group_min_max(t, scheme.weights.group_size)
    scale, _ = calculate_qparams(lo, hi, scheme.weights, global_scale=global_scale)
    out = NVFP4PackedCompressor.compress(
        {"weight": t, "weight_scale": scale, "weight_global_scale": global_scale}, scheme
    )
    return {
        "weight_packed": as_bytes(out["weight_packed"]),
        "weight_scale": as_bytes(out["weight_scale"]),
        "weight_global_scale": from_torch(out["weight_global_scale"]),
    }


def ct_nvfp4_decompress(weights: dict[str, np.ndarray]) -> np.ndarray:
    """compressed-tensors' own NVFP4 reader, ``NVFP4PackedCompressor.decompress``
    (compressors/nvfp4/base.py: ``unpack_fp4_from_uint8`` to bfloat16, the E4M3 scales to
    bfloat16, then forward_helpers.py ``_dequantize``: ``scale / global_scale`` in float32,
    ``x_q * scale``, cast to bfloat16). ``weights``: :func:`ct_nvfp4`'s output."""
    import torch
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4

    scheme = QuantizationScheme(targets=["Linear"], weights=NVFP4["weights"])
    state = {
        "weight_packed": torch.from_numpy(weights["weight_packed"].copy()),
        "weight_scale": torch.from_numpy(weights["weight_scale"].copy()).view(torch.float8_e4m3fn),
        "weight_global_scale": torch.from_numpy(weights["weight_global_scale"].copy()),
    }
    return from_torch(NVFP4PackedCompressor.decompress(state, scheme)["weight"])


# -- nvidia-modelopt 0.47.0 ---------------------------------------------------------------------


def modelopt_nvfp4(x: np.ndarray, global_amax: Any = None) -> dict[str, np.ndarray]:
    """ModelOpt NVFP4 weight export: ``weight``, ``weight_scale`` (bytes), ``weight_scale_2``.

    export/quant_utils.py: ``get_weights_scaling_factor_2_from_quantizer`` (the quantizer's
    ``_amax``: ``global_amax``, or max|x| as the max calibrator records it), then
    ``NVFP4QTensor.get_weights_scaling_factor`` and ``to_quantized_weight`` →
    ``NVFP4QTensor.quantize`` (qtensor/nvfp4_tensor.py) with those scales.

    ``x`` is one 2-D weight, or a stack ``(T, rows, cols)`` of T weights, each with its own
    ``weight_scale_2`` (``global_amax``: None or an array of shape ``(T,)``). The stack goes
    through one call with ``(T, 1, 1)`` global scales: every step of ModelOpt's arithmetic is
    elementwise, so broadcasting computes exactly what T calls do, and ``torch.searchsorted``
    costs about 18 ms a call on the CPU whatever the size.
    """
    import warnings
    from types import SimpleNamespace

    import torch

    with warnings.catch_warnings():  # its package __init__ warns (torch.jit.script, CUDA)
        warnings.simplefilter("ignore")
        from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    t = to_torch(x)
    if global_amax is None:
        amax = t.abs().amax(dim=(-2, -1), keepdim=True)
    else:
        amax = torch.tensor(np.asarray(global_amax, dtype=np.float64), dtype=torch.float32)
        amax = amax.to(t.dtype).reshape(*t.shape[:-2], 1, 1)
    quantizer = SimpleNamespace(_amax=amax.float(), block_sizes={-1: 16})
    scale_2 = NVFP4QTensor.get_weights_scaling_factor_2_from_quantizer(quantizer)
    scale, _ = NVFP4QTensor.get_weights_scaling_factor(t, 16, scale_2)
    packed, _, _ = NVFP4QTensor.quantize(t, 16, scale, scale_2)
    return {
        "weight": as_bytes(packed._quantized_data),
        "weight_scale": as_bytes(scale),
        "weight_scale_2": from_torch(scale_2).reshape(x.shape[:-2]),
    }


# -- AMD Quark 0.13 -----------------------------------------------------------------------------

#: The weight configs Quark recorded in the producer fixtures' config.json
#: (shared/fixtures/producers/kimi-k2-mxfp4-quark and kimi-k2-w4a8-quark,
#: ``quantization_config.global_quant_config.weight``), rebuilt by ``QTensorConfig.from_dict``.
QUARK_MXFP4_WEIGHT: dict[str, Any] = {
    "dtype": "fp4", "is_dynamic": False, "qscheme": "per_group", "ch_axis": -1, "group_size": 32,
    "block_size": None, "symmetric": None, "round_method": "half_even", "scale_type": "float",
    "zero_point_type": "int32", "scale_format": "e8m0", "scale_calculation_mode": "even",
    "mx_element_dtype": None, "observer_cls": "PerBlockMXObserver", "is_scale_quant": False,
    "enable_buffer_reuse": False, "max_input_numel": 4194304,
}
QUARK_W4A8_WEIGHT: list[dict[str, Any]] = [
    {
        "dtype": "fp8_e4m3", "is_dynamic": False, "qscheme": "per_tensor", "ch_axis": None,
        "group_size": None, "block_size": None, "symmetric": True, "round_method": "half_even",
        "scale_type": "float32", "zero_point_type": "int32", "scale_format": None,
        "scale_calculation_mode": None, "mx_element_dtype": None,
        "observer_cls": "PerTensorMinMaxObserver", "is_scale_quant": False,
        "enable_buffer_reuse": False, "max_input_numel": 4194304,
    },
    {
        "dtype": "int4", "is_dynamic": False, "qscheme": "per_channel", "ch_axis": 0,
        "group_size": None, "block_size": None, "symmetric": True, "round_method": "half_even",
        "scale_type": "float32", "zero_point_type": "int32", "scale_format": None,
        "scale_calculation_mode": None, "mx_element_dtype": None,
        "observer_cls": "PerChannelMinMaxObserver", "is_scale_quant": False,
        "enable_buffer_reuse": False, "max_input_numel": 4194304,
    },
]


def quark_config(d: dict[str, Any]) -> Any:
    from quark.torch.quantization.config.config import QTensorConfig

    return QTensorConfig.from_dict(dict(d))


def quark_int4_config(group_size: int | None) -> Any:
    """Quark's own ``Int4PerGroupSpec`` / ``Int4PerChannelSpec`` (symmetric, half_even)."""
    from quark.torch.quantization.config.config import Int4PerChannelSpec, Int4PerGroupSpec

    if group_size is None:
        return Int4PerChannelSpec(symmetric=True, ch_axis=0, is_dynamic=False).to_quantization_spec()
    return Int4PerGroupSpec(
        symmetric=True, ch_axis=1, group_size=group_size, is_dynamic=False
    ).to_quantization_spec()


def quark_single_stage(x: np.ndarray, config: Any) -> dict[str, np.ndarray]:
    """Quark's file-to-file export of one weight: ``file2file_quantization.py`` L1315
    ``_single_stage_quantize_weight`` (observer, ``scaled_real_quantize``, ``create_pack_method``
    ``.pack(w, False)``, ``to_e8m0_uint8`` for e8m0 scales), the function
    ``ModelQuantizer.direct_quantize_checkpoint`` runs for each tensor of a shard (L1743).
    Returns ``weight`` and ``weight_scale`` as written."""
    from quark.torch.quantization import file2file_quantization as f2f

    out: dict[str, Any] = {}
    f2f._single_stage_quantize_weight(
        tensor=to_torch(x), tensor_name="w.weight", layer_name="w", weight_config=config,
        quantized_tensors=out, safetensor_filename="model.safetensors",
    )
    return {"weight": from_torch(out["w.weight"]),
            "weight_scale": from_torch(out["w.weight_scale"])}


def quark_mxfp4(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quark MXFP4 export (``OCP_MXFP4Spec`` weights as the kimi-k2-mxfp4-quark fixture):
    ``(weight, weight_scale)``, uint8 packed codes (``Pack_fp4``, element 0 low) and E8M0
    bytes (``to_e8m0_uint8``)."""
    out = quark_single_stage(x, quark_config(QUARK_MXFP4_WEIGHT))
    return out["weight"], out["weight_scale"]


def quark_w4a8(w: np.ndarray) -> dict[str, np.ndarray]:
    """Quark's W4A8 export: ``file2file_quantization.py`` L1471 ``_progressive_quantize_weight``
    with the ``ProgressiveSpec`` stages of the kimi-k2-w4a8-quark fixture. Returns ``weight``
    (int32, ``Pack_4_bits.pack(q, True)``), ``weight_scale`` and ``weight_scale_2``."""
    from quark.torch.quantization import file2file_quantization as f2f

    out: dict[str, Any] = {}
    f2f._progressive_quantize_weight(
        tensor=to_torch(w), tensor_name="w.weight", layer_name="w",
        weight_config_stages=[quark_config(d) for d in QUARK_W4A8_WEIGHT],
        quantized_tensors=out, safetensor_filename="model.safetensors", device="cpu",
    )
    return {
        "weight": from_torch(out["w.weight"]),
        "weight_scale": from_torch(out["w.weight_scale"]),
        "weight_scale_2": from_torch(out["w.weight_scale_2"]),
    }


@functools.cache
def quark_triton_reference() -> dict[str, Any]:
    """Quark's torch reference of its Triton MXFP4 path, ``kernel/mx/triton.py``
    ``downcast_to_mxfp_torch`` (L642) with the helpers it calls, executed from the installed
    file's own source text.

    ``triton.py`` imports triton at module level (for its ``@triton.jit`` kernels); the torch
    reference itself uses torch only. So the plain-Python definitions it needs are lifted out of
    the installed file by ``ast`` and executed unchanged; nothing is re-typed here.
    """
    import quark.torch.kernel.mx as mx_pkg
    import torch
    from quark.torch.quantization import utils as quark_utils

    path = inspect.getfile(mx_pkg).replace("__init__.py", "triton.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    wanted = {
        "get_max_quant_val", "DequantScaleRoundingMode", "axis_permute_order",
        "right_shift_unsigned", "downcast_to_mxfp_torch", "swizzle_mx", "transpose_shape",
        "upcast_from_mxfp_torch", "cvt_e2m1_to_fp32",
        "SWIZZLE_ALIGN_INNER", "SWIZZLE_SIZE_INNER", "SWIZZLE_SIZE_OUTER",
    }
    keep: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in wanted:
            if any(_is_triton_decorator(d) for d in node.decorator_list):
                raise AssertionError(f"{node.name} is a Triton kernel, not torch code")
            keep.append(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in wanted for t in node.targets
        ):
            keep.append(node)
    found = {n.targets[0].id if isinstance(n, ast.Assign) else n.name  # type: ignore[attr-defined]
             for n in keep}
    missing = wanted - found
    if missing:
        raise AssertionError(f"{path} no longer defines {sorted(missing)}")
    from enum import Enum

    namespace: dict[str, Any] = {"torch": torch, "Enum": Enum, "__name__": "quark_triton_ref"}
    # downcast_to_mxfp_torch imports even_round from quark.torch.quantization.utils itself.
    assert hasattr(quark_utils, "even_round")
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), namespace)
    return namespace


def _is_triton_decorator(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return text.startswith("triton.")


def quark_triton_mxfp4(x: np.ndarray, mode: str = "EVEN") -> tuple[np.ndarray, np.ndarray]:
    """``downcast_to_mxfp_torch(x, torch.uint8, axis=-1, DEQUANT_SCALE_ROUNDING_MODE=mode)``:
    packed E2M1 (``evens | odds << 4``) and scale bytes."""
    import torch

    ns = quark_triton_reference()
    rounding = ns["DequantScaleRoundingMode"][mode]
    codes, scales = ns["downcast_to_mxfp_torch"](
        to_torch(x), torch.uint8, axis=-1, DEQUANT_SCALE_ROUNDING_MODE=rounding
    )
    return as_bytes(codes), as_bytes(scales)


def quark_triton_upcast(codes: np.ndarray, scales: np.ndarray, dtype: Any) -> np.ndarray:
    """``upcast_from_mxfp_torch(codes, scales, dtype, axis=-1)`` (triton.py L831), the torch
    reference of Quark's Triton dequant: packed E2M1 bytes and E8M0 bytes in, ``dtype`` out."""
    import torch

    ns = quark_triton_reference()
    out = ns["upcast_from_mxfp_torch"](torch.from_numpy(np.ascontiguousarray(codes)),
                                       torch.from_numpy(np.ascontiguousarray(scales)), dtype,
                                       axis=-1)
    return from_torch(out)


# -- comparison and reporting -------------------------------------------------------------------


def hexfloats(values: np.ndarray) -> list[str]:
    """Values as exact hex floats (bfloat16 widened exactly), NaN with its bits."""
    out = []
    bits = values.view(np.uint16 if values.dtype.itemsize == 2 else np.uint32)
    with np.errstate(invalid="ignore"):
        wide = values.astype(np.float64)
    for v, b in zip(wide, bits, strict=True):
        if np.isnan(v):
            out.append(f"nan(0x{int(b):0{values.dtype.itemsize * 2}x})")
        else:
            out.append(float(v).hex())
    return out


def unpack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Packed E2M1 bytes (last axis) as one code per element, element 2k from the low nibble."""
    pairs = np.stack([codes & 0xF, codes >> 4], axis=-1)
    return pairs.reshape(*codes.shape[:-1], codes.shape[-1] * 2)


def _blocks_view(codes: np.ndarray, packed: bool, n_blocks: int) -> np.ndarray:
    c = unpack_nibbles(codes) if packed else codes
    return c.reshape(n_blocks, -1)


def mx_mismatches(
    x: np.ndarray,
    ours: tuple[np.ndarray, np.ndarray],
    theirs: tuple[np.ndarray, np.ndarray],
    *,
    packed: bool,
    skip: np.ndarray | None = None,
) -> np.ndarray:
    """Indices of the blocks (of 32 along the last axis, rows of ``x.reshape(-1, 32)``) whose
    scale byte or codes differ; ``skip`` (elements, ``x``'s shape) marks codes not compared."""
    n_blocks = x.size // BLOCK
    s_ours = np.asarray(ours[1]).reshape(n_blocks)
    s_theirs = np.asarray(theirs[1]).reshape(n_blocks)
    c_ours = _blocks_view(np.asarray(ours[0]), packed, n_blocks)
    c_theirs = _blocks_view(np.asarray(theirs[0]), packed, n_blocks)
    differ = c_ours != c_theirs
    if skip is not None:
        differ &= ~np.asarray(skip).reshape(differ.shape)
    bad = (s_ours != s_theirs) | np.any(differ, axis=1)
    return np.flatnonzero(bad)


def mx_report(
    x: np.ndarray,
    ours: tuple[np.ndarray, np.ndarray],
    theirs: tuple[np.ndarray, np.ndarray],
    *,
    packed: bool,
    who: str,
    blocks: Sequence[int],
    labels: Sequence[str] | None = None,
    limit: int = 4,
) -> str:
    """A readable report of the first differing blocks: input (hex floats), both outputs."""
    n_blocks = x.size // BLOCK
    xb = x.reshape(n_blocks, BLOCK)
    s_ours = np.asarray(ours[1]).reshape(n_blocks)
    s_theirs = np.asarray(theirs[1]).reshape(n_blocks)
    c_ours = _blocks_view(np.asarray(ours[0]), packed, n_blocks)
    c_theirs = _blocks_view(np.asarray(theirs[0]), packed, n_blocks)
    lines = [f"{len(blocks)} of {n_blocks} blocks differ between mxformats and {who} "
             f"(input dtype {x.dtype}); first {min(limit, len(blocks))}:"]
    for i in list(blocks)[:limit]:
        diff = np.flatnonzero(c_ours[i] != c_theirs[i])
        label = f" [{labels[i]}]" if labels is not None else ""
        lines.append(f"- block {i}{label}")
        lines.append(f"    input: {hexfloats(xb[i])}")
        lines.append(f"    scale: mxformats 0x{int(s_ours[i]):02x}, {who} 0x{int(s_theirs[i]):02x}")
        lines.append(f"    codes (mxformats): {[f'{int(c):x}' for c in c_ours[i]]}")
        lines.append(f"    codes ({who}): {[f'{int(c):x}' for c in c_theirs[i]]}")
        if diff.size:
            lines.append(f"    differing elements: {diff.tolist()} "
                         f"(inputs {hexfloats(xb[i][diff])})")
    return "\n".join(lines)


def assert_mx_equal(
    x: np.ndarray,
    ours: tuple[np.ndarray, np.ndarray],
    theirs: tuple[np.ndarray, np.ndarray],
    *,
    packed: bool,
    who: str,
    labels: Sequence[str] | None = None,
    skip: np.ndarray | None = None,
) -> None:
    """Byte equality of scales and codes (``np.array_equal`` on the uint8 arrays), with a
    block-level report on failure. ``skip`` marks element codes that are not compared (their
    blocks' scale bytes still are); the caller asserts what the producer does there."""
    o_codes, o_scales = (np.asarray(a) for a in ours)
    t_codes, t_scales = (np.asarray(a) for a in theirs)
    assert o_codes.dtype == np.uint8 and o_scales.dtype == np.uint8, (o_codes.dtype, o_scales.dtype)
    assert t_codes.dtype == np.uint8 and t_scales.dtype == np.uint8, (t_codes.dtype, t_scales.dtype)
    assert o_codes.shape == t_codes.shape, (o_codes.shape, t_codes.shape)
    assert o_scales.shape == t_scales.shape, (o_scales.shape, t_scales.shape)
    if skip is None and np.array_equal(o_codes, t_codes) and np.array_equal(o_scales, t_scales):
        return
    bad = mx_mismatches(x, ours, theirs, packed=packed, skip=skip)
    if not len(bad):
        return
    raise AssertionError(mx_report(x, ours, theirs, packed=packed, who=who, blocks=bad,
                                   labels=labels))


# -- inputs -------------------------------------------------------------------------------------


def cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 → ``dtype`` (round to nearest even; overflow to Inf, NaN kept)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, dtype=np.float64).astype(dtype)


def random_blocks(
    n_blocks: int, dtype: np.dtype, *, seed: int, grid: np.ndarray, emax: int,
    specials: bool = True,
) -> np.ndarray:
    """``(n_blocks, 32)`` random MX blocks of ``dtype``, vectorised.

    Each block draws one kind: Gaussian values at a block exponent over the whole float32
    range (huge and tiny blocks included); element-grid values and their midpoints (ties) at
    the block's scale, some nudged one ulp of ``dtype`` either way; uniformly random bit
    patterns (every exponent, subnormals, NaN payloads and Inf included); a Gaussian block
    with sprinkled ±0, ±Inf, NaN and subnormals (only when ``specials``); sparse blocks (mostly
    ±0). ``grid`` holds the element format's non-negative values and midpoints; ``emax`` its
    largest exponent.
    """
    rng = np.random.default_rng(seed)
    kind = rng.choice(5, size=n_blocks, p=[0.4, 0.25, 0.1, 0.1 if specials else 0.0,
                                            0.15 if specials else 0.25])
    if not specials:
        kind = np.where(kind == 3, 0, kind)
    wide_e = rng.integers(-150, 128, size=(n_blocks, 1))
    narrow_e = rng.integers(-24, 24, size=(n_blocks, 1))
    e = np.where(rng.random((n_blocks, 1)) < 0.5, narrow_e, wide_e)
    sign = rng.choice([-1.0, 1.0], size=(n_blocks, BLOCK))
    # kind 0: Gaussian
    gauss = rng.standard_normal((n_blocks, BLOCK)) * np.exp2(e.astype(np.float64))
    # kind 1: grid values and midpoints at the block scale (ties), nudged by one ulp sometimes
    g = rng.choice(grid, size=(n_blocks, BLOCK)) * sign * np.exp2((e - emax).astype(np.float64))
    ties = cast(g, dtype)
    nudge = rng.choice([-1, 0, 0, 0, 1], size=(n_blocks, BLOCK))
    if dtype != BF16:
        towards = np.where(nudge > 0, np.inf, -np.inf).astype(dtype)
        ties = np.where(nudge == 0, ties, np.nextafter(ties, towards))
    else:
        ties = _next_bf16(ties, nudge)
    # kind 2: random bits
    nbits = 8 * dtype.itemsize
    raw = rng.integers(0, 1 << nbits, size=(n_blocks, BLOCK), dtype=np.uint64)
    bits = raw.astype(np.uint32 if nbits == 32 else np.uint16).view(dtype)
    # kind 3: Gaussian with specials sprinkled in
    pick = rng.random((n_blocks, BLOCK))
    tiny = np.float64(np.finfo(np.float32).smallest_subnormal) * rng.integers(1, 1 << 23, size=(n_blocks, BLOCK))
    special_values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan])
    sprinkled = np.where(pick < 0.08, rng.choice(special_values, size=(n_blocks, BLOCK)),
                         np.where(pick < 0.12, tiny * sign, gauss))
    # kind 4: sparse (all zero, or a few non-zero among signed zeros)
    zeros = np.where(rng.random((n_blocks, BLOCK)) < 0.1, gauss, 0.0 * sign)
    out = np.empty((n_blocks, BLOCK), dtype=dtype)
    k = kind[:, None]
    out[:] = cast(gauss, dtype)
    out = np.where(k == 1, ties, out)
    out = np.where(k == 2, bits, out)
    out = np.where(k == 3, cast(sprinkled, dtype), out)
    out = np.where(k == 4, cast(zeros, dtype), out)
    return out.astype(dtype)


def _next_bf16(x: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """One bfloat16 ulp towards ``direction`` (-1, 0, +1), by bit arithmetic (finite x)."""
    bits = x.view(np.uint16).astype(np.int32)
    negative = (bits & 0x8000) != 0
    magnitude = bits & 0x7FFF
    away = (direction > 0) != negative  # moving away from zero
    is_zero = magnitude == 0
    step = np.where(away, 1, -1)
    new = np.where(is_zero & (direction != 0),
                   np.where(direction > 0, 0x0001, 0x8001),
                   np.where(negative, 0x8000, 0) | np.clip(magnitude + step, 0, 0x7F7F))
    new = np.where((direction == 0) | np.isnan(x.astype(np.float32)), bits, new)
    return new.astype(np.uint16).view(BF16)


def element_grid(values: np.ndarray) -> np.ndarray:
    """An element format's non-negative finite values and the midpoints between neighbours."""
    v = np.unique(np.abs(values[np.isfinite(values)]).astype(np.float64))
    return np.concatenate([v, (v[1:] + v[:-1]) / 2])


def call_or_error(fn: Callable[[], Any]) -> Any:
    """``fn()``, or the exception it raised (to assert on a producer's failure)."""
    try:
        return fn()
    except Exception as exc:
        return exc


#: The quiet NaN torch and numpy produce (bits), by input dtype: the NaN the profiles define.
CANONICAL_NAN = {F32: (0x7FC00000, 0xFFC00000), BF16: (0x7FC0, 0xFFC0), F16: (0x7E00, 0xFE00)}


def nan_mask(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isnan(x.astype(np.float32))


def noncanonical_nan(x: np.ndarray) -> np.ndarray:
    """NaN elements whose bits are not the canonical quiet NaN of ``x``'s dtype (either sign)."""
    bits = x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)
    plus, minus = CANONICAL_NAN[x.dtype]
    return nan_mask(x) & (bits != plus) & (bits != minus)


def stack_blocks(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Hypothesis blocks ``(32,)`` as one ``(n, 32)`` C-contiguous array."""
    return np.ascontiguousarray(np.stack(list(blocks)))


def every_code_and_scale(elem_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Logical codes ``(256, max(32, 2**bits))`` holding every code in each row, and the scale
    bytes ``(256, blocks)``: row ``b`` has every block scaled by byte ``b``."""
    n_codes = 1 << elem_bits
    row = np.tile(np.arange(n_codes, dtype=np.uint8), max(1, BLOCK // n_codes))
    logical = np.tile(row, (256, 1))
    scales = np.repeat(np.arange(256, dtype=np.uint8)[:, None], row.size // BLOCK, axis=1)
    return logical, scales


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit patterns, every NaN counted equal to every NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan_a, nan_b = nan_mask(a), nan_mask(b)
    bits = np.uint16 if a.dtype.itemsize == 2 else np.uint32
    return bool(np.array_equal(nan_a, nan_b)
                and np.array_equal(a.view(bits)[~nan_a], b.view(bits)[~nan_b]))
