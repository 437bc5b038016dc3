"""Where the validator reads a checkpoint from: the :class:`~.interface.Reader` interface
(:mod:`~mxformats.validate.readers.interface`), a local folder
(:mod:`~mxformats.validate.readers.local`), a Hugging Face repository pinned to one commit
(:mod:`~mxformats.validate.readers.hub`, the ``hub`` extra), and :func:`open_reader`, which picks
one for a command-line argument.

The interface and the readers import nothing of each other but the interface: this package
alone knows both readers.
"""

from __future__ import annotations

import os
from pathlib import Path

from .hub import CONNECTIONS, HubReader, open_hub
from .interface import (
    HUB_PREFIX,
    RANGE_IGNORED,
    READ_FAILED,
    NotAFolder,
    Reader,
    ReadFailed,
    unsafe_name,
)
from .local import LocalReader

__all__ = [
    "HUB_PREFIX",
    "RANGE_IGNORED",
    "READ_FAILED",
    "HubReader",
    "LocalReader",
    "NotAFolder",
    "ReadFailed",
    "Reader",
    "open_reader",
    "unsafe_name",
]


def open_reader(root_arg: str | os.PathLike[str], allow: tuple[Path, ...] = (),
                hub_connections: int = CONNECTIONS) -> Reader:
    """The reader for a command-line checkpoint argument: ``hf://ORG/NAME[@REVISION]`` (the
    ``hub`` extra; ``hub_connections`` reads in flight at once) or a local folder. Raises
    :class:`NotAFolder` (a Hub error included) with the reason when it cannot be read at all."""
    text = os.fspath(root_arg)
    if text.startswith(HUB_PREFIX):
        return open_hub(text, hub_connections)
    root = Path(text)
    if not root.is_dir():
        raise NotAFolder(f"{root} is not a readable directory")
    try:
        os.listdir(root)
    except OSError as exc:
        raise NotAFolder(f"{root} is not readable ({exc.strerror})") from None
    return LocalReader(root, allow)
