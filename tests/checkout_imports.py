"""Import ``mxformats`` and ``mxformats.kernels`` from the tree in ``$MXFORMATS_ROOT``.

``kernels/`` installs as ``mxformats.kernels`` (pyproject.toml ``package-dir``), so a plain
``PYTHONPATH`` cannot map it; and an editable install would otherwise keep supplying the
checkout it was made from. This file's text is written as ``sitecustomize.py`` by
``tests/mutants/run.py`` (each mutant's copy) and ``benchmarks/gpu.py`` (its pytest
subprocess, on a machine where mxformats is not installed), and executed by ``gpu.py`` itself.
"""

import importlib.util
import os
import sys

_ROOT = os.environ["MXFORMATS_ROOT"]
#: Top-level package -> folder, as in pyproject.toml [tool.setuptools] package-dir.
_DIRS = {"mxformats": "mxformats", "mxformats.kernels": "kernels"}


class _TreeFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in _DIRS:
            return None
        folder = os.path.join(_ROOT, _DIRS[fullname])
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )


sys.meta_path.insert(0, _TreeFinder)
