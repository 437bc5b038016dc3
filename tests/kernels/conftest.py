"""Parametrise the kernel tests over the backends that run on ``--device`` and their claims.

A test marked ``@pytest.mark.kernel("quantize_mx")`` gets ``(backend, fmt, profile)`` for every
``(format, profile)`` pair every backend on this device claims for that function; a test that
takes a ``backend`` argument without the marker gets each backend on this device. ``--device``
comes from ``tests/conftest.py`` (``cpu``: the Triton interpreter, HIP compiled for the CPU).
"""

from __future__ import annotations

from typing import Any

import pytest

from .backends import Backend, backends_for


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kernel(function): run once per (backend, format, profile) the backends on --device "
        "claim for function",
    )


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    """``--device``: cpu (the interpreter, HIP compiled for the CPU) or cuda."""
    return str(request.config.getoption("--device"))


def _supported(backend: Backend) -> dict[str, Any]:
    try:
        return dict(backend.load().SUPPORTED)
    except ImportError:
        return {}  # test_backend_imports reports it (a failure under CI=true)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    device = str(metafunc.config.getoption("--device"))
    backends = backends_for(device)
    marker = metafunc.definition.get_closest_marker("kernel")
    if marker is not None:
        function = marker.args[0]
        metafunc.parametrize(
            ("backend", "fmt", "profile"),
            [pytest.param(b, fmt, profile, id=f"{b.name}-{fmt}-{profile}")
             for b in backends for fmt, profile in _supported(b).get(function, ())],
        )
    elif "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", backends, ids=[b.name for b in backends])
