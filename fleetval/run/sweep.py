"""Fleet sweep: isolate a slow node by bisection over node groups (one rank per node).

The bisection itself is `fleetval.detect.bisection.isolate` (shared with the `isolate` check,
which bisects ranks inside one job); here each group of nodes is one STRICT_SPREAD job
running the suite's steps, scored by `group_score` (median busbw, else 1/time). One slow
node among N is found in about log2(N) rounds of two jobs; every round's groups and
scores are kept as the evidence, in the run's summary and on the command line.
"""

from __future__ import annotations

import statistics
from typing import Any

from fleetval.detect.bisection import Isolation, isolate
from fleetval.run.execute import RunState, StepOutcome, cluster_shape, connect, recording, run_job
from fleetval.run.plan import PlanError, eligible_nodes, node_group_job
from fleetval.store.dataset import RunRecord, Store
from fleetval.suite import Suite
from fleetval.vocab import Status

Group = tuple[str, ...]


def group_score(rows: list[dict[str, Any]]) -> float | None:
    """A node group's speed: per measurement (collective, size) its slowest rank, then the
    median over measurements; busbw where rows have it, else 1/time. None if the job failed.

    NOTE: the slowest rank, not a mean: a late rank waits least in its own collectives
    (the others wait for it), so only the group's slowest reading shows the delay.
    """
    if not rows or any(r["status"] == Status.FAIL.value for r in rows):
        return None
    by_key: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        key = (r["step"], r["collective"], r["op"], r["dtype"], r["size_bytes"])
        if r["busbw_gbps"]:
            by_key.setdefault(("busbw", *key), []).append(r["busbw_gbps"])
        elif r["time_us_median"]:
            by_key.setdefault(("time", *key), []).append(1e6 / r["time_us_median"])
    busbw = [min(v) for k, v in by_key.items() if k[0] == "busbw"]
    speeds = busbw or [min(v) for v in by_key.values()]
    return statistics.median(speeds) if speeds else None


def sweep(
    suite: Suite,
    store: Store,
    *,
    address: str | None = None,
    threshold: float = 0.2,
    labels: dict[str, str] | None = None,
) -> tuple[RunRecord, Isolation]:
    """Run the sweep as one stored run whose jobs are the node groups tried."""
    connect(address, suite.placement.cpus_per_rank)
    cluster = cluster_shape()
    names = [
        n.name
        for n in eligible_nodes(suite, cluster)
        if n.bundles(suite.placement.cpus_per_rank, 0) > 0
    ]
    if len(names) < 2:
        raise PlanError(
            f"a sweep needs at least 2 nodes that can take a rank; the cluster has {cluster.describe()}"
        )
    with recording(suite, store, labels=labels) as state:

        def measure(group: Group) -> float | None:
            job = node_group_job(suite, cluster, group, index=_next_job(state))
            run_job(job, state)
            return group_score(_job_rows(store, state, job.index))

        found = isolate(names, measure, threshold)
        state.outcomes.append(_verdict_outcome(found))
    assert state.record is not None
    return state.record, found


def _next_job(state: RunState) -> int:
    return len({o.job for o in state.outcomes})


def _job_rows(store: Store, state: RunState, job: int) -> list[dict[str, Any]]:
    return [r for r in store.results([state.run_id]).to_pylist() if r["job"] == job]


def _verdict_outcome(found: Isolation) -> StepOutcome:
    status = Status.FAIL.value if found.flagged else Status.PASS.value
    message = (
        f"slow node(s): {', '.join(found.flagged)} after {found.rounds} round(s)"
        if found.flagged
        else f"no slow node found in {found.rounds} round(s)"
    )
    if found.note:
        message += f"; {found.note}"
    evidence = found.evidence()
    if evidence:
        message += "; evidence (score: busbw GB/s or 1/time) " + "; ".join(evidence)
    return StepOutcome(-1, 0, "isolate", "sweep", status, message, 0.0)
