"""Shared fixtures: one simulated Ray cluster per test session (starting Ray costs seconds)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import NoReturn

import pytest

# Rank actors import torch; keep their thread pools small on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Rich wraps tables at 80 columns when not on a terminal; tests read whole lines.
os.environ["COLUMNS"] = "250"

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
            # The dashboard serves Ray's state API, which the leak checks below ask.
            "include_dashboard": True,
            "dashboard_port": 0,
        },
    )
    for name in WORKERS:
        cluster.add_node(num_cpus=2, num_gpus=2, labels={"fleetval/node": name})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    _wait_for_state_api()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _wait_for_state_api(timeout_s: float = 60.0) -> None:
    """The dashboard starts after the head and registers its (random) port; ask until it answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            leftovers()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def leftovers() -> tuple[list[str], list[str]]:
    """Actors still alive and placement groups not removed, from Ray's state API."""
    from ray.util.state import list_actors, list_placement_groups

    actors = list_actors(filters=[("state", "!=", "DEAD")], raise_on_missing_output=False)
    groups = list_placement_groups(
        filters=[("state", "!=", "REMOVED")], raise_on_missing_output=False
    )
    return [a.actor_id for a in actors], [g.placement_group_id for g in groups]


def assert_no_leaks(
    timeout_s: float = 45.0, *, besides: tuple[list[str], list[str]] = ([], [])
) -> None:
    """Every actor dead and every placement group removed (kills are asynchronous and slow on a
    loaded 2-core box: poll; a clean end returns at once),
    `besides` those (actor ids, group ids) some other live owner holds, e.g. a running
    service's warm pool."""
    deadline = time.monotonic() + timeout_s
    while True:
        actors, groups = leftovers()
        actors = [a for a in actors if a not in besides[0]]
        groups = [g for g in groups if g not in besides[1]]
        if not actors and not groups:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"leaked after the test: actors {actors}, placement groups {groups}"
            )
        time.sleep(0.2)


@pytest.fixture
def ray_session(ray_cluster: object) -> Iterator[object]:
    """The shared cluster, with a check after the test that nothing was left behind."""
    assert_no_leaks()
    yield ray_cluster
    assert_no_leaks()


def tool_missing(reason: str) -> NoReturn:
    """A test's tool is absent: skipped on a developer's machine, a failure in CI, which
    installs every tool (`scripts/setup.sh test`), so that a skip there never hides a test."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
