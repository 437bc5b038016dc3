"""The validator's data model: what a checkpoint is once its configs and headers are read.

:func:`mxformats.validate.files.load` builds a :class:`Checkpoint` (reading configs, the index
and every shard header, never tensor data) and reports what it could not read as findings.

**How check modules plug in.** A check module lives in ``mxformats/validate/`` and exposes::

    def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]: ...

It declares its checks at import time with :func:`~mxformats.validate.findings.declare` and
yields :class:`~mxformats.validate.findings.Finding` objects, and it ends with its record
(``CHECK``, a :class:`~mxformats.validate.checkmodule.CheckModule`: its name, ``run``, when it
applies, and its per-module work if any). The runner (:mod:`mxformats.validate.runner`) loops
over the records (``files``, ``coverage``, ``layout``, ``numbers``, ``reproduce``,
``manifest``, ``deployment``: :data:`~mxformats.validate.checks.CHECK_MODULES`) and turns any
exception a check raises into an ``INTERNAL_ERROR`` finding: a check must never crash the run.
What differs between checkpoint formats is not in the check modules
but in each format's descriptor (:mod:`mxformats.validate.descriptors`). A module reads only
what ``opts.level`` allows (``structure``: nothing beyond headers; ``scales``: scale and small
tensors; ``full``: everything) and reads tensor data only with :meth:`Checkpoint.read`
(bounded, through the header's offsets, after path safety).
Numeric checks apply only when :attr:`Checkpoint.numeric` is true (a verified quantized format).

A finding may carry ``extra={"reproduction": {...}}`` (the ``--source`` module): the runner puts
the first such block in the JSON report's ``reproduction``. The per-module work of ``numbers``
and ``reproduce`` runs as tasks (:mod:`mxformats.validate.tasks`) over ``opts.workers``
processes or a Ray cluster (:mod:`mxformats.validate.executors`).

Names: a *module* is a tensor name without its last component (``…experts.3.gate_proj``); its
tensors are keyed by that last component (``weight``, ``weight_scale``, ``weight_packed``...).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, overload

import numpy as np

from mxformats.tensorfile import DTYPES

from .excludes import ExcludeMatcher
from .findings import Level
from .readers import LocalReader, Reader, ReadFailed

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .descriptors.base import Descriptor

__all__ = [
    "QUANT_SUFFIXES",
    "Architecture",
    "Checkpoint",
    "CheckpointFormat",
    "CodeStats",
    "ExpectedModule",
    "Module",
    "Options",
    "TensorRef",
    "VisionDims",
    "modules_of",
]


class CheckpointFormat(str, Enum):
    """The detected checkpoint format (``value`` is what reports print); each has its
    descriptor in :mod:`mxformats.validate.descriptors`. Not to be confused with the element
    :class:`mxformats.formats.Format`."""

    QUARK_MXFP4 = "quark-mxfp4"
    QUARK_W4A8 = "quark-w4a8"
    CT_INT4 = "compressed-tensors-int4"
    CT_NVFP4 = "compressed-tensors-nvfp4"
    CT_FP8_BLOCK = "compressed-tensors-fp8-block"
    CT_MIXED = "compressed-tensors-mixed"
    MODELOPT_NVFP4 = "modelopt-nvfp4"
    MODELOPT_FP8_BLOCK = "modelopt-fp8-block"
    MODELOPT_MIXED = "modelopt-mixed"
    BF16 = "bf16"
    FP8_BLOCK = "fp8-block"
    UNSUPPORTED = "unsupported"


#: Parameter names that only quantized modules carry.
QUANT_SUFFIXES = frozenset(
    {
        "weight_scale",
        "weight_scale_2",
        "weight_packed",
        "weight_shape",
        "weight_zero_point",
        "weight_g_idx",
        "input_scale",
        "weight_scale_inv",
        "input_global_scale",
        "weight_global_scale",
    }
)


#: ``_FILE(ref)`` is ``ref.file`` (a C-level getter for maps over many tensors)
_FILE = itemgetter(1)


class TensorRef(NamedTuple):
    """One tensor as its shard header describes it (immutable).

    ``file`` is relative to the checkpoint folder (as the index names it); ``begin``/``end`` are
    absolute byte offsets in that file (header included), ``end`` exclusive. A named tuple, not
    a frozen dataclass: the loader makes one per tensor (139,098 for Kimi-K2.6), and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, several times the
    cost of building a tuple.
    """

    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def module(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else ""

    @property
    def param(self) -> str:
        return self.name.rsplit(".", 1)[-1]


_T = TypeVar("_T")


class _Computed(Generic[_T]):
    """:func:`functools.cached_property` without its lock: the value is computed on the
    first read and stored in the instance's ``__dict__`` under the same name, where later
    reads find it without calling anything. Python 3.11's ``cached_property`` takes an
    ``RLock`` on every first read (a third of a full-size checkpoint's coverage pass, one
    read per module) so that the value is computed once; here two threads reading first
    may both compute it, which is harmless for a pure function of the instance."""

    def __init__(self, compute: Callable[[Any], _T]) -> None:
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> _Computed[_T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _T: ...

    def __get__(self, instance: object | None, owner: type | None = None
                ) -> _T | _Computed[_T]:
        if instance is None:
            return self
        value: _T = self.compute(instance)
        instance.__dict__[self.name] = value
        return value


@dataclass
class Module:
    """A module's tensors, keyed by parameter name; ``quantized`` when it carries any
    quantization tensor (:data:`QUANT_SUFFIXES`) or a packed integer ``weight``.

    ``quantized`` is computed once, when first read (every check group asks it of every
    module, ~70,000 for Kimi-K2.6): the loader fills ``tensors`` before any check runs, and
    nothing changes them afterwards."""

    name: str
    tensors: dict[str, TensorRef] = field(default_factory=dict)

    @_Computed
    def quantized(self) -> bool:
        if not QUANT_SUFFIXES.isdisjoint(self.tensors):
            return True
        w = self.tensors.get("weight")
        return (
            w is not None and w.dtype in ("U8", "I32", "F8_E4M3", "F8_E5M2") and len(w.shape) >= 2
        )

    @property
    def files(self) -> set[str]:
        return set(map(_FILE, self.tensors.values()))

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def modules_of(tensors: Iterable[tuple[str, TensorRef]]) -> dict[str, Module]:
    """The :class:`Module` of each ``(name, ref)`` of ``tensors``, by module name, each
    keyed by parameter (a tensor name's last component), in the order they come."""
    modules: dict[str, Module] = {}
    for tname, ref in tensors:
        module, _, param = tname.rpartition(".")  # TensorRef.module and .param, in one split
        mod = modules.get(module)
        if mod is None:
            mod = modules[module] = Module(module)
        mod.tensors[param] = ref
    return modules


class ExpectedModule(NamedTuple):
    """A module the config implies: its logical (BF16) parameter shapes and its role
    (immutable; a named tuple for the reason :class:`TensorRef` is one: ~70,000 per Kimi).

    ``kind``: ``attention``, ``dense_mlp``, ``expert``, ``shared_expert``, ``router``,
    ``embedding``, ``norm``, ``lm_head``, ``vision``, ``projector`` or ``mtp``. ``linear``: an
    ``nn.Linear`` (quantizable by the recipes); ``layer``/``expert`` where they apply.
    """

    name: str
    kind: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    linear: bool = False
    layer: int | None = None
    expert: int | None = None

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The logical ``[out, in]`` of the ``weight`` (None when it has none)."""
        for param, shape in self.params:  # a loop: no dict per call (~70,000 calls per run)
            if param == "weight":
                return shape
        return None


@dataclass(frozen=True)
class VisionDims:
    """The vision tower's sizes, defaults applied (``defaulted``: the ``vision_config`` keys
    that took one)."""

    hidden: int
    intermediate: int
    patch: int
    pos_height: int
    pos_width: int
    blocks: int
    merge: tuple[int, int]
    defaulted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Architecture:
    """Shape-relevant facts from the (text) config; nothing is hard-coded."""

    layers: int
    first_dense: int
    experts: int
    shared_experts: int
    mtp_layers: int
    hidden: int
    intermediate: int
    moe_intermediate: int
    vocab: int
    heads: int
    q_lora: int | None
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_head: int
    multimodal: bool
    prefix: str  # "model." or "language_model.model."
    lm_head: str  # module name: "lm_head" or "language_model.lm_head"
    #: the vision tower's sizes (None if text-only or ``vision_problem`` says why not derived)
    vision: VisionDims | None = None
    #: why the vision tower's inventory could not be derived (only it goes unchecked)
    vision_problem: str | None = None
    #: where the text keys sit — ``"text_config"`` (K2.5/K2.6) or ``""`` (the top level)
    where: str = ""
    #: the text keys config.json omits, which took the loader's defaults (``TEXT_DEFAULTS``)
    defaulted: tuple[str, ...] = ()


@dataclass
class Checkpoint:
    """A checkpoint folder as configs and headers describe it (no tensor data read).

    Attributes:
        root: the folder (resolved).
        config: config.json; ``text_config`` the nested text config (K2.5/K2.6) or ``config``.
        format: the detected :class:`CheckpointFormat`; ``format_detail`` says why / which producer.
        quant_config: the quantization config the loader uses (top level wins), or None.
        exclude: Quark ``exclude`` or compressed-tensors ``ignore`` (exact names or ``re:``).
        arch: :class:`Architecture`, None when the config lacks the needed keys.
        index: the parsed ``model.safetensors.index.json`` (None for a single file).
        weight_map: tensor name -> shard file from the index (or the single file's header).
        shards: shard files in use (index order), relative names.
        tensors: name -> :class:`TensorRef` for every tensor in every readable shard.
        unreadable: shards whose header could not be read (their tensors are unknown).
        modules: module name -> :class:`Module` built from ``tensors``.
        expected: module name -> :class:`ExpectedModule` the config implies (empty without arch).
        bytes_total: sum of the shard file sizes.
    """

    root: Path
    config: dict[str, Any]
    text_config: dict[str, Any]
    format: CheckpointFormat
    format_detail: str = ""
    #: the format's :class:`~mxformats.validate.descriptors.base.Descriptor` (set by the loader)
    descriptor: Descriptor | None = field(default=None, repr=False, compare=False)
    quant_config: dict[str, Any] | None = None
    exclude: list[str] = field(default_factory=list)
    arch: Architecture | None = None
    #: why ``arch`` is None although config.json parsed (a key absent or malformed, a count
    #: the shards cannot hold): the coverage group's summary cites it
    arch_problem: str | None = None
    index: dict[str, Any] | None = None
    weight_map: dict[str, str] = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)
    tensors: dict[str, TensorRef] = field(default_factory=dict)
    unreadable: set[str] = field(default_factory=set)
    modules: dict[str, Module] = field(default_factory=dict)
    expected: dict[str, ExpectedModule] = field(default_factory=dict)
    bytes_total: int = 0
    #: tensor names the index maps to shards that are missing, unsafe or unreadable (their
    #: absence is already reported by the files group, so other checks skip them)
    unavailable: set[str] = field(default_factory=set)
    allowed_roots: tuple[Path, ...] = ()
    #: called with the byte count after each :meth:`read` (the runner's progress bar)
    on_read: Callable[[int], None] | None = field(default=None, repr=False, compare=False)
    _matcher: tuple[list[str], ExcludeMatcher] | None = field(
        default=None, repr=False, compare=False
    )
    #: what every byte is read through (None means a :class:`LocalReader` of ``root``)
    reader: Reader | None = field(default=None, repr=False, compare=False)
    #: tensor-data reads the reader could not complete (the runner reports them, one
    #: finding per file)
    read_failures: list[ReadFailed] = field(default_factory=list, repr=False, compare=False)
    #: the reads :meth:`reading_ahead` asked ahead, while it runs
    _ahead: _Ahead | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def numeric(self) -> bool:
        """True when numeric checks apply (a verified quantized format)."""
        return self.descriptor is not None and self.descriptor.numeric

    def read(self, name: str, *, max_bytes: int | None = None) -> NDArray[Any]:
        """Read one tensor's data (numpy array of its dtype and shape; ``F8_E8M0`` as its
        ml_dtypes type). Raises ``ValueError`` past ``max_bytes`` or for a missing tensor."""
        ref = self.tensors[name]
        if ref.file in self.unreadable:
            raise ValueError(f"{ref.file}: shard header unreadable")
        if max_bytes is not None and ref.nbytes > max_bytes:
            raise ValueError(f"{name}: {ref.nbytes} bytes exceeds the read bound {max_bytes}")
        dtype = DTYPES[ref.dtype]
        count = ref.nbytes // dtype.itemsize
        raw = self.read_bytes(ref, 0, ref.nbytes)
        arr = np.frombuffer(raw, dtype=dtype, count=count)
        return arr.reshape(ref.shape)

    @contextmanager
    def reading_ahead(self, refs: Iterable[TensorRef]) -> Iterator[None]:
        """While the block runs, the whole-tensor reads of ``refs`` go out ahead, in that
        order, through :meth:`Reader.read_ranges` (a Hub reader has many in flight; its
        window bounds the memory), and :meth:`read_bytes` takes each from there. A read
        asked in another order, or not asked, is made when asked."""
        if self.reader is None:
            self.reader = LocalReader(self.root, self.allowed_roots)
        ahead = self._ahead = _Ahead(self.reader, [(r.file, r.begin, r.end) for r in refs])
        try:
            yield
        finally:
            ahead.source.close()  # reads asked and not taken are not made
            self._ahead = None

    def read_bytes(self, ref: TensorRef, begin: int, end: int) -> bytes:
        """Bytes ``[begin, end)`` of tensor ``ref``'s data, exactly its span's slice, through
        :attr:`reader` (counted by :attr:`on_read`; taken from :meth:`reading_ahead` when it
        asked for it). A :class:`ReadFailed` is kept in :attr:`read_failures` and re-raised;
        any read error is an ``OSError``."""
        if not 0 <= begin <= end <= ref.nbytes:
            raise ValueError(f"{ref.name}: bytes [{begin}, {end}) outside its {ref.nbytes}")
        if self.reader is None:
            self.reader = LocalReader(self.root, self.allowed_roots)
        key = (ref.file, ref.begin + begin, ref.begin + end)
        try:
            got = None if self._ahead is None else self._ahead.take(key)
            if isinstance(got, OSError):
                raise got
            raw = self.reader.read_range(*key) if got is None else got
        except ReadFailed as exc:
            self.read_failures.append(exc)
            raise
        if self.on_read is not None:
            self.on_read(len(raw))
        return raw

    def module_of(self, tensor: str) -> Module | None:
        return self.modules.get(tensor.rsplit(".", 1)[0])

    def is_excluded(self, module: str) -> bool:
        """Whether the loader (vLLM) reads ``module`` as excluded/ignored, as the format's
        descriptor matches: an exact name or a ``re:`` regex (``re.match``), never a glob, except
        where the loader takes wildcards (ModelOpt)."""
        return self.exclude_matcher(module)

    @property
    def exclude_matcher(self) -> ExcludeMatcher:
        """The matcher of the current :attr:`exclude` list (built once per list)."""
        # a list equal to the cached copy: one C-level comparison, no per-call copy
        if self._matcher is None or self._matcher[0] != self.exclude:
            matcher = (ExcludeMatcher(self.exclude) if self.descriptor is None
                       else self.descriptor.matcher(self.exclude))
            self._matcher = (list(self.exclude), matcher)
        return self._matcher[1]


class _Ahead:
    """Reads asked ahead (:meth:`Checkpoint.reading_ahead`), taken in the order asked: taking
    one drops those asked before it and not taken (their caller moved past them)."""

    def __init__(self, reader: Reader, ranges: list[tuple[str, int, int]]) -> None:
        self.pending = Counter(ranges)
        self.source = reader.read_ranges(ranges)
        self.answers = zip(ranges, self.source, strict=True)

    def take(self, key: tuple[str, int, int]) -> bytes | OSError | None:
        """The answer to ``key`` when it was asked ahead and not yet taken, else None."""
        if not self.pending[key]:
            return None
        for asked, got in self.answers:
            self.pending[asked] -= 1
            if asked == key:
                return got
        return None


@dataclass
class CodeStats:
    """What a module's code checks leave for the checkpoint-wide ones: the code histogram by
    kind (``fp4``, ``int4``), the dequantized RMS of the sampled rows (None: not computed,
    the per-expert checks skip the module), and the all-zero blocks whose scale names the
    producer that wrote them (``zero_blocks``: what the scale says -> how many blocks); the
    weight's :func:`~mxformats.fast.scan.checksum` where the compiled pass computed it on the
    way (None: the caller computes it where it needs it)."""

    hist: dict[str, NDArray[Any]] = field(default_factory=dict)
    rms: float | None = None
    zero_blocks: dict[str, int] = field(default_factory=dict)
    checksum: int | None = None

    def count_zero_blocks(self, scales: NDArray[Any], known: Mapping[float, str],
                          unit: str) -> None:
        """Count the (decoded) ``scales`` of all-zero blocks whose value ``known`` maps to a
        producer; other values are left to the format's own checks."""
        # + 0.0 turns -0.0 into +0.0: np.unique would keep whichever zero numpy's CPU-specific
        # sort puts first, and the message would print "-0" on some CPUs only.
        values, counts = np.unique(np.asarray(scales, np.float64) + 0.0, return_counts=True)
        for value, n in zip(values.tolist(), counts.tolist(), strict=True):
            who = known.get(value)
            if who is not None:
                key = f"{unit} with scale {value:.8g}: {who}"
                self.zero_blocks[key] = self.zero_blocks.get(key, 0) + n


def _cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


@dataclass
class Options:
    """Command-line options, as check modules see them."""

    level: Level = Level.SCALES
    target: str | None = None  # mi300x | mi355x | h200 | b200
    tp: int | None = None
    ep: int | None = None
    source: Path | None = None
    sample: int | None = None  # modules per layer for --source
    manifest: Path | None = None
    #: tasks run at once: processes of the local executor (default: this process's CPUs)
    workers: int = field(default_factory=lambda: _cores())
    strict: bool = False
    allow_symlink_root: tuple[Path, ...] = ()
    #: ``--yes`` lets a remote ``--level full`` read more than 10 GB
    yes: bool = False
    #: where the tasks run: ``local`` (a process pool) or ``ray`` (a Ray cluster)
    executor: str = "local"
    #: ``--ray-address``: ``auto``, ``HOST:PORT``, or None (a local Ray instance)
    ray_address: str | None = None
    #: ``--resume``: a JSON report whose finished tasks are reused
    resume: Path | None = None
    #: ``--hub-connections``: ranged reads of an ``hf://`` checkpoint in flight at once, per
    #: run (a pool process's reader gets its share)
    hub_connections: int = 32
    #: ``--device``: where ``--source`` re-quantizes and compares (``cuda``, ``cuda:N``,
    #: ``cpu`` under ``TRITON_INTERPRET=1``); None: the compiled CPU passes
    device: str | None = None

    def at_least(self, level: Level) -> bool:
        order = {Level.STRUCTURE: 0, Level.SCALES: 1, Level.FULL: 2}
        return order[self.level] >= order[level]
