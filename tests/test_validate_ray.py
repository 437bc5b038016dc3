"""``mxformats.validate.executors.ray``: the Ray executor on an in-process two-node cluster.

One cluster per module (``ray.cluster_utils.Cluster``: a head and a second node, one CPU and
an 80 MiB object store each, both on this machine), shut down at the module's end so later
tests in the same pytest process see no Ray. The toy functions are module-level and pickled by
value (``register_pickle_by_value``), so Ray's workers need not import this test module; the
wrapper they run is imported from mxformats, as the validator's tasks will be.

Ray puts both nodes on the address it picks for this machine, not on 127.0.0.1 explicitly:
``ray.init(address="127.0.0.1:PORT")`` rewrites a loopback host to that address
(``ray._private.services.resolve_ip_for_localhost``), so a cluster bound to loopback alone is
unreachable by its own address.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import requires

from mxformats import fast
from mxformats.validate.executors import Outcome

ray = requires("ray")

from ray.cluster_utils import Cluster  # noqa: E402
from test_validate_tasks import FIXTURES, NUMERIC_CASES  # noqa: E402
from validate_corpus import Case  # noqa: E402

from mxformats.validate.executors import executor_for  # noqa: E402
from mxformats.validate.executors.ray import RayExecutor  # noqa: E402
from mxformats.validate.model import Options  # noqa: E402

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """Two Ray nodes; the first executor made connects the driver to them."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    try:
        cluster.add_node(**NODE_ARGS, num_gpus=1)  # declared, not real: --device cuda's tasks
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _outcomes(executor: RayExecutor, fn: Callable[[Any], Any], items: list[Any]) -> list[Outcome[Any]]:
    """Every outcome, ordered by index (each index exactly once)."""
    outcomes = sorted(executor.map(fn, items), key=lambda outcome: outcome.index)
    assert [outcome.index for outcome in outcomes] == list(range(len(items)))
    return outcomes


def _square(x: int) -> int:
    return x * x


def _fast_threads(_: int) -> int:
    return fast.workers()


def _square_on_node(x: int) -> tuple[int, str]:
    time.sleep(0.2)  # long enough that one one-CPU node cannot take every task
    return x * x, ray.get_runtime_context().get_node_id()


def _gpu_and_node(_: int) -> tuple[list[Any], str | None, str]:
    return (ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"),
            ray.get_runtime_context().get_node_id())


def _raise_on_three(item: tuple[Path, int]) -> int:
    calls, x = item
    with calls.open("a") as log:
        log.write(f"{x}\n")
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


def _die_first_time(item: tuple[Path, int]) -> int:
    marker, x = item
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return x + 100


def _die(item: tuple[Path, int]) -> int:
    runs, x = item
    with runs.open("a") as log:
        log.write(f"{x}\n")
    os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_map_gives_the_plain_loop_values_in_index_order(ray_cluster: Cluster) -> None:
    executor = RayExecutor(address=ray_cluster.address)
    assert executor.name == "ray" and executor.workers == 2  # one CPU on each node
    items = list(range(25))  # more than the 2 x workers in flight
    outcomes = _outcomes(executor, _square, items)
    assert [outcome.value for outcome in outcomes] == [_square(x) for x in items]
    assert all(outcome.error is None and outcome.attempts == 1 for outcome in outcomes)
    assert list(executor.map(_square, [])) == []


def test_a_task_uses_one_thread_for_its_one_cpu(ray_cluster: Cluster) -> None:
    """Each task's fast paths get one thread (the CPU Ray gave it), not one per CPU of the
    machine, which every worker of a node would start."""
    outcomes = _outcomes(RayExecutor(address=ray_cluster.address), _fast_threads, [0, 1])
    assert [outcome.value for outcome in outcomes] == [1, 1]


def test_tasks_run_on_both_nodes(ray_cluster: Cluster) -> None:
    outcomes = _outcomes(RayExecutor(address=ray_cluster.address), _square_on_node, list(range(6)))
    assert [outcome.value[0] for outcome in outcomes if outcome.value] == [x * x for x in range(6)]
    nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert {outcome.value[1] for outcome in outcomes if outcome.value} == nodes
    assert len(nodes) == 2


def test_device_cuda_asks_ray_for_one_gpu_per_task(ray_cluster: Cluster) -> None:
    """``--device cuda`` with ``--executor ray``: every task holds one GPU, which Ray makes
    the task's ``CUDA_VISIBLE_DEVICES`` (so the task's ``cuda`` is that GPU); only the node
    that declares one runs them. Without a GPU device, tasks ask for none."""
    opts = Options(executor="ray", ray_address=ray_cluster.address, device="cuda")
    executor = executor_for(opts)
    assert isinstance(executor, RayExecutor) and executor.gpus_per_task == 1
    outcomes = _outcomes(executor, _gpu_and_node, [0, 1, 2])
    assert {(tuple(o.value[0]), o.value[1]) for o in outcomes} == {((0,), "0")}
    assert len({o.value[2] for o in outcomes}) == 1
    plain = executor_for(Options(executor="ray", ray_address=ray_cluster.address, device="cpu"))
    assert isinstance(plain, RayExecutor) and plain.gpus_per_task == 0


def test_in_flight_tasks_are_bounded(ray_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    executor = RayExecutor(address=ray_cluster.address, workers=1)
    waited_on: list[int] = []
    wait = ray.wait

    def counting_wait(refs: list[Any], **kwargs: Any) -> Any:
        waited_on.append(len(refs))
        return wait(refs, **kwargs)

    monkeypatch.setattr(ray, "wait", counting_wait)
    assert [o.value for o in _outcomes(executor, _square, list(range(9)))] == [x * x for x in range(9)]
    assert max(waited_on) == 2  # 2 x workers, never all 9 at once
    assert len(waited_on) == 9


def test_an_exception_is_the_outcome_and_not_retried(ray_cluster: Cluster, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    outcomes = _outcomes(
        RayExecutor(address=ray_cluster.address), _raise_on_three, [(calls, x) for x in range(5)]
    )
    assert [o.value for o in outcomes] == [0, 1, 2, None, 4]
    assert outcomes[3].error == "ValueError: bad item 3"
    assert outcomes[3].attempts == 1
    assert sorted(calls.read_text().split()) == ["0", "1", "2", "3", "4"]  # ran once each


def test_a_killed_worker_is_retried(ray_cluster: Cluster, tmp_path: Path) -> None:
    items = [(tmp_path / "killed-once", 1), (tmp_path / "absent" / "never", 2)]
    (tmp_path / "absent").mkdir()
    (tmp_path / "absent" / "never").touch()  # this one's marker exists: it never dies
    outcomes = _outcomes(RayExecutor(address=ray_cluster.address), _die_first_time, items)
    assert [(o.value, o.error, o.attempts) for o in outcomes] == [(101, None, 2), (102, None, 1)]


def test_a_worker_that_always_dies_is_an_error_after_max_attempts(
    ray_cluster: Cluster, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    executor = RayExecutor(address=ray_cluster.address, max_attempts=2)
    [outcome] = _outcomes(executor, _die, [(runs, 7)])
    assert runs.read_text().split() == ["7", "7"]  # the first attempt and one retry
    assert outcome.value is None and outcome.attempts == 2
    assert outcome.error is not None
    assert outcome.error.startswith("WorkerCrashedError: the worker died on each of 2 attempts; ")


def test_an_item_that_does_not_serialise_never_runs(ray_cluster: Cluster) -> None:
    items = [2, threading.Lock(), 3]
    outcomes = _outcomes(RayExecutor(address=ray_cluster.address), _square, items)
    assert [o.value for o in outcomes] == [4, None, 9]
    assert outcomes[1].attempts == 0
    assert outcomes[1].error is not None
    assert outcomes[1].error.startswith("TypeError: Could not serialize the argument <unlocked ")
    assert "\n" not in outcomes[1].error  # Ray's serialisability report is left out


def test_arguments_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RayExecutor(max_attempts=0)
    with pytest.raises(ValueError, match="workers"):
        RayExecutor(workers=0)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.setattr(ray, "init", None)  # never reached
    with pytest.raises(ValueError, match="HOST:PORT"):
        RayExecutor(address="head-node")
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(ConnectionError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        RayExecutor(address=f"127.0.0.1:{port}")


def test_ray_is_imported_when_a_ray_executor_is_made_only() -> None:
    code = (
        "import sys, mxformats, mxformats.cli, mxformats.validate.runner, "
        "mxformats.validate.executors.ray; assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'mxformats\[ray\]'"):
        RayExecutor()


@pytest.mark.parametrize("fixture", FIXTURES)
def test_validate_on_the_cluster_gives_the_local_report(
        ray_cluster: Cluster, fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The validator's tasks on two Ray nodes: the same JSON report (timings aside) as in one
    process, reproduction block included (issue 18's acceptance)."""
    from test_validate_tasks import PRODUCERS, SRC, _json, _without_timings

    from mxformats.validate import tasks
    from mxformats.validate.findings import Level
    from mxformats.validate.model import Options
    from mxformats.validate.runner import validate

    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)  # several tasks, over both nodes
    monkeypatch.setattr(tasks, "TASK_MODULES", 2)
    opts = {"level": Level.FULL, "source": SRC}
    local = validate(PRODUCERS / fixture, Options(workers=1, **opts))
    # The cluster's own address: ``None`` would join whichever Ray runs on this machine, and
    # under pytest-xdist every worker process starts a cluster of its own.
    on_ray = validate(PRODUCERS / fixture, Options(workers=2, executor="ray", **opts),
                      executor=RayExecutor(address=ray_cluster.address, workers=2))
    assert len(on_ray.tasks) > 2 and on_ray.reproduction is not None
    assert _without_timings(_json(on_ray)) == _without_timings(_json(local))


@pytest.mark.parametrize("c", NUMERIC_CASES[::6], ids=lambda c: c.name)
def test_corpus_on_the_cluster_gives_the_local_report(
        ray_cluster: Cluster, c: Case, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Corruption-corpus cases whose numbers or reproduction change (the sample the local
    executor's own test takes): the same JSON report on two Ray nodes as in one process."""
    from test_validate_corpus import build, ensure_twins, options
    from test_validate_tasks import _json, _without_timings

    from mxformats.validate import tasks
    from mxformats.validate.runner import validate

    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
    monkeypatch.setattr(tasks, "TASK_MODULES", 2)
    bases = {c.base} | ({c.source} if isinstance(c.source, str) else set())
    ensure_twins(tmp_path_factory.getbasetemp() / "twins-ray", bases)
    path = build(c, tmp_path)
    opts = options(c)
    local = validate(path, opts)
    opts.workers, opts.executor = 2, "ray"
    on_ray = validate(path, opts, executor=RayExecutor(address=ray_cluster.address, workers=2))
    assert _without_timings(_json(on_ray)) == _without_timings(_json(local))
