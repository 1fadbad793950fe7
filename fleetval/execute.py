"""Run a plan on Ray: per job a placement group, rank actors, rendezvous, steps, teardown.

Every wait has a deadline. A rank that dies, raises or stops making progress ends its
step as FAILED with the rank, node and device named; the job's actors are killed and its
placement group removed on every path (success, failure, Ctrl-C), and the run goes on
with the next job.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fleetval.checks import declared_metrics
from fleetval.checks.base import ActiveFault, Progress, RankContext
from fleetval.plan import NODE_LABEL, ClusterShape, Job, NodeShape, make_plan
from fleetval.rank import Placed, RankActor
from fleetval.results import Row
from fleetval.store import RunRecord, Store, new_run_id
from fleetval.suite import Suite
from fleetval.vocab import Status

log = logging.getLogger(__name__)

ERROR_GRACE_S = 5.0  # after one rank fails, how long the others get before the step is cut
POLL_S = 0.5
PORT_RETRIES = 3
RemoteRank = ray.remote(RankActor)


class JobAborted(RuntimeError):
    """The job's actors can no longer be trusted (dead, hung or unplaceable)."""


class RunCancelled(Exception):
    """The caller set the run's cancel event: the current job is torn down, nothing more runs."""


@dataclass(frozen=True)
class Culprit:
    rank: int
    node: str
    device_id: str | None
    reason: str  # "crash", "hang", "error", "not placed", "not joined"
    detail: str


@dataclass(frozen=True)
class StepOutcome:
    job: int
    world_size: int
    step: str
    check: str
    status: str
    message: str
    seconds: float
    culprits: tuple[Culprit, ...] = ()


@dataclass(frozen=True)
class Event:
    """Progress for a front end: a step started, made progress or ended."""

    kind: str  # "step_start", "step_progress", "step_end"
    job: int
    step: str
    index: int  # step number across the whole run, from 0
    total: int
    detail: str = ""
    outcome: StepOutcome | None = None


EventSink = Callable[[Event], None]


@dataclass
class _Rank:
    """Driver-side handle of one rank actor."""

    actor: Any
    placed: Placed
    ctx: RankContext | None = None


@dataclass
class RunState:
    """What a run accumulates while its jobs execute."""

    run_id: str
    suite: Suite
    store: Store
    on_event: EventSink
    total_steps: int
    done_steps: int = 0
    backend: str = ""
    outcomes: list[StepOutcome] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    record: RunRecord | None = None
    cancel: threading.Event | None = None

    def check_cancelled(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise RunCancelled("cancelled by request")


# -- Ray connection and cluster shape --------------------------------------------------


class ClusterUnreachable(ValueError):
    """The Ray address given cannot be reached (bad input: nothing ran)."""


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on an address nobody listens on: ray.init would retry for minutes."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return  # "auto" or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ClusterUnreachable(f"--address {address}: no Ray cluster reachable ({err})") from err


def connect(address: str | None, min_cpus: float = 0) -> None:
    """Join `address` (or $RAY_ADDRESS); with neither, start an embedded local instance."""
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        check_reachable(address)
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        return
    # NOTE: logical CPUs may exceed physical cores: validation ranks mostly wait on I/O.
    cpus = max(os.cpu_count() or 1, int(min_cpus + 0.999))
    ray.init(
        address="local",  # a fresh instance, even when a test cluster left its address file
        num_cpus=cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )


def cluster_shape() -> ClusterShape:
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        labels = n.get("Labels") or {}
        nodes.append(
            NodeShape(
                name=labels.get(NODE_LABEL) or n.get("NodeManagerHostname", "?"),
                cpus=res.get("CPU", 0.0),
                gpus=res.get("GPU", 0.0),
            )
        )
    return ClusterShape(tuple(sorted(nodes, key=lambda s: s.name)))


# -- placement ---------------------------------------------------------------------------


def create_group(job: Job, timeout_s: float) -> PlacementGroup:
    """A ready placement group for the job, or PlacementError (the group removed)."""
    bundles = [job.bundle()] * job.world_size
    selector = job.label_selector()
    pg = placement_group(
        bundles,
        strategy=job.strategy.value,
        bundle_label_selector=[selector] * job.world_size if selector else None,
    )
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except GetTimeoutError as err:
        remove_placement_group(pg)
        free = ray.available_resources()
        raise JobAborted(
            f"placement group of {job.world_size} x {job.bundle()} ({job.strategy.value}) not ready "
            f"within {timeout_s:g}s; free now: {free.get('CPU', 0):g} CPU, {free.get('GPU', 0):g} GPU"
        ) from err
    return pg


def start_ranks(job: Job, pg: PlacementGroup, timeout_s: float) -> list[_Rank]:
    """One actor per bundle, ordered into ranks by node name, then GPU id."""
    actors = [
        RemoteRank.options(
            num_cpus=job.cpus_per_rank,
            num_gpus=job.gpus_per_rank,
            max_concurrency=2,  # progress() answers while run_step blocks
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i
            ),
        ).remote(job.gpus_per_rank)
        for i in range(job.world_size)
    ]
    try:
        placed = ray.get([a.describe.remote() for a in actors], timeout=timeout_s)
    except (GetTimeoutError, RayActorError) as err:
        for a in actors:
            ray.kill(a, no_restart=True)
        raise JobAborted(f"rank actors did not start within {timeout_s:g}s: {err}") from err
    ranks = [_Rank(a, p) for a, p in zip(actors, placed, strict=True)]
    return sorted(ranks, key=lambda r: (r.placed.node, r.placed.gpu_ids, r.placed.node_id))


def assign(ranks: list[_Rank], job: Job, run_id: str, seed: int) -> None:
    node_names = sorted({r.placed.node for r in ranks})
    for i, r in enumerate(ranks):
        same_node = [x for x in ranks if x.placed.node == r.placed.node]
        r.ctx = RankContext(
            run_id=run_id,
            job=job.index,
            rank=i,
            world_size=job.world_size,
            local_rank=same_node.index(r),
            local_world_size=len(same_node),
            node=r.placed.node,
            node_rank=node_names.index(r.placed.node),
            backend=job.backend,
            device=r.placed.device,
            device_id=r.placed.device_id,
            seed=seed,
        )


def rank_env(run_id: str, backend: str) -> dict[str, str]:
    """Environment for every rank before the group forms: NCCL logs and Flight Recorder dumps."""
    if backend != "nccl":
        return {}
    logdir = os.path.join(tempfile.gettempdir(), "fleetval", run_id)
    env = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": os.path.join(logdir, "flight-recorder-rank-"),
    }
    if "NCCL_DEBUG" not in os.environ:  # the user's own setting wins
        env |= {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": os.path.join(logdir, "nccl.%h.%p.log")}
    return env


def rendezvous(ranks: list[_Rank], job: Job, suite: Suite, run_id: str) -> None:
    """Form the process group on rank 0's node address; retry on a port clash."""
    t = suite.timeouts
    env = rank_env(run_id, job.backend)
    master = ranks[0].placed.node_ip
    for attempt in range(PORT_RETRIES):
        port = ray.get(ranks[0].actor.free_port.remote(), timeout=t.rendezvous_s)
        refs = [r.actor.join.remote(r.ctx, master, port, t.collective_s, env) for r in ranks]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=t.rendezvous_s)
        try:
            ray.get(ready)
        except RayTaskError as err:
            if "address already in use" in str(err).lower() and attempt + 1 < PORT_RETRIES:
                ray.get([r.actor.leave.remote() for r in ranks], timeout=t.rendezvous_s)
                continue
            raise JobAborted(f"process group failed to form: {_short(err)}") from err
        if pending:
            missing = [ranks[refs.index(p)] for p in pending]
            raise JobAborted(
                f"process group not formed within {t.rendezvous_s:g}s; ranks not joined: "
                + ", ".join(f"{r.ctx.rank} on {r.placed.node}" for r in missing)
            )
        return


def teardown(ranks: list[_Rank], pg: PlacementGroup | None) -> None:
    """Kill every actor and remove the group; never raises (it runs on every exit path)."""
    for r in ranks:
        try:
            ray.kill(r.actor, no_restart=True)
        except Exception as err:
            log.warning("kill rank actor: %s", err)
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception as err:
            log.warning("remove placement group: %s", err)


# -- running a step ----------------------------------------------------------------------


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    last = [line for line in text if line.strip()][-1:] or [type(err).__name__]
    return last[0][:300]


def faults_for(suite: Suite, ctx: RankContext, step: str) -> tuple[ActiveFault, ...]:
    return tuple(
        ActiveFault(f.kind, f.ms or 0.0)
        for f in suite.faults
        if f.applies(rank=ctx.rank, node=ctx.node, step=step)
    )


def _progress(ranks: list[_Rank], timeout_s: float = 2.0) -> dict[int, Progress | None]:
    refs = {r.ctx.rank: r.actor.progress.remote() for r in ranks}
    out: dict[int, Progress | None] = {}
    for rank, ref in refs.items():
        try:
            out[rank] = ray.get(ref, timeout=timeout_s)
        except Exception:
            out[rank] = None
    return out


def name_culprits(
    ranks: list[_Rank],
    unfinished: set[int],
    failures: dict[int, tuple[str, str]],
    progress: dict[int, Progress | None],
) -> list[Culprit]:
    """Who broke the step: ranks that died or raised; else the unfinished ranks that fell
    behind the others (fewer collectives entered); else every unfinished rank."""
    by_rank = {r.ctx.rank: r for r in ranks}

    def culprit(rank: int, reason: str, detail: str) -> Culprit:
        r = by_rank[rank]
        return Culprit(rank, r.placed.node, r.placed.device_id, reason, detail)

    # A dead rank makes its peers raise too (connection reset): name only the dead ones.
    for kind in ("crash", "error"):
        named = [
            culprit(k, kind, d) for k, (reason, d) in sorted(failures.items()) if reason == kind
        ]
        if named:
            return named
    seqs = {k: p.seq for k, p in progress.items() if p is not None}
    lead = max(seqs.values(), default=0)
    behind = [k for k in sorted(unfinished) if seqs.get(k, -1) < lead]
    stuck = behind or sorted(unfinished)
    leader = next((p for p in progress.values() if p is not None and p.seq == lead), None)
    where = f"; the others reached {leader.describe()}" if behind and leader else ""
    return [
        culprit(k, "hang", f"did not finish; last reached {_describe(progress.get(k))}{where}")
        for k in stuck
    ]


def _describe(p: Progress | None) -> str:
    return p.describe() if p is not None else "nothing (no answer)"


def _wait_step(
    refs: dict[Any, int], deadline: float, tick: Callable[[], None]
) -> tuple[dict[int, list[Row]], dict[int, tuple[str, str]]]:
    """Collect rows until all ranks finish or the deadline passes; failures shorten the deadline."""
    rows: dict[int, list[Row]] = {}
    failures: dict[int, tuple[str, str]] = {}
    pending = dict(refs)
    while pending and time.monotonic() < deadline:
        ready, _ = ray.wait(
            list(pending), num_returns=1, timeout=min(POLL_S, max(0.0, deadline - time.monotonic()))
        )
        for ref in ready:
            rank = pending.pop(ref)
            try:
                rows[rank] = ray.get(ref)
            except RayActorError as err:
                failures[rank] = ("crash", f"rank process died: {_short(err)}")
            except RayTaskError as err:
                failures[rank] = ("error", f"raised {_short(err)}")
        if failures:
            deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
        tick()
    return rows, failures


def run_step(ranks: list[_Rank], job: Job, step: Any, state: RunState) -> StepOutcome:
    """Run one step on every rank and write its rows; raise JobAborted if the ranks are lost."""
    suite, name = state.suite, step.step_name
    timeout = suite.step_timeout(step)
    started = time.monotonic()
    refs = {
        r.actor.run_step.remote(step, faults_for(suite, r.ctx, name)): r.ctx.rank for r in ranks
    }

    def tick() -> None:
        state.check_cancelled()  # NOTE: raises out of the wait; run_job's finally tears down
        lead = ranks[0].actor.progress.remote()
        ready, _ = ray.wait([lead], timeout=0.2)
        try:
            detail = ray.get(ready[0]).describe() if ready else ""
        except RayError:  # rank 0 itself may be the one that died; _wait_step names it
            return
        if detail:
            state.on_event(_event(state, "step_progress", job, name, detail))

    rows, failures = _wait_step(refs, started + timeout, tick)
    unfinished = {k for k in refs.values() if k not in rows and k not in failures}
    all_rows = [row for k in sorted(rows) for row in rows[k]]
    culprits: list[Culprit] = []
    if failures or unfinished:
        culprits = name_culprits(ranks, unfinished, failures, _progress(ranks))
        if unfinished:
            _save_flight_recorder(ranks, state, f"job{job.index}-{name}")
        all_rows += [_culprit_row(c, job, step, state.run_id, ranks) for c in culprits]
    seconds = time.monotonic() - started
    status, message = _step_status(all_rows, culprits, timeout, unfinished)
    if all_rows:
        state.store.write_results(state.run_id, f"job{job.index}-{name}", all_rows)
    outcome = StepOutcome(
        job.index, job.world_size, name, step.check, status, message, seconds, tuple(culprits)
    )
    if culprits:
        raise _StepBroke(outcome)
    return outcome


class _StepBroke(JobAborted):
    def __init__(self, outcome: StepOutcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def _save_flight_recorder(ranks: list[_Rank], state: RunState, part: str) -> None:
    """On a hang with NCCL, keep every rank's Flight Recorder trace as a run artifact."""
    refs = {r.ctx.rank: r.actor.flight_recorder.remote() for r in ranks}
    for rank, ref in refs.items():
        try:
            trace = ray.get(ref, timeout=10)
        except Exception:  # evidence is best effort; the culprit is named anyway
            continue
        if trace:
            state.store.write_artifact(state.run_id, f"{part}-rank{rank}.flight-recorder", trace)


def _culprit_row(c: Culprit, job: Job, step: Any, run_id: str, ranks: list[_Rank]) -> Row:
    ctx = next(r.ctx for r in ranks if r.ctx.rank == c.rank)
    return Row(
        run_id=run_id,
        job=job.index,
        step=step.step_name,
        check=step.check,
        world_size=job.world_size,
        rank=c.rank,
        local_rank=ctx.local_rank,
        node=c.node,
        device=ctx.device,
        device_id=c.device_id,
        backend=job.backend,
        metric="step_outcome",
        status=Status.FAIL.value,
        message=f"{c.reason}: {c.detail}",
        details={"reason": c.reason},
    )


def _step_status(
    rows: list[Row], culprits: list[Culprit], timeout: float, unfinished: set[int]
) -> tuple[str, str]:
    if culprits:
        hung = unfinished and culprits[0].reason == "hang"
        what = f"timed out after {timeout:g}s" if hung else "failed"
        names = ", ".join(f"rank {c.rank} on {c.node} ({c.reason})" for c in culprits)
        return Status.FAIL.value, f"step {what}; culprit: {names}"
    failed = [r for r in rows if r.status == Status.FAIL.value]
    if failed:
        worst = failed[0]
        text = f"{len(failed)} failing rows; e.g. rank {worst.rank} {worst.collective or ''}: {worst.message}"
        return Status.FAIL.value, text + _traced_sources(failed)
    if any(r.status == Status.WARN.value for r in rows):
        return Status.WARN.value, "warnings"
    return Status.PASS.value, ""


def _traced_sources(rows: list[Row]) -> str:
    """Where wrong elements can be traced to the rank that sent them, say which rank."""
    per_source: dict[str, int] = {}
    for r in rows:
        for src, n in r.details.get("wrong_by_source", {}).items():
            per_source[src] = per_source.get(src, 0) + n
    if not per_source:
        return ""
    ranked = sorted(per_source.items(), key=lambda kv: -kv[1])
    return "; wrong data traced to " + ", ".join(f"rank {k} ({n} elements)" for k, n in ranked[:3])


def _event(
    state: RunState,
    kind: str,
    job: Job,
    step: str,
    detail: str = "",
    outcome: StepOutcome | None = None,
) -> Event:
    return Event(kind, job.index, step, state.done_steps, state.total_steps, detail, outcome)


# -- a job and a run ----------------------------------------------------------------------


def _fingerprint_nodes(ranks: list[_Rank], state: RunState, timeout_s: float) -> None:
    """One environment fingerprint per node not yet seen in this run."""
    firsts = {r.placed.node: r for r in reversed(ranks) if r.placed.node not in state.nodes}
    refs = {name: r.actor.fingerprint.remote() for name, r in firsts.items()}
    for name, ref in refs.items():
        r = firsts[name]
        try:
            fp = ray.get(ref, timeout=timeout_s)
        except Exception as err:
            fp = {"extra": f'{{"error": "{_short(err)}"}}'}
        state.nodes[name] = {
            **fp,
            "node": name,
            "hostname": r.placed.hostname,
            "node_ip": r.placed.node_ip,
            "ray_node_id": r.placed.node_id,
        }


def run_job(job: Job, state: RunState) -> list[StepOutcome]:
    """Placement group -> actors -> rendezvous -> steps in order; torn down on every path."""
    pg, ranks = None, []
    state.backend = state.backend or job.backend
    first = len(state.outcomes)
    remaining = list(job.steps)
    try:
        t = state.suite.timeouts
        pg = create_group(job, t.placement_s)
        ranks = start_ranks(job, pg, t.rendezvous_s)
        assign(ranks, job, state.run_id, state.suite.seed)
        _fingerprint_nodes(ranks, state, t.rendezvous_s)
        rendezvous(ranks, job, state.suite, state.run_id)
        while remaining:
            state.check_cancelled()
            step = remaining[0]
            state.on_event(_event(state, "step_start", job, step.step_name))
            outcome = run_step(ranks, job, step, state)
            remaining.pop(0)
            _record(state, job, outcome)
    except _StepBroke as broke:
        remaining.pop(0)
        _record(state, job, broke.outcome)
        _not_run(
            state, job, remaining, f"not run: job aborted after step {broke.outcome.step} failed"
        )
    except JobAborted as err:
        _not_run(state, job, remaining, str(err), status=Status.FAIL.value)
    finally:
        teardown(ranks, pg)
    return state.outcomes[first:]


def _record(state: RunState, job: Job, outcome: StepOutcome) -> None:
    state.outcomes.append(outcome)
    state.done_steps += 1
    state.on_event(_event(state, "step_end", job, outcome.step, outcome.message, outcome))


def _not_run(
    state: RunState, job: Job, steps: list[Any], message: str, status: str = Status.SKIP.value
) -> None:
    for step in steps:
        _record(
            state,
            job,
            StepOutcome(
                job.index, job.world_size, step.step_name, step.check, status, message, 0.0
            ),
        )


def run_status(outcomes: list[StepOutcome]) -> str:
    statuses = {o.status for o in outcomes}
    return Status.FAIL.value if Status.FAIL.value in statuses else Status.PASS.value


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
    status, message = "error", ""
    try:
        yield state
        status = run_status(state.outcomes)
    except KeyboardInterrupt:
        status, message = "cancelled", "interrupted; finished steps are kept"
        raise
    except RunCancelled:
        status, message = "cancelled", "cancelled by request; finished steps are kept"
    finally:
        if state.nodes:
            store.write_nodes(state.run_id, list(state.nodes.values()))
        state.record = RunRecord(
            run_id=state.run_id,
            suite=suite.name,
            status=status,
            started_at=started,
            finished_at=datetime.now(UTC),
            labels=labels or {},
            submitter=submitter,
            backend=state.backend,
            faults=[f.model_dump(mode="json", exclude_none=True) for f in suite.faults],
            suite_json=suite.to_json(),
            summary=summary(state.outcomes),
            message=message,
            metrics=declared_metrics(s.check for s in suite.steps),
        )
        store.write_run(state.record)


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
) -> RunRecord:
    """Plan the suite on the cluster, run every job, store rows, nodes and the run record.

    A PlanError (bad input) is raised before anything is written. `run_id` lets a caller
    (the service) name the run before it starts; setting `cancel` stops it within a poll
    interval: the running job's actors are killed and its group removed, status `cancelled`.
    """
    fixed = [w for w in suite.placement.world_sizes if w != "all"]
    connect(address, max(fixed, default=0) * suite.placement.cpus_per_rank)
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
        for job in plan.jobs:
            state.check_cancelled()
            run_job(job, state)
    assert state.record is not None  # written by recording() on the way out
    return state.record
