"""Shared fixtures: one simulated Ray cluster per test session (starting Ray costs seconds)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.helpers.ray import QUIET_NODE, WARM, assert_no_leaks, clean_up, leftovers

if TYPE_CHECKING:
    from fleetval.run.pool import RankPool


@pytest.hookimpl(tryfirst=True)  # NOTE: before every other plugin's configure
def pytest_configure(config: pytest.Config) -> None:
    """The environment of every test and of every process a test starts (Ray's nodes and
    workers, CLI and service subprocesses, xdist's workers, which start after this): set
    once, before collection imports any test module."""
    # Rank actors import torch; keep their thread pools small on a 2-core machine.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Ray's background work that no test reads: the agents' metrics export and the usage-stats
    # reporter. Every Ray the tests start inherits this (the session's, fleet8's, the CLI's and
    # the service's embedded ones): an idle 4-node cluster used 0.075 cores with them, 0.05
    # without (bench/RESULTS.md, "Test time on 2 cores, 2026-11-27 01:08-03:16 UTC").
    os.environ.setdefault("RAY_enable_metrics_collection", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Each node's dashboard agent samples every process on the machine for the dashboard nobody
    # opens here (every 5 s by default); once a minute keeps it alive and cheap.
    os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "60000")
    # No idle workers started ahead for each new driver (every rank is an actor, started on its
    # node when placed) and no memory monitor reading /proc every 250 ms in each raylet: an idle
    # 4-node cluster 0.042 -> 0.027 cores, its start 12 -> 10 CPU-s (bench/RESULTS.md).
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    # Ranks at normal priority, as fleetval's embedded Ray and the deploy recipes start them (Ray's
    # default for workers, nice 15, puts every pytest worker and CLI process ahead of them).
    os.environ.setdefault("RAY_worker_niceness", "0")
    # Rich wraps tables at 80 columns when not on a terminal; tests read whole lines.
    os.environ["COLUMNS"] = "250"


@pytest.hookimpl(tryfirst=True)  # NOTE: before xdist's own, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under xdist (`-n 3 --dist loadgroup --no-loadscope-reorder`, scripts/test.sh): each
    module runs whole on one worker (its module fixtures once), and the modules that start Ray
    clusters of their own (`own_cluster`: nine simulated nodes, Ray in a Slurm job, fresh
    `fleetval run`s) run one after another on one worker, never two such start-ups at once on
    2 cores. xdist hands out the groups in the order set below (without
    --no-loadscope-reorder, xdist >= 3.8, it sorts them by their number of tests, and the
    own_cluster chain, ten tests, started after the unit modules)."""
    # A module's place, whole (its tests keep their order): the own_cluster chain first, as
    # collected, then the modules on the session's cluster, then the rest, each part by its
    # marks. NOTE: the session-cluster modules before the rest, so the worker that ran the
    # chain is mostly left unit modules when it is done, not a third session cluster to start
    # (~20 CPU-s). The chain ends with the 8-node sweeps, whose last five tests take no time:
    # xdist hands a worker its next module once two of its tests are left, and behind a long
    # one (the fresh `fleetval run`s, 120 s) that module waited while the others idled.
    place: dict[str, tuple[bool, ...]] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        own = item.get_closest_marker("own_cluster") is not None
        item.add_marker(pytest.mark.xdist_group("own_cluster" if own else module))
        key = (False,) if own else (
            True,
            "ray_cluster" not in item.fixturenames,
            *(item.get_closest_marker(m) is None for m in ("multinode", "slow")),
        )  # fmt: skip
        place[module] = min(place.get(module, key), key)
    items.sort(key=lambda item: place[item.nodeid.split("::")[0]])


@pytest.hookimpl(optionalhook=True)  # NOTE: xdist's hook: its controller, once per worker
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """Stop at once where xdist's grouping did not take: the modules would be dealt out test by
    test, three Slurm clusters and three fresh `fleetval run`s starting at once on 2 cores, and
    fail as timeouts far from the cause. xdist marks each grouped test's id with `@group`;
    pytest 9.2 ignores that mark (pytest-dev/pytest-xdist#1386), so pyproject caps pytest."""
    config = node.config  # type: ignore[attr-defined]
    if config.getoption("dist") == "loadgroup" and ids and not all("@" in i for i in ids):
        raise pytest.UsageError(
            f"--dist loadgroup did not group the tests under pytest {pytest.__version__} "
            "(pytest-dev/pytest-xdist#1386): install the test extra's pytest (<9.2)"
        )


HEAD = "head"
WORKERS = ("node-a", "node-b", "node-c")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A head with 4 CPUs and three worker nodes declaring 2 CPUs + 2 GPUs each (labelled by name).

    The GPUs are declared resources only: a rank placed on one still runs on CPU, which
    is what placement and rank-ordering tests need.
    """
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 4,
            "labels": {"fleetval/node": HEAD},
            "include_dashboard": False,  # the leak checks ask the GCS (tests/helpers/ray.py)
            **QUIET_NODE,
        },
    )
    for name in WORKERS:
        cluster.add_node(num_cpus=2, num_gpus=2, labels={"fleetval/node": name}, **QUIET_NODE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="session")
def warm_pool(ray_cluster: object) -> Iterator[RankPool]:
    """One warm `RankPool` for the session's runs that take it (`run_suite(..., pool=)`), as
    the service keeps one: a job of the same shape as the last clean one reuses its ranks
    instead of starting processes that import torch. At the end it must free everything."""
    from fleetval.policy import FailurePolicy
    from fleetval.run.pool import RankPool

    pool = RankPool(FailurePolicy(idle_s=3600))
    WARM.append(pool)
    yield pool
    WARM.remove(pool)
    pool.close()
    assert_no_leaks()


@pytest.fixture(autouse=True)
def _whole_cluster(request: pytest.FixtureRequest) -> None:
    """A test that does not take the warm pool gets the whole cluster: the pool's idle ranks
    are freed first (its placement and leak checks see no one else's)."""
    if "warm_pool" not in request.fixturenames:
        for pool in WARM:
            pool.close()


@pytest.fixture
def ray_session(ray_cluster: object) -> Iterator[object]:
    """The shared cluster, with a check after the test that nothing was left behind but what
    the warm pool keeps idle.

    A test that leaks fails alone: its leftovers are cleaned up before it fails, and a test
    starting after one that leaked waits for that clean-up instead of failing for it."""
    try:
        assert_no_leaks(15)
    except AssertionError:
        clean_up(*leftovers())
        assert_no_leaks()
    yield ray_cluster
    try:
        assert_no_leaks()
    except AssertionError:
        clean_up(*leftovers())
        raise
