"""Audit of the firing matrix (issue 31): switch off each declared condition in turn and show
that a named test of ``tests/test_check_firing.py`` goes red.

Each entry of :data:`SWITCHES` is one planted bug: a source edit (file, exact old text, new
text) that stops one check firing on one condition, or on one format or tensor role, while
every other condition still fires. The script applies each to a fresh copy of the repository
(never to this checkout), runs the matrix case it names there, and prints a table: the
switch, the test, and whether it went red (``caught``) or stayed green (``MISSED``). Exit 1
when any is missed, or when a declared (check, condition) has no switch here.

``--write-patches DIR`` writes each switch as a mutant patch (tests/mutants/README.md format:
``# mutant:``, ``# must-fail:``, the diff), so that ``tests/mutants/run.py`` can run them too.

Usage::

    python tests/audit_conditions.py                 # every switch
    python tests/audit_conditions.py NAME ...        # these switches
    python tests/audit_conditions.py --list          # the switches and their tests
    python tests/audit_conditions.py --write-patches tests/mutants NAME ...
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

import audit_coverage
import audit_files
import audit_index
import audit_layout
import audit_manifest
import audit_resume
from audit_switch import CTI, CTN, LAYOUT, MON, MX, W4, Switch, one

ROOT = Path(__file__).resolve().parent.parent
STATS = "mxformats/validate/stats.py"
NVFP4 = "mxformats/validate/descriptors/nvfp4.py"
NUMBERS = "mxformats/validate/numbers.py"
DEPLOYMENT = "mxformats/validate/deployment.py"
FP8 = "mxformats/validate/descriptors/fp8_block.py"
W4A8 = "mxformats/validate/descriptors/quark_w4a8.py"
CT_INT4 = "mxformats/validate/descriptors/ct_int4.py"
FP8_MO = "mxformats/validate/descriptors/fp8_block_modelopt.py"
MXFP4 = "mxformats/validate/descriptors/quark_mxfp4.py"
PLAUSIBILITY = "mxformats/validate/plausibility.py"
REPRODUCE = "mxformats/validate/reproduce.py"
_UNAVAILABLE = '        if ref is None and f"{mod.name}.{p}" in ckpt.unavailable:\n'



_BLOCK = ("bad = Count.of(((b & _E4M3_MAG) == _E4M3_MAG) | ((b & _E4M3_MAG) == 0) | "
          "(b >= 0x80))")
_NONFINITE_BITS = "return Count.of((a.view(view) & m) == m)"
_FAR = "every code far below the bound"
_FP8_240, _FP8_208 = ("largest |code| 240, the binade below 256",
                      "largest |code| 208, scales powers of two")
_ZERO_TILE = "a tile of zero codes with the module's scales"
_NV_BELOW_4, _NV_FOUR = ("largest |code| below 4", "largest |code| 4 and a block scale above 384")
_ABOVE, _BELOW, _SIBLINGS = ("a block decoding above 1000", "every block decoding below 1e-05",
                             "an expert 100x its siblings")
_MAG = "DECODED_MAGNITUDE"
_TP = "DEPLOY_TP_DIVISIBILITY"
_RMS_UP, _RMS_DOWN = "an expert 8x above its layer's median", "an expert 8x below it"
_SAME = "        same = (mine.dtype == theirs.dtype and mine.shape == theirs.shape"
_CODE, _SCALE = "a code changed", "a scale changed"
_FLOOR = "a Quark recipe no profile reproduces (floor)"
_FOUR_SIX = "bytes of a recipe the config does not name (Four-Over-Six)"


def _not_compared(name: str, kind: str, what: str, params: str, conditions: tuple[str, ...],
                  catches: tuple[tuple[str, str], ...]) -> Switch:
    """A reproduction switch: the produced tensors ``params`` (a Python expression over
    ``p``) taken as identical whatever their bytes."""
    return Switch(name, kind, what, REPRODUCE, _SAME,
                  _SAME.replace("same = (", f"same = {params} or ("),
                  tuple(("REPRO_MISMATCH", c) for c in conditions),
                  tuple(("REPRO_MISMATCH", c, f) for c, f in catches))

#: Every declared (check, condition) switched off, and switches of a format or a tensor role.
SWITCHES: tuple[Switch, ...] = (
    one("cond_e8m0_nan_off", "value", "E8M0 byte 0xFF not counted", STATS,
         '"nan": count(np.arange(len(counts)) == 0xFF)',
         '"nan": count(np.arange(len(counts)) == -1)', "E8M0_NAN", "byte 0xFF", MX),
    one("cond_e8m0_zero_off", "value", "E8M0 byte 0x00 not counted", STATS,
         '"zero": count(np.arange(len(counts)) == 0)',
         '"zero": count(np.arange(len(counts)) == -1)',
         "E8M0_ZERO", "byte 0x00", MX),
    one("cond_e8m0_range_low_off", "sign", "E8M0 bytes below the window not counted", STATS,
         "outside[2:lo] = True", "outside[2:2] = True", "E8M0_RANGE", "below the window", MX),
    one("cond_e8m0_range_high_off", "sign", "E8M0 bytes above the window not counted", STATS,
         "outside[hi + 1:0xFF] = True", "outside[0xFF:0xFF] = True", "E8M0_RANGE",
         "above the window", MX),
    one("cond_scale_nan_off", "value", "a NaN float scale not counted", STATS,
         '"nonfinite": Count.of(~np.isfinite(s))', '"nonfinite": Count.of(np.isinf(s))',
         "SCALE_NONFINITE", "NaN", CTI),
    one("cond_scale_pos_inf_off", "sign", "a +Inf float scale not counted", STATS,
         '"nonfinite": Count.of(~np.isfinite(s))',
         '"nonfinite": Count.of(np.isnan(s) | (s == -np.inf))', "SCALE_NONFINITE", "+Inf", W4),
    one("cond_scale_neg_inf_off", "sign", "a -Inf float scale not counted", STATS,
         '"nonfinite": Count.of(~np.isfinite(s))',
         '"nonfinite": Count.of(np.isnan(s) | (s == np.inf))', "SCALE_NONFINITE", "-Inf",
         "fp8-block"),
    one("cond_scale_negative_off", "sign", "a negative float scale not counted", STATS,
         '"negative": Count.of(s < 0)', '"negative": Count.of(s < -np.inf)', "SCALE_NEGATIVE",
         "negative", "compressed-tensors-fp8-block"),
    one("cond_scale_zero_off", "value", "a zero float scale not counted", STATS,
         '"zero": Count.of(s == 0)', '"zero": Count.of(s == 1e300)', "SCALE_ZERO", "zero",
         "modelopt-fp8-block"),
    one("cond_w4a8_scale2_low_off", "sign", "max(weight_scale_2) below 448/7.5 not reported",
         STATS, "return Severity.ERROR if top > W4A8_SCALE2_MAX else Severity.WARNING",
         "return Severity.ERROR if top > W4A8_SCALE2_MAX else None", "W4A8_SCALE2_MAX",
         "max below 448/7.5", W4),
    one("cond_w4a8_scale2_high_off", "sign", "max(weight_scale_2) above 448/7.5 not reported",
         STATS, "return Severity.ERROR if top > W4A8_SCALE2_MAX else Severity.WARNING",
         "return None if top > W4A8_SCALE2_MAX else Severity.WARNING", "W4A8_SCALE2_MAX",
         "max above 448/7.5", W4),
    one("cond_nvfp4_block_nan_off", "value", "an E4M3 block scale 0x7F (NaN) not counted",
         NVFP4, _BLOCK, "bad = Count.of((b == 0xFF) | ((b & _E4M3_MAG) == 0) | (b >= 0x80))",
         "NVFP4_BLOCK_SCALE", "NaN (0x7F)", MON),
    one("cond_nvfp4_block_neg_nan_off", "sign", "an E4M3 block scale 0xFF not counted", NVFP4,
         _BLOCK, "bad = Count.of((b == 0x7F) | ((b & _E4M3_MAG) == 0) | ((b >= 0x80) & "
         "(b != 0xFF)))", "NVFP4_BLOCK_SCALE", "negative NaN (0xFF)", CTN),
    one("cond_nvfp4_block_zero_off", "value", "an E4M3 block scale 0x00 not counted", NVFP4,
         _BLOCK, "bad = Count.of(((b & _E4M3_MAG) == _E4M3_MAG) | (b >= 0x80))",
         "NVFP4_BLOCK_SCALE", "zero", MON),
    one("cond_nvfp4_block_neg_zero_off", "sign", "an E4M3 block scale 0x80 not counted",
         NVFP4, _BLOCK, "bad = Count.of(((b & _E4M3_MAG) == _E4M3_MAG) | (b == 0) | "
         "(b > 0x80))", "NVFP4_BLOCK_SCALE", "negative zero", CTN),
    one("cond_nvfp4_block_negative_off", "sign", "a negative E4M3 block scale not counted",
         NVFP4, _BLOCK, "bad = Count.of(((b & _E4M3_MAG) == _E4M3_MAG) | ((b & _E4M3_MAG) == 0))",
         "NVFP4_BLOCK_SCALE", "negative", "modelopt-mixed"),
    one("cond_nvfp4_convention_modelopt_off", "format",
         "the reciprocal convention not reported for ModelOpt", NVFP4,
         "(g[0] < 1) == self.global_is_divisor:",
         "(g[0] < 1) == self.global_is_divisor and self.global_is_divisor:",
         "NVFP4_GLOBAL_CONVENTION", "the other producer's side of 1", MON),
    one("cond_nvfp4_convention_ct_off", "format",
         "the reciprocal convention not reported for compressed-tensors", NVFP4,
         "(g[0] < 1) == self.global_is_divisor:",
         "(g[0] < 1) == self.global_is_divisor and not self.global_is_divisor:",
         "NVFP4_GLOBAL_CONVENTION", "the other producer's side of 1",
         "compressed-tensors-mixed"),
    one("cond_nvfp4_gate_up_gate_larger_off", "sign",
         "a fused pair whose gate global scale is the larger not reported", NVFP4,
         "        differ = _differing(a, b, self.global_name)\n        if differ is None:",
         "        differ = _differing(a, b, self.global_name)\n"
         "        if differ is None or differ[0] > differ[1]:",
         "NVFP4_GATE_UP_SCALE", "an expert's gate_proj differs", MON),
    one("cond_nvfp4_gate_up_up_larger_off", "sign",
         "a fused pair whose up global scale is the larger not reported", NVFP4,
         "        differ = _differing(a, b, self.global_name)\n        if differ is None:",
         "        differ = _differing(a, b, self.global_name)\n"
         "        if differ is None or differ[0] < differ[1]:",
         "NVFP4_GATE_UP_SCALE", "an expert's up_proj differs", CTN),
    one("cond_nvfp4_fused_input_gate_larger_off", "sign",
         "a fused pair whose gate activation scale is the larger not reported", NVFP4,
         "            if differ is not None:\n                yield from listed.add(",
         "            if differ is not None and differ[0] < differ[1]:\n"
         "                yield from listed.add(",
         "NVFP4_FUSED_INPUT_SCALE", "an expert's gate_proj differs", CTN),
    one("cond_nvfp4_fused_input_up_larger_off", "sign",
         "a fused pair whose up activation scale is the larger not reported", NVFP4,
         "            if differ is not None:\n                yield from listed.add(",
         "            if differ is not None and differ[0] > differ[1]:\n"
         "                yield from listed.add(",
         "NVFP4_FUSED_INPUT_SCALE", "an expert's up_proj differs", MON),
    *(Switch(f"cond_nonfinite_{name}_off", kind,
             f"a {cond} BF16/F32 tensor not counted (exponent bits)", STATS, _NONFINITE_BITS,
             f"return Count.of(((a.view(view) & m) == m) & {keep})",
             (("ROUTER_BIAS_NONFINITE", cond), ("TENSOR_NONFINITE", cond)),
             (("ROUTER_BIAS_NONFINITE", cond, router), ("TENSOR_NONFINITE", cond, other)))
      for name, kind, cond, keep, router, other in (
          ("nan", "value", "NaN", "~np.isnan(a.astype(np.float64))", MX, W4),
          ("pos_inf", "sign", "+Inf", "(a.astype(np.float64) != np.inf)", "fp8-block", CTI),
          ("neg_inf", "sign", "-Inf", "(a.astype(np.float64) != -np.inf)", CTN, MON))),
    one("cond_fnuz_positive_off", "sign", "a positive scale overflowing when doubled passes",
         DEPLOYMENT, "bad = np.isfinite(s) & (np.abs(s) * 2 > top)",
         "bad = np.isfinite(s) & (-s * 2 > top)", "DEPLOY_FNUZ_SCALE",
         "above half the dtype's largest value", "compressed-tensors-int4"),
    one("cond_fnuz_negative_off", "sign", "a negative scale overflowing when doubled passes",
         DEPLOYMENT, "bad = np.isfinite(s) & (np.abs(s) * 2 > top)",
         "bad = np.isfinite(s) & (s * 2 > top)", "DEPLOY_FNUZ_SCALE",
         "below minus half of it", W4),
    # a tensor role, a format, a field switched off (every condition of it still declared)
    Switch("cond_nvfp4_input_role_off", "role",
           "the NVFP4 activation scale (input_scale / input_global_scale) not checked", NVFP4,
           "for p in (self.global_name, self.input_name):", "for p in (self.global_name,):",
           (), (("SCALE_NONFINITE", "NaN", MON), ("SCALE_ZERO", "zero", CTN))),
    Switch("cond_w4a8_stage1_role_off", "role", "W4A8's per-tensor weight_scale not checked",
           W4A8, "        for p in self.scale_params:\n            ref, s = module.tensors[p], "
           "arrays[p]", "        for p in self.scale_params[1:]:\n            ref, s = "
           "module.tensors[p], arrays[p]", (), (("SCALE_NEGATIVE", "negative", W4),)),
    Switch("cond_fp8_modelopt_format_off", "format",
           "the ModelOpt FP8 block scales not checked", FP8,
           "        yield from scale_findings(ref, s)\n",
           "        if self.format.value != \"modelopt-fp8-block\":\n"
           "            yield from scale_findings(ref, s)\n",
           (), (("SCALE_NONFINITE", "+Inf", "modelopt-fp8-block"),)),
    Switch("cond_ct_int4_format_off", "format", "compressed-tensors INT4 scales not checked",
           CT_INT4, '        yield from scale_findings(module.tensors["weight_scale"], '
           'arrays["weight_scale"])', "        return iter(())", (),
           (("SCALE_ZERO", "zero", CTI),)),
    Switch("cond_nvfp4_zero_severity_field_off", "field",
           "SCALE_ZERO a warning on a compressed-tensors weight_global_scale (vLLM divides)",
           NVFP4, "divides = param == self.input_name or self.global_is_divisor",
           "divides = param == self.input_name", (),
           (("SCALE_ZERO", "zero", CTN),)),
    *(Switch(name, kind, what, LAYOUT, _UNAVAILABLE, _UNAVAILABLE.replace(
        "ckpt.unavailable:", f"ckpt.unavailable or (\n                {skip}):"),
        (("QUANT_TENSOR_MISSING", "absent"),), (("QUANT_TENSOR_MISSING", "absent", fmt),))
      for name, kind, what, skip, fmt in (
          ("cond_missing_input_global_scale_role_off", "role",
           "a missing input_global_scale not reported",
           'ref is None and p == "input_global_scale"', CTN),
          ("cond_missing_modelopt_fp8_format_off", "format",
           "a missing tensor of a ModelOpt FP8 block module not reported",
           'desc.format.value == "modelopt-fp8-block"', "modelopt-fp8-block"))),
    Switch("cond_dtype_weight_shape_role_off", "role",
           "a compressed-tensors weight_shape of another dtype not reported", LAYOUT,
           "        if ref.dtype not in dtypes:\n",
           "        if ref.dtype not in dtypes and p != \"weight_shape\":\n",
           (("QUANT_DTYPE", "another dtype of the same width"),),
           (("QUANT_DTYPE", "another dtype of the same width", CTI),)),
    Switch("cond_fnuz_bf16_dtype_off", "field", "DEPLOY_FNUZ_SCALE skips BF16 scales",
           DEPLOYMENT, "    dtypes=(\"F32\", \"F16\", \"BF16\"),",
           "    dtypes=(\"F32\", \"F16\"),", (),
           (("DEPLOY_FNUZ_SCALE", "above half the dtype's largest value",
             "compressed-tensors-fp8-block"),)),
    # the packed 4-bit codes' checks: each packing (a format) switched off in turn
    one("cond_not_tight_mxfp4_format_off", "format", "MXFP4 blocks never counted loose",
         STATS, "bad = Count.of(nzg & ~hig & (sc > 1) & (sc < 254))",
         "bad = Count.of(nzg & ~hig & (sc > 1) & (sc < 1))", "SCALE_NOT_TIGHT", _FAR, MX),
    Switch("cond_not_tight_w4a8_format_off", "format", "W4A8 rows never counted loose", STATS,
           "bad = Count.of(nzg[:, 0] & ~hig[:, 0] & ~(s2 <= _F32_EPS * (1 + 1e-6)))",
           "bad = Count.of(nzg[:, 0] & ~hig[:, 0] & (s2 < 0))", (),
           (("SCALE_NOT_TIGHT", _FAR, W4),)),
    Switch("cond_not_tight_int4_format_off", "format",
           "compressed-tensors INT4 groups never counted loose", STATS,
           "bad = Count.of(nz_group & ~hi_group & ~(np.abs(sc) <= _F32_EPS))",
           "bad = Count.of(nz_group & ~hi_group & (np.abs(sc) < 0))", (),
           (("SCALE_NOT_TIGHT", _FAR, CTI), ("SCALE_NOT_TIGHT", _FAR, "compressed-tensors-mixed"))),
    one("cond_zero_row_int4_format_off", "format",
         "an all-zero row of a compressed-tensors INT4 weight not reported", STATS,
         "    elif zero_rows.n:", "    elif zero_rows.n and packing != \"int4-group\":",
         "ROW_ALL_ZERO", "the first row zero", CTI),
    Switch("cond_zero_row_w4a8_format_off", "format",
           "an all-zero row of a W4A8 weight not reported", STATS, "    elif zero_rows.n:",
           "    elif zero_rows.n and packing != \"int4-row\":", (),
           (("ROW_ALL_ZERO", "the first row zero", W4),)),
    one("cond_single_code_nonzero_off", "value", "a weight of one nonzero code not reported",
         STATS, "    if single:", "    if single and zero_rows.n == w.shape[0]:",
         "TENSOR_SINGLE_CODE", "one nonzero code everywhere", "compressed-tensors-mixed"),
    one("cond_single_code_zero_off", "value", "an all-zero weight not reported as one code",
         STATS, "    if single:", "    if single and zero_rows.n < w.shape[0]:",
         "TENSOR_SINGLE_CODE", "zero everywhere", W4),
    one("cond_single_code_signed_zeros_off", "sign",
         "an MXFP4 weight of +0 and -0 codes not reported as one code", STATS,
         "if packing == \"mx-fp4\" and not np.any(nzg):",
         "if packing == \"mx-fp4\" and not np.any(nzg) and False:",
         "TENSOR_SINGLE_CODE", "+0 and -0 mixed", MX),
    one("cond_nvfp4_not_tight_small_off", "value",
         "an NVFP4 block whose largest |code| is below 4 not counted loose", NVFP4,
         "loose = Count.of((gmax > 0) & ~tight & ~clamped)",
         "loose = Count.of((gmax > 3) & ~tight & ~clamped)", "NVFP4_BLOCK_NOT_TIGHT",
         _NV_BELOW_4, CTN),
    one("cond_nvfp4_not_tight_four_off", "value",
         "a largest |code| of 4 always tight (Four-Over-Six assumed)", NVFP4,
         "if self.is_four_over_six(gmax, scales):", "if True:", "NVFP4_BLOCK_NOT_TIGHT",
         _NV_FOUR, MON),
    Switch("cond_nvfp4_not_tight_ct_format_off", "format",
           "compressed-tensors NVFP4 codes not checked", NVFP4,
           "        if gmax.shape != scales.shape:",
           "        if gmax.shape != scales.shape or self.global_is_divisor:", (),
           (("NVFP4_BLOCK_NOT_TIGHT", _NV_BELOW_4, "compressed-tensors-mixed"),)),
    one("cond_fp8_tile_240_off", "value", "an FP8 tile peaking at 240 judged with the ue8m0 "
         "bound 224", FP8, "_TOP_UE8M0 if ue8m0 else _TOP)", "_TOP_UE8M0 if ue8m0 else "
         "_TOP_UE8M0)", "FP8_TILE_NOT_TIGHT", _FP8_240, "fp8-block"),
    one("cond_fp8_tile_ue8m0_off", "value", "the ue8m0 bound lowered to 128", FP8,
         "_TOP_UE8M0 = 0x76", "_TOP_UE8M0 = 0x70", "FP8_TILE_NOT_TIGHT", _FP8_208,
         "compressed-tensors-fp8-block"),
    Switch("cond_fp8_tile_modelopt_format_off", "format", "ModelOpt FP8 block codes not checked",
           FP8_MO, "return super().code_findings(ckpt, module, self._grid(arrays), stats)",
           "return iter(())", (), (("FP8_TILE_NOT_TIGHT", _FP8_240, "modelopt-fp8-block"),)),
    one("cond_fp8_zero_tile_ct_format_off", "format",
         "compressed-tensors FP8 zero tiles' scales not compared", FP8, "        if not marks:",
         "        if not marks or self.scale_name == \"weight_scale\":", "FP8_ZERO_TILE_SCALE",
         _ZERO_TILE, "compressed-tensors-fp8-block"),
    Switch("cond_fp8_zero_tile_deepseek_format_off", "format",
           "DeepSeek FP8 zero tiles' scales not compared", FP8, "        if not marks:",
           "        if not marks or self.scale_name == \"weight_scale_inv\":", (),
           (("FP8_ZERO_TILE_SCALE", _ZERO_TILE, "fp8-block"),)),
    one("cond_fp8_pow2_mantissa_off", "value",
         "a ue8m0 scale 1.5 times a power of two taken for one", FP8, "(mant != 0.5))",
         "(mant != 0.5) & (mant != 0.75))", "FP8_SCALE_NOT_POW2",
         "one scale above a power of two, ue8m0 declared", "fp8-block"),
    # the decoded magnitude: each bound, each scale role that feeds it, one format's scales
    one("cond_decoded_above_off", "value", "a module decoding above 1e3 passes",
         PLAUSIBILITY, "    if m.amax > MAGNITUDE_MAX:", "    if m.amax > MAGNITUDE_MAX * 1e12:",
         _MAG, _ABOVE, MX, "compressed-tensors-fp8-block"),
    one("cond_decoded_below_off", "value", "a module decoding below 1e-5 passes",
         PLAUSIBILITY, "    if 0 < m.amax < MAGNITUDE_MIN:",
         "    if 0 < m.amax < MAGNITUDE_MIN * 1e-9:", _MAG, _BELOW, W4, CTN),
    one("cond_decoded_siblings_off", "value", "an expert 256x its siblings passes",
         PLAUSIBILITY, "rms / median >= SIBLING_RATIO)", "rms / median >= SIBLING_RATIO * 10)",
         _MAG, _SIBLINGS, MON),
    Switch("cond_decoded_ct_global_role_off", "role",
           "the compressed-tensors NVFP4 weight_global_scale left out of the decoded magnitude",
           NVFP4, "factor = E2M1.max / g[0] if self.global_is_divisor else E2M1.max * g[0]",
           "factor = E2M1.max if self.global_is_divisor else E2M1.max * g[0]", (),
           ((_MAG, _SIBLINGS, CTN), (_MAG, _BELOW, "compressed-tensors-mixed"))),
    Switch("cond_decoded_w4a8_stage1_role_off", "role",
           "W4A8's per-tensor weight_scale left out of the decoded magnitude", W4A8,
           "return np.asarray(arrays[\"weight_scale_2\"]), float(s1[0]) * -QMIN",
           "return np.asarray(arrays[\"weight_scale_2\"]), float(-QMIN)", (),
           ((_MAG, _ABOVE, W4),)),
    Switch("cond_decoded_mxfp4_format_off", "format", "MXFP4 modules' magnitude not measured",
           MXFP4, "return np.asarray(arrays[\"weight_scale\"]).view(np.uint8).view(E8M0), "
           "E2M1.max", "return None  # type: ignore[return-value]", (),
           ((_MAG, _BELOW, MX),)),
    # an expert's RMS against its layer: each side, a scale role, a packing
    one("cond_rms_outlier_above_off", "sign", "an expert above its layer's median passes",
         STATS, "        dev = abs(x - med)", "        dev = med - x", "EXPERT_RMS_OUTLIER",
         _RMS_UP, MX),
    one("cond_rms_outlier_below_off", "sign", "an expert below its layer's median passes",
         STATS, "        dev = abs(x - med)", "        dev = x - med", "EXPERT_RMS_OUTLIER",
         _RMS_DOWN, CTI),
    Switch("cond_rms_w4a8_stage1_role_off", "role",
           "W4A8's per-tensor weight_scale left out of an expert's RMS", STATS,
           "sumsq = float((st.gsq[:, 0] * s2[::step] ** 2).sum()) * s1 * s1",
           "sumsq = float((st.gsq[:, 0] * s2[::step] ** 2).sum())", (),
           (("EXPERT_RMS_OUTLIER", _RMS_UP, W4),)),
    Switch("cond_rms_int4_scales_format_off", "format",
           "compressed-tensors INT4 group scales left out of an expert's RMS", STATS,
           "sumsq = float((st.gsq * np.repeat(sc[::step], per, axis=-1) ** 2).sum())",
           "sumsq = float(st.gsq.sum())", (),
           (("EXPERT_RMS_OUTLIER", _RMS_DOWN, "compressed-tensors-mixed"),)),
    # reproduction: codes, scales, one scale role each, and the recipes no profile reproduces
    _not_compared("cond_repro_codes_off", "value", "a produced code tensor taken as identical",
                  'p in ("weight", "weight_packed")', (_CODE,),
                  ((_CODE, MX), (_CODE, "fp8-block"), (_CODE, CTN))),
    _not_compared("cond_repro_scales_off", "value", "a produced scale tensor taken as identical",
                  'p not in ("weight", "weight_packed")', (_SCALE,),
                  ((_SCALE, W4), (_SCALE, "compressed-tensors-fp8-block"), (_SCALE, MON))),
    _not_compared("cond_repro_w4a8_scale_2_role_off", "role",
                  "W4A8's produced weight_scale_2 taken as identical", 'p == "weight_scale_2"',
                  (), ((_SCALE, W4),)),
    _not_compared("cond_repro_scale_inv_role_off", "role",
                  "DeepSeek's produced weight_scale_inv taken as identical",
                  'p == "weight_scale_inv"', (), ((_SCALE, "fp8-block"),)),
    one("cond_repro_floor_claimed_off", "field",
         "a Quark recipe no profile reproduces compared byte for byte (errors)", REPRODUCE,
         'return profile, ckpt.descriptor.unclaimed(ckpt) if ckpt.descriptor is not None else ""',
         'return profile, ""', "REPRO_MISMATCH", _FLOOR, MX),
    one("cond_repro_four_over_six_off", "field",
         "ModelOpt Four-Over-Six bytes compared byte for byte (errors)", NVFP4,
         '        return (f"ModelOpt Four-Over-Six block scales (no non-zero block above "',
         '        return "" and (f"ModelOpt Four-Over-Six block scales (no non-zero block above "',
         "REPRO_MISMATCH", _FOUR_SIX, MON),
    one("cond_repro_uncorrelated_off", "value",
         "a weight uncorrelated with its source passes unless constant", REPRODUCE,
         "    if r.correlation < 0.9:", "    if r.correlation < 0.9 and r.correlation == 0.0:",
         "REPRO_UNCORRELATED", "the codes in reverse order", "compressed-tensors-fp8-block"),
    one("cond_repro_constant_off", "value",
         "a constant weight's correlation left NaN (passes every comparison)", REPRODUCE,
         "result.correlation = stats.correlation if stats.weight_varies else 0.0",
         "result.correlation = stats.correlation if stats.weight_varies else math.nan",
         "REPRO_UNCORRELATED", "every code zero", MX, CTI),
    one("cond_repro_error_within_off", "value",
         "a relative error within 0.5 reported as an error", REPRODUCE,
         "if r.rel_error <= ERROR_LIMIT else Severity.ERROR)",
         "if r.rel_error <= ERROR_LIMIT * 0.01 else Severity.ERROR)", "REPRO_ERROR_HIGH",
         "every scale 1.3x: relative error within 0.5", W4, MON),
    one("cond_repro_error_beyond_off", "value",
         "a relative error beyond 0.5 reported as a warning", REPRODUCE,
         "if r.rel_error <= ERROR_LIMIT else Severity.ERROR)",
         "if r.rel_error <= ERROR_LIMIT * 100 else Severity.ERROR)", "REPRO_ERROR_HIGH",
         "every scale 4x: relative error beyond 0.5", "compressed-tensors-nvfp4"),
    one("cond_repro_error_nan_off", "value", "a module decoding to NaN has no error figure",
         REPRODUCE, "result.rel_error, result.sqnr_db = math.inf, -math.inf",
         "result.rel_error, result.sqnr_db = math.nan, math.nan", "REPRO_ERROR_HIGH",
         "a NaN scale: no finite error", MX, "fp8-block"),
    one("cond_source_absent_off", "value", "a module absent from the source skipped silently",
         REPRODUCE, '    except _Unusable as exc:\n        out.missing = Finding(',
         '    except _Unusable as exc:\n        if "no weight" in str(exc):\n'
         '            return\n        out.missing = Finding(', "REPRO_SOURCE_MISSING",
         "the module absent from the source", "compressed-tensors-nvfp4"),
    one("cond_source_transposed_off", "value", "a transposed source weight accepted",
         REPRODUCE, "        if shape is not None and found != shape:",
         "        if shape is not None and found != shape and found != shape[::-1]:",
         "REPRO_SOURCE_MISSING", "the source weight transposed", W4),
    one("cond_source_nan_unclaimed_off", "value",
         "an unclaimed module with a NaN source judged by nothing, silently", REPRODUCE,
         "    if recipe and r.first_mismatch and math.isnan(r.rel_error):",
         "    if recipe and r.first_mismatch and math.isnan(r.rel_error) and False:",
         "REPRO_SOURCE_MISSING", "a NaN source weight, the bytes unclaimed (floor)", MX),
    one("cond_source_awq_off", "value", "a source quantized otherwise read as BF16",
         REPRODUCE, "    if not source.supported:", "    if not source.supported and False:",
         "REPRO_SOURCE_UNSUPPORTED", "a source quantized otherwise (AWQ)", MX),
    one("cond_source_gone_off", "value", "an absent source folder taken as no --source",
         REPRODUCE,
         '        return Finding(REPRO_SOURCE_UNSUPPORTED, f"--source {opts.source}: {exc}")',
         "        return None", "REPRO_SOURCE_UNSUPPORTED", "no source folder", CTN),
    one("cond_nothing_verified_source_off", "field",
         "a source holding none of the modules reported under another check", REPRODUCE,
         'yield Finding(REPRO_NOTHING_VERIFIED, f"--source {opts.source}: the source holds no "',
         'yield Finding(REPRO_SOURCE_MISSING, f"--source {opts.source}: the source holds no "',
         "REPRO_NOTHING_VERIFIED", "a source holding none of the modules", "fp8-block"),
    one("cond_nothing_verified_profile_off", "field",
         "a format no profile reproduces reported under another check", REPRODUCE,
         'return Finding(REPRO_NOTHING_VERIFIED, f"--source: {ckpt.format.value} has no producer "',
         'return Finding(REPRO_SOURCE_UNSUPPORTED, f"--source: {ckpt.format.value} has no '
         'producer "', "REPRO_NOTHING_VERIFIED", "a format no profile reproduces", "bf16",
         "modelopt-fp8-block"),
    # deployment: each divisibility rule, one format's partition multiple, each target verdict
    *(one(name, kind, what, DEPLOYMENT, old, old.replace(":", " and False:") if new is None
           else new, cid, cond, fmt)
      for name, kind, what, old, new, cid, cond, fmt in (
          ("cond_deploy_tp_below_1_off", "value", "a TP below 1 accepted",
           "    if tp < 1 or ep < 1:", "    if tp < -1 or ep < 1:", _TP, "a parallel size below 1",
           "bf16"),
          ("cond_deploy_heads_off", "field", "attention heads not divisible by TP accepted",
           "    if heads % tp:", None, _TP, "attention heads not divisible", W4),
          ("cond_deploy_moe_off", "field", "moe_intermediate_size not divisible by TP accepted",
           "        if moe_intermediate % tp:", None, _TP, "moe_intermediate_size not divisible",
           MON),
          ("cond_deploy_moe_group_off", "field",
           "moe_intermediate_size/TP off the format's group accepted",
           "        elif group and (moe_intermediate // tp) % group:", None, _TP,
           "moe_intermediate_size/TP off the group", CTI),
          ("cond_deploy_intermediate_off", "field",
           "intermediate_size not divisible by TP accepted", "    if intermediate % tp:", None,
           _TP, "intermediate_size not divisible", MX),
          ("cond_deploy_dense_group_off", "field",
           "intermediate_size/TP off a quantized dense MLP's group accepted",
           "    elif dense_quantized and dense_group and (intermediate // tp) % dense_group:",
           None, _TP, "intermediate_size/TP off the dense group", "modelopt-fp8-block"),
          ("cond_deploy_ep_off", "field", "n_routed_experts not divisible by EP accepted",
           "        if experts % ep:", None, "DEPLOY_EP_DIVISIBILITY",
           "n_routed_experts not divisible", CTN),
          ("cond_deploy_unknown_target_off", "value", "an unknown target not reported",
           "    if opts.target is not None and opts.target not in TARGETS:", None,
           "DEPLOY_UNSUPPORTED", "an unknown target", "fp8-block"))),
    one("cond_deploy_unsupported_off", "value", "a target with no kernel reported as slow",
         DEPLOYMENT, 'check = {"unsupported": DEPLOY_UNSUPPORTED, "slow": DEPLOY_SLOW_PATH,',
         'check = {"unsupported": DEPLOY_SLOW_PATH, "slow": DEPLOY_SLOW_PATH,',
         "DEPLOY_UNSUPPORTED", "a target with no kernel for the scheme", W4),
    one("cond_deploy_slow_off", "value", "an emulated target reported as a note",
         DEPLOYMENT, 'check = {"unsupported": DEPLOY_UNSUPPORTED, "slow": DEPLOY_SLOW_PATH,',
         'check = {"unsupported": DEPLOY_UNSUPPORTED, "slow": DEPLOY_NOTE,',
         "DEPLOY_SLOW_PATH", "a target that emulates the scheme", CTI),
    *(one(f"cond_router_bias_{dtype.lower()}_off", "field",
           f"a router bias stored as {dtype} accepted", NUMBERS,
           '            if ref.dtype != "F32":',
           f'            if ref.dtype not in ("F32", "{dtype}"):',
           "ROUTER_BIAS_DTYPE", f"stored as {dtype}", fmt)
      for dtype, fmt in (("BF16", MX), ("F16", "fp8-block"))),
    one("cond_pack_method_other_off", "value", "a pack_method other than reorder accepted",
         W4A8, '        if method != "reorder":',
         '        if method != "reorder" and method is None:', "PACK_METHOD",
         "another pack_method ('order')", W4),
    one("cond_pack_method_none_off", "value", "no pack_method recorded accepted", W4A8,
         '        if method != "reorder":',
         '        if method != "reorder" and method is not None:',
         "PACK_METHOD", "no pack_method recorded", W4),
    one("cond_expert_all_zero_off", "value", "an all-zero expert not reported", NUMBERS,
         "            if projs and all(z for _, _, z in projs.values()):",
         "            if projs and all(z for _, _, z in projs.values()) and False:",
         "EXPERT_ALL_ZERO", "every projection of an expert zero", CTI, MX),
    one("cond_expert_duplicate_off", "value", "a copied expert not reported", NUMBERS,
         "            if key in seen and _same_bytes(",
         "            if key in seen and False and _same_bytes(",
         "EXPERT_DUPLICATE", "an expert's tensors copied from another's", W4,
         "compressed-tensors-mixed"),
    *(one(f"cond_deploy_note_{vendor}_off", "field", f"no kernel verdict on a {vendor} target",
           DEPLOYMENT,
           "    said = fmt.kernel(target, vendor, arch, ckpt)\n    if said is not None:",
           "    said = fmt.kernel(target, vendor, arch, ckpt)\n"
           f"    if said is not None and vendor != \"{vendor}\":", "DEPLOY_NOTE", cond, fmt)
      for vendor, cond, fmt in (
          ("cuda", "a native path on a CUDA target (B200)", "compressed-tensors-mixed"),
          ("rocm", "a native path on a ROCm target (MI355X)", W4))),
    Switch("cond_deploy_w4a8_multiple_format_off", "format",
           "W4A8's partition multiple (8) dropped", W4A8, "    tp_multiple = 8",
           "    tp_multiple = None", (),
           ((_TP, "moe_intermediate_size/TP off the group", W4),)),
    # the structure checks, a table per group of checks
    *audit_files.SWITCHES,
    *audit_index.SWITCHES,
    *audit_layout.SWITCHES,
    *audit_coverage.SWITCHES,
    *audit_manifest.SWITCHES,
    *audit_resume.SWITCHES,
)


def declared() -> set[tuple[str, str]]:
    """Every declared (check, condition) of the catalogue."""
    sys.path.insert(0, str(ROOT))
    from mxformats.validate.catalogue import load_all

    return {(c.id, cond) for c in load_all().values() for cond in c.conditions}


def apply(switch: Switch, root: Path) -> None:
    """Plant ``switch`` in the copy at ``root`` (its old text must occur exactly once)."""
    path = root / switch.path
    text = path.read_text()
    if text.count(switch.old) != 1:
        raise ValueError(f"{switch.name}: {switch.path} holds its text "
                         f"{text.count(switch.old)} times, not once")
    path.write_text(text.replace(switch.old, switch.new))


def patch_text(switch: Switch) -> str:
    """The switch as a mutant patch (tests/mutants/README.md)."""
    before = (ROOT / switch.path).read_text()
    if before.count(switch.old) != 1:
        raise ValueError(f"{switch.name}: {switch.path} does not hold its text once")
    after = before.replace(switch.old, switch.new)
    diff = difflib.unified_diff(before.splitlines(keepends=True),
                                after.splitlines(keepends=True),
                                f"a/{switch.path}", f"b/{switch.path}", n=3)
    head = [f"# mutant: {switch.what} (issue 31 audit, {switch.kind})"]
    head += [f"# must-fail: {sel}" for sel in switch.selections()]
    return "\n".join(head) + "\n" + f"diff --git a/{switch.path} b/{switch.path}\n" + \
        "".join(diff)


def run_switch(switch: Switch, timeout: int) -> tuple[bool, str]:
    """Plant the switch in a fresh copy of the checkout (made, and its imports mapped to it,
    as ``tests/mutants/run.py`` makes a mutant's), run its matrix cases there: (red, pytest's
    last line)."""
    sys.path.insert(0, str(ROOT / "tests" / "mutants"))
    import run as mutants

    with tempfile.TemporaryDirectory(prefix=f"audit-{switch.name}-") as tmp:
        root = Path(tmp) / "repo"
        mutants.copy_repo(root)
        apply(switch, root)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--basetemp", str(Path(tmp) / "pytest"), *switch.selections()],
            cwd=root, env=mutants.env_for(root), capture_output=True, text=True,
            timeout=timeout)
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        last = lines[-1] if lines else proc.stderr.strip()[-200:]
        return proc.returncode == 1 and " failed" in last, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="switches to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the switches and exit")
    parser.add_argument("--write-patches", type=Path, metavar="DIR",
                        help="write the switches as mutant patches into DIR and exit")
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args(argv)
    by_name = {s.name: s for s in SWITCHES}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown switches: {unknown}")
    chosen = [by_name[n] for n in args.names] or list(SWITCHES)
    if args.list:
        for s in chosen:
            print(f"{s.name:42} {s.kind:7} {s.what}")
            for sel in s.selections():
                print(f"{'':50}{sel}")
        return 0
    if args.write_patches is not None:
        for s in chosen:
            (args.write_patches / f"{s.name}.patch").write_text(patch_text(s))
            print(args.write_patches / f"{s.name}.patch")
        return 0
    uncovered = sorted(declared() - {c for s in SWITCHES for c in s.conditions})
    failed = 0
    print(f"{'switch':42} {'kind':7} {'result':7} test")
    for s in chosen:
        red, last = run_switch(s, args.timeout)
        failed += not red
        for sel in s.selections():
            print(f"{s.name:42} {s.kind:7} {'caught' if red else 'MISSED':7} "
                  f"{sel.split('::', 1)[1]}")
        print(f"{'':58}({last})")
    print(f"{len(chosen) - failed} of {len(chosen)} switches caught by a named test")
    if uncovered:
        print(f"declared conditions with no switch: {uncovered}")
    return 1 if failed or uncovered else 0


if __name__ == "__main__":
    sys.exit(main())
