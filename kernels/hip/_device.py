"""Where the HIP kernels run: ``mxf_run`` (kernels/hip/dispatch.cpp) behind one interface.

- :class:`CpuDriver`: CPU tensors. The sanitised driver executable (ASan + UBSan) runs as a
  long-lived subprocess fed through pipes (an ASan runtime cannot be loaded into a normal
  Python); a request costs a pipe round trip, not a process start. A sanitizer report kills
  the driver: the call raises :class:`KernelError` with the report, and the next call starts
  a new driver.
- :class:`SharedLibrary`: GPU tensors. ``mxf_run`` from a shared library built by nvcc
  (NVIDIA) or torch.utils.cpp_extension (ROCm), called through ctypes with device pointers on
  the current stream.

Spec: the operations and their argument order are listed in ``dispatch.cpp``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    import torch

__all__ = ["CpuDriver", "Executor", "KernelError", "SharedLibrary", "byte_view", "request_header",
           "warp_size", "wave_size"]

#: The wave size the CPU runtime simulates: 64 (CDNA, the GPUs these checkpoints run on)
#: unless ``MXFORMATS_HIP_WARP_SIZE`` says 32.
DEFAULT_WARP_SIZE = 64


_wave_override: ContextVar[int | None] = ContextVar("mxformats_hip_wave_size", default=None)


def warp_size() -> int:
    """The CPU runtime's wave size for the next calls: :func:`wave_size`'s, else
    ``MXFORMATS_HIP_WARP_SIZE`` (32 or 64), else 64."""
    override = _wave_override.get()
    value = override if override is not None else int(
        os.environ.get("MXFORMATS_HIP_WARP_SIZE", DEFAULT_WARP_SIZE))
    if value not in (32, 64):
        raise ValueError(f"the wave size must be 32 or 64, got {value}")
    return value


@contextlib.contextmanager
def wave_size(size: int) -> Iterator[None]:
    """Run the CPU kernels called inside the block with waves of ``size`` (32 or 64) lanes."""
    token = _wave_override.set(size)
    try:
        yield
    finally:
        _wave_override.reset(token)


class KernelError(RuntimeError):
    """A kernel failed: the sanitised CPU driver reported an error (its report is the
    message), or a GPU launch returned an error code."""


class Executor(Protocol):
    def run(self, op: str, params: Sequence[int], inputs: Sequence[torch.Tensor],
            outputs: Sequence[torch.Tensor]) -> None:
        """Run ``op``: ``inputs`` and ``outputs`` are contiguous tensors on the executor's
        device; the outputs are written in place."""


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous tensor (a one-element slice may keep a stride other than 1)."""
    import torch

    flat = t.reshape(-1)
    if flat.numel() and flat.stride(0) != 1:
        flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
    return flat.view(torch.uint8)


def request_header(op: str, params: Sequence[int], input_sizes: Sequence[int],
                   output_sizes: Sequence[int]) -> str:
    """The text line of one request to the CPU driver (driver.cpp), the inputs' bytes to
    follow, with the current :func:`warp_size`."""
    return " ".join(str(v) for v in (
        op, warp_size(), len(params), *params, len(input_sizes), *input_sizes,
        len(output_sizes), *output_sizes)) + "\n"


class CpuDriver:
    """The sanitised CPU driver, started on first use (and again after it died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the driver (it is started again by the next call)."""
        with self._lock:
            self._discard()

    def _start(self) -> subprocess.Popen[bytes]:
        from ._build import cpu_driver

        executable = cpu_driver()
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1:" + env.get("ASAN_OPTIONS", "")
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:" + env.get(
            "UBSAN_OPTIONS", "")
        # Lives as long as the driver (closed by _discard), so no context manager.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        return subprocess.Popen([str(executable)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self._stderr, env=env)

    def _report(self) -> str:
        assert self._stderr is not None
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _discard(self) -> None:
        if self._process is not None:
            for pipe in (self._process.stdin, self._process.stdout):
                if pipe is not None:
                    pipe.close()
            self._process.kill()
            self._process.wait()
        if self._stderr is not None:
            self._stderr.close()
        self._process = self._stderr = None

    def run(self, op: str, params: Sequence[int], inputs: Sequence[torch.Tensor],
            outputs: Sequence[torch.Tensor]) -> None:
        in_bytes = [byte_view(t.contiguous()).numpy() for t in inputs]
        out_bytes = [byte_view(t).numpy() for t in outputs]
        header = request_header(op, params, [b.size for b in in_bytes],
                                [b.size for b in out_bytes])
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._discard()
                self._process = self._start()
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            replies = cast(io.BufferedReader, process.stdout)
            try:
                process.stdin.write(header.encode())
                for b in in_bytes:
                    process.stdin.write(b.data)
                process.stdin.flush()
                status = replies.readline()
                if status.startswith(b"error "):
                    raise KernelError(f"{op}: {status[6:].decode().strip()}")
                if status != b"ok\n":
                    raise BrokenPipeError
                for b in out_bytes:
                    view = b.data
                    got = 0
                    while got < b.size:
                        chunk = replies.readinto(view[got:])
                        if not chunk:
                            raise BrokenPipeError
                        got += chunk
            except BrokenPipeError:
                process.wait()
                report = self._report()
                self._discard()
                raise KernelError(f"the HIP CPU driver died running {op} (exit status "
                                  f"{process.returncode}):\n{report}") from None


class SharedLibrary:
    """``mxf_run`` of a GPU build, called with device pointers on the current stream."""

    def __init__(self, path: Path) -> None:
        self._library = ctypes.CDLL(str(path))
        run = self._library.mxf_run
        run.restype = ctypes.c_int
        run.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64,
                        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_void_p]
        self._run = run

    def run(self, op: str, params: Sequence[int], inputs: Sequence[torch.Tensor],
            outputs: Sequence[torch.Tensor]) -> None:
        import torch

        held = [t.contiguous() for t in inputs]  # alive until the launch is queued
        device = (held + list(outputs))[0].device
        with torch.cuda.device(device):  # the library launches on the current device
            stream = torch.cuda.current_stream(device).cuda_stream
            status = self._run(
                op.encode(), (ctypes.c_int64 * len(params))(*params), len(params),
                (ctypes.c_void_p * len(held))(*(t.data_ptr() for t in held)), len(held),
                (ctypes.c_void_p * len(outputs))(*(t.data_ptr() for t in outputs)),
                len(outputs), ctypes.c_void_p(stream))
        if status != 0:
            raise KernelError(f"{op}: launch failed with HIP/CUDA error {status}")
