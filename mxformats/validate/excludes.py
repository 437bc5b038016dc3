"""Exclude-list matching as the loaders read it: :class:`ExcludeMatcher` (Quark's ``exclude``,
compressed-tensors' ``ignore``), the near misses of an entry that matches no module
(:class:`NearMisses`), and :func:`literal_alternation`, the trie regex of ModelOpt's substring
matching (:mod:`~mxformats.validate.descriptors.base`). Below the data model
(:mod:`~mxformats.validate.model`), whose :meth:`Checkpoint.is_excluded
<mxformats.validate.model.Checkpoint.is_excluded>` uses it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_TRIE_DEPTH",
    "ExcludeMatcher",
    "NearMiss",
    "NearMisses",
    "literal_alternation",
    "matches_exclude",
]



class ExcludeMatcher:
    """The loaders' exclude/ignore matching: an entry is an exact module name, or ``re:`` and a
    regex tried with ``re.match`` (anchored at the start, not at the end). Globs
    (``*self_attn*``) are taken literally. Sources: vLLM
    ``model_executor/layers/quantization/quark/utils.py`` ``_is_equal_or_regex_match`` (commit
    0a6c8da27be32d22a467948731b4ceda02264b80) for Quark ``exclude``; compressed-tensors 0.20.1
    ``utils/match.py`` ``match_name`` for ``ignore``. Exact names are a set lookup (a real K2
    exclude list has ~550 of them, checked for ~70,000 modules).

    An invalid ``re:`` entry matches nothing here and is listed in :attr:`invalid` as
    ``(entry, reason)``: vLLM's ``regex.match`` raises on it at load time.
    """

    #: whether a glob entry is a real pattern to this loader (ModelOpt) or a literal name
    globs_match = False

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = list(patterns)
        self.exact = {p for p in patterns if not p.startswith("re:")}
        self.regexes: list[tuple[str, re.Pattern[str]]] = []
        self.invalid: list[tuple[str, str]] = []
        for p in patterns:
            if p.startswith("re:"):
                try:
                    self.regexes.append((p, re.compile(p[3:])))
                except re.error as exc:
                    self.invalid.append((p, str(exc)))

    def __call__(self, module: str) -> bool:
        return module in self.exact or any(r.match(module) for _, r in self.regexes)

    def matches_any(self, modules: list[str]) -> bool:
        """Whether the list matches any of ``modules``: ``any(map(self, modules))``, in one
        C-level set test when the list holds only exact names (a real K2 list does) and
        the matching is this class's, not a subclass's own."""
        if self.regexes or type(self).__call__ is not ExcludeMatcher.__call__:
            return any(map(self, modules))
        return not self.exact.isdisjoint(modules)

    def unmatched(self, modules: Iterable[str]) -> list[str]:
        """The valid entries that match none of ``modules``, in list order."""
        names = set(modules)
        hit = {p for p in self.exact if p in names}
        for p, r in self.regexes:
            if any(r.match(n) for n in names):
                hit.add(p)
        bad = {p for p, _ in self.invalid}
        return [p for p in dict.fromkeys(self.patterns) if p not in hit and p not in bad]


@dataclass(frozen=True)
class NearMiss:
    """The module an exclude entry that matches nothing was probably meant for.

    ``rewrite`` is ``(old, new)`` when replacing the entry's leading ``old`` by ``new`` gives
    ``module`` exactly (``("", "language_model.")`` for ``model.layers.0...`` in a K2.5
    checkpoint); ``how`` says how it was found: ``prefix``, ``search`` (a ``re:`` entry that
    ``re.search`` finds but ``re.match`` does not) or ``similar`` (closest by edit ratio).
    """

    module: str
    how: str
    rewrite: tuple[str, str] | None = None


class NearMisses:
    """Finds, for an entry that matches no module, the module it would have matched."""

    #: candidates examined by the similarity fallback (it is quadratic in name length)
    MAX_SIMILAR = 500

    def __init__(self, modules: Iterable[str]) -> None:
        self.modules = sorted(set(modules))
        self._by_suffix: dict[str, str] = {}
        for name in self.modules:
            parts = name.split(".")
            for k in range(1, len(parts)):
                self._by_suffix.setdefault(".".join(parts[k:]), name)

    def find(self, entry: str) -> NearMiss | None:
        if entry.startswith("re:"):
            return self._regex(entry[3:])
        parts = entry.split(".")
        # the entry names a module under a longer (or different) prefix; keep >= 2 components
        # of the entry so that a bare "o_proj" does not match every layer's
        for k in range(max(len(parts) - 1, 1)):
            tail = ".".join(parts[k:])
            found = self._by_suffix.get(tail)
            if found is not None:
                old = ".".join(parts[:k]) + "." if k else ""
                return NearMiss(found, "prefix", (old, found[: len(found) - len(tail)]))
        last = parts[-1]
        pool = [n for n in self.modules if n.rsplit(".", 1)[-1] == last] or [
            n for n in self.modules if n.count(".") == entry.count(".")
        ]
        pool = pool[: self.MAX_SIMILAR]
        close = difflib.get_close_matches(entry, pool, n=1, cutoff=0.75)
        return NearMiss(close[0], "similar") if close else None

    def _regex(self, pattern: str) -> NearMiss | None:
        r = re.compile(pattern)
        found = next((n for n in self.modules if r.search(n)), None)
        return NearMiss(found, "search") if found is not None else None


#: Branching levels a :func:`literal_alternation` trie may nest (``re`` compiles nested groups
#: recursively); a word list that needs more gets the flat alternation.
MAX_TRIE_DEPTH = 40


class _TooDeep(Exception):
    pass


def literal_alternation(words: Iterable[str]) -> str:
    """A regex that matches exactly where one of the literal ``words`` does, as
    ``"|".join(map(re.escape, words))`` would, but written as a trie (``ab(?:c|d)`` for
    ``abc``, ``abd``): ``re`` tries every alternative of a flat alternation at every position,
    the trie rules each position out on its first characters (ModelOpt's ~550-entry exclude
    list against every module of a full-size checkpoint: the difference between seconds and
    tens of milliseconds). A list whose trie nests deeper than :data:`MAX_TRIE_DEPTH` gets
    the flat alternation."""
    unique = list(dict.fromkeys(words))
    trie: dict[str, Any] = {}
    for word in unique:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}  # "" (no character) marks a word's end
    try:
        return _trie_pattern(trie, 0)
    except _TooDeep:
        return "|".join(map(re.escape, unique))


def _trie_pattern(node: dict[str, Any], depth: int) -> str:
    if depth > MAX_TRIE_DEPTH:
        raise _TooDeep
    alternatives = []
    for ch, child in sorted(node.items()):
        if not ch:
            continue
        run = [ch]
        while len(child) == 1 and "" not in child:  # a chain without branches: one literal
            ((ch, child),) = child.items()
            run.append(ch)
        alternatives.append(re.escape("".join(run)) + _trie_pattern(child, depth + 1))
    if not alternatives:
        return ""
    body = alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"
    return f"(?:{body})?" if "" in node else body


def matches_exclude(module: str, patterns: list[str]) -> bool:
    """Whether ``module`` matches the exclude/ignore list as vLLM reads it."""
    return ExcludeMatcher(patterns)(module)
