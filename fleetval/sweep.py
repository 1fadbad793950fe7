"""Fleet sweep: isolate a slow node by bisection over node groups (one rank per node).

Each round splits the suspects into two equal halves and runs the suite's steps on
each half as one STRICT_SPREAD job. A half whose score (median busbw, else 1/time) is
worse than the other by more than the threshold holds the slow node; the faster half
is cleared and becomes the pool of known-good partners that pad single nodes into
pairs. With an odd number of suspects one node sits the round out and is tested at the
end against a known-good partner. One slow node among N is found in about log2(N)
rounds of two jobs. Fleets of 2-3 nodes are tested as all pairs instead.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from fleetval.execute import RunState, StepOutcome, cluster_shape, connect, recording, run_job
from fleetval.plan import PlanError, eligible_nodes, node_group_job
from fleetval.store import RunRecord, Store
from fleetval.suite import Suite
from fleetval.vocab import Status

Group = tuple[str, ...]
Measure = Callable[[Group], float | None]  # higher is better; None: the group's job failed


@dataclass(frozen=True)
class Trial:
    group: Group
    score: float | None


@dataclass
class Isolation:
    """What a sweep found: the slow nodes (empty when healthy) and the trials that show it."""

    flagged: list[str] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    rounds: int = 0
    note: str = ""


def _worse(a: float | None, b: float | None, threshold: float) -> bool:
    """a is worse than b beyond the threshold (a failed job is worse than any score)."""
    if a is None:
        return b is not None
    return b is not None and a < b * (1 - threshold)


def isolate(nodes: list[str], measure: Measure, threshold: float = 0.2) -> Isolation:
    """Bisection for one slow node; see the module docstring. Pure: `measure` runs the jobs."""
    result = Isolation()
    if len(nodes) < 4:
        return _pairwise(nodes, measure, threshold, result)
    suspects, good, aside = list(nodes), [], []
    reference: float | None = None  # the better score of the last round: a cleared group's

    def trial(group: list[str]) -> float | None:
        score = measure(tuple(group))
        result.trials.append(Trial(tuple(group), score))
        return score

    while len(suspects) > 1:
        if len(suspects) % 2:
            aside.append(suspects.pop())
        half = len(suspects) // 2
        a, b = suspects[:half], suspects[half:]
        if half == 1:  # a lone node needs a partner; only cleared nodes will do
            if not good:
                aside.extend(suspects)
                suspects = []
                break
            a, b = a + good[:1], b + good[:1]
        result.rounds += 1
        sa, sb = trial(a), trial(b)
        if _worse(sa, sb, threshold):
            good += [n for n in b if n not in good]
            suspects = [n for n in a if n not in good]
        elif _worse(sb, sa, threshold):
            good += [n for n in a if n not in good]
            suspects = [n for n in b if n not in good]
        else:
            good += [n for n in a + b if n not in good]
            suspects = []
        reference = max((s for s in (sa, sb) if s is not None), default=None)
    result.flagged = suspects
    for node in aside:
        if not good:
            result.note = f"no cleared node to pair {node} with"
            continue
        result.rounds += 1
        if _worse(trial([node, good[0]]), reference, threshold):
            result.flagged.append(node)
    return result


def _pairwise(nodes: list[str], measure: Measure, threshold: float, result: Isolation) -> Isolation:
    """Small fleets: every pair; a node in every slow pair (and no fast one) is flagged."""
    if len(nodes) < 2:
        result.note = "a sweep needs at least 2 nodes"
        return result
    result.trials = [Trial(p, measure(p)) for p in combinations(nodes, 2)]
    result.rounds = 1
    best = max((t.score for t in result.trials if t.score is not None), default=None)
    slow = [t.group for t in result.trials if _worse(t.score, best, threshold)]
    fast = {n for t in result.trials if t.group not in slow for n in t.group}
    if slow:
        common = set.intersection(*(set(g) for g in slow)) - fast
        result.flagged = sorted(common) or sorted({n for g in slow for n in g} - fast)
    if len(nodes) == 2 and slow:
        result.note = "two nodes: the slow pair cannot be split further"
    return result


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
    return StepOutcome(-1, 0, "isolate", "sweep", status, message, 0.0)
