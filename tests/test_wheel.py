"""The wheel, installed in a bare venv with only the core dependencies (issue 17, item 5): it
ships the spec vectors, so ``mxformats check`` runs them; without hypothesis, the check skips
that source and says to install ``mxformats[test]``; the core import does not import torch.

The build and the venv use no network: the wheel is built from a copy of the sources with the
setuptools already installed, and the venv reaches the core dependencies (numpy, ml_dtypes,
rich and its two, safetensors) through a ``.pth`` file naming a folder of links to them."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The core dependencies' import names and distributions (pyproject's dependencies, and rich's).
CORE = {"numpy": "numpy", "ml_dtypes": "ml_dtypes", "rich": "rich", "safetensors": "safetensors",
        "markdown_it": "markdown-it-py", "mdurl": "mdurl", "pygments": "Pygments"}


def _core_site(folder: Path) -> Path:
    """A folder holding links to the core dependencies (and their dist-info) only."""
    folder.mkdir()
    for module, dist in CORE.items():
        spec = __import__(module)
        source = Path(spec.__file__).parent
        (folder / source.name).symlink_to(source)
        files = importlib.metadata.distribution(dist).files or []
        info = {Path(str(f)).parts[0] for f in files if ".dist-info" in str(f)}
        for name in info:
            target = source.parent / name
            if target.exists():
                (folder / name).symlink_to(target)
    libs = Path(sysconfig.get_paths()["purelib"])
    for extra in ("numpy.libs", "ml_dtypes.libs"):
        if (libs / extra).exists():
            (folder / extra).symlink_to(libs / extra)
    return folder


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for name in ("mxformats", "kernels", "spec"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "_build*"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MXFORMATS_ROOT")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp / "dist"), str(src)], check=True, env=env)
    (wheel,) = (tmp / "dist").glob("mxformats-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert "mxformats/spec/vectors/mx/ocp.json" in z.namelist()
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--no-deps", "--no-index", "-q", str(wheel)], check=True, env=env)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "core-deps.pth").write_text(str(_core_site(tmp / "core")) + "\n")
    return venv


def _run(venv: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MXFORMATS_ROOT")}
    return subprocess.run(argv, capture_output=True, text=True, cwd=venv, env=env,
                          check=False)


def test_the_wheel_checks_with_its_vectors_and_without_hypothesis(installed: Path) -> None:
    bin_ = installed / "bin"
    done = _run(installed, str(bin_ / "mxformats"), "check", "mxformats:quantize_mx",
                "--profile", "ocp", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    vectors = [r for r in report["runs"] if r["source"] == "vectors"]
    assert vectors and all(r["blocks"] > 0 and r["skipped"] is None for r in vectors)
    skipped = [r["skipped"] for r in report["runs"] if r["source"] == "hypothesis"]
    assert skipped and all("pip install 'mxformats[test]'" in s for s in skipped)


def test_the_installed_core_imports_no_torch_and_runs_as_a_module(installed: Path) -> None:
    python = str(installed / "bin" / "python")
    code = ("import sys, mxformats; assert 'torch' not in sys.modules; "
            "assert 'matplotlib' not in sys.modules; "
            "assert 'site-packages' in mxformats.__file__, mxformats.__file__")
    assert _run(installed, python, "-c", code).returncode == 0
    done = _run(installed, python, "-m", "mxformats", "--version")
    assert done.returncode == 0 and done.stdout.startswith("mxformats ")
    hypothesis = _run(installed, python, "-c", "import hypothesis")
    assert hypothesis.returncode != 0  # the venv is a core install


def test_the_installed_metadata_names_the_docs_url(installed: Path) -> None:
    """The wheel's ``Project-URL: Documentation`` (what pip and PyPI show) is the address the
    CLI and the JSON findings link to."""
    code = ("import importlib.metadata as m, mxformats.output as o; "
            "urls = dict(u.split(', ', 1) for u in m.metadata('mxformats').get_all('Project-URL'));"
            "assert urls['Documentation'] == o.DOCS_URL, urls")
    done = _run(installed, str(installed / "bin" / "python"), "-c", code)
    assert done.returncode == 0, done.stderr
