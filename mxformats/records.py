"""The one record base of every scheme's producer and consumer profiles.

A scheme describes each profile as a frozen dataclass record (``<Scheme>Producer``,
``<Scheme>Consumer``) that its functions and the kernels' plans read and nothing else. Every such
record starts with the registry entry (:class:`Record`: name, library, version, function,
description); the record's class names its scheme and kind, so :attr:`Record.info` is its
:class:`~mxformats.registry.ProfileInfo` and the scheme registers exactly that. A producer's
:attr:`ProducerRecord.default_consumer` reads the one pairing table,
:data:`mxformats.pairing.DEFAULT_CONSUMERS` (with ``mxformats.pairing.SCHEME_CONSUMER`` for
a scheme's unlisted producers), so no scheme repeats it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from mxformats.pairing import DEFAULT_CONSUMERS, SCHEME_CONSUMER
from mxformats.registry import Kind, ProfileInfo, Scheme, get_profile_info

__all__ = ["ConsumerRecord", "DeprecatedAliases", "ProducerRecord", "Record", "lookup"]

R = TypeVar("R", bound="Record")


@dataclass(frozen=True)
class Record:
    """What the profile registry lists for a record.

    Attributes:
        name: the profile name (``profile=name``).
        library, version, function: the source the record reproduces.
        description: one line.
        scheme, kind: class constants of each scheme's record classes.
    """

    name: str
    library: str
    version: str
    function: str
    description: str

    scheme: ClassVar[Scheme]
    kind: ClassVar[Kind]

    @property
    def info(self) -> ProfileInfo:
        """The registry entry of this record."""
        return ProfileInfo(self.name, self.scheme, self.kind, self.library, self.version,
                           self.function, self.description)


@dataclass(frozen=True)
class ProducerRecord(Record):
    """A record of a profile that writes checkpoints."""

    kind: ClassVar[Kind] = "producer"

    @property
    def default_consumer(self) -> str | None:
        """The consumer that decodes what this producer writes: its row of
        :data:`~mxformats.pairing.DEFAULT_CONSUMERS`, else its scheme's consumer
        (``mxformats.pairing.SCHEME_CONSUMER``); None where the scheme has neither."""
        return DEFAULT_CONSUMERS.get((self.scheme, self.name)) or SCHEME_CONSUMER.get(self.scheme)


@dataclass(frozen=True)
class ConsumerRecord(Record):
    """A record of a profile that decodes checkpoints."""

    kind: ClassVar[Kind] = "consumer"


def lookup(table: Mapping[str, R], scheme: Scheme, kind: Kind, name: str) -> R:
    """The record ``name`` of a scheme's ``table`` of ``kind`` (a scheme's ``get_producer`` and
    ``get_consumer``); the registry's ValueError lists the valid names."""
    get_profile_info(scheme, kind, name)
    return table[name]


@dataclass(frozen=True, eq=False)
class DeprecatedAliases:
    """A module ``__getattr__`` (PEP 562) serving the names a module had before this
    vocabulary: ``aliases`` maps each old name to its new one in ``namespace`` (the module's
    ``globals()``); reading an old name warns (DeprecationWarning) and returns the new object.
    ``aliases`` stays readable, so the public API listing (``tests/test_public_api.py``) holds
    the old names too.
    """

    module: str
    aliases: Mapping[str, str]
    namespace: Mapping[str, Any] = field(repr=False)

    def __call__(self, name: str) -> object:
        if name in self.aliases:
            new = self.aliases[name]
            warnings.warn(f"{self.module}.{name} is deprecated; use {new}", DeprecationWarning,
                          stacklevel=2)
            return self.namespace[new]
        raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
