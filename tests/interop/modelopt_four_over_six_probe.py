"""Run ModelOpt 0.47.0's NVFP4 "Four Over Six" recipe and check what spec/nvfp4.md says of it.

    python tests/interop/modelopt_four_over_six_probe.py OUT_DIR

Quantizes a one-layer BF16 Llama (hidden 64, intermediate 128, seeded weights, one all-zero
block) twice with ``mtq.quantize(model, NVFP4_FOUR_OVER_SIX_CFG, forward_loop)`` and
``export_hf_checkpoint``, each time with different calibration tokens, then reports per weight:
whether the two exports are byte-identical (the choice depends on the weight alone) and whether
the spec's formulas (section "ModelOpt Four Over Six") give the exported ``weight``,
``weight_scale`` and ``weight_scale_2``, with the share of blocks at the multiplier 1.5.

On a CUDA machine it runs the producer as is. On a CPU ModelOpt refuses (its Triton kernels
load only with CUDA), so the script lifts that gate alone: the kernel
``static_blockwise_fp4_fake_quant`` runs under the Triton interpreter (``TRITON_INTERPRET=1``)
and ``libdevice.isnan`` is replaced by ``x != x``; every other step is ModelOpt's. On the CPU
this printed, for nvidia-modelopt 0.47.0, torch 2.13, triton 3.9: identical weights across the
two calibrations and all 7 weights reproduced, 45 % of the blocks at 1.5. The per-block choice
on a GPU (``div.full.f32``, CUDA sums) may differ on near ties; run it there to find out.
Not a test: it needs minutes and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import types
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from mxformats.schemes.mx import pack_fp4
from mxformats.schemes.nvfp4 import e2m1_codes

F32 = np.float32
#: The candidate multipliers of the recipe's MSE search (preset nvfp4_four_over_six.yaml).
MULTIPLIERS = (1.0, 1.5)
#: The E4M3 maximum ModelOpt normalizes a 4/6 block scale to (numeric_utils.E4M3_MAX_46).
M46 = 256.0
#: Quantized modules that share one global amax (ModelOpt's fused groups).
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("o_proj",), ("down_proj",))


def _e4m3(value: Any) -> Any:
    return np.asarray(value, F32).astype(ml_dtypes.float8_e4m3fn)


def _fake_quant(x: Any, amax: Any, global_amax: F32) -> Any:
    """ModelOpt's ``static_blockwise_fp4_fake_quant`` on float32 blocks ``x`` ``(n, 16)``:
    ``compute_fp4_scales`` (``_fp8_eager`` on the CPU) then ``nvfp4_scalar_quant``."""
    scale = (amax / F32(6)).astype(F32)
    fp8_amax = F32(F32(global_amax * F32(448 / M46)) / F32(6))
    to_fp8 = F32(F32(448) / fp8_amax)
    scale = (_e4m3(np.clip(scale * to_fp8, -448, 448)).astype(F32) * F32(F32(1) / to_fp8))
    safe = np.where((scale == 0) | ~np.isfinite(scale), F32(1), scale)[:, None]
    q = (np.abs(x) / safe).astype(F32)
    grid = np.select([q <= 0.25, q < 0.75, q <= 1.25, q < 1.75, q <= 2.5, q < 3.5, q <= 5.0],
                     [0, 0.5, 1, 1.5, 2, 3, 4], 6).astype(F32)
    out = (grid * safe).astype(F32)
    return np.where((scale == 0)[:, None], F32(0), np.where(x >= 0, out, -out))


def spec_export(weight: Any, global_amax: F32) -> tuple[Any, Any, F32, Any]:
    """``weight``, ``weight_scale`` bytes, ``weight_scale_2`` and the chosen multiplier index
    per block, as spec/nvfp4.md describes the 4/6 export (losses summed in order)."""
    x = np.asarray(weight, F32).reshape(-1, 16)
    block_amax = np.abs(x).max(axis=1)
    losses = []
    for m in MULTIPLIERS:
        err = ((x - _fake_quant(x, (block_amax * F32(m)).astype(F32), global_amax)) ** 2)
        total = np.zeros(len(x), F32)
        for column in err.astype(F32).T:
            total = (total + column).astype(F32)
        losses.append(total)
    pick = np.argmin(np.stack(losses), axis=0)
    amax = (block_amax * np.asarray(MULTIPLIERS, F32)[pick]).astype(F32)
    scale = (amax / F32(6)).astype(F32)
    scale = np.where(scale == 0, F32(1), scale)
    normalized = (scale * F32(M46)).astype(F32) / F32(global_amax / F32(6))
    scale_bytes = _e4m3(np.clip(normalized, 2.0**-9, 448.0))
    scale_2 = F32(global_amax / F32(6 * M46))
    codes = e2m1_codes((x / (scale_bytes.astype(F32)[:, None] * scale_2)).astype(F32))
    rows = weight.shape[0]
    return (pack_fp4(codes.reshape(rows, -1)), scale_bytes.view(np.uint8).reshape(rows, -1),
            scale_2, pick)


def _cpu_gate_lifted() -> None:
    """Let ModelOpt's Triton fake-quant kernel run under the Triton interpreter on the CPU."""
    import modelopt.torch.kernels.quantization.gemm as kernels
    from modelopt.torch.kernels.quantization.common import nvfp4_quant
    from modelopt.torch.kernels.quantization.gemm import fp4_kernel

    kernels.static_blockwise_fp4_fake_quant = fp4_kernel.static_blockwise_fp4_fake_quant
    kernels.IS_AVAILABLE = True
    fp4_kernel.torch.cuda.device = lambda device: contextlib.nullcontext()
    nvfp4_quant.libdevice = types.SimpleNamespace(isnan=lambda v: v != v)


def quantize_and_export(out: Path, calibration_seed: int) -> dict[str, Any]:
    """Export the probe model with ModelOpt's 4/6 recipe; its source weights (float32)."""
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.quantization.config import NVFP4_FOUR_OVER_SIX_CFG
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
                         max_position_embeddings=64, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("proj.weight"):
                p.copy_((torch.randn(p.shape) * 0.02).to(torch.bfloat16))
        model.model.layers[0].mlp.up_proj.weight[3, 5] = 0.25  # up_proj holds the gate/up amax
        model.model.layers[0].mlp.down_proj.weight[7, :16] = 0  # an all-zero block
    source = {n: p.detach().float().numpy().copy() for n, p in model.named_parameters()
              if n.endswith("proj.weight")}
    tokens = torch.Generator().manual_seed(calibration_seed)

    def forward_loop(m: Any) -> None:
        for _ in range(2):
            m(torch.randint(0, 128, (2, 16), generator=tokens))

    mtq.quantize(model, copy.deepcopy(NVFP4_FOUR_OVER_SIX_CFG), forward_loop)
    export_hf_checkpoint(model, export_dir=str(out))
    return source


def _load(path: Path) -> dict[str, Any]:
    """The export's tensors: 1-byte ones as raw bytes, the others as float32."""
    import torch
    from safetensors.torch import load_file

    return {k: v.contiguous().view(-1).view(torch.uint8).numpy().copy()
            if v.dtype.itemsize == 1 else v.float().numpy()
            for k, v in load_file(str(path / "model.safetensors")).items()}


def main(out_dir: str) -> int:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
        _cpu_gate_lifted()
    out = Path(out_dir)
    source = quantize_and_export(out / "calibration-0", 0)
    quantize_and_export(out / "calibration-7", 7)
    first, second = _load(out / "calibration-0"), _load(out / "calibration-7")
    failures = 0
    for group in GROUPS:
        names = [n for n in source if n.rsplit(".", 2)[-2] in group]
        global_amax = F32(max(np.abs(source[n]).max() for n in names))
        for name in names:
            base = name.removesuffix(".weight")
            stored = {p: first[f"{base}.{p}"] for p in ("weight", "weight_scale", "weight_scale_2")}
            same = all(stored[p].tobytes() == second[f"{base}.{p}"].tobytes() for p in stored)
            packed, scales, scale_2, pick = spec_export(source[name], global_amax)
            match = (packed.tobytes() == stored["weight"].tobytes()
                     and scales.tobytes() == stored["weight_scale"].tobytes()
                     and F32(scale_2).tobytes() == stored["weight_scale_2"].tobytes())
            failures += (not same) + (not match)
            print(f"{base}: calibration-independent {same}, spec formulas {match}, "
                  f"{int(pick.sum())}/{pick.size} blocks at 1.5")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
