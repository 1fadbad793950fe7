"""Leak checks on the connected Ray cluster: actors alive and placement groups not removed."""

from __future__ import annotations

import os
import signal
import time
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetval.run.pool import RankPool

Held = tuple[list[str], list[str]]  # actor ids, placement group ids

# The session's warm pools (tests/conftest.py `warm_pool`): what they keep idle is no leak.
WARM: list[RankPool] = []
# A simulated node the tests start: no log monitor, whose 0.1 s loop streams worker logs to
# drivers, and every driver here says log_to_driver=False (a third of an idle node's CPU).
QUIET_NODE = {"include_log_monitor": False}


def warm_held() -> Held:
    """The actors and placement groups the warm pools keep idle."""
    actors = [a for pool in WARM for a in pool.actor_ids()]
    return actors, [g for pool in WARM for g in pool.group_ids()]


def leftovers(besides: Held = ([], [])) -> Held:
    """Actors still alive and placement groups not removed, asked of the connected cluster,
    but for `besides` (actor ids, group ids) and what the warm pools keep idle (theirs while
    they live; a test that does not take one has it freed first: tests/conftest.py).

    NOTE: from its GCS, not the state API: that one, without an address, asks the newest Ray
    instance on the machine, which on a shared machine may be someone else's."""
    from ray._private.state import actors
    from ray.util import placement_group_table

    warm = warm_held()
    skip_actors, skip_groups = {*besides[0], *warm[0]}, {*besides[1], *warm[1]}
    alive = [a for a, info in actors().items() if info["State"] != "DEAD" and a not in skip_actors]
    groups = [
        g
        for g, info in placement_group_table().items()
        if info["state"] != "REMOVED" and g not in skip_groups
    ]
    return alive, groups


def assert_no_leaks(timeout_s: float = 45.0, *, besides: Held = ([], [])) -> None:
    """Every actor dead and every placement group removed (kills are asynchronous and slow on a
    loaded 2-core box: poll; a clean end returns at once),
    `besides` those (actor ids, group ids) some other live owner holds, e.g. a running
    service's warm pool."""
    deadline = time.monotonic() + timeout_s
    while True:
        actors, groups = leftovers(besides)
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
