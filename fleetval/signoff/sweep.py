"""What a report shows of a fleet sweep: its verdict, and each node over the last N sweeps.

A sweep is a stored run whose summary holds its verdict (`summary["sweep"]`, written by
`fleetval.run.sweep`). The history is `fleetval.fleet.history`'s (what `fleetval
sweep-history` prints), cut at the reported run: a report of an older sweep never shows
newer ones. Plain frozen dataclasses, so `fleetval.reports` only formats them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetval.fleet.drain import drain_lines
from fleetval.fleet.history import DRIFT, NodeHistory, node_histories, sweep_runs
from fleetval.fleet.verdict import FleetVerdict
from fleetval.signoff.gates import is_sweep
from fleetval.store.catalog import Catalog, RunRecord
from fleetval.vocab import NodeState

SWEEPS_SHOWN = 10  # `fleetval report --sweeps`
DRAIN_FORMS = ("kubectl", "slurm")  # the drain list as the report prints it to paste


@dataclass(frozen=True, kw_only=True)
class SweepCell:
    """One node in one sweep of the history; state None: the node was not in that sweep."""

    run_id: str
    state: NodeState | None
    score: float | None  # GB/s: pair busbw where paired, else alone


@dataclass(frozen=True, kw_only=True)
class NodeTrend:
    """One node across the sweeps shown, a cell per sweep (oldest first), and its flags."""

    history: NodeHistory
    cells: tuple[SweepCell, ...]

    @property
    def node(self) -> str:
        return self.history.node

    @property
    def notable(self) -> bool:
        """Not healthy in some sweep shown, or flagged (what a short report lists)."""
        unhealthy = any(c.state not in (None, NodeState.HEALTHY) for c in self.cells)
        return unhealthy or bool(self.history.findings)


@dataclass(frozen=True, kw_only=True)
class SweepView:
    verdict: FleetVerdict  # the reported sweep's, read back from its summary
    stored: dict[str, Any]  # the same as stored (with references and trials), for JSON
    drain_lines: dict[str, tuple[str, ...]]  # form -> lines to paste (DRAIN_FORMS)
    last: int  # how many sweeps were asked for
    runs: tuple[str, ...]  # the sweeps shown, oldest first; the reported one last
    history: tuple[NodeTrend, ...]  # by node name
    drift_limit: float = DRIFT  # drifting: the newer sweeps' median this much below the older

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.stored,
            "drain_lines": {f: list(lines) for f, lines in self.drain_lines.items()},
            "history": {
                "last": self.last,
                "runs": list(self.runs),
                "nodes": [t.history.to_dict() for t in self.history],
            },
        }


def sweep_view(catalog: Catalog, record: RunRecord, last: int = SWEEPS_SHOWN) -> SweepView | None:
    """The sweep section of `record`'s report, None when the run is not a sweep."""
    if not is_sweep(record.summary):
        return None
    if last < 1:
        raise ValueError(f"sweeps: {last} sweeps shown; at least 1 (the reported one)")
    runs = sweep_runs(catalog, last, until=record.run_id)
    ids = tuple(r.run_id for r in runs)
    verdict = FleetVerdict.from_dict(record.summary["sweep"])
    return SweepView(
        verdict=verdict,
        stored=record.summary["sweep"],
        drain_lines={f: tuple(drain_lines(verdict, f, record.run_id)) for f in DRAIN_FORMS},
        last=last,
        runs=ids,
        history=tuple(_trend(h, ids) for h in node_histories(runs)),
    )


def _trend(h: NodeHistory, runs: tuple[str, ...]) -> NodeTrend:
    seen = {s.run_id: s for s in h.seen}
    cells = tuple(
        SweepCell(run_id=r, state=seen[r].state, score=seen[r].score)
        if r in seen
        else SweepCell(run_id=r, state=None, score=None)
        for r in runs
    )
    return NodeTrend(history=h, cells=cells)
