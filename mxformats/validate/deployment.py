"""Deployment checks, given ``--target``, ``--tp`` and ``--ep``: will vLLM run it there?

What vLLM's loader needs (``vllm==0.33.0`` from PyPI, paths under
``vllm/model_executor/layers/quantization/``):

- TP splits each routed expert's ``moe_intermediate_size`` (unless EP is on) and the dense
  MLP's ``intermediate_size``; a group-quantized weight needs each partition to be a multiple
  of the group: ``compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_wna16.py:244``
  raises when ``intermediate_size_per_partition % group_size != 0``, and
  ``quark/schemes/quark_ocp_mx.py:192`` registers the MXFP4 scale as a
  ``GroupQuantScaleParameter`` of ``I_part/32`` columns. A packed INT4 weight needs a multiple
  of 8. Attention heads split by TP.
- EP splits the routed experts: ``n_routed_experts % ep == 0``.
- Quark W4A8 has one vLLM kernel, ``QuarkW4A8Fp8MoEMethod``, which asserts ROCm with AITER's
  fused MoE (``quark/quark_moe.py:1420``): it cannot run on CUDA targets.
- Quark MXFP4 (``QuarkOCP_MX``) has native AITER kernels only on gfx950 (MI355X); on gfx942
  (MI300X) and CUDA it dequantizes (emulation): runs, slowly.
- compressed-tensors WNA16 runs through Marlin on CUDA; ROCm kernels are partial (warning).
- FP8 block needs each partition a multiple of 128; NVFP4 has FP4 tensor cores only on sm100.
- fnuz targets (MI300X, e4m3fnuz): ``utils/w8a8_utils.py:127`` and ``:129``
  (``normalize_e4m3fn_to_e4m3fnuz``) double FP8 weight and input scales, so every float scale
  must stay finite when doubled.

Each format's part (the partition multiple, the kernel per target) is its descriptor's
(:attr:`Descriptor.tp_multiple`, :meth:`Descriptor.kernel`, whose rules cite their loader code;
for a mixed-precision format the members' rules, :meth:`Descriptor.paths_for`). SGLang's rules
are in the same descriptors (``engine_paths``) and show in ``mxformats preflight``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from .checkmodule import CheckModule
from .descriptors import Descriptor, by_format
from .findings import Finding, Level, Severity, declare, listed
from .model import CheckpointFormat
from .targets import TARGETS

if TYPE_CHECKING:
    from .model import Checkpoint, Options

__all__ = ["TARGETS", "TP_SIZES", "admissible_tp", "checkpoint_tp", "dense_quantized",
           "deployment_problems", "kernel_table", "run"]


#: Every format the validator reads: the parallel sizes' rules apply to each.
_EVERY_FORMAT = tuple(f.value for f in CheckpointFormat if f is not CheckpointFormat.UNSUPPORTED)
#: The formats with a partition multiple (:attr:`Descriptor.tp_multiple`: every quantized
#: one), and those that may quantize a dense MLP (all but Quark W4A8, whose vLLM scheme is
#: the routed experts' alone).
_GROUPED = tuple(f for f in _EVERY_FORMAT if f != "bf16")
_DENSE_QUANTIZED = tuple(f for f in _GROUPED if f != "quark-w4a8")
DEPLOY_UNSUPPORTED = declare(
    "DEPLOY_UNSUPPORTED", severity=Severity.ERROR, level=Level.STRUCTURE, group="deployment",
    conditions=("a target with no kernel for the scheme", "an unknown target"),
    formats=_EVERY_FORMAT,
    only={"a target with no kernel for the scheme": ("quark-w4a8", "modelopt-fp8-block",
                                                      "modelopt-mixed")},
    meaning="The target cannot run this checkpoint's quantization scheme in vLLM.",
    fix="Pick a target with a kernel for the scheme, or re-quantize for this target.")
DEPLOY_SLOW_PATH = declare(
    "DEPLOY_SLOW_PATH", severity=Severity.WARNING, level=Level.STRUCTURE, group="deployment",
    conditions=("a target that emulates the scheme",),
    formats=("quark-mxfp4", "compressed-tensors-int4", "compressed-tensors-nvfp4",
             "compressed-tensors-mixed", "modelopt-nvfp4", "modelopt-mixed"),
    meaning="The target runs this scheme through an emulation or fallback path (slow).",
    fix="Expect lower throughput, or choose a target with native kernels.")
DEPLOY_NOTE = declare(
    "DEPLOY_NOTE", severity=Severity.INFO, level=Level.STRUCTURE, group="deployment",
    conditions=("a native path on a CUDA target (B200)", "a native path on a ROCm target (MI355X)"),
    formats=("quark-mxfp4", "quark-w4a8", "compressed-tensors-int4", "compressed-tensors-nvfp4",
             "compressed-tensors-fp8-block", "compressed-tensors-mixed", "modelopt-nvfp4",
             "modelopt-mixed", "fp8-block"),
    only={"a native path on a CUDA target (B200)": (
              "compressed-tensors-int4", "compressed-tensors-nvfp4", "compressed-tensors-fp8-block",
              "compressed-tensors-mixed", "modelopt-nvfp4", "modelopt-mixed", "fp8-block"),
          "a native path on a ROCm target (MI355X)": (
              "quark-mxfp4", "quark-w4a8", "compressed-tensors-fp8-block", "fp8-block")},
    meaning="What the target needs to run this checkpoint (runtime, flags).",
    fix="Set up the runtime as described.")
DEPLOY_TP = declare(
    "DEPLOY_TP_DIVISIBILITY", severity=Severity.ERROR, level=Level.STRUCTURE, group="deployment",
    conditions=("a parallel size below 1", "attention heads not divisible",
                "moe_intermediate_size not divisible", "moe_intermediate_size/TP off the group",
                "intermediate_size not divisible", "intermediate_size/TP off the dense group"),
    formats=_EVERY_FORMAT,
    only={"moe_intermediate_size/TP off the group": _GROUPED,
          "intermediate_size/TP off the dense group": _DENSE_QUANTIZED},
    meaning="A dimension the tensor-parallel split cuts is not divisible as the kernels need.",
    fix="Choose another --tp, or enable expert parallelism for the routed experts.")
DEPLOY_EP = declare(
    "DEPLOY_EP_DIVISIBILITY", severity=Severity.ERROR, level=Level.STRUCTURE, group="deployment",
    conditions=("n_routed_experts not divisible",),
    meaning="The routed expert count is not divisible by the expert-parallel size.",
    fix="Choose an --ep that divides n_routed_experts.")
DEPLOY_FNUZ_SCALE = declare(
    "DEPLOY_FNUZ_SCALE", severity=Severity.ERROR, level=Level.SCALES, group="deployment",
    conditions=("above half the dtype's largest value", "below minus half of it"),
    formats=("quark-w4a8", "compressed-tensors-int4", "compressed-tensors-fp8-block",
             "compressed-tensors-mixed", "modelopt-nvfp4", "modelopt-fp8-block", "modelopt-mixed",
             "fp8-block"),
    roles=("weight_scale", "weight_scale_2", "input_scale", "weight_scale_inv"),
    dtypes=("F32", "F16", "BF16"),
    meaning="A float scale overflows when doubled, as vLLM does converting FP8 e4m3fn to e4m3fnuz "
            "(MI300X).",
    fix="Re-quantize with smaller scales, or deploy on a non-fnuz target.")

def deployment_problems(
    fmt: Descriptor,
    target: str | None,
    tp: int,
    ep: int,
    *,
    experts: int,
    moe_intermediate: int,
    intermediate: int,
    heads: int,
    dense_quantized: bool = False,
    ckpt: Checkpoint | None = None,
) -> list[tuple[str, str]]:
    """Pure core: ``(check id, message)`` for a format (its descriptor), target and parallel
    sizes; ``ckpt``, when given, picks a mixed-precision format's kernel path and partition
    multiples from the members its layers use (:meth:`Descriptor.tp_multiples`)."""
    out: list[tuple[str, str]] = []
    group, dense_group = fmt.tp_multiples(ckpt)
    if tp < 1 or ep < 1:
        return [(DEPLOY_TP.id, f"parallel sizes must be >= 1 (tp={tp}, ep={ep})")]
    if heads % tp:
        out.append((DEPLOY_TP.id, f"num_attention_heads {heads} is not divisible by TP {tp}"))
    if ep > 1:
        if experts % ep:
            out.append((DEPLOY_EP.id, f"n_routed_experts {experts} is not divisible by EP {ep}"))
    elif experts:
        if moe_intermediate % tp:
            out.append((DEPLOY_TP.id, f"moe_intermediate_size {moe_intermediate} is not "
                        f"divisible by TP {tp}"))
        elif group and (moe_intermediate // tp) % group:
            out.append((DEPLOY_TP.id, f"moe_intermediate_size/TP = {moe_intermediate // tp} is "
                        f"not a multiple of {group} ({fmt.format.value} groups/packing)"))
    if intermediate % tp:
        out.append((DEPLOY_TP.id, f"intermediate_size {intermediate} is not divisible by TP {tp}"))
    elif dense_quantized and dense_group and (intermediate // tp) % dense_group:
        out.append((DEPLOY_TP.id, f"intermediate_size/TP = {intermediate // tp} is not a "
                    f"multiple of {dense_group} (quantized dense MLP)"))
    if target is None:
        return out
    vendor, arch, _ = TARGETS[target]
    said = fmt.kernel(target, vendor, arch, ckpt)
    if said is not None:
        kind, message = said
        check = {"unsupported": DEPLOY_UNSUPPORTED, "slow": DEPLOY_SLOW_PATH,
                 "note": DEPLOY_NOTE}[kind]
        out.append((check.id, message))
    return out


#: The tensor-parallel sizes the preflight tries.
TP_SIZES = (1, 2, 4, 8, 16, 32, 64)

def admissible_tp(fmt: Descriptor, *, experts: int, moe_intermediate: int, intermediate: int,
                  heads: int, dense_quantized: bool = False,
                  ckpt: Checkpoint | None = None) -> list[int]:
    """The sizes of :data:`TP_SIZES` whose split every kernel accepts (no expert parallelism):
    the rules of :func:`deployment_problems` (``ckpt``: a mixed format's members)."""
    return [tp for tp in TP_SIZES if not deployment_problems(
        fmt, None, tp, 1, experts=experts, moe_intermediate=moe_intermediate,
        intermediate=intermediate, heads=heads, dense_quantized=dense_quantized, ckpt=ckpt)]


def dense_quantized(ckpt: Checkpoint) -> bool:
    """Whether a dense (not expert) MLP of ``ckpt`` is quantized: TP splits its
    ``intermediate_size`` under the format's partition multiple too."""
    return any(m.quantized and ".mlp.gate_proj" in n + "." and ".experts." not in n
               and ".shared_experts" not in n for n, m in ckpt.modules.items())


def checkpoint_tp(ckpt: Checkpoint, fmt: Descriptor) -> list[int] | None:
    """:func:`admissible_tp` of ``ckpt`` stored as ``fmt`` (None without an architecture):
    what ``preflight`` and ``inspect`` both print."""
    a = ckpt.arch
    if a is None:
        return None
    return admissible_tp(fmt, experts=a.experts, moe_intermediate=a.moe_intermediate,
                         intermediate=a.intermediate, heads=a.heads,
                         dense_quantized=dense_quantized(ckpt), ckpt=ckpt)


def kernel_table(fmt: Descriptor, ckpt: Checkpoint | None = None) -> dict[str, str]:
    """vLLM's path for the format on each of :data:`TARGETS`: ``native``, ``emulated``,
    ``unsupported``, or ``-`` where the descriptor says nothing (its generic path); ``ckpt``,
    when given, picks the paths whose requirements it meets (:meth:`Descriptor.kernel`)."""
    table = {}
    for target, (vendor, arch, _) in TARGETS.items():
        said = fmt.kernel(target, vendor, arch, ckpt)
        table[target] = "-" if said is None else {"unsupported": "unsupported",
                                                  "slow": "emulated", "note": "native"}[said[0]]
    return table


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    """Deployment findings when any of ``--target/--tp/--ep`` is given."""
    if opts.target is None and opts.tp is None and opts.ep is None:
        return
    if opts.target is not None and opts.target not in TARGETS:
        yield Finding(DEPLOY_UNSUPPORTED, f"unknown target {opts.target!r}; known: "
                      f"{', '.join(TARGETS)}")
        return
    a = ckpt.arch
    checks = {c.id: c for c in (DEPLOY_UNSUPPORTED, DEPLOY_SLOW_PATH, DEPLOY_NOTE, DEPLOY_TP,
                                DEPLOY_EP)}
    if a is not None:
        desc = ckpt.descriptor or by_format(ckpt.format.value)
        for cid, msg in deployment_problems(
                desc, opts.target, opts.tp or 1, opts.ep or 1, experts=a.experts,
                moe_intermediate=a.moe_intermediate, intermediate=a.intermediate,
                heads=a.heads, dense_quantized=dense_quantized(ckpt), ckpt=ckpt):
            yield Finding(checks[cid], msg, "config.json")
    if opts.target is None or not TARGETS[opts.target][2] or not opts.at_least(Level.SCALES):
        return
    yield from listed(_fnuz_scales(ckpt))


def _fnuz_scales(ckpt: Checkpoint) -> Iterator[Finding]:
    """DEPLOY_FNUZ_SCALE per scale tensor that overflows when doubled; the caller lists them
    (a producer's scale convention makes every module's overflow, or none)."""
    for name, ref in sorted(ckpt.tensors.items()):
        if ref.dtype not in DEPLOY_FNUZ_SCALE.dtypes or not name.endswith(
                DEPLOY_FNUZ_SCALE.roles):
            continue
        try:
            s = ckpt.read(name).astype(np.float64)
        except (ValueError, OSError):
            continue
        top = float(np.finfo(np.float32).max) if ref.dtype == "F32" else (
            65504.0 if ref.dtype == "F16" else 3.3895313892515355e38)
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(s) & (np.abs(s) * 2 > top)
        if np.any(bad):
            i = int(np.argmax(bad.reshape(-1)))
            yield Finding(DEPLOY_FNUZ_SCALE, f"{name}: {int(bad.sum())} scale(s) overflow when "
                          f"doubled for e4m3fnuz, first {float(s.reshape(-1)[i]):.6g}", ref.file,
                          name, ref.begin + i * (ref.nbytes // max(s.size, 1)))


def applies(ckpt: Checkpoint, opts: Options) -> bool:
    """Whether the deployment checks run: any of ``--target/--tp/--ep`` is given."""
    return opts.target is not None or opts.tp is not None or opts.ep is not None


#: The deployment checks as the runner runs them.
CHECK = CheckModule("deployment", run, applies)
