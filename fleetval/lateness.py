"""Lateness of ranks from every timed step (placeholder: engineer 7c provides the real scoring).

The step module calls `late_ranks` on every finished step's rows and names each result
as a `late` culprit; this stand-in finds nobody, so the wiring compiles and is testable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleetval.results import Row


@dataclass(frozen=True)
class LateRank:
    rank: int
    node: str
    device_id: str | None
    score: float
    lateness_us: float
    detail: str


def late_ranks(rows: Sequence[Row]) -> list[LateRank]:
    """Ranks measurably later than their peers in these rows (none, in this stand-in)."""
    return []
