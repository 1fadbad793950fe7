"""Fleet sweeps stored without Ray, as `fleetval.run.sweep` stores them: the verdict in the
run's summary and as its last step. Three sweeps of a small fleet whose history has a repeat
offender, a flapping node, a drifting one and a node that joined late.

A recipe of `fleetval.testing.builder`. Used by the sweep report, history and straggler tests
and tests/integration/test_report.py (the browser).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from fleetval.fleet.verdict import (
    FleetVerdict,
    LinkMeasured,
    LinkVerdict,
    NodeVerdict,
    TrunkVerdict,
)
from fleetval.jsontypes import JsonObject
from fleetval.run.outcome import StepOutcome
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.testing.builder import SyntheticRun, build_store
from fleetval.vocab import NodeState, RunStatus, Status

NODES = [f"node-{i}" for i in range(6)]
# (state, pair GB/s) per node and sweep, oldest first; node-6 joins the fleet in the third.
# node-3: drain, healthy, drain (a repeat offender); node-5: healthy, suspect, healthy
# (flapping); node-1 slows from 10 to 7 GB/s (drifting).
SWEEPS: list[dict[str, tuple[str, float]]] = [
    {**{n: ("healthy", 10.0) for n in NODES}, "node-3": ("drain", 3.0)},
    {**{n: ("healthy", 10.0) for n in NODES}, "node-1": ("healthy", 9.0),
     "node-5": ("suspect", 9.0)},
    {**{n: ("healthy", 10.0) for n in NODES}, "node-1": ("healthy", 7.0),
     "node-3": ("drain", 2.5), "node-6": ("healthy", 10.0)},
]  # fmt: skip
REASONS = {"drain": "slow in 2 pairs with proven-good nodes", "suspect": "slow in a pair once",
           "healthy": "met every reference"}  # fmt: skip


def write_sweep(
    store: Store,
    i: int,
    states: dict[str, tuple[str, float]],
    *,
    links: tuple[LinkVerdict, ...] = (),
    findings: tuple[str, ...] = (),
    gates: JsonObject | None = None,
    trunks: tuple[TrunkVerdict, ...] = (),
    coverage: tuple[LinkMeasured, ...] = (),
    verdict: FleetVerdict | None = None,
) -> str:
    """A sweep stored as `fleetval.run.sweep` stores one: the verdict in the summary, the
    verdict as the last step's outcome (FAIL when flagged), the run's status from it.
    `verdict`: a whole verdict (e.g. from `run_rounds` on a simulated fleet) instead."""
    nodes = tuple(
        NodeVerdict(n, NodeState(s), "high" if s == "drain" else "medium", REASONS[s],
                    (f"pair {g} GB/s",), alone_gbps=None, pair_gbps=g)
        for n, (s, g) in sorted(states.items())
    )  # fmt: skip
    v = verdict or FleetVerdict(nodes=nodes, links=links, findings=findings, rounds=3, jobs=9,
                                drain_limit=2, trunks=trunks, coverage=coverage)  # fmt: skip
    status = Status.FAIL if v.flagged else Status.PASS
    verdict_step = StepOutcome(-1, 0, "verdict", "sweep", status.value, "; ".join(findings), 0.0)
    started = datetime(2026, 1, 1, 2, tzinfo=UTC) + timedelta(days=i)
    run_id = f"{started:%Y%m%d-%H%M%S}-00000{i}"
    suite = {"name": "sweep", **({"gates": gates} if gates else {})}
    record = Run(
        run_id=run_id, suite="sweep", started_at=started, finished_at=started + timedelta(minutes=4),
        status=(RunStatus.FAIL if v.flagged else RunStatus.PASS).value, suite_json=json.dumps(suite),
        summary={"steps": [asdict(verdict_step)], "sweep": v.to_dict()},
    )  # fmt: skip
    build_store(store, [SyntheticRun(record)])  # a sweep's record only: no rows, no nodes
    return run_id
