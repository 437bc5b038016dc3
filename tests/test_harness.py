"""The kernel-author harness (mxformats.testing.harness) catches planted bugs and reports the
first differing block.

Most tests compare a small hand-written numpy OCP MXFP4 quantizer (``fake_quantize_mx``, built
from the reference codec) with a copy that has one bug planted, passing the fake as the
``reference``: so they pin the harness itself, whatever the profiles do. The tests at the end run
the real ``mxformats.schemes.mx`` reference.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mxformats import E2M1, E4M3FN, E8M0, Format
from mxformats.codec import as_float64
from mxformats.testing import CheckReport, check_dequantizer, check_int4_quantizer, check_quantizer
from mxformats.testing.cases import mx_blocks
from mxformats.testing.harness import find_vectors, hex_value, load_vectors

#: The profile name passed with the fakes: it has no spec vectors, so the fakes' checks do not
#: depend on what spec/vectors/mx/ holds.
FAKE = "fake"

# -- fakes --------------------------------------------------------------------------------------


def fake_quantize_mx(
    x: Any,
    elem: Format = E2M1,
    *,
    block_size: int = 32,
    axis: int = -1,
    profile: str = "ocp",
    rounding: str = "nearest-even",
    swap_nibbles: bool = False,
    scale_offset: int = 0,
    shift_blocks: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """OCP MX: scale 2^(floor(log2 amax) - emax) clamped to E8M0, elements RNE and saturating,
    NaN anywhere -> scale 0xFF; E2M1 packed two per byte, element 2k low. The keywords plant
    bugs."""
    v = np.moveaxis(as_float64(x), axis, -1)
    blocks = v.reshape(*v.shape[:-1], v.shape[-1] // block_size, block_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        amax = np.max(np.abs(blocks), axis=-1)
        usable = np.where(np.isfinite(amax) & (amax > 0), amax, 1.0)
        e = np.floor(np.log2(usable)) - elem.emax
    e = np.where(amax == 0, -127, np.where(np.isinf(amax), 127, e))
    e = np.clip(e, -127, 127).astype(np.int64)
    scales = np.where(np.isnan(amax), 0xFF, e + 127 + scale_offset).astype(np.uint8)
    scaled = np.where(np.isnan(blocks), 0.0, blocks) / np.ldexp(1.0, e)[..., None]
    codes = elem.encode(scaled, rounding=rounding).reshape(v.shape)
    if elem.bits == 4:
        lo, hi = codes[..., 0::2], codes[..., 1::2]
        codes = ((lo << 4) | hi) if swap_nibbles else (lo | (hi << 4))
    if shift_blocks:
        scales = np.roll(scales, shift_blocks, axis=0)
    return (np.moveaxis(codes.astype(np.uint8), -1, axis),
            np.moveaxis(scales, -1, axis))


def fake_dequantize_mx(
    codes: Any,
    scales: Any = None,
    elem: Format = E2M1,
    *,
    block_size: int = 32,
    axis: int = -1,
    profile: str = "ocp",
    dtype: Any = np.float32,
    naive_scale: bool = False,
) -> np.ndarray:
    """OCP decode: element value × 2^(b - 127), NaN where b = 0xFF; ``naive_scale`` plants the
    ``b << 23`` bug (0x00 decodes to 0, 0xFF to +Inf)."""
    c = np.moveaxis(np.asarray(codes), axis, -1)
    s = np.moveaxis(np.asarray(scales), axis, -1).astype(np.int64)
    if elem.bits == 4:
        c = np.stack([c & 0xF, c >> 4], axis=-1).reshape(*c.shape[:-1], -1)
    values = elem.decode(c, np.float64)
    if naive_scale:
        scale = (s.astype(np.uint32) << 23).view(np.float32).astype(np.float64)
    else:
        scale = np.where(s == 0xFF, np.nan, np.ldexp(1.0, s - 127))
    out = values * np.repeat(scale, block_size, axis=-1)
    return np.moveaxis(out.astype(dtype), -1, axis)


def fake_quantize_int4(
    x: Any, *, group_size: int = 32, axis: int = -1, profile: str = "compressed-tensors",
    reciprocal: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric INT4: float32 scale amax / 7.5, q = clamp(round(x / s)); ``reciprocal``
    multiplies by 1/s instead (Quark's arithmetic)."""
    v = as_float64(x).astype(np.float32)
    g = v.reshape(*v.shape[:-1], v.shape[-1] // group_size, group_size)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        amax = np.max(np.abs(g), axis=-1, keepdims=True)
        s = np.maximum(amax / np.float32(7.5), np.finfo(np.float32).tiny)
        q = g * (np.float32(1) / s) if reciprocal else g / s
        q = np.clip(np.rint(np.nan_to_num(q)), -8, 7)
    return q.reshape(v.shape).astype(np.int8), s[..., 0].astype(np.float32)


def planted(**bug: Any) -> Any:
    return functools.partial(fake_quantize_mx, **bug)


def first(report: CheckReport) -> Any:
    assert not report.ok, str(report)
    assert report.mismatch is not None
    return report.mismatch


# -- the fake agrees with itself ----------------------------------------------------------------


def test_identical_function_passes_every_source() -> None:
    report = check_quantizer(fake_quantize_mx, reference=fake_quantize_mx, profile=FAKE, max_examples=25)
    assert report.ok, str(report)
    report.raise_if_failed()
    sources = {r.source for r in report.runs if r.skipped is None}
    assert {"sweep", "boundary", "hypothesis"} <= sources
    # Every bf16 and fp16 pattern in float32, bf16 patterns in bfloat16, two layouts each.
    sweep = {d: sum(r.blocks for r in report.runs if r.source == "sweep" and r.dtype == d)
             for d in ("float32", "bfloat16")}
    assert sweep == {"float32": 4 * 65536 // 32, "bfloat16": 2 * 65536 // 32}
    assert "OK" in str(report).splitlines()[0]


def test_reports_are_deterministic() -> None:
    bug = planted(rounding="nearest-away")
    a = check_quantizer(bug, reference=fake_quantize_mx, profile=FAKE, sources=["hypothesis"], max_examples=30)
    b = check_quantizer(bug, reference=fake_quantize_mx, profile=FAKE, sources=["hypothesis"], max_examples=30)
    strip = [line for line in str(a).splitlines() if " s" not in line]
    assert strip == [line for line in str(b).splitlines() if " s" not in line]


# -- planted bugs: each reported at the right first block ----------------------------------------


def test_catches_flipped_tie_in_the_sweep() -> None:
    m = first(check_quantizer(planted(rounding="nearest-away"), reference=fake_quantize_mx, profile=FAKE))
    # bf16 patterns 0x0000..0x001F: amax 31·2^-133 puts the scale at 2^-127, and pattern 16
    # (2^-129) is 0.25 after scaling: the first tie.
    assert (m.source, m.dtype, m.block) == ("sweep", "float32", 0)
    assert m.label == "sweep: bfloat16 patterns 0x0000..0x001F"
    assert m.expected.scale == m.got.scale == 0x00
    assert m.expected.codes[16] == 0x0 and m.got.codes[16] == 0x1
    assert np.array_equal(m.expected.codes[:16], m.got.codes[:16])
    assert m.summary.startswith("codes differ at element 16")
    text = str(check_quantizer(planted(rounding="nearest-away"), reference=fake_quantize_mx, profile=FAKE,
                               sources=["sweep"], dtypes=["float32"]))
    assert "element 16: input 0x1p-129" in text
    assert "expected code 0x0, got 0x1" in text


def test_catches_flipped_tie_in_the_tie_blocks() -> None:
    m = first(check_quantizer(planted(rounding="nearest-away"), reference=fake_quantize_mx, profile=FAKE,
                              sources=["boundary"]))
    assert m.label == "ties: element midpoints at scale 2^-127"
    assert m.block == 0 and m.inputs.astype(np.float64)[1] == 0.25 * 2.0**-127
    assert (m.expected.codes[1], m.got.codes[1]) == (0x0, 0x1)


def test_catches_swapped_nibbles() -> None:
    m = first(check_quantizer(planted(swap_nibbles=True), reference=fake_quantize_mx, profile=FAKE,
                              sources=["boundary"]))
    assert m.label == "ties: element midpoints at scale 2^-127"
    e, g = m.expected.packed, m.got.packed
    assert np.array_equal(g, ((e & 0xF) << 4) | (e >> 4))
    assert m.expected.scale == m.got.scale
    assert m.summary.startswith("codes differ at element 0")


def test_catches_scale_off_by_one() -> None:
    m = first(check_quantizer(planted(scale_offset=1), reference=fake_quantize_mx, profile=FAKE,
                              sources=["boundary"]))
    assert m.block == 0 and m.got.scale == m.expected.scale + 1
    assert np.array_equal(m.got.codes, m.expected.codes)
    assert m.summary == "scale byte differs"
    text = str(check_quantizer(planted(scale_offset=1), reference=fake_quantize_mx, profile=FAKE,
                               sources=["boundary"]))
    assert "expected scale 0x00 (2^-127)" in text and "got      scale 0x01 (2^-126)" in text


def test_catches_shifted_block_index() -> None:
    m = first(check_quantizer(planted(shift_blocks=1), reference=fake_quantize_mx, profile=FAKE,
                              sources=["boundary"], dtypes=["bfloat16"]))
    blocks = mx_blocks(dtype="bfloat16")
    _, scales = fake_quantize_mx(blocks.values)
    s = scales[:, 0]
    i = int(np.flatnonzero(np.roll(s, 1) != s)[0])
    assert m.block == i and m.batch_size == len(blocks)
    assert m.label == blocks.labels[i]
    assert (m.expected.scale, m.got.scale) == (s[i], s[i - 1])


def test_hypothesis_finds_and_shrinks_a_position_bug() -> None:
    m = first(check_quantizer(planted(shift_blocks=1), reference=fake_quantize_mx, profile=FAKE,
                              sources=["hypothesis"], max_examples=50))
    assert m.source == "hypothesis"
    assert m.batch_size == 2  # shrunk to the smallest batch that shows it
    assert m.label.startswith("hypothesis: shrunk example")


def test_sources_run_in_order_and_stop_at_the_first_difference() -> None:
    report = check_quantizer(planted(scale_offset=1), reference=fake_quantize_mx, profile=FAKE,
                             dtypes=["bfloat16", "float32"])
    assert [r.source for r in report.runs] == ["vectors", "vectors", "sweep"]
    assert report.runs[-1].dtype == "bfloat16"


# -- malformed results and errors ----------------------------------------------------------------


def test_unpacked_codes_are_reported_as_a_shape_problem() -> None:
    def unpacked(x: Any, elem: Format, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        codes, scales = fake_quantize_mx(x, elem, **kw)
        return np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(codes.shape[0], -1), scales

    m = first(check_quantizer(unpacked, reference=fake_quantize_mx, profile=FAKE, sources=["boundary"]))
    assert "codes have dtype uint8 shape" in m.summary and "(17, 16)" not in m.summary
    assert "expected dtype uint8 shape" in m.summary


def test_wrong_return_type_is_reported() -> None:
    m = first(check_quantizer(lambda x, elem, **kw: 42, reference=fake_quantize_mx, profile=FAKE,
                              sources=["boundary"]))
    assert "malformed" in m.summary and "expected (codes, scales)" in m.summary


def test_function_that_raises_is_reported_at_the_first_block_it_refuses() -> None:
    def no_nan(x: Any, elem: Format, **kw: Any) -> Any:
        if np.isnan(as_float64(x)).any():
            raise ValueError("NaN not supported")
        return fake_quantize_mx(x, elem, **kw)

    m = first(check_quantizer(no_nan, reference=fake_quantize_mx, profile=FAKE, sources=["boundary"]))
    assert m.label == "reference: sources.md §6 #18"  # [NaN, 1.0]: the first NaN block
    assert m.got.error == "ValueError: NaN not supported"
    assert m.expected.scale == 0xFF
    assert m.summary == "the function raises on this block"


def test_both_raising_on_a_block_agree() -> None:
    def no_nan(x: Any, elem: Format, **kw: Any) -> Any:
        if np.isnan(as_float64(x)).any():
            raise ValueError("NaN not supported")
        return fake_quantize_mx(x, elem, **kw)

    report = check_quantizer(no_nan, reference=no_nan, sources=["boundary", "sweep"])
    assert report.ok, str(report)


def test_reference_refusing_a_dtype_skips_it_with_a_note() -> None:
    def bf16_only(x: Any, elem: Format, **kw: Any) -> Any:
        if np.asarray(x).dtype.name != "bfloat16":
            raise TypeError("bfloat16 input only")
        return fake_quantize_mx(x, elem, **kw)

    report = check_quantizer(bf16_only, reference=bf16_only, sources=["boundary"])
    assert report.ok
    assert any("float32: skipped" in n and "bfloat16 input only" in n for n in report.notes)
    assert [r.dtype for r in report.runs if r.skipped is None] == ["bfloat16"]


def test_raise_if_failed_carries_the_report() -> None:
    report = check_quantizer(planted(scale_offset=1), reference=fake_quantize_mx, profile=FAKE,
                             sources=["boundary"])
    with pytest.raises(AssertionError) as info:
        report.raise_if_failed()
    text = str(info.value)
    assert text == str(report)
    assert "FIRST DIFFERENCE (scale byte differs)" in text
    assert "found by: boundary (ties: element midpoints at scale 2^-127)" in text
    assert "[ 0] 0x1.8p-125" in text  # the block's values as hex floats


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="dtypes"):
        check_quantizer(fake_quantize_mx, dtypes=["float8"], reference=fake_quantize_mx, profile=FAKE)
    with pytest.raises(ValueError, match="sources"):
        check_quantizer(fake_quantize_mx, sources=["everything"], reference=fake_quantize_mx, profile=FAKE)
    with pytest.raises(ValueError, match="not an MX element"):
        check_quantizer(fake_quantize_mx, elem="int4", reference=fake_quantize_mx, profile=FAKE)


# -- vectors ------------------------------------------------------------------------------------


def test_vectors_are_used_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "vectors" / "mx"
    folder.mkdir(parents=True)
    cases = [
        {"id": "v1", "elem": "e2m1", "input": ["0x1.8p+2", "0x1.4p+2"]},  # [6, 5]: a tie
        {"id": "e4m3 only", "elem": "e4m3fn", "input": ["0x1p+0"]},
        {"id": "not bf16", "input": ["0x1.0000000001p+0"]},
    ]
    (folder / "fake-profile.json").write_text(json.dumps({"cases": cases}))
    monkeypatch.setenv("MXFORMATS_SPEC_DIR", str(tmp_path))
    assert find_vectors("fake-profile") == folder / "fake-profile.json"
    m = first(check_quantizer(planted(rounding="nearest-away"), profile="fake-profile",
                              reference=fake_quantize_mx, dtypes=["bfloat16"]))
    assert (m.source, m.label) == ("vectors", "vectors: fake-profile.json v1")
    assert (m.expected.codes[1], m.got.codes[1]) == (0x6, 0x7)
    report = check_quantizer(fake_quantize_mx, profile="fake-profile",
                             reference=fake_quantize_mx, dtypes=["bfloat16"],
                             sources=["vectors"])
    assert report.ok and report.runs[0].blocks == 1
    assert any("1 case(s) of fake-profile.json not used in bfloat16" in n for n in report.notes)


def test_missing_vectors_are_skipped_with_a_note() -> None:
    report = check_quantizer(fake_quantize_mx, profile="no-such-profile",
                             reference=fake_quantize_mx, sources=["vectors"])
    assert report.ok
    assert report.notes == ("vectors: no spec/vectors/mx/no-such-profile.json here; skipped",)


# -- axis, other elements -----------------------------------------------------------------------


def test_axis_zero_and_wider_elements() -> None:
    report = check_quantizer(fake_quantize_mx, reference=fake_quantize_mx, profile=FAKE, axis=0,
                             sources=["boundary"])
    assert report.ok, str(report)
    m = first(check_quantizer(planted(rounding="nearest-away"), reference=fake_quantize_mx, profile=FAKE,
                              elem=E4M3FN, sources=["boundary"]))
    assert m.label.startswith("ties: element midpoints")
    assert m.expected.packed is not None and m.expected.packed.size == 32  # one byte per code


# -- dequantizer --------------------------------------------------------------------------------


def test_dequantizer_identical_passes() -> None:
    report = check_dequantizer(fake_dequantize_mx, reference=fake_dequantize_mx, profile=FAKE,
                               max_examples=20)
    assert report.ok, str(report)
    runs = {r.source: r for r in report.runs}
    assert runs["vectors"].skipped == "not shipped"
    assert runs["exhaustive"].blocks == 256  # every scale byte, all 16 codes twice


def test_dequantizer_catches_the_shift_by_23_scale_decoder() -> None:
    bug = functools.partial(fake_dequantize_mx, naive_scale=True)
    m = first(check_dequantizer(bug, reference=fake_dequantize_mx, profile=FAKE))
    assert m.source == "exhaustive" and m.input_scale == 0x00
    assert m.summary.startswith("output differs at element 1")  # code 0x1: 0.5 · 2^-127
    text = str(check_dequantizer(bug, reference=fake_dequantize_mx, profile=FAKE))
    assert "element 1: code 0x1: expected 0x1p-128, got 0x0p+0" in text
    assert "input: scale 0x00 (2^-127), codes 0 1 2 3" in text


def test_dequantizer_nan_any() -> None:
    def other_nan(*args: Any, **kw: Any) -> np.ndarray:
        out = fake_dequantize_mx(*args, **kw)
        return np.where(np.isnan(out), -np.float32("nan"), out).astype(np.float32)

    m = first(check_dequantizer(other_nan, reference=fake_dequantize_mx, profile=FAKE))
    assert m.input_scale == 0xFF
    assert check_dequantizer(other_nan, reference=fake_dequantize_mx, profile=FAKE, nan="any").ok


# -- INT4 ---------------------------------------------------------------------------------------


def test_int4_reciprocal_differs_from_division() -> None:
    assert check_int4_quantizer(fake_quantize_int4, reference=fake_quantize_int4,
                                max_examples=20).ok
    bug = functools.partial(fake_quantize_int4, reciprocal=True)
    m = first(check_int4_quantizer(bug, reference=fake_quantize_int4, sources=["boundary"]))
    assert m.summary.startswith("codes differ at element")
    assert np.array_equal(m.expected.scale, m.got.scale)


# -- torch in and out ---------------------------------------------------------------------------


def test_torch_tensors_in_and_out() -> None:
    from conftest import requires

    torch = requires("torch")

    def torch_quantizer(x: Any, elem: Format, **kw: Any) -> tuple[Any, Any]:
        assert isinstance(x, torch.Tensor)
        if x.dtype == torch.bfloat16:
            arr = x.view(torch.int16).numpy().view(np.uint16)
            values = (arr.astype(np.uint32) << 16).view(np.float32)
        else:
            values = x.numpy()
        codes, scales = fake_quantize_mx(values, elem, **kw)
        return torch.from_numpy(codes), torch.from_numpy(scales).view(torch.float8_e8m0fnu)

    report = check_quantizer(torch_quantizer, reference=fake_quantize_mx, profile=FAKE, torch_device="cpu",
                             sources=["boundary", "hypothesis"], max_examples=10)
    assert report.ok, str(report)


# -- rendering ------------------------------------------------------------------------------------


def test_hex_value() -> None:
    assert hex_value(6.0) == "0x1.8p+2"
    assert hex_value(-0.0) == "-0x0p+0"
    assert hex_value(2.0**-149) == "0x1p-149"
    assert hex_value(float("inf")) == "inf" and hex_value(float("nan")) == "nan"
    assert E8M0.decode(0) == np.float32(2.0**-127)


# -- the real reference ---------------------------------------------------------------------------


def real_quantize_mx() -> Any:
    from mxformats.schemes.mx import quantize_mx

    return quantize_mx


@pytest.mark.parametrize("profile", ["ocp", "torchao-floor", "quark"])
def test_real_reference_agrees_with_itself(profile: str) -> None:
    quantize_mx = real_quantize_mx()
    report = check_quantizer(quantize_mx, profile=profile, sources=["vectors", "boundary"])
    assert report.ok, str(report)


def test_real_reference_with_a_planted_nibble_swap() -> None:
    quantize_mx = real_quantize_mx()

    def swapped(x: Any, elem: Format, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        codes, scales = quantize_mx(x, elem, **kw)
        return ((codes & 0xF) << 4) | (codes >> 4), scales

    m = first(check_quantizer(swapped, profile="ocp", sources=["boundary"]))
    assert m.source == "boundary" and m.summary.startswith("codes differ")


def test_fake_is_the_ocp_profile_on_finite_blocks() -> None:
    quantize_mx = real_quantize_mx()
    blocks = mx_blocks(families=["ties", "scale-boundaries", "tiny", "random"], n=16)
    finite = blocks.values[np.isfinite(blocks.values).all(axis=1)]
    codes, scales = quantize_mx(finite, E2M1, profile="ocp")
    fake_codes, fake_scales = fake_quantize_mx(finite)
    assert np.array_equal(codes, fake_codes) and np.array_equal(scales, fake_scales)


def test_real_vectors_come_first_and_name_the_vector() -> None:
    quantize_mx = real_quantize_mx()

    def half_up(x: Any, elem: Format, **kw: Any) -> Any:
        return quantize_mx(x, elem, **{**kw, "profile": "quark-triton"})

    m = first(check_quantizer(half_up, profile="ocp"))
    assert m.source == "vectors" and m.label.startswith("vectors: ocp.json formats.md §6 #1")
    assert (m.expected.codes[1], m.got.codes[1]) == (0x6, 0x7)  # 5.0: nearest-even vs half-up


def test_real_dequantizer_vectors() -> None:
    from mxformats.schemes.mx import dequantize_mx

    def spec_decoder(codes: Any, scales: Any, elem: Format, **kw: Any) -> Any:
        return dequantize_mx(codes, scales, elem, **{**kw, "profile": "ocp"})

    assert check_dequantizer(dequantize_mx, profile="quark-hip-fp16", dtype="float16",
                             max_examples=10).ok
    m = first(check_dequantizer(spec_decoder, profile="quark-hip-fp16", dtype="float16"))
    # sources.md §6.8 #49: Quark's HIP fp16 decoder clamps the NaN scale 0xFF to 2^15.
    assert m.source == "vectors" and "#49" in m.label and m.input_scale == 0xFF


def test_torch_dequantizer() -> None:
    from conftest import requires

    torch = requires("torch")

    def torch_dequantizer(codes: Any, scales: Any, elem: Format, *, dtype: Any,
                          **kw: Any) -> Any:
        assert isinstance(codes, torch.Tensor) and codes.dtype == torch.uint8
        assert dtype == torch.bfloat16
        out = fake_dequantize_mx(codes.numpy(), scales.numpy(), elem, dtype=np.float32, **kw)
        return torch.from_numpy(out).to(torch.bfloat16)

    report = check_dequantizer(torch_dequantizer, reference=fake_dequantize_mx, profile=FAKE,
                               dtype="bfloat16", torch_device="cpu", max_examples=10)
    # torch's float32 -> bfloat16 cast writes NaN as 0xFFFF: bit for bit, that is a difference.
    m = first(report)
    assert m.input_scale == 0xFF
    assert m.got.output is not None and m.got.output.view(np.uint16)[0] == 0xFFFF
    report = check_dequantizer(torch_dequantizer, reference=fake_dequantize_mx, profile=FAKE,
                               dtype="bfloat16", torch_device="cpu", max_examples=10, nan="any")
    assert report.ok, str(report)


def test_vectors_come_from_the_generator_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MXFORMATS_SPEC_DIR", raising=False)
    loaded = load_vectors("ocp")
    assert loaded is not None and loaded[0] == "ocp.json"
    committed = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "mx" / "ocp.json"
    assert loaded[1] == json.loads(committed.read_text(encoding="utf-8"))
    assert load_vectors("no-such-profile") is None
