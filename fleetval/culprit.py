"""Who broke (or slowed) a step: core data, so the status policy judges culprits without
importing the executor that names them (`fleetval.run`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Culprit:
    """Who broke (or slowed) a step: rank, node, physical device, and why."""

    rank: int
    node: str
    device_id: str | None
    reason: str  # a CulpritReason value: crash, hang, error, late, not placed, not joined, ...
    detail: str
    pid: int = 0  # the rank's process on its node (0: unknown), for the operator to inspect
