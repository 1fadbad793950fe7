"""Run a plan on Ray: the run's record, and each job's steps in order.

The parts: `cluster` (the connection), `job` (placement group, actors, rendezvous,
teardown as one context manager), `step` (one step on all ranks, culprits), `status`
(the one status policy). A job that breaks (crash, hang, error, lost node, unplaceable)
records its culprits, skips its remaining steps, and the run goes on with the next job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from fleetval import status
from fleetval.checks import declared_metrics
from fleetval.run.cluster import (
    ClusterUnreachable,
    check_reachable,
    cluster_shape,
    connect,
    embedded_limit,
    will_embed,
)
from fleetval.run.job import JobAborted, RunState, job_ranks
from fleetval.run.outcome import Culprit, Event, EventSink, RunCancelled, StepOutcome
from fleetval.run.plan import Job, PlanError, make_plan
from fleetval.run.pool import RankPool
from fleetval.run.step import StepBroke, culprit_row, run_step
from fleetval.store.dataset import RunRecord, Store, new_run_id
from fleetval.suite import Suite
from fleetval.vocab import EventKind, RunStatus, Status

__all__ = [
    "ClusterUnreachable",
    "Culprit",
    "Event",
    "EventSink",
    "RunCancelled",
    "RunState",
    "StepOutcome",
    "check_reachable",
    "cluster_shape",
    "connect",
    "recording",
    "run_job",
    "run_suite",
]


def run_job(
    job: Job, state: RunState, ready: Callable[[], None] | None = None
) -> list[StepOutcome]:
    """The job's steps in order on one set of ranks; torn down on every path. `ready` is
    called once the ranks are up, before the first step (a sweep lines up a round's jobs)."""
    state.backend = state.backend or job.backend
    first = len(state.outcomes)
    remaining = list(job.steps)
    try:
        with job_ranks(job, state) as ranks:
            if ready is not None:
                ready()
            while remaining:
                state.check_cancelled()
                step = remaining[0]
                state.event(EventKind.STEP_START, job.index, step.step_name)
                outcome = run_step(ranks, job, step, state)
                remaining.pop(0)
                _record(state, job, outcome)
    except StepBroke as broke:
        remaining.pop(0)
        _record(state, job, broke.outcome)
        _not_run(
            state, job, remaining, f"not run: job aborted after step {broke.outcome.step} failed"
        )
    except JobAborted as err:
        _job_failed(state, job, remaining, err)
    return state.outcomes[first:]


def _job_failed(state: RunState, job: Job, steps: list[Any], err: JobAborted) -> None:
    """The job never got to run `steps`: its culprits (if known) go with the first one."""
    if err.culprits and steps:
        rows = [culprit_row(c, job, steps[0], state.run_id, []) for c in err.culprits]
        state.store.write_results(state.run_id, f"job{job.index}-{steps[0].step_name}", rows)
    for i, step in enumerate(steps):
        outcome = StepOutcome(
            job.index,
            job.world_size,
            step.step_name,
            step.check,
            Status.FAIL.value,
            str(err),
            0.0,
            err.culprits if i == 0 else (),
        )
        _record(state, job, outcome)


def _record(state: RunState, job: Job, outcome: StepOutcome) -> None:
    state.outcomes.append(outcome)
    state.done_steps += 1
    state.event(EventKind.STEP_END, job.index, outcome.step, outcome.message, outcome)


def _not_run(state: RunState, job: Job, steps: list[Any], message: str) -> None:
    for step in steps:
        _record(
            state,
            job,
            StepOutcome(
                job.index,
                job.world_size,
                step.step_name,
                step.check,
                Status.SKIP.value,
                message,
                0.0,
            ),
        )


def summary(outcomes: list[StepOutcome]) -> dict[str, Any]:
    return {"steps": [asdict(o) for o in outcomes]}


@contextmanager
def recording(
    suite: Suite,
    store: Store,
    *,
    labels: dict[str, str] | None = None,
    submitter: str = "",
    on_event: EventSink | None = None,
    total_steps: int = 0,
    run_id: str | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[RunState]:
    """One run: yields its state for `run_job` calls, then writes nodes and the run record,
    whatever happened. A Ctrl-C is recorded as `cancelled` and re-raised; a cancel event
    set by the caller is recorded as `cancelled` and the record returned as usual."""
    state = RunState(
        run_id or new_run_id(), suite, store, on_event or (lambda e: None), total_steps
    )
    state.cancel = cancel
    started = datetime.now(UTC)
    store.write_schema_note()
    run_status, message = RunStatus.ERROR.value, ""
    try:
        yield state
        run_status = status.run_status(o.status for o in state.outcomes).value
    except KeyboardInterrupt:
        run_status, message = RunStatus.CANCELLED.value, "interrupted; finished steps are kept"
        raise
    except RunCancelled:
        run_status = RunStatus.CANCELLED.value
        message = "cancelled by request; finished steps are kept"
    finally:
        if state.nodes:
            store.write_nodes(state.run_id, list(state.nodes.values()))
        state.record = RunRecord(
            run_id=state.run_id,
            suite=suite.name,
            status=run_status,
            started_at=started,
            finished_at=datetime.now(UTC),
            labels=labels or {},
            submitter=submitter,
            backend=state.backend,
            faults=[f.model_dump(mode="json", exclude_none=True) for f in suite.faults],
            suite_json=suite.to_json(),
            summary={**summary(state.outcomes), **state.summary},
            message=message,
            metrics=declared_metrics(s.check for s in suite.steps),
        )
        store.write_run(state.record)


def _check_embedded(address: str | None, worlds: list[int], cpus_per_rank: float) -> None:
    """A world size the embedded instance could never start is refused before Ray starts
    (PlanError: exit 2), not blamed on ranks `not placed` a placement deadline later."""
    if not will_embed(address):
        return  # a cluster's own shape judges it (make_plan)
    for world in worlds:
        why = embedded_limit(world * cpus_per_rank)
        if why:
            raise PlanError(
                f"placement.world_sizes: world size {world} needs {world} bundles of "
                f"{cpus_per_rank:g} CPU; {why}"
            )


def run_suite(
    suite: Suite,
    store: Store,
    *,
    address: str | None = None,
    labels: dict[str, str] | None = None,
    submitter: str = "",
    on_event: EventSink | None = None,
    run_id: str | None = None,
    cancel: threading.Event | None = None,
    pool: RankPool | None = None,
) -> RunRecord:
    """Plan the suite on the cluster, run every job, store rows, nodes and the run record.

    A PlanError (bad input) is raised before anything is written. `run_id` lets a caller
    (the service) name the run before it starts; setting `cancel` stops it within a poll
    interval: the running job's actors are killed and its group removed, status `cancelled`.
    With a `pool` (the service's), jobs take warm ranks from it and give clean ones back.
    """
    fixed = [w for w in suite.placement.world_sizes if w != "all"]
    need = max(fixed, default=0) * suite.placement.cpus_per_rank
    _check_embedded(address, fixed, suite.placement.cpus_per_rank)
    connect(address, need)
    plan = make_plan(suite, cluster_shape())
    total = sum(len(j.steps) for j in plan.jobs)
    with recording(
        suite,
        store,
        labels=labels,
        submitter=submitter,
        on_event=on_event,
        total_steps=total,
        run_id=run_id,
        cancel=cancel,
    ) as state:
        state.pool = pool
        for job in plan.jobs:
            state.check_cancelled()
            run_job(job, state)
    assert state.record is not None  # written by recording() on the way out
    return state.record
