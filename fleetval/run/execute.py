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
from fleetval.checks.spec import StepSpec
from fleetval.run.cluster import (
    ClusterUnreachable,
    check_reachable,
    cluster_shape,
    connect,
    embedded_limit,
    will_embed,
)
from fleetval.run.job import JobAborted, RunState, WarmRanks, job_ranks
from fleetval.run.life import RunLife, RunOutcome, RunStopped, StopReason
from fleetval.run.outcome import Culprit, Event, EventSink, StepOutcome
from fleetval.run.plan import Job, PlanError, make_plan
from fleetval.run.pool import RankPool
from fleetval.run.step import culprit_row, run_step
from fleetval.store.dataset import Store, new_run_id
from fleetval.store.records import Run
from fleetval.suite import Suite
from fleetval.vocab import EventKind, Status

__all__ = [
    "ClusterUnreachable",
    "Culprit",
    "Event",
    "EventSink",
    "RunLife",
    "RunOutcome",
    "RunState",
    "RunStopped",
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
    called once the ranks are up, before the first step (a sweep lines up a round's jobs).
    A step whose outcome breaks the job ends it: its remaining steps are recorded not run."""
    state.backend = state.backend or job.backend
    first = len(state.outcomes)
    remaining = list(job.steps)
    try:
        with job_ranks(job, state) as ranks:
            if ready is not None:
                ready()
            while remaining:
                state.check_cancelled()
                step = remaining.pop(0)
                state.event(EventKind.STEP_START, job.index, step.step_name)
                outcome = run_step(ranks, job, step, state)
                _record(state, job, outcome)
                if outcome.breaks_job:
                    why = f"not run: job aborted after step {outcome.step} failed"
                    _not_run(state, job, remaining, why)
                    remaining = []
    except JobAborted as err:
        _job_failed(state, job, remaining, err)
    return state.outcomes[first:]


def _job_failed(state: RunState, job: Job, steps: list[StepSpec], err: JobAborted) -> None:
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


def _not_run(state: RunState, job: Job, steps: list[StepSpec], message: str) -> None:
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


def summary(outcomes: list[StepOutcome]) -> dict[str, list[dict[str, Any]]]:
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
    life: RunLife | None = None,
    pool: WarmRanks | None = None,
) -> Iterator[RunState]:
    """One run: yields its state for `run_job` calls, then ends its life and writes nodes and
    the run record, whatever happened (`state.record`, `life.outcome`).

    The run stops through its life (`life.request_stop`, or setting `cancel`: give one or
    the other): the running job is torn down and the run ends `cancelled`, its record
    returned as usual. A KeyboardInterrupt (a Ctrl-C no handler caught) stops it the same
    way, and is re-raised; any other exception ends it `error`, and is re-raised."""
    if life is not None and cancel is not None:
        raise TypeError("recording: pass a cancel event or a life, not both")
    life = life if life is not None else RunLife(cancel)
    state = RunState(
        run_id or new_run_id(),
        suite,
        store,
        on_event or (lambda e: None),
        total_steps,
        life=life,
        pool=pool,
    )
    started = datetime.now(UTC)

    def write(outcome: RunOutcome) -> Run:
        if state.nodes:
            store.write_nodes(state.run_id, list(state.nodes.values()))
        record = Run(
            run_id=state.run_id,
            suite=suite.name,
            status=outcome.status.value,
            started_at=started,
            finished_at=datetime.now(UTC),
            labels=labels or {},
            submitter=submitter,
            backend=state.backend,
            faults=[f.model_dump(mode="json", exclude_none=True) for f in suite.faults],
            suite_json=suite.to_json(),
            summary={**summary(state.outcomes), **state.summary},
            message=outcome.message,
            metrics=declared_metrics(s.check for s in suite.steps),
        )
        store.write_run(record)
        return record

    store.write_schema_note()
    life.start()
    try:
        yield state
    except RunStopped:
        life.stopped(write)
    except KeyboardInterrupt:
        life.request_stop(StopReason.CTRL_C)
        life.stopped(write)
        raise
    except BaseException as err:
        life.fail(err, write)
        raise
    else:
        life.finish(status.run_status(o.status for o in state.outcomes), write)


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
    life: RunLife | None = None,
) -> Run:
    """Plan the suite on the cluster, run every job, store rows, nodes and the run record.

    A PlanError (bad input) is raised before anything is written (the life ends `error`).
    `run_id` lets a caller (the service) name the run before it starts. A stop, asked of
    the run's `life` (the service holds it: `life.request_stop(reason)`) or by setting
    `cancel` (one or the other), takes effect within a poll interval: the running job's
    actors are killed and its group removed, status `cancelled`; `life.outcome` says how the
    run ended, on every path. With a `pool` (the service's), jobs take warm ranks from it and
    give clean ones back.
    """
    if life is not None and cancel is not None:
        raise TypeError("run_suite: pass a cancel event or a life, not both")
    life = life if life is not None else RunLife(cancel)
    try:
        fixed = [w for w in suite.placement.world_sizes if w != "all"]
        need = max(fixed, default=0) * suite.placement.cpus_per_rank
        _check_embedded(address, fixed, suite.placement.cpus_per_rank)
        connect(address, need)
        plan = make_plan(suite, cluster_shape())
    except BaseException as err:  # refused before it started: nothing written
        life.fail(err)
        raise
    total = sum(len(j.steps) for j in plan.jobs)
    try:
        with recording(
            suite,
            store,
            labels=labels,
            submitter=submitter,
            on_event=on_event,
            total_steps=total,
            run_id=run_id,
            life=life,
            pool=pool,
        ) as state:
            for job in plan.jobs:
                state.check_cancelled()
                run_job(job, state)
    except BaseException as err:
        if not life.ended:  # its record could not be written
            life.fail(err)
        raise
    assert state.record is not None  # written by recording() on the way out
    return state.record
