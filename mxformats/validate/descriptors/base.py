"""What every checkpoint-format descriptor provides, and the helpers they share.

A descriptor is one module of :mod:`mxformats.validate.descriptors` holding everything the
validator knows about one checkpoint format: how its configs name it (:meth:`Descriptor.detect`),
the exclude/ignore list and how its loader matches it, the tensors each quantized Linear
carries (names, dtypes, shapes), the config keys its loader rejects, its numeric checks and
the reference profile that reproduces its bytes for ``--source``. The shared check modules
(``layout``, ``numbers``, ``reproduce``) ask the checkpoint's descriptor and never branch on a
format's name.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mxformats.fast.passes import COMPILED, OnePass
from mxformats.pairing import default_consumer

from ..excludes import ExcludeMatcher, literal_alternation
from ..model import CheckpointFormat, CodeStats
from ..targets import TARGETS

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

    from ..findings import Finding
    from ..model import Checkpoint, ExpectedModule, Module

__all__ = ["Configs", "Descriptor", "EnginePath", "MixedDescriptor", "ModelOptMatcher",
           "TensorSpec", "cdiv"]

#: param -> (accepted dtypes, accepted shapes); the first of each is the usual one.
TensorSpec = dict[str, tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]]


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``."""
    return -(-a // b)


@dataclass(frozen=True)
class Configs:
    """The quantization configs a folder holds: config.json's ``quantization_config`` (top
    level, else ``text_config``'s; None when absent) and ``hf_quant_config.json`` (None when
    absent)."""

    quant_config: Mapping[str, Any] | None
    hf_quant_config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EnginePath:
    """One serving engine's kernel path for a format on some targets: a preflight rule.

    ``engine``: ``vllm`` or ``sglang``; ``kind``: ``native``, ``emulated`` (a dequantizing or
    fallback path: runs, slowly) or ``unsupported``; ``what``: the path in words (``{target}``
    and ``{arch}`` are filled in); ``source``: the loader code the rule comes from (repository,
    path, commit); ``archs``: the target archs or vendors (``sm90``, ``rocm``...) it applies to,
    empty for every target; ``requires``: the eligibility rule the checkpoint must meet
    (:meth:`Descriptor.path_problems`), None when the path takes every checkpoint of the format.
    The first path of an engine that applies and whose requirements hold is the one it runs.
    """

    engine: str
    kind: str
    what: str
    source: str
    archs: tuple[str, ...] = ()
    requires: str | None = None

    def applies(self, engine: str, vendor: str, arch: str) -> bool:
        """Whether this path is ``engine``'s on a target of ``vendor``/``arch``."""
        return self.engine == engine and (not self.archs or arch in self.archs
                                          or vendor in self.archs)

    def describe(self, target: str, arch: str) -> str:
        """:attr:`what` for ``target``."""
        return self.what.format(target=target, arch=arch)


#: EnginePath.kind -> the kind :meth:`Descriptor.kernel` reports (deployment's check)
_DEPLOY_KIND = {"native": "note", "emulated": "slow", "unsupported": "unsupported"}


class ModelOptMatcher(ExcludeMatcher):
    """vLLM's ModelOpt ``exclude_modules`` matching: an exact name, a substring of the module
    name (also with ``language_model.`` removed), or an ``fnmatch`` wildcard. Source: vLLM
    ``vllm/model_executor/layers/quantization/modelopt.py``
    ``ModelOptQuantConfigBase.is_layer_excluded`` (commit
    00155cdecca722d98e34234c3d172725b7720b7d). A glob here is a real pattern, never
    ``EXCLUDE_GLOB``."""

    globs_match = True

    def __init__(self, patterns: list[str]) -> None:
        super().__init__([p for p in patterns if not p.startswith("re:")])
        self.patterns = list(patterns)
        # One C-level scan per module instead of a Python loop over every entry: an entry hits
        # when it is a substring of the name (equality and the ``language_model.``-less name
        # are substrings of it too) or when the name fnmatches it.
        # An entry without fnmatch's special characters matches only its own name as a glob,
        # which the substring scan finds already: only real globs need the second regex.
        unique = list(dict.fromkeys(self.patterns))
        globs = [p for p in unique if any(c in p for c in "*?[")]
        self._substring = re.compile(literal_alternation(unique)) if unique else None
        self._glob = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in globs)
                                ) if globs else None

    def __call__(self, module: str) -> bool:
        return self._substring is not None and bool(
            self._substring.search(module)
            or (self._glob is not None and self._glob.match(module)))

    def unmatched(self, modules: Any) -> list[str]:
        names = sorted(set(modules))
        joined = "\n".join(names)
        return [p for p in dict.fromkeys(self.patterns)
                if not (p in joined if "\n" not in p and p else
                        any(p in n for n in names))
                and not fnmatch.filter(names, p)]


class Descriptor:
    """One checkpoint format. Subclasses set the class attributes and override what differs.

    Attributes:
        format: the :class:`~mxformats.validate.model.CheckpointFormat` it describes.
        detail: the one-line description reports print.
        numeric: whether its numbers are verified (``numbers`` runs at ``scales``/``full``).
        weight_param: the parameter holding the codes (``weight`` or ``weight_packed``).
        scale_params: the scale tensors read at level ``scales``.
        small_params: further small tensors read at level ``scales`` (``weight_shape``...).
        needs_exclude_entries: a BF16 Linear the list does not exclude fails to load (vLLM
            builds every Linear with the scheme); False where a module's own tensors decide.
        profile: the reference profile that reproduces its bytes (None: no ``--source``).
        quantizer: the function :meth:`produce` quantizes with: the :mod:`mxformats.fast` path
            of :attr:`profile`'s reference quantizer (the reference stays the definition; the
            fast path returns its bytes, on :func:`mxformats.fast.workers` threads); None where
            the format has no producer profile.
        scheme: the profile's scheme, the API that takes it (``mx``, ``int4``, ``w4a8``,
            ``nvfp4``, ``fp8-block``; None where the format has no single producer profile).
        error_threshold: the dequantized relative error above which ``--source`` reports.
        missing_hint: per parameter, the converter bug a missing tensor points to.
    """

    format: CheckpointFormat = CheckpointFormat.UNSUPPORTED
    detail: str = ""
    numeric: bool = False
    weight_param: str = "weight"
    scale_params: tuple[str, ...] = ()
    small_params: tuple[str, ...] = ()
    needs_exclude_entries: bool = True
    profile: str | None = None
    quantizer: Callable[..., Any] | None = None
    scheme: str | None = None
    error_threshold: float = 0.15
    #: param -> the converter bug its absence looks like (QUANT_TENSOR_MISSING says it)
    missing_hint: Mapping[str, str] = {}
    #: why a BF16 Linear the exclude list misses does not load (NOT_EXCLUDED_UNQUANTIZED)
    bf16_linear_why = "vLLM builds it quantized and its BF16 weight raises KeyError"
    #: what the loader does with a checkpoint that declares this format but stores every
    #: module BF16, where the format judges a BF16 Linear by its own tensors
    #: (:attr:`needs_exclude_entries` False) yet the loader builds the Linears the list leaves
    #: quantized and decodes them wrong: NOTHING_QUANTIZED is then an error saying so; None
    #: where it stays a warning
    all_bf16_why: str | None = None

    # -- detection and config ---------------------------------------------------------------

    def detect(self, configs: Configs) -> str | None:
        """The report's detail line when ``configs`` declare this format, else None."""
        raise NotImplementedError

    def for_configs(self, configs: Configs) -> Descriptor:
        """The descriptor of a checkpoint whose ``configs`` this one detected: itself, or the
        variant of it whose producer profile the configs name (:attr:`profile`)."""
        return self

    def exclude_list(self, configs: Configs) -> list[str]:
        """The exclude/ignore entries as the loader reads them."""
        qc = configs.quant_config or {}
        entries = qc.get("ignore")
        return [str(e) for e in entries] if isinstance(entries, list) else []

    def matcher(self, entries: list[str]) -> ExcludeMatcher:
        """How the loader matches the entries (exact or ``re:`` unless overridden)."""
        return ExcludeMatcher(entries)

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        """Config values the loader rejects or mis-reads (one message each)."""
        return []

    def config_warnings(self, ckpt: Checkpoint) -> list[str]:
        """Config values the loader accepts but mxformats cannot verify (one message each;
        the layout check reports each as a CONFIG_QUANT warning)."""
        return []

    def config_findings(self, ckpt: Checkpoint) -> Iterator[Finding]:
        """Format-specific config findings beyond CONFIG_QUANT."""
        return iter(())

    def unquantizable(self, exp: ExpectedModule) -> str | None:
        """Why the loader cannot load ``exp`` quantized in this format (None: it can)."""
        return None

    def for_module(self, ckpt: Checkpoint, module: str) -> Descriptor:
        """The descriptor ``module`` is stored in: this one, except in a mixed-precision
        checkpoint, where each module follows its own group's scheme."""
        return self

    # -- tensors ----------------------------------------------------------------------------

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        """The tensors of a quantized Linear ``[out, inp]``."""
        return {}

    def dtype_note(self, param: str, dtype: str) -> str | None:
        """Why an accepted but non-first ``dtype`` of ``param`` deserves QUANT_DTYPE_UNUSUAL,
        in words (None: it loads as the first does and needs no note)."""
        return None

    def quantized(self, module: Module) -> bool:
        """Whether ``module`` carries this format's weight and scales (numeric checks run)."""
        need = (self.weight_param, *self.scale_params)
        return module.quantized and all(p in module.tensors for p in need)

    # -- numbers ----------------------------------------------------------------------------

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        """Findings on one module's scale tensors (level ``scales``)."""
        return iter(())

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        """Findings that need the codes (level ``full``); fills ``stats`` where it can.
        ValueError: shapes that do not fit the format (the layout checks report them)."""
        return iter(())

    def layer_findings(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                       ) -> Iterator[Finding]:
        """Findings across the modules of the checkpoint (sibling scales; ``arrays``: module
        name -> the scale arrays read)."""
        return iter(())

    def engine_arrays(self, ckpt: Checkpoint, module: str, arrays: dict[str, NDArray[Any]]
                      ) -> tuple[dict[str, NDArray[Any]], str] | None:
        """Module ``module``'s ``arrays`` as the serving engine decodes them where that is not
        as the file says (NVFP4: a fused partner's global scale), with what the engine does
        in words; None where it decodes the file's own. ``--source`` reports that decode's
        error beside the file's."""
        return None

    def block_scales(self, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], float] | None:
        """What bounds the module's decoded weight, from its scales alone (``arrays``: the
        :attr:`scale_params` read at level ``scales``): ``(scales, factor)``, one scale per
        block (group, row or tile) in a dtype that decodes to its value as the loader reads it
        (E8M0 bytes as ``float8_e8m0fnu``), and the factor the loader multiplies every one by
        times the element format's largest magnitude, so that ``|scale| × factor`` is the
        largest magnitude the block decodes to. None where the format has no scales or a
        per-tensor scale is missing (the layout checks report it)."""
        return None

    # -- deployment -------------------------------------------------------------------------

    #: the multiple a tensor-parallel partition of a quantized dimension must be (the group,
    #: block or packing the kernels need); None: no constraint beyond divisibility
    tp_multiple: int | None = None

    def part_multiple(self, experts: bool) -> int | None:
        """The multiple a tensor-parallel partition of a quantized routed or shared expert's
        (``experts``) or dense MLP's dimension stored in this format must be
        (:attr:`tp_multiple`, unless the experts' kernels need more)."""
        return self.tp_multiple

    def tp_multiples(self, ckpt: Checkpoint | None) -> tuple[int | None, int | None]:
        """``(routed and shared experts, dense MLP)``: the multiple a tensor-parallel partition
        of each must be (:meth:`part_multiple`; a mixed-precision format's from its
        members)."""
        return self.part_multiple(True), self.part_multiple(False)

    #: each engine's kernel paths, in the order the engine tries them (preflight's data)
    engine_paths: tuple[EnginePath, ...] = ()

    def paths_for(self, ckpt: Checkpoint) -> tuple[EnginePath, ...]:
        """The engine paths of ``ckpt`` stored in this format: :attr:`engine_paths`, except
        for a mixed-precision format, whose paths follow the members its layers use."""
        return self.engine_paths

    def kernel(self, target: str, vendor: str, arch: str, ckpt: Checkpoint | None = None
               ) -> tuple[str, str] | None:
        """Whether vLLM has a kernel for this format on ``target``: ``(kind, message)`` with
        kind ``unsupported``, ``slow`` (emulated or a fallback) or ``note`` (native, with what
        it needs); None when no path is declared. The first vLLM path of
        :attr:`engine_paths` (of :meth:`paths_for` ``ckpt`` when given) that takes every
        checkpoint of the format, or, when ``ckpt`` is given, whose requirement it meets."""
        for path in self.engine_paths if ckpt is None else self.paths_for(ckpt):
            if path.applies("vllm", vendor, arch) and (path.requires is None or (
                    ckpt is not None and not self.path_problems(ckpt, path.requires))):
                return _DEPLOY_KIND[path.kind], path.describe(target, arch)
        return None

    def path_taken(self, ckpt: Checkpoint, engine: str, vendor: str, arch: str
                   ) -> EnginePath | None:
        """The first of :attr:`engine_paths` that ``engine`` takes on a ``vendor``/``arch``
        target for ``ckpt`` (its requirement met); None when none is declared."""
        for path in self.engine_paths:
            if path.applies(engine, vendor, arch) and (
                    path.requires is None or not self.path_problems(ckpt, path.requires)):
                return path
        return None

    def path_problems(self, ckpt: Checkpoint, requires: str) -> list[str]:
        """Why ``ckpt`` does not meet the eligibility rule ``requires`` of one of its
        :attr:`engine_paths` (empty: it does)."""
        return []

    def fingerprints(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                     ) -> Iterator[str]:
        """Provenance the small scale tensors show (``arrays``: module -> its small scales),
        one sentence each (the FINGERPRINT finding)."""
        return iter(())

    # -- reproduction -----------------------------------------------------------------------

    def reproduce_params(self) -> tuple[str, ...]:
        """The tensors ``--source`` compares byte for byte."""
        return (self.weight_param, *self.scale_params, *self.small_params)

    def produced_params(self) -> tuple[str, ...]:
        """The tensors :meth:`produce_module` writes (those of :meth:`reproduce_params` that
        the producer derives from the weight; NVFP4 leaves out the activation scale)."""
        return self.reproduce_params()

    def unclaimed(self, ckpt: Checkpoint) -> str:
        """Why the config's recipe is one :attr:`profile` does not reproduce byte for byte
        ("" when the profile's bytes are claimed)."""
        return ""

    def unclaimed_tensors(self, arrays: dict[str, NDArray[Any]],
                          produced: dict[str, NDArray[Any]]) -> str:
        """Why one module's tensors (``arrays``, :meth:`reproduce_params` read; ``produced``:
        what :attr:`profile` writes from the source) come from a recipe the profile does not
        reproduce, recognised from the bytes because the config does not name it ("" when the
        profile's bytes are claimed)."""
        return ""

    def for_arrays(self, arrays: dict[str, NDArray[Any]]) -> Descriptor:
        """The variant of this format whose producer profile one module's stored ``arrays``
        (:meth:`reproduce_params`) show where the config names none: itself unless a format
        recognises one (DeepSeek FP8 block: UE8M0 scales without ``scale_fmt``)."""
        return self

    def produce_module(self, module: str, w: NDArray[Any],
                       sibling: Callable[[str], NDArray[Any] | None]) -> dict[str, NDArray[Any]]:
        """The tensors the producer writes for ``module`` from source weight ``w``;
        ``sibling(name)``, for producers that calibrate fused modules together, reads another
        module's source weight: None where the producer did not calibrate that module with
        this one (it is not quantized in this format), an exception where it did but the
        source cannot supply it (the module cannot be reproduced then)."""
        return self.produce(w)

    def reproduce_in_one_pass(self, module: str, w: NDArray[Any],
                              arrays: dict[str, NDArray[Any]], passes: OnePass = COMPILED
                              ) -> Moments | None:
        """``--source`` for one module in one pass of ``passes``
        (:mod:`mxformats.fast.passes`: compiled on the CPU, or on the ``--device``): the
        :class:`~mxformats.fast.moments.Moments` of the module's stored ``arrays``
        (:meth:`reproduce_params`), decoded by :attr:`consumer`, against source weight ``w``,
        when every stored byte is what :meth:`produce_module` writes and every value is finite.
        None otherwise, and wherever the format has no such pass or the pass cannot run: the
        caller then runs :meth:`produce_module` and the numpy decoder, which give the same
        bytes and moments bits and the messages that say where they differ."""
        return None

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        """The tensors the producer writes for source weight ``w``."""
        raise NotImplementedError(f"{self.format.value} has no reference profile")

    @property
    def consumer(self) -> str | None:
        """The consumer profile that decodes this format's weights: the default consumer of
        :attr:`profile` in the pairing table (:func:`mxformats.pairing.default_consumer`, printed
        in ``spec/profiles.md``), None where the format has no producer profile. The one
        choice :meth:`dequantize`, ``--source``'s error figures, :func:`mxformats.read_tensor`
        and ``mxformats inspect`` share; ValueError for a profile the registry lacks."""
        if self.scheme is None or self.profile is None:
            return None
        return default_consumer(self.scheme, self.profile)

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        """The module's weight as its :attr:`consumer` decodes it, in the float dtype the
        consumer computes in (its exact values: callers widen them as they need)."""
        raise NotImplementedError(f"{self.format.value} has no decoder")


#: EnginePath kinds from best to worst: a mixed checkpoint runs as its worst member does.
_KINDS = ("native", "emulated", "unsupported")


class MixedDescriptor(Descriptor):
    """A mixed-precision format: :meth:`~Descriptor.for_module` picks each module's descriptor,
    and the checks across modules run per member descriptor on its own modules.

    Its engine paths are composed per target from the members its quantized layers use
    (:meth:`paths_for`): an engine runs the checkpoint natively only where it runs every
    member natively; one emulated member makes it emulated, one unsupported member
    unsupported; a member with no declared path leaves the target undeclared."""

    numeric = True
    #: engine -> the loader code that dispatches a scheme per layer (cited with the members')
    dispatcher: Mapping[str, str] = {}

    def members(self, ckpt: Checkpoint) -> list[Descriptor]:
        """The member descriptors of ``ckpt``'s quantized modules, by format name."""
        found: dict[str, Descriptor] = {}
        for name, module in ckpt.modules.items():
            member = self.for_module(ckpt, name) if module.quantized else self
            if member is not self:
                found.setdefault(member.format.value, member)
        return [found[k] for k in sorted(found)]

    def tp_multiples(self, ckpt: Checkpoint | None) -> tuple[int | None, int | None]:
        """Per part, the least common multiple of the members' :meth:`part_multiple` over the
        quantized modules of that part: each member's loader checks its own layers' partitions
        (e.g. INT4 g32 experts beside NVFP4 g16 ones need moe_intermediate/TP % 32 == 0)."""
        if ckpt is None:
            return None, None
        experts: set[int] = set()
        dense: set[int] = set()
        for name, module in ckpt.modules.items():
            expert = ".experts." in name or ".shared_experts." in name
            multiple = self.for_module(ckpt, name).part_multiple(expert) \
                if module.quantized else None
            if multiple is not None and ".mlp." in name:
                (experts if expert else dense).add(multiple)
        return (math.lcm(*experts) if experts else None), (math.lcm(*dense) if dense else None)

    def member_path(self, ckpt: Checkpoint, member: Descriptor, engine: str, vendor: str,
                    arch: str) -> EnginePath | None:
        """The path ``engine`` takes for ``member``'s layers: the member's own
        (:meth:`~Descriptor.path_taken`) unless this format's dispatcher differs."""
        return member.path_taken(ckpt, engine, vendor, arch)

    def paths_for(self, ckpt: Checkpoint) -> tuple[EnginePath, ...]:
        members = self.members(ckpt)
        engines = sorted({p.engine for m in members for p in m.engine_paths})
        out = []
        for engine in engines:
            for vendor, arch, _ in TARGETS.values():
                taken = [(m, self.member_path(ckpt, m, engine, vendor, arch)) for m in members]
                paths = [p for _, p in taken if p is not None]
                if len(paths) < len(taken):
                    continue
                sources = [self.dispatcher[engine]] if engine in self.dispatcher else []
                out.append(EnginePath(
                    engine, max((p.kind for p in paths), key=_KINDS.index),
                    "; ".join(f"{m.format.value} layers: {p.what}" for m, p in taken if p),
                    " + ".join(dict.fromkeys([*sources, *(p.source for p in paths)])),
                    archs=(arch,)))
        return tuple(out)

    def quantized(self, module: Module) -> bool:
        """False: a module no member descriptor claims (a scheme with no descriptor, such as
        ModelOpt per-tensor ``FP8``) has no tensors to read, no numbers to check and no
        profile to reproduce it."""
        return False

    def _by_member(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                   ) -> list[tuple[Descriptor, dict[str, dict[str, NDArray[Any]]]]]:
        by_member: dict[int, tuple[Descriptor, dict[str, dict[str, NDArray[Any]]]]] = {}
        for name, found in arrays.items():
            member = self.for_module(ckpt, name)
            if member is not self:
                by_member.setdefault(id(member), (member, {}))[1][name] = found
        return list(by_member.values())

    def layer_findings(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                       ) -> Iterator[Finding]:
        for member, own in self._by_member(ckpt, arrays):
            yield from member.layer_findings(ckpt, own)

    def fingerprints(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                     ) -> Iterator[str]:
        for member, own in self._by_member(ckpt, arrays):
            yield from member.fingerprints(ckpt, own)
