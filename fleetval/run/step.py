"""One step on every rank of a job: start it everywhere, wait on all ranks at once under the
step's deadline, name the culprits, write rows. Crash, hang and error culprits break the
job (its outcome's `breaks_job`: the job runs no more steps and its ranks are torn down);
late ranks are named but the job goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ray

from fleetval import status
from fleetval.checks import synchronizing_metrics
from fleetval.checks.base import ActiveFault, Progress, RankContext
from fleetval.checks.spec import StepSpec
from fleetval.detect import lateness
from fleetval.policy import FailurePolicy
from fleetval.run import flightrec
from fleetval.run.culprits import (
    DeadlineFinding,
    RankEvidence,
    name_culprits,
    progressed,
)
from fleetval.run.fabric import node_groups
from fleetval.run.job import RankHandle, RunState, gather
from fleetval.run.outcome import Culprit, StepOutcome
from fleetval.run.plan import Job
from fleetval.store.schema import Row
from fleetval.suite import Suite
from fleetval.text import short
from fleetval.vocab import CULPRIT_METRIC, CulpritReason, EventKind, Status


@dataclass
class Heartbeats:
    """The latest answer of every rank's progress() and when it came; one probe in flight each."""

    ranks: list[RankHandle]
    policy: FailurePolicy
    last: dict[int, Progress] = field(default_factory=dict)
    heard: dict[int, float] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    inflight: dict[int, Any] = field(default_factory=dict)
    asked: dict[int, float] = field(default_factory=dict)  # when each in-flight probe was sent
    sent_at: float = 0.0

    def poll(self) -> None:
        """Harvest answers that arrived; ask again those that answered (never pile up calls)."""
        self.poll_answers()
        if time.monotonic() - self.sent_at >= self.policy.probe_every_s:
            self.sent_at = time.monotonic()
            self._ask()

    def _ask(self) -> None:
        for r in self.ranks:
            if r.rank not in self.inflight and r.rank not in self.dead:
                self.inflight[r.rank] = r.actor.progress.remote()
                self.asked[r.rank] = time.monotonic()

    def final(self) -> set[int]:
        """Ask every rank once more; the ranks whose probe then stays unanswered for
        `probe_answer_s` since it was sent (a probe already that old is not waited on again)."""
        wait_s = self.policy.probe_answer_s
        self._ask()
        while self.inflight:
            self.poll_answers()
            sent = [t for k, t in self.asked.items() if k in self.inflight]
            left = max((t + wait_s - time.monotonic() for t in sent), default=0.0)
            if left <= 0 or not self.inflight:
                break
            ray.wait(
                list(self.inflight.values()), num_returns=len(self.inflight), timeout=min(left, 0.5)
            )
        return set(self.inflight)

    def poll_answers(self) -> None:
        refs = list(self.inflight.values())
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
        for rank, ref in list(self.inflight.items()):
            if ref in ready:
                self._take(rank, ref)

    def _take(self, rank: int, ref: Any) -> None:
        del self.inflight[rank]
        self.asked.pop(rank, None)
        try:
            self.last[rank] = ray.get(ref)
            self.heard[rank] = time.monotonic()
        except ray.exceptions.RayError:
            self.dead.add(rank)

    def leader(self) -> Progress | None:
        return max(self.last.values(), key=lambda p: p.seq, default=None)


def faults_for(
    suite: Suite, ctx: RankContext, step: str, nodes: frozenset[str]
) -> tuple[ActiveFault, ...]:
    groups = node_groups(suite) if any(f.between for f in suite.faults) else None
    return tuple(
        ActiveFault(f.kind, f.ms or 0.0)
        for f in suite.faults
        if f.applies(rank=ctx.rank, node=ctx.node, step=step, nodes=nodes, groups=groups)
    )


def run_step(ranks: list[RankHandle], job: Job, step: StepSpec, state: RunState) -> StepOutcome:
    """Run one step on every rank and write its rows. An outcome that `breaks_job` (the ranks
    lost, or still busy at the deadline) ends the job: its ranks are torn down."""
    suite, name = state.suite, step.step_name
    timeout = suite.step_timeout(step)
    started = time.monotonic()
    nodes = frozenset(r.placed.node for r in ranks)
    refs = [r.actor.run_step.remote(step, faults_for(suite, r.ctx, name, nodes)) for r in ranks]
    policy = suite.timeouts
    beats = Heartbeats(ranks, policy)

    def tick() -> None:
        state.check_cancelled()  # NOTE: raises out of the wait; the job's context tears down
        beats.poll()
        lead = beats.leader()
        if lead is not None:
            state.event(EventKind.STEP_PROGRESS, job.index, name, lead.describe())

    traces: dict[int, bytes] = {}

    def snapshot() -> None:
        # NOTE: at the first failure, before the grace: the NCCL watchdog may tear ranks down.
        traces.update(flight_recorder(ranks, policy.flight_recorder_s))

    answers = gather(
        refs,
        started + timeout,
        grace_s=policy.error_grace_s,
        tick=tick,
        on_failure=snapshot,
        poll_s=policy.poll_s,
    )
    rows = [row for kind, got in answers if kind == "ok" for row in got]
    culprits: list[Culprit] = []
    finding: DeadlineFinding | None = None
    if any(kind != "ok" for kind, _ in answers):
        if not traces:  # the deadline passed with nobody failing: take them now
            snapshot()
        ranks_evidence = evidence(ranks, answers, beats)
        # Every rank still moving at the deadline: the deadline was too short, nobody hung.
        finding = progressed(ranks_evidence, timeout, policy=policy)
        if finding is not None:
            culprits = list(finding.slow)
        else:
            named = name_culprits(ranks_evidence, policy=policy)
            culprits = flightrec.confirm(named, traces, ranks)
        keep_traces(traces, state, f"job{job.index}-{name}")
    else:
        culprits = [
            late_culprit(x, ranks)
            for x in lateness.late_ranks_in_step(rows, metrics=synchronizing_metrics())
        ]
    rows += [culprit_row(c, job, step, state.run_id, ranks) for c in culprits]
    seconds = time.monotonic() - started
    outcome = StepOutcome(
        job.index,
        job.world_size,
        name,
        step.check,
        status.step_status(rows, culprits, deadline=finding is not None).value,
        finding.message if finding else step_message(rows, culprits, timeout, seconds),
        seconds,
        tuple(culprits),
        deadline=finding is not None,
    )
    if rows:
        state.store.write_results(state.run_id, f"job{job.index}-{name}", rows)
    return outcome


def evidence(
    ranks: list[RankHandle], answers: list[tuple[str, Any]], beats: Heartbeats
) -> list[RankEvidence]:
    """Each rank's outcome with a final heartbeat probe: the pure naming rules take it from here."""
    silent = beats.final()
    now = time.monotonic()
    out = []
    for r, (kind, value) in zip(ranks, answers, strict=True):
        dead = kind == "crash" or r.rank in beats.dead
        out.append(
            RankEvidence(
                rank=r.rank,
                node=r.placed.node,
                device_id=r.placed.device_id,
                outcome="crash" if dead else kind,
                error=str(value) if kind in ("crash", "raised") else "",
                answered=r.rank not in silent,
                progress=beats.last.get(r.rank),
                silent_s=now - beats.heard.get(r.rank, beats.sent_at or now),
                pid=r.placed.pid,
            )
        )
    return out


def late_culprit(x: lateness.LateRank, ranks: list[RankHandle]) -> Culprit:
    """A late rank, named but not aborting: the job goes on."""
    detail = f"late by {x.lateness_us:.0f} us (score {x.score:.2f}): {x.detail}"
    pid = next((r.placed.pid for r in ranks if r.rank == x.rank), 0)
    return Culprit(x.rank, x.node, x.device_id, CulpritReason.LATE.value, detail, pid)


def flight_recorder(ranks: list[RankHandle], timeout_s: float) -> dict[int, bytes]:
    """Every live rank's NCCL Flight Recorder trace, asked all at once (NCCL only)."""
    if not ranks or ranks[0].ctx is None or ranks[0].ctx.backend != "nccl":
        return {}
    answers = gather(
        [r.actor.flight_recorder.remote() for r in ranks], time.monotonic() + timeout_s
    )
    return {r.rank: v for r, (k, v) in zip(ranks, answers, strict=True) if k == "ok" and v}


def keep_traces(traces: dict[int, bytes], state: RunState, part: str) -> None:
    for rank, trace in traces.items():
        state.store.write_artifact(state.run_id, f"{part}-rank{rank}.flight-recorder", trace)


def culprit_row(c: Culprit, job: Job, step: StepSpec, run_id: str, ranks: list[RankHandle]) -> Row:
    """A culprit as a row of the step, so queries over results see who broke or slowed it."""
    ctx = next((r.ctx for r in ranks if r.rank == c.rank), None)
    return Row(
        run_id=run_id,
        job=job.index,
        step=step.step_name,
        check=step.check,
        world_size=job.world_size,
        rank=c.rank,
        local_rank=ctx.local_rank if ctx else 0,
        node=c.node,
        device=ctx.device if ctx else "",
        device_id=c.device_id,
        backend=job.backend,
        metric=CULPRIT_METRIC,
        status=(Status.FAIL if status.aborts(c) else Status.WARN).value,
        message=f"{c.reason}: {c.detail}",
        details={"reason": c.reason},
    )


def step_message(rows: list[Row], culprits: list[Culprit], timeout: float, seconds: float) -> str:
    if culprits:
        timed_out = seconds >= timeout
        broke = any(status.aborts(c) for c in culprits)
        what = f"timed out after {timeout:g}s" if timed_out else "failed" if broke else "passed"
        names = ", ".join(f"rank {c.rank} on {c.node} ({c.reason})" for c in culprits)
        return f"step {what}; {'culprit' if broke else 'late'}: {names}"
    failed = [r for r in rows if r.status == Status.FAIL.value]
    if failed:
        worst = failed[0]
        text = f"{len(failed)} failing rows; e.g. rank {worst.rank} {worst.collective or ''}: {worst.message}"
        return text + traced_sources(failed)
    if any(r.status == Status.WARN.value for r in rows):
        warned = [r for r in rows if r.status == Status.WARN.value]
        return f"{len(warned)} warnings; e.g. rank {warned[0].rank}: {short(warned[0].message)}"
    return ""


def traced_sources(rows: list[Row]) -> str:
    """Where wrong elements can be traced to the rank that sent them, say which rank."""
    per_source: dict[str, int] = {}
    for r in rows:
        for src, n in r.details.get("wrong_by_source", {}).items():
            per_source[src] = per_source.get(src, 0) + n
    if not per_source:
        return ""
    ranked = sorted(per_source.items(), key=lambda kv: -kv[1])
    return "; wrong data traced to " + ", ".join(f"rank {k} ({n} elements)" for k, n in ranked[:3])
