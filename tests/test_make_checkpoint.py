"""``make_kimi_checkpoint`` against the real producer checkpoints in ``tests/data/producers/``.

The producers' folders are ground truth (README there). Generated with the fixtures' own
dimensions and shard size, a checkpoint must equal the producer's in everything but the weight
values: the same files, the same config and index text, the same shard headers (names, dtypes,
shapes, order, offsets). Given the fixtures' BF16 source it must reproduce the producers' folders
byte for byte. The rest covers what the fixtures cannot show: the K2.5/K2.6 multimodal layout,
other expert counts, exclude/ignore semantics as vLLM applies them, determinism and numerics.

The decoders here are written from the producers' own layouts (compressed-tensors
``unpack_from_int32``: element 8c+i in nibble i, stored q+8; Quark's reorder packing
[0,2,4,6,1,3,5,7]; OCP MX v1.0 E2M1 with element 2k in the low nibble; see
tests/data/producers/README.md, where each was measured), not with ``mxformats``' own
dequantizers, so the sanity check does not lean on the code it checks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mxformats.tensorfile import read_header, read_safetensors, write_safetensors
from mxformats.testing.checkpoints import (
    CHECKPOINT_FORMATS,
    bf16_twin_path,
    default_recipe,
    make_kimi_checkpoint,
)

PRODUCERS = Path(__file__).parent / "data" / "producers"
SOURCE = PRODUCERS / "src-bf16"
FOLDER = {
    "quark-mxfp4": "kimi-k2-mxfp4-quark",
    "quark-w4a8": "kimi-k2-w4a8-quark",
    "compressed-tensors-int4": "kimi-k2-int4-compressed-tensors",
}
QUANTIZED = list(FOLDER)
#: The FP8 block formats: every tensor of the producer fixture is reproduced (the config and
#: index text are this generator's own).
FP8_FOLDER = {
    "fp8-block-deepseek": "kimi-k2-fp8-block-deepseek",
    "compressed-tensors-fp8-block": "kimi-k2-fp8-block-compressed-tensors",
}
#: The NVFP4 formats: every tensor but the calibrated activation scales is the producer's.
NVFP4_FOLDER = {
    "modelopt-nvfp4": "kimi-k2-nvfp4-modelopt",
    "compressed-tensors-nvfp4": "kimi-k2-nvfp4-compressed-tensors",
}
#: The shard size the producer fixtures were saved with (save_pretrained(max_shard_size="1MB")).
FIXTURE_SHARD_SIZE = 1_000_000
#: Tiny dimensions that keep hundreds of experts fast (multiples of 32 where MXFP4 needs them).
TINY = dict(hidden=32, moe_intermediate=32, intermediate=64, q_lora=32, kv_lora=32, heads=1,
            qk_nope=16, qk_rope=16, v_head=16, vocab=64, layers=2)
BF16 = np.dtype(ml_dtypes.bfloat16)
INDEX = "model.safetensors.index.json"


# -- reading a checkpoint -------------------------------------------------------------------------


def shard_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.safetensors"))


def headers(folder: Path) -> dict[str, dict[str, tuple[str, tuple[int, ...]]]]:
    """{shard: {tensor: (dtype, shape)}} in file order."""
    out = {}
    for f in shard_files(folder):
        header, _ = read_header(folder / f)
        out[f] = {n: (e["dtype"], tuple(e["shape"])) for n, e in header.items() if n != "__metadata__"}
    return out


def flat(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {n: v for h in headers(folder).values() for n, v in h.items()}


def tensors(folder: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for f in shard_files(folder):
        out.update(read_safetensors(folder / f))
    return out


def config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


def quant_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg.get("quantization_config") or cfg["text_config"]["quantization_config"]


def header_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return raw[: 8 + int.from_bytes(raw[:8], "little")]


def make(tmp_path: Path, fmt: str, name: str = "ckpt", **kw: Any) -> Path:
    return make_kimi_checkpoint(tmp_path / name, fmt, **kw)


# -- decoders (the producers' layouts, tests/data/producers/README.md) ----------------------------

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)


def nibbles(words: np.ndarray) -> np.ndarray:
    """int32 words [O, W] -> nibble i of each word as [O, W, 8] (uint8)."""
    u = words.view(np.uint32)[..., None] >> (4 * np.arange(8, dtype=np.uint32))
    return (u & 0xF).astype(np.uint8)


def decode_mxfp4(weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    codes = np.stack([weight & 0xF, weight >> 4], axis=-1).reshape(weight.shape[0], -1)
    s = np.exp2(scale.astype(np.float64) - 127)
    return E2M1[codes] * np.repeat(s, 32, axis=-1)


def decode_w4a8(weight: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    n = nibbles(weight).astype(np.int64)
    q = np.where(n >= 8, n - 16, n)
    cols = np.empty_like(q)
    cols[..., [0, 2, 4, 6, 1, 3, 5, 7]] = q  # nibble i holds column 8c + [0,2,4,6,1,3,5,7][i]
    return cols.reshape(weight.shape[0], -1) * s2.astype(np.float64)[:, None] * float(s1)


def decode_ct(packed: np.ndarray, scale: np.ndarray, shape: np.ndarray) -> np.ndarray:
    q = nibbles(packed).astype(np.int64).reshape(packed.shape[0], -1) - 8
    out, inp = (int(v) for v in shape)
    s = np.repeat(scale.astype(np.float64), 32, axis=-1)[:, :inp]
    return (q[:, :inp] * s)[:out]


def quantized_modules(fmt: str, names: set[str]) -> set[str]:
    marker = ".weight_packed" if fmt.startswith("compressed") else ".weight_scale"
    return {n.removesuffix(marker) for n in names if n.endswith(marker)}


def linear_modules(names: set[str], shapes: dict[str, tuple[str, tuple[int, ...]]]) -> set[str]:
    """Every Linear module (router and LM head included), from the tensor names: a 2-D
    ``weight`` (or a quantized one) that is not an embedding, norm or positional table."""
    out = set()
    for n in names:
        for suffix in (".weight", ".weight_packed"):
            if n.endswith(suffix):
                module = n.removesuffix(suffix)
                if suffix == ".weight" and len(shapes[n][1]) != 2 and f"{n}_scale" not in names:
                    continue
                if "embed" in module or module.endswith("norm") or re.search(r"norm\d?$", module):
                    continue
                out.add(module)
    return out


# -- 1. reproduction of the producers ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_reproduces_producer_checkpoint_byte_for_byte(tmp_path: Path, fmt: str) -> None:
    """From the producers' own source, every file of the producer's folder, byte for byte:
    quantized tensors (the profiles), shard headers, config.json, index, recipe."""
    out = make(tmp_path, fmt, source=SOURCE, max_shard_size=FIXTURE_SHARD_SIZE)
    ref = PRODUCERS / FOLDER[fmt]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ref.iterdir())
    got, want = tensors(out), tensors(ref)
    assert list(got) == list(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        assert got[name].tobytes() == array.tobytes(), f"{fmt}: {name} differs from the producer"
    for f in sorted(p.name for p in ref.iterdir()):
        assert (out / f).read_bytes() == (ref / f).read_bytes(), f"{fmt}: {f} differs"


@pytest.mark.parametrize("fmt", sorted(FP8_FOLDER))
def test_reproduces_fp8_block_producer_tensors(tmp_path: Path, fmt: str) -> None:
    """From the producers' source, every FP8 block shard holds the producer's tensors, in its
    order, byte for byte; the config declares the producer's quantization_config."""
    out = make(tmp_path, fmt, source=SOURCE, max_shard_size=FIXTURE_SHARD_SIZE)
    ref = PRODUCERS / FP8_FOLDER[fmt]
    for shard in sorted(p.name for p in ref.glob("*.safetensors")):
        got, want = read_safetensors(out / shard), read_safetensors(ref / shard)
        assert list(got) == list(want), shard
        for name, array in want.items():
            assert got[name].dtype == array.dtype, name
            assert got[name].tobytes() == array.tobytes(), f"{fmt}: {name} differs"
    assert config(out)["quantization_config"] == config(ref)["quantization_config"]


@pytest.mark.parametrize("fmt", sorted(NVFP4_FOLDER))
def test_reproduces_nvfp4_producer_tensors(tmp_path: Path, fmt: str) -> None:
    """From the producers' source, the NVFP4 checkpoint holds the producer's tensors (names,
    dtypes, shapes), and every one but the activation scales (calibrated by the producer, a
    fixed stand-in here) byte for byte; the config declares the producer's
    quantization_config (ModelOpt: and its hf_quant_config.json)."""
    out = make(tmp_path, fmt, source=SOURCE, max_shard_size=FIXTURE_SHARD_SIZE)
    ref = PRODUCERS / NVFP4_FOLDER[fmt]
    got, want = tensors(out), tensors(ref)
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        if not name.endswith(("input_scale", "input_global_scale")):
            assert got[name].tobytes() == array.tobytes(), f"{fmt}: {name} differs"
    assert config(out)["quantization_config"]["quant_method"] == \
        config(ref)["quantization_config"]["quant_method"]
    if fmt == "modelopt-nvfp4":
        hf = json.loads((out / "hf_quant_config.json").read_text())
        assert hf["quantization"]["quant_algo"] == "NVFP4"


# -- 2. structure of generated checkpoints ---------------------------------------------------------


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_generated_structure_equals_producer(tmp_path: Path, fmt: str) -> None:
    """Generated with the fixtures' dimensions: everything but the weight values equals the
    producer's checkpoint, and the BF16 twin equals the producers' source."""
    out = make(tmp_path, fmt, seed=7, max_shard_size=FIXTURE_SHARD_SIZE)
    for got, ref in ((out, PRODUCERS / FOLDER[fmt]), (bf16_twin_path(out), SOURCE)):
        assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in ref.iterdir())
        # names, dtypes, shapes, shard by shard and in file order
        assert headers(got) == headers(ref)
        assert config(got) == config(ref)
        assert json.loads((got / INDEX).read_text()) == json.loads((ref / INDEX).read_text())
        for f in sorted(p.name for p in ref.iterdir()):
            if f.endswith(".safetensors"):
                assert header_bytes(got / f) == header_bytes(ref / f), f
            else:  # config.json, the index and recipe.yaml: the producers' exact text
                assert (got / f).read_text() == (ref / f).read_text(), f
    # ... and the values are this generator's own, not the fixtures'
    assert tensors(bf16_twin_path(out))["lm_head.weight"].tobytes() != \
        tensors(SOURCE)["lm_head.weight"].tobytes()


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_quantized_tensor_layout(tmp_path: Path, fmt: str) -> None:
    """Per quantized module exactly the producer's tensors, dtypes and shapes (from the BF16
    twin's [O, I]); the router bias F32 and full-precision; nothing else changes dtype."""
    out = make(tmp_path, fmt, experts=6)
    got, src = flat(out), flat(bf16_twin_path(out))
    modules = quantized_modules(fmt, set(got))
    assert modules
    for m in modules:
        dtype, (o, i) = src[f"{m}.weight"]
        assert dtype == "BF16"
        if fmt == "quark-mxfp4":
            want = {"weight": ("U8", (o, i // 2)), "weight_scale": ("U8", (o, i // 32))}
        elif fmt == "quark-w4a8":
            want = {"weight": ("I32", (o, i // 8)), "weight_scale": ("F32", ()),
                    "weight_scale_2": ("F32", (o,))}
        else:
            want = {"weight_packed": ("I32", (o, -(-i // 8))),
                    "weight_scale": ("BF16", (o, -(-i // 32))), "weight_shape": ("I64", (2,))}
        present = {n.removeprefix(m + "."): got[n] for n in got if n.rsplit(".", 1)[0] == m}
        assert present == want, m
    for name, (dtype, shape) in src.items():
        module = name.rsplit(".", 1)[0]
        if module not in modules:
            assert got[name] == (dtype, shape), name
    bias = tensors(bf16_twin_path(out))["model.layers.1.mlp.gate.e_score_correction_bias"]
    assert bias.dtype == np.float32 and bias.shape == (6,)
    assert np.any(bias.astype(BF16).astype(np.float32) != bias), "bias should use full F32"


# -- 3. index conventions and sharding -------------------------------------------------------------


@pytest.mark.parametrize("fmt", [*QUANTIZED, "bf16"])
def test_index_conventions(tmp_path: Path, fmt: str) -> None:
    """Quark: total_size = sum of shard file sizes (headers included), indent 4, weight_map in
    output order; transformers/llm-compressor: sum of tensor bytes, sorted keys. The weight_map
    names exactly the tensors of each shard."""
    out = make(tmp_path, fmt, experts=6, shards=3)
    raw = (out / INDEX).read_text()
    index = json.loads(raw)
    files = shard_files(out)
    assert len(files) == 3 and files[0] == "model-00001-of-00003.safetensors"
    file_bytes = sum((out / f).stat().st_size for f in files)
    tensor_bytes = sum(
        e["data_offsets"][1] - e["data_offsets"][0]
        for f in files for n, e in read_header(out / f)[0].items() if n != "__metadata__"
    )
    assert file_bytes != tensor_bytes
    want = file_bytes if fmt.startswith("quark") else tensor_bytes
    assert index["metadata"]["total_size"] == want
    assert index["weight_map"] == {n: f for f, h in headers(out).items() for n in h}
    if fmt.startswith("quark"):
        assert raw == json.dumps(index, indent=4)
        assert set(index["metadata"]) == {"total_size"}
        assert all(read_header(out / f)[0].get("__metadata__") is None for f in files)
    else:
        assert list(index["weight_map"]) == sorted(index["weight_map"])
        assert all(read_header(out / f)[0]["__metadata__"] == {"format": "pt"} for f in files)
    if fmt == "compressed-tensors-int4":
        elements = sum(int(np.prod(s)) for n, (_, s) in flat(out).items()
                       if not n.endswith("e_score_correction_bias"))
        assert index["metadata"]["total_parameters"] == elements


def test_compressed_tensors_modules_straddle_shards(tmp_path: Path) -> None:
    """llm-compressor saves in module order (weight_scale, weight_packed, weight_shape) and
    splits next-fit, so a module's tensors can sit in two files, as in the real checkpoint."""
    ref = json.loads((PRODUCERS / FOLDER["compressed-tensors-int4"] / INDEX).read_text())
    m = "model.layers.2.mlp.experts.2.down_proj"
    assert ref["weight_map"][f"{m}.weight_packed"] != ref["weight_map"][f"{m}.weight_scale"]
    out = make(tmp_path, "compressed-tensors-int4", seed=3, max_shard_size=FIXTURE_SHARD_SIZE)
    wm = json.loads((out / INDEX).read_text())["weight_map"]
    assert wm == ref["weight_map"]
    assert wm[f"{m}.weight_scale"] != wm[f"{m}.weight_packed"] == wm[f"{m}.weight_shape"]


@pytest.mark.parametrize("fmt", ["bf16", "compressed-tensors-int4", "quark-mxfp4"])
def test_single_shard(tmp_path: Path, fmt: str) -> None:
    """One shard: transformers writes model.safetensors and no index; Quark keeps the file name
    and always writes the index."""
    out = make(tmp_path, fmt, shards=1)
    assert shard_files(out) == ["model.safetensors"]
    assert (out / INDEX).exists() == fmt.startswith("quark")


def test_source_written_and_read_one_shard_at_a_time(tmp_path: Path) -> None:
    """A multi-gigabyte source (the validator benchmarks' 2 GB checkpoint) is generated and
    quantized one shard at a time: with the shard size fixed, a model three times deeper
    leaves the peak of traced allocations where it was, instead of tripling it."""
    import tracemalloc

    def peak(layers: int) -> tuple[int, int]:
        dims = dict(TINY, hidden=256, moe_intermediate=256, intermediate=512, experts=8,
                    layers=layers)
        tracemalloc.start()
        try:
            out = make(tmp_path, "quark-mxfp4", f"layers-{layers}", max_shard_size=1_000_000,
                       **dims)
            return tracemalloc.get_traced_memory()[1], sum(
                p.stat().st_size for p in bf16_twin_path(out).glob("*.safetensors"))
        finally:
            tracemalloc.stop()

    (shallow, shallow_bytes), (deep, deep_bytes) = peak(3), peak(9)
    assert deep_bytes > 2.5 * shallow_bytes
    assert deep < 1.3 * shallow, (shallow, deep)


def test_source_dtypes_from_the_headers(tmp_path: Path) -> None:
    """A source tensor is checked from its shard header: a float one (F32) is read, an
    integer one is refused naming its dtype."""
    src = make(tmp_path, "bf16", "src", **TINY)
    shard = next(iter(sorted(src.glob("*.safetensors"))))
    tensors = read_safetensors(shard)
    name = next(n for n, a in tensors.items() if a.ndim == 2 and "experts" in n)
    write_safetensors(shard, {**tensors, name: np.asarray(tensors[name], np.float32)})
    make_kimi_checkpoint(tmp_path / "from-f32", "quark-mxfp4", source=src)
    write_safetensors(shard, {**tensors, name: np.zeros(tensors[name].shape, np.int8)})
    with pytest.raises(ValueError, match=f"{re.escape(name)} is I8, not a BF16/F32"):
        make_kimi_checkpoint(tmp_path / "from-i8", "quark-mxfp4", source=src)


# -- 4. exclude / ignore semantics ------------------------------------------------------------------


@pytest.mark.parametrize("multimodal", [False, True], ids=["k2", "k25"])
@pytest.mark.parametrize("fmt", QUANTIZED)
def test_exclude_lists_match_tensors(tmp_path: Path, fmt: str, multimodal: bool) -> None:
    """As vLLM reads them (exact names): a module is quantized iff the config's exclude/ignore
    does not list it, and every listed name is an unquantized Linear present in the checkpoint.
    Which modules each producer quantizes: routed experts everywhere, plus the dense MLP for
    MXFP4; never attention, routers, shared experts, LM head, vision tower or projector."""
    out = make(tmp_path, fmt, experts=6, multimodal=multimodal)
    shapes = flat(out)
    names = set(shapes)
    qc = quant_config(config(out))
    listed = qc["exclude"] if fmt.startswith("quark") else qc["ignore"]
    quantized = quantized_modules(fmt, names)
    linears = linear_modules(names, shapes)
    assert quantized <= linears
    assert set(listed) == linears - quantized
    assert len(listed) == len(set(listed))
    p = "language_model.model." if multimodal else "model."
    head = "language_model.lm_head" if multimodal else "lm_head"
    if fmt.startswith("quark"):
        assert listed == sorted(listed)
    else:  # module order: vision tower and projector first (multimodal), layers, LM head last
        assert listed[-1] == head
        text = [n for n in listed if n.startswith(p)]
        assert listed[: len(listed) - len(text) - 1] == [n for n in listed if not n.startswith(p)
                                                          and n != head]
        layer = [int(n.split(".")[len(p.split(".")) ]) for n in text]
        assert layer == sorted(layer)
    assert head in listed and f"{head}.weight" in names
    for m in quantized:
        assert re.fullmatch(rf"{re.escape(p)}layers\.\d+\.mlp\.(experts\.\d+\.)?(gate|up|down)_proj",
                            m), m
    dense = {m for m in quantized if ".experts." not in m}
    assert bool(dense) == (fmt == "quark-mxfp4")
    assert len(quantized - dense) == 2 * 6 * 3
    if multimodal:
        vision = {n for n in names if n.startswith(("vision_tower.", "mm_projector."))}
        assert vision and all(shapes[n][0] == "BF16" for n in vision)
        assert not any(n.endswith(("_scale", "_scale_2", "_packed", "_shape")) for n in vision)


def test_default_recipes() -> None:
    """The text recipes are the producer fixtures' (their README and recipe.yaml)."""
    assert default_recipe("quark-mxfp4") == ["lm_head", "*self_attn*", "*.gate", "*shared_experts*",
                                             "*embed*", "*norm*"]
    assert default_recipe("quark-w4a8") == ["*self_attn*", "*mlp.gate", "*lm_head",
                                            "*mlp.gate_proj", "*mlp.up_proj", "*mlp.down_proj",
                                            "*shared_experts*"]
    recipe = (PRODUCERS / FOLDER["compressed-tensors-int4"] / "recipe.yaml").read_text()
    ignore = re.search(r"ignore: \[(.*)\]", recipe)
    assert ignore is not None
    assert [s.strip().strip("'") for s in ignore.group(1).split(", ")] == \
        default_recipe("compressed-tensors-int4")
    for fmt in QUANTIZED:
        mm = default_recipe(fmt, multimodal=True)
        assert "lm_head" not in mm  # a bare lm_head misses language_model.lm_head
        assert any("vision_tower" in p for p in mm) and any("mm_projector" in p for p in mm)


def test_bare_lm_head_pitfall(tmp_path: Path) -> None:
    """``exclude=`` builds the broken checkpoint on purpose: Quark's bare ``lm_head`` pattern
    does not match ``language_model.lm_head``, which then gets MXFP4-packed."""
    patterns = default_recipe("quark-mxfp4", multimodal=True)
    patterns[patterns.index("*lm_head")] = "lm_head"
    out = make(tmp_path, "quark-mxfp4", multimodal=True, exclude=patterns)
    got = flat(out)
    assert got["language_model.lm_head.weight"][0] == "U8"
    assert "language_model.lm_head.weight_scale" in got
    assert "language_model.lm_head" not in quant_config(config(out))["exclude"]


# -- 5. multimodal layout --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_multimodal_layout(tmp_path: Path, fmt: str) -> None:
    """K2.5/K2.6: KimiK25ForConditionalGeneration with the DeepSeek-V3 fields in text_config;
    the text tensors under ``language_model.`` exactly as the K2 layout's (same dtypes, shapes
    and, for one seed, values); BF16 vision tower and projector; the quantization_config under
    text_config for compressed-tensors, at the top level only for Quark."""
    mm = make(tmp_path, fmt, "mm", multimodal=True, seed=5)
    text = make(tmp_path, fmt, "text", seed=5)
    cfg = config(mm)
    assert cfg["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert cfg["model_type"] == "kimi_k25"
    assert cfg["text_config"]["model_type"] == "kimi_k2"
    tcfg = {k: v for k, v in cfg["text_config"].items() if k != "quantization_config"}
    assert tcfg == {k: v for k, v in config(text).items() if k != "quantization_config"}
    assert "vision_config" in cfg
    if fmt.startswith("quark"):
        assert "quantization_config" in cfg and "quantization_config" not in cfg["text_config"]
    else:
        assert "quantization_config" not in cfg and "quantization_config" in cfg["text_config"]
    got, want = flat(mm), flat(text)

    def rename(n: str) -> str:
        return "language_model." + n

    assert {rename(n): v for n, v in want.items()} == \
        {n: v for n, v in got.items() if n.startswith("language_model.")}
    other = {n: v for n, v in got.items() if not n.startswith("language_model.")}
    assert all(n.startswith(("vision_tower.", "mm_projector.")) for n in other)
    assert all(dtype == "BF16" for dtype, _ in other.values())
    assert other["vision_tower.patch_embed.proj.weight"][1] == (32, 3, 14, 14)
    assert other["mm_projector.proj.0.weight"][1] == (128, 128)
    assert other["mm_projector.proj.2.weight"][1] == (128, 128)
    for block in ("norm0", "norm1", "wqkv", "wo", "mlp.fc0", "mlp.fc1"):
        for p in ("weight", "bias"):
            assert f"vision_tower.encoder.blocks.0.{block}.{p}" in other
    name = "model.layers.1.mlp.experts.2.up_proj.weight"
    a, b = tensors(bf16_twin_path(mm)), tensors(bf16_twin_path(text))
    assert a[rename(name)].tobytes() == b[name].tobytes()
    a, b = tensors(mm), tensors(text)
    assert a[rename(name + "_scale")].tobytes() == b[name + "_scale"].tobytes()


# -- 6. expert counts, MTP -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_six_experts(tmp_path: Path, fmt: str) -> None:
    """A non-power-of-two expert count: the fixture's structure with experts 0..5, the router
    and its bias sized 6, the extra experts shaped like expert 0."""
    out = make(tmp_path, fmt, experts=6)
    assert config(out)["n_routed_experts"] == 6
    got, ref = flat(out), flat(PRODUCERS / FOLDER[fmt])
    assert {n: v for n, v in got.items() if not re.search(r"experts\.[45]\.|mlp\.gate\.", n)} == \
        {n: v for n, v in ref.items() if "mlp.gate." not in n}
    for layer in (1, 2):
        p = f"model.layers.{layer}.mlp."
        assert got[f"{p}gate.weight"] == ("BF16", (6, 128))
        assert got[f"{p}gate.e_score_correction_bias"] == ("F32", (6,))
        experts = {int(m.group(1)) for n in got if (m := re.match(rf"{re.escape(p)}experts\.(\d+)\.", n))}
        assert experts == set(range(6))
        for e in (4, 5):
            for n, v in got.items():
                if n.startswith(f"{p}experts.0."):
                    assert got[n.replace("experts.0.", f"experts.{e}.")] == v


@pytest.mark.parametrize("fmt", ["compressed-tensors-int4", "quark-mxfp4"])
def test_288_experts_is_fast(tmp_path: Path, fmt: str) -> None:
    """A REAM-like 288-expert model with tiny dimensions: complete and quick."""
    out = make(tmp_path, fmt, experts=288, **TINY)
    got = flat(out)
    assert config(out)["n_routed_experts"] == 288
    assert got["model.layers.1.mlp.gate.weight"] == ("BF16", (288, 32))
    assert len(quantized_modules(fmt, set(got)) - {"model.layers.0.mlp.gate_proj",
                                                   "model.layers.0.mlp.up_proj",
                                                   "model.layers.0.mlp.down_proj"}) == 288 * 3


def test_no_mtp_layer_unless_asked(tmp_path: Path) -> None:
    out = make(tmp_path, "bf16")
    assert config(out)["num_nextn_predict_layers"] == 0
    assert not any(n.startswith("model.layers.3.") for n in flat(out))
    mtp = make(tmp_path, "quark-mxfp4", "mtp", nextn=1)
    assert config(mtp)["num_nextn_predict_layers"] == 1
    got = flat(mtp)
    for n in ("embed_tokens.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight",
              "self_attn.q_a_proj.weight", "mlp.experts.3.down_proj.weight_scale"):
        assert f"model.layers.3.{n}" in got
    assert got["model.layers.3.embed_tokens.weight"] == ("BF16", (640, 128))
    # the MTP layer's LM head stays BF16 (vLLM never quantizes an LM head)
    assert got["model.layers.3.shared_head.head.weight"] == ("BF16", (640, 128))
    assert "model.layers.3.shared_head.head.weight_scale" not in got


# -- 7. determinism, twin, source --------------------------------------------------------------------


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_deterministic_per_seed(tmp_path: Path, fmt: str) -> None:
    a = make(tmp_path, fmt, "a", seed=11, experts=6)
    b = make(tmp_path, fmt, "b", seed=11, experts=6)
    c = make(tmp_path, fmt, "c", seed=12, experts=6)
    assert folder_bytes(a) == folder_bytes(b)
    assert folder_bytes(bf16_twin_path(a)) == folder_bytes(bf16_twin_path(b))
    assert headers(a) == headers(c)
    ta, tc = tensors(a), tensors(c)
    assert all(ta[n].tobytes() != tc[n].tobytes() for n in ta if ta[n].size > 64
               and not n.endswith(("norm.weight", "weight_shape")))


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_twin_reproduces_the_checkpoint(tmp_path: Path, fmt: str) -> None:
    """The quantized folder is a function of its twin: re-quantizing the twin with source=
    gives the same bytes. source_out puts the twin elsewhere."""
    twin = tmp_path / "elsewhere" / "src"
    out = make(tmp_path, fmt, experts=6, multimodal=True, source_out=twin)
    assert not bf16_twin_path(out).exists() and (twin / "config.json").exists()
    again = make(tmp_path, fmt, "again", source=twin)
    assert folder_bytes(again) == folder_bytes(out)


def test_bf16_format_is_the_source(tmp_path: Path) -> None:
    out = make(tmp_path, "bf16", experts=6)
    assert not bf16_twin_path(out).exists()
    assert {dtype for dtype, _ in flat(out).values()} == {"BF16", "F32"}
    other = make(tmp_path, "quark-w4a8", "q", experts=6)
    assert folder_bytes(out) == folder_bytes(bf16_twin_path(other))


def test_rejects_bad_requests(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fmt"):
        make(tmp_path, "mxfp4")
    with pytest.raises(ValueError, match="multiple of 32"):
        make(tmp_path, "quark-mxfp4", "odd", hidden=48)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(FileExistsError):
        make(tmp_path, "bf16", "full")
    with pytest.raises(ValueError, match="architecture"):
        make(tmp_path, "quark-mxfp4", "wrong", source=PRODUCERS / FOLDER["quark-mxfp4"])
    assert set(CHECKPOINT_FORMATS) == {*QUANTIZED, *FP8_FOLDER, *NVFP4_FOLDER, "bf16"}


# -- 8. numerics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_dequantizes_close_to_source(tmp_path: Path, fmt: str) -> None:
    """Every quantized weight, decoded as the layout says, is close to its BF16 source:
    relative RMS error and correlation within what each scheme allows on N(0, 0.02) data."""
    out = make(tmp_path, fmt, experts=6, multimodal=True)
    got, src = tensors(out), tensors(bf16_twin_path(out))
    limit = {"quark-mxfp4": 0.2, "quark-w4a8": 0.25, "compressed-tensors-int4": 0.15}[fmt]
    modules = quantized_modules(fmt, set(got))
    assert modules
    for m in sorted(modules):
        w = src[f"{m}.weight"].astype(np.float64)
        if fmt == "quark-mxfp4":
            d = decode_mxfp4(got[f"{m}.weight"], got[f"{m}.weight_scale"])
        elif fmt == "quark-w4a8":
            d = decode_w4a8(got[f"{m}.weight"], got[f"{m}.weight_scale"],
                            got[f"{m}.weight_scale_2"])
        else:
            d = decode_ct(got[f"{m}.weight_packed"], got[f"{m}.weight_scale"],
                          got[f"{m}.weight_shape"])
        assert d.shape == w.shape
        err = np.sqrt(np.mean((d - w) ** 2) / np.mean(w**2))
        assert err < limit, f"{m}: relative error {err:.3f}"
        assert np.corrcoef(d.ravel(), w.ravel())[0, 1] > 0.95, m
