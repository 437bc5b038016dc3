"""pyproject.toml lists every package, and mxformats.kernels maps to the top-level kernels/."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import mxformats
import mxformats.kernels

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    from conftest import requires

    tomllib = requires("tomli")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


#: Packages that ship data only (the spec and its vectors, issue 17): no __init__.py.
DATA_PACKAGES = {"mxformats.spec"}


def _package_dirs() -> dict[str, Path]:
    """Package name -> source folder, from [tool.setuptools] packages and package-dir."""
    mapping = SETUPTOOLS.get("package-dir", {})
    dirs = {}
    for name in SETUPTOOLS["packages"]:
        prefixes = [p for p in mapping if name == p or name.startswith(p + ".")]
        prefix = max(prefixes, key=len, default=None)
        if prefix is None:
            rel = Path(*name.split("."))
        else:
            rel = Path(mapping[prefix], *name[len(prefix) :].split(".")[1:])
        dirs[name] = ROOT / rel
    return dirs


def test_every_package_folder_is_listed() -> None:
    listed = {path.resolve() for path in _package_dirs().values()}
    for name, path in _package_dirs().items():
        if name in DATA_PACKAGES:
            assert path.is_dir() and not (path / "__init__.py").exists(), name
            continue
        assert (path / "__init__.py").is_file(), f"{name}: no {path}/__init__.py"
    found = {
        init.parent.resolve()
        for top in ("mxformats", "kernels")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = sorted(str(p.relative_to(ROOT)) for p in found - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_kernels_is_the_top_level_folder() -> None:
    kernels = Path(mxformats.kernels.__file__).resolve()
    installed = Path(mxformats.__file__).resolve().parent / "kernels" / "__init__.py"
    assert kernels in {(ROOT / "kernels" / "__init__.py").resolve(), installed}
    assert mxformats.kernels.__doc__ and "bit for bit" in mxformats.kernels.__doc__


def test_installed_version_matches() -> None:
    assert importlib.metadata.version("mxformats") == mxformats.__version__
