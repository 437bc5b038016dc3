"""Building the HIP kernels: for the CPU (g++ with the project's runtime, sanitised), for AMD
(hipcc, compile only here) and for NVIDIA (nvcc with the mapping header).

Every build is cached under :func:`cache_dir` by a hash of the sources, the command and the
compiler's version, and written under a temporary name then renamed, so concurrent processes
(pytest-xdist workers) racing to build the same thing are safe. The CPU driver is cached object
by object (each object's hash covers its own source and every header), so a change to one
kernel recompiles that kernel and the link only.

``python3 kernels/hip/_build.py amd gfx90a gfx940`` compiles every kernel for those AMD targets
with hipcc and prints each command (``.ci/hip.sh``; this module needs only the standard
library, and torch for :func:`rocm_library` alone).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = [
    "KERNELS",
    "SOURCE_DIR",
    "amd_compile_command",
    "cache_dir",
    "cpu_driver",
    "nvidia_library",
    "rocm_library",
]

SOURCE_DIR = Path(__file__).resolve().parent
#: The kernel sources (each compiled on its own), then the host-side dispatch.
KERNELS = ("mx_quantize.hip", "mx_dequantize.hip", "int4_dequantize.hip", "fp8_cast.hip",
           "fp8_block.hip", "nvfp4.hip")
DISPATCH = "dispatch.cpp"
DRIVER = "driver.cpp"
#: Probes of the CPU runtime's semantics, linked into the CPU driver only.
PROBES = "runtime_probe.hip"

#: No floating-point contraction, no strict-aliasing assumptions (the kernels load 16-byte
#: vectors from element arrays), C++17.
COMMON_FLAGS = ("-std=c++17", "-ffp-contract=off", "-fno-strict-aliasing")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")
CPU_FLAGS = (*COMMON_FLAGS, "-O1", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror")
#: The unsanitised CPU driver that benchmarks/hip_cost.py counts instructions of.
MEASURED_CPU_FLAGS = (*COMMON_FLAGS, "-O2", "-Wall", "-Wextra", "-Werror")
#: nvcc: no FMA contraction (--fmad=false), IEEE division and denormals (the defaults, stated).
NVCC_FLAGS = ("-x", "cu", "-std=c++17", "--fmad=false", "-prec-div=true", "-ftz=false", "-O3",
              "-Xcompiler", "-fPIC,-fno-strict-aliasing")
#: hipcc (HIP_PLATFORM=amd): no contraction; HIP-Clang keeps denormals and correctly rounded
#: float32 division by default.
HIPCC_FLAGS = (*COMMON_FLAGS, "-O3")


def cache_dir() -> Path:
    """``$MXFORMATS_HIP_CACHE``, else ``$XDG_CACHE_HOME/mxformats/hip`` (``~/.cache``)."""
    explicit = os.environ.get("MXFORMATS_HIP_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mxformats" / "hip"


def _sources_digest(command: Sequence[str], compiler: str,
                    sources: Callable[[Path], bool] | None = None) -> str:
    """Hash of the sources ``sources`` selects (default: every .hip, .h and .cpp file), the
    command and the compiler's version."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE_DIR.glob("*")):
        if path.suffix in (".hip", ".h", ".cpp") and (sources is None or sources(path)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update("\0".join(command).encode())
    digest.update(_compiler_version(compiler).encode())
    return digest.hexdigest()[:20]


@functools.cache
def _compiler_version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True,
                          check=True).stdout


def _run(command: Sequence[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"build failed: {' '.join(command)}\n{done.stdout}{done.stderr}")


#: Builds that failed in this process, by target: asked again, the same error is raised
#: without compiling again (a broken kernel otherwise recompiles for every test example).
#: A changed source is another digest, so another target, and is built.
_FAILED: dict[Path, RuntimeError] = {}


def _cached(name: str, digest: str, build: Callable[[Path], Path]) -> Path:
    """The cached artifact ``name`` for ``digest``; ``build(workdir) -> Path`` makes it."""
    target = cache_dir() / digest / name
    if target.exists():
        return target
    if target in _FAILED:
        raise _FAILED[target]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="build-") as work:
        try:
            made: Path = build(Path(work))
        except RuntimeError as error:
            _FAILED[target] = error
            raise
        os.replace(made, target)  # atomic: a racing build replaces an identical file
    return target


def _compiler(name: str, env_var: str) -> str:
    found = shutil.which(os.environ.get(env_var, name))
    if found is None:
        raise RuntimeError(f"{name} is not installed (set {env_var} to use another compiler)")
    return found


def cpu_driver(sanitized: bool = True) -> Path:
    """The sanitised CPU driver executable (ASan + UBSan), built once per source version: each
    object is cached by its own source, the headers and the command; the link by the objects'
    digests. ``sanitized=False``: the same driver without sanitizers, at -O2
    (:data:`MEASURED_CPU_FLAGS`), for measuring the kernels' work."""
    cxx = _compiler("g++", "CXX")
    flags = (*CPU_FLAGS, *SANITIZE_FLAGS) if sanitized else MEASURED_CPU_FLAGS
    sanitize = SANITIZE_FLAGS if sanitized else ()  # the link's
    sources: list[tuple[Path, tuple[str, ...]]] = [
        (SOURCE_DIR / k, ("-x", "c++")) for k in (*KERNELS, PROBES)]
    sources += [(SOURCE_DIR / DISPATCH, ()), (SOURCE_DIR / DRIVER, ())]

    def cached_object(source: tuple[Path, tuple[str, ...]]) -> tuple[str, Path]:
        path, language = source
        command = (cxx, *flags, *language, "-c")
        digest = _sources_digest(command, cxx, lambda p: p == path or p.suffix == ".h")

        def build(work: Path) -> Path:
            obj = work / f"{path.stem}.o"
            _run([*command, str(path), "-o", str(obj)])
            return obj

        return digest, _cached(f"{path.stem}.o", digest, build)

    # Every object is attempted before a failure is raised (pool.map would cancel the ones not
    # yet started at the first failure), so each broken object is compiled, and remembered,
    # once.
    with ThreadPoolExecutor(max_workers=len(sources)) as pool:
        futures = [pool.submit(cached_object, source) for source in sources]
    objects = [future.result() for future in futures]
    link = hashlib.sha256("\0".join(d for d, _ in objects).encode()).hexdigest()[:20]

    def build(work: Path) -> Path:
        exe = work / "mxf_hip_cpu"
        _run([cxx, *sanitize, *(str(obj) for _, obj in objects), "-o", str(exe)])
        return exe

    return _cached("mxf_hip_cpu", link, build)


def nvidia_library(arch: str) -> Path:
    """The kernels and ``mxf_run`` as a shared library for NVIDIA ``arch`` (e.g. ``sm_90``),
    built with nvcc against ``hip_nvidia.h``."""
    nvcc = _compiler("nvcc", "NVCC")
    flags = (*NVCC_FLAGS, f"-arch={arch}", "-shared")
    digest = _sources_digest((nvcc, *flags), nvcc)

    def build(work: Path) -> Path:
        library = work / "libmxf_hip.so"
        sources = [str(SOURCE_DIR / name) for name in (*KERNELS, DISPATCH)]
        _run([nvcc, *flags, *sources, "-o", str(library)])
        return library

    return _cached("libmxf_hip.so", digest, build)


def rocm_library() -> Path:
    """The kernels and ``mxf_run`` as a shared library for this machine's AMD GPU, built by
    ``torch.utils.cpp_extension`` (hipcc) on ROCm PyTorch (cached by torch under
    :func:`cache_dir`); RuntimeError on another PyTorch build. Not run in this project's CI: it
    needs an AMD GPU and ROCm >= 6 for gfx942/gfx950."""
    import torch

    if not torch.version.hip:
        raise RuntimeError("mxformats.kernels.hip.rocm needs a ROCm build of PyTorch")
    from torch.utils import cpp_extension

    build = cache_dir() / "rocm"
    build.mkdir(parents=True, exist_ok=True)
    sources = [str(SOURCE_DIR / name) for name in (*KERNELS, DISPATCH)]
    # is_python_module=False: a plain shared library (mxf_run is extern "C", no pybind).
    # dispatch.cpp goes to the host compiler: it must see the HIP runtime, not hip_cpu.h.
    cpp_extension.load(name="mxf_hip_rocm", sources=sources,
                       extra_cflags=[*HIPCC_FLAGS, "-D__HIP_PLATFORM_AMD__=1"],
                       extra_cuda_cflags=list(HIPCC_FLAGS),
                       extra_include_paths=[str(SOURCE_DIR)], build_directory=str(build),
                       is_python_module=False)
    return build / "mxf_hip_rocm.so"


def amd_compile_command(source: Path, target: str, output: Path) -> list[str]:
    """hipcc compiling one kernel for the AMD GPU ``target`` (run with HIP_PLATFORM=amd)."""
    return ["hipcc", f"--offload-arch={target}", *HIPCC_FLAGS, "-c", str(source), "-o",
            str(output)]


def _compile_for_amd(targets: Sequence[str]) -> None:
    """Compile every kernel for each AMD target (in parallel), printing each command."""
    env = dict(os.environ, HIP_PLATFORM="amd")  # hipcc picks nvidia when nvcc is installed
    with tempfile.TemporaryDirectory() as work:
        commands = [amd_compile_command(SOURCE_DIR / name, target,
                                        Path(work) / f"{target}-{name}.o")
                    for target in targets for name in (*KERNELS, DISPATCH)]
        for command in commands:
            print("HIP_PLATFORM=amd", " ".join(command), flush=True)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(lambda command: _run(command, env), commands))
        print(f"compiled {len(commands)} sources for {', '.join(targets)}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "amd":
        sys.exit("usage: python3 kernels/hip/_build.py amd TARGET...")
    _compile_for_amd(sys.argv[2:])
