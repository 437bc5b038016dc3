"""Write the intersphinx inventories the docs build reads, so the build never downloads one.

The real ``objects.inv`` files of numpy, PyTorch and Python could not be fetched where this
project is built (no network), so this script writes small ones instead: every object the
mxformats docs refer to, each checked to exist in the installed library (``import`` and
``getattr``, so a renamed object fails here, not as a broken link), pointing at its page in the
library's public documentation. Aliases used as annotation types (``numpy.typing.NDArray``) are
listed under both ``py:class`` and ``py:data`` so either role resolves.

Run from the repository root with the test venv (numpy and torch installed) after adding a name:
``python docs/_intersphinx/make_inventories.py``; commit the ``*.inv`` files it writes.
"""

from __future__ import annotations

import builtins
import importlib
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

_SCALARS = "reference/arrays.scalars.html#numpy.{name}"
NUMPY: dict[str, tuple[str, str]] = {
    "numpy.ndarray": ("class", "reference/generated/numpy.ndarray.html#numpy.ndarray"),
    "numpy.dtype": ("class", "reference/generated/numpy.dtype.html#numpy.dtype"),
    "numpy.random.Generator": ("class", "reference/random/generator.html#numpy.random.Generator"),
    "numpy.typing.NDArray": ("alias", "reference/typing.html#numpy.typing.NDArray"),
    "numpy.typing.ArrayLike": ("alias", "reference/typing.html#numpy.typing.ArrayLike"),
    "numpy.typing.DTypeLike": ("alias", "reference/typing.html#numpy.typing.DTypeLike"),
    **{
        f"numpy.{name}": ("class", _SCALARS.format(name=name))
        for name in ("generic", "number", "integer", "floating", "bool_", "uint8", "uint16",
                     "uint32", "int8", "int16", "int32", "int64", "float16", "float32",
                     "float64")
    },
}

TORCH: dict[str, tuple[str, str]] = {
    "torch.Tensor": ("class", "tensors.html#torch.Tensor"),
    "torch.dtype": ("class", "tensor_attributes.html#torch.dtype"),
    "torch.device": ("class", "tensor_attributes.html#torch.device"),
}

_ABC = "library/collections.abc.html#collections.abc.{name}"
_BUILTIN_CLASS_PAGES = {
    "bool": "library/functions.html#bool", "int": "library/functions.html#int",
    "float": "library/functions.html#float", "object": "library/functions.html#object",
    "str": "library/stdtypes.html#str", "bytes": "library/stdtypes.html#bytes",
    "dict": "library/stdtypes.html#dict", "list": "library/stdtypes.html#list",
    "tuple": "library/stdtypes.html#tuple", "set": "library/stdtypes.html#set",
    "frozenset": "library/stdtypes.html#frozenset",
}
PYTHON: dict[str, tuple[str, str]] = {
    **{name: ("class", page) for name, page in _BUILTIN_CLASS_PAGES.items()},
    **{
        name: ("exception", f"library/exceptions.html#{name}")
        for name in ("Exception", "ValueError", "TypeError", "KeyError", "OSError",
                     "AssertionError", "RuntimeError", "ImportError")
    },
    **{
        f"collections.abc.{name}": ("class", _ABC.format(name=name))
        for name in ("Callable", "Iterable", "Iterator", "Mapping", "Sequence")
    },
    "io.BufferedReader": ("class", "library/io.html#io.BufferedReader"),
    "os.PathLike": ("class", "library/os.html#os.PathLike"),
    "pathlib.Path": ("class", "library/pathlib.html#pathlib.Path"),
    "enum.Enum": ("class", "library/enum.html#enum.Enum"),
    "typing.Any": ("data", "library/typing.html#typing.Any"),
    "typing.Literal": ("data", "library/typing.html#typing.Literal"),
    "re.match": ("function", "library/re.html#re.match"),
    "re.Pattern": ("class", "library/re.html#re.Pattern"),
    "fnmatch.fnmatch": ("function", "library/fnmatch.html#fnmatch.fnmatch"),
}


def _resolve(name: str) -> object:
    """The installed object called ``name`` (a dotted path; a bare name is a builtin)."""
    if "." not in name:
        return getattr(builtins, name)
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def inventory(project: str, version: str, objects: dict[str, tuple[str, str]]) -> bytes:
    """An ``objects.inv`` (version 2) holding ``objects``: name -> (kind, page#anchor)."""
    lines = []
    for name, (kind, uri) in sorted(objects.items()):
        _resolve(name)  # AttributeError/ImportError: the library has no such object
        for role in ("class", "data") if kind == "alias" else (kind,):
            lines.append(f"{name} py:{role} 1 {uri} -")
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    return header.encode() + zlib.compress(("\n".join(lines) + "\n").encode())


def main() -> None:
    import sys

    import numpy
    import torch

    sets = {
        "numpy": ("NumPy", numpy.__version__, NUMPY),
        "torch": ("PyTorch", torch.__version__.split("+")[0], TORCH),
        "python": ("Python", f"{sys.version_info.major}.{sys.version_info.minor}", PYTHON),
    }
    for file, (project, version, objects) in sets.items():
        (HERE / f"{file}.inv").write_bytes(inventory(project, version, objects))
        print(f"docs/_intersphinx/{file}.inv: {len(objects)} objects ({project} {version})")


if __name__ == "__main__":
    main()
