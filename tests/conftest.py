"""Shared fixtures: one simulated Ray cluster per test session (starting Ray costs seconds)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import suppress
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
            "include_dashboard": False,  # the leak checks ask the GCS (see `leftovers`)
        },
    )
    for name in WORKERS:
        cluster.add_node(num_cpus=2, num_gpus=2, labels={"fleetval/node": name})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def leftovers() -> tuple[list[str], list[str]]:
    """Actors still alive and placement groups not removed, asked of the connected cluster.

    NOTE: from its GCS, not the state API: that one, without an address, asks the newest Ray
    instance on the machine, which on a shared machine may be someone else's."""
    from ray._private.state import actors
    from ray.util import placement_group_table

    alive = [a for a, info in actors().items() if info["State"] != "DEAD"]
    groups = [g for g, info in placement_group_table().items() if info["state"] != "REMOVED"]
    return alive, groups


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


def clean_up(actors: list[str], groups: list[str]) -> None:
    """Kill leftover actors (by their process: the driver that owns them may be gone or
    another process) and remove leftover placement groups, so the next test starts clean."""
    from ray._private.state import actors as actor_table
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    table = actor_table()  # NOTE: this cluster's GCS: never a pid of another Ray instance
    for actor_id in actors:
        pid = table.get(actor_id, {}).get("Pid")
        if pid:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for group_id in groups:
        with suppress(Exception):  # already removed meanwhile
            remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(group_id))))


@pytest.fixture
def ray_session(ray_cluster: object) -> Iterator[object]:
    """The shared cluster, with a check after the test that nothing was left behind.

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


def tool_missing(reason: str) -> NoReturn:
    """A test's tool is absent: skipped on a developer's machine, a failure in CI, which
    installs every tool (`scripts/setup.sh test`), so that a skip there never hides a test."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
