"""Writes the compressed-tensors INT4 group-128 and per-channel fixtures beside this file with
the real producer: llm-compressor ``oneshot`` + ``QuantizationModifier`` on the BF16 source
model ``tests/data/producers/src-bf16`` (on CPU). Not run by the tests or CI: the fixtures are
committed, and README.md here records how they were made (versions, commands).

Run in a separate venv (torch 2.13.0 CPU, llmcompressor 0.14.0.1, compressed-tensors 0.19.0,
transformers 5.17.0), from the repository root::

    /work/venv-llmc/bin/python tests/data/int4-groups/make_fixtures.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoConfig, DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.conversion_mapping import (
    get_checkpoint_conversion_mapping,
    register_checkpoint_conversion_mapping,
)

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "producers" / "src-bf16"

#: the Kimi INT4 release's ignore list (the group-32 fixture's recipe.yaml)
KIMI_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$", "re:.*shared_experts.*",
               "re:model.layers.0.mlp.*"]
#: group 128: the routed experts' down_proj has moe_intermediate_size 96 columns, which 128
#: does not divide (llm-compressor's divisibility check refuses it, and vLLM's MoE kernels
#: need moe_intermediate_size / TP % 128 == 0), so the recipe quantizes layer 0's dense MLP:
#: gate/up_proj [256, 128] (one group per row) and down_proj [128, 256] (two groups per row)
DENSE_ONLY_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$", "re:.*shared_experts.*",
                     "re:.*mlp\\.experts\\..*"]

RECIPES = {
    "kimi-k2-int4-g128-compressed-tensors": ({"strategy": "group", "group_size": 128},
                                             DENSE_ONLY_IGNORE),
    "kimi-k2-int4-channel-compressed-tensors": ({"strategy": "channel"}, KIMI_IGNORE),
}


class KimiK2Config(DeepseekV3Config):
    """DeepSeek-V3's config under Kimi's ``model_type`` (which transformers does not know), so
    the written config.json keeps ``kimi_k2`` as the source's does."""

    model_type = "kimi_k2"


AutoConfig.register("kimi_k2", KimiK2Config)  # oneshot's validate_model reads the config
# transformers 5 fuses the per-expert Linears of a DeepSeek-V3 checkpoint on load by its
# model_type's conversion mapping: without it, the experts would be left random
register_checkpoint_conversion_mapping(
    "kimi_k2", get_checkpoint_conversion_mapping("deepseek_v3"))


def main() -> None:
    for name, (grouping, ignore) in RECIPES.items():
        out = HERE / name
        shutil.rmtree(out, ignore_errors=True)
        model = DeepseekV3ForCausalLM.from_pretrained(
            SOURCE, config=KimiK2Config.from_pretrained(SOURCE), dtype=torch.bfloat16)
        weights = {"num_bits": 4, "type": "int", "symmetric": True, "dynamic": False,
                   **grouping}
        recipe = QuantizationModifier(
            config_groups={"group_0": {"targets": ["Linear"], "weights": weights}},
            ignore=ignore)
        oneshot(model=model, recipe=recipe)
        # llm-compressor's wrapped save_pretrained: compressed, two shards like the source
        model.save_pretrained(out, save_compressed=True, max_shard_size="1MB")
        (out / "generation_config.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
