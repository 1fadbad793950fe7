"""Fleet sweep, the engine side: the jobs of each round run side by side on Ray.

What to run and what it means is `fleetval.fleet` (pure, unit-tested and benchmarked on a
simulated fleet); here each planned job becomes a job of the run (`plan.node_job`: every
rank its nodes can take), all jobs of a round run at once (one thread per job drives its
ranks through `execute.run_job`, each with its own deadlines), and each job's rows become
its score (`fleet.score`). The sweep is one stored run: every job's rows, and the verdict
in its summary (`summary["sweep"]`), which `fleetval sweep-history` reads.

Warm ranks: the sweep keeps one rank actor per slot on each node (`pool.NodePool`) for all
its jobs and rounds, and each job forms its process group among its nodes' ranks; a rank
that died or hung is replaced, not reused. Starting a rank (a process importing torch)
costs seconds; forming a group among warm ones, a fraction of one.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import statistics
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from contextvars import ContextVar

from fleetval.analysis.baselines import BaselineError, Baselines
from fleetval.fleet.judge import Measurement, Planned
from fleetval.fleet.score import measurement
from fleetval.fleet.verdict import BaselineLevels, FleetVerdict, run_rounds
from fleetval.run.execute import RunState, StepOutcome, cluster_shape, connect, recording, run_job
from fleetval.run.fabric import sweep_fabric
from fleetval.run.job import NOT_PLACED
from fleetval.run.plan import ClusterShape, Job, PlanError, eligible_nodes, node_job
from fleetval.run.plan import resolve_gpus_per_rank as gpus_per_rank
from fleetval.run.pool import NodePool
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.suite import Suite
from fleetval.vocab import Status, SweepPhase


def sweep(
    suite: Suite,
    store: Store,
    *,
    address: str | None = None,
    baseline: str | None = None,
    labels: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> tuple[Run, FleetVerdict | None]:
    """Sweep the fleet as one stored run; bad input (PlanError, BaselineError) before it starts.
    Setting `cancel` stops it within a poll: the verdict is then None, the run `cancelled`."""
    levels = baseline_levels(store, baseline) if baseline else None
    connect(address, suite.placement.cpus_per_rank)
    cluster = cluster_shape()
    names = sweep_nodes(suite, cluster)
    fabric = sweep_fabric(suite, store, len(names))  # topology, and the links measured before
    verdict = None
    with (
        warm_ranks(suite, cluster) as pool,
        recording(suite, store, labels=labels, cancel=cancel, pool=pool) as state,
    ):
        started, warm = pool.started, pool.reused  # a shared pool counts other sweeps' too
        skus: dict[str, str] = {}  # filled from each node's fingerprint as jobs run
        measure = _round_runner(suite, cluster, state, skus, itertools.count())
        verdict = run_rounds(names, measure, suite.sweep, skus=skus, baseline=levels, fabric=fabric)
        state.summary["sweep"] = verdict.to_dict()
        state.summary["ranks"] = {
            "started": pool.started - started,
            "jobs_all_warm": pool.reused - warm,
        }
        state.outcomes.append(_verdict_outcome(verdict))
    assert state.record is not None  # written by recording() on the way out
    return state.record, verdict


# The warm ranks that sweeps inside `keep_warm` share (None: each sweep keeps its own).
_SHARED: ContextVar[NodePool | None] = ContextVar("fleetval_sweep_ranks", default=None)


@contextmanager
def keep_warm() -> Iterator[NodePool]:
    """Sweeps in this block share one warm rank per slot on each node: back-to-back sweeps
    (`fleetval sweep --repeat`), a nightly loop or a benchmark start each node's ranks once,
    not once a sweep. A node whose slots a later sweep shapes differently starts anew; a
    rank that died or hung is replaced, as within a sweep. All torn down at the block's end;
    a block inside another shares the outer one's ranks (a loop around `fleetval sweep`).
    """
    outer = _SHARED.get()
    if outer is not None:
        yield outer
        return
    pool = NodePool()  # each sweep gives it its slots' shape (`warm_ranks`)
    token = _SHARED.set(pool)
    try:
        yield pool
    finally:
        _SHARED.reset(token)
        pool.close()


@contextmanager
def warm_ranks(suite: Suite, cluster: ClusterShape) -> Iterator[NodePool]:
    """One warm rank per slot on each node, for the whole sweep; torn down at its end on every
    path, unless a `keep_warm` block holds them for the next sweep."""
    per_node = functools.partial(_node_slots, suite, cluster)
    shared = _SHARED.get()
    if shared is not None:
        shared.serve(per_node)
        yield shared
        return
    pool = NodePool(per_node)
    try:
        yield pool
    finally:
        pool.close()


def _node_slots(suite: Suite, cluster: ClusterShape, node: str) -> Job:
    """The one-node job whose bundles are a node's slots: one rank in each."""
    return node_job(suite, cluster, (node,), -1, [])


def sweep_nodes(suite: Suite, cluster: ClusterShape) -> list[str]:
    """The nodes a sweep judges: the eligible ones that can take a rank (at least two)."""
    gpr, cpr = gpus_per_rank(suite, cluster), suite.placement.cpus_per_rank
    names = [n.name for n in eligible_nodes(suite, cluster) if n.bundles(cpr, gpr) > 0]
    if len(names) < 2:
        raise PlanError(
            f"a sweep needs at least 2 nodes that can take a rank; the cluster has {cluster.describe()}"
        )
    return names


def baseline_levels(store: Store, name: str) -> BaselineLevels:
    """A baseline's past sweeps: the median of their fleet levels per phase and SKU."""
    runs = [store.run(r) for r in Baselines(store).resolve(name).run_ids]
    past = [r.summary["sweep"].get("levels", {}) for r in runs if "sweep" in r.summary]
    if not past:
        raise BaselineError(f"baseline {name!r}: none of its {len(runs)} run(s) is a sweep")
    keys = {k for levels in past for k in levels}
    return BaselineLevels(
        name, {k: statistics.median(lv[k] for lv in past if k in lv) for k in sorted(keys)}
    )


def _round_runner(
    suite: Suite,
    cluster: ClusterShape,
    state: RunState,
    skus: dict[str, str],
    index: Iterator[int],
) -> Callable[[list[Planned]], list[Measurement]]:
    steps = {SweepPhase.ALONE: suite.sweep.alone_steps, SweepPhase.PAIR: suite.sweep.pair_steps}

    def measure(planned: list[Planned]) -> list[Measurement]:
        state.check_cancelled()
        jobs = [node_job(suite, cluster, p.nodes, next(index), steps[p.phase]) for p in planned]
        children = [_child(state) for _ in jobs]
        outcomes = _together(jobs, children, suite)
        for child in children:
            state.outcomes += child.outcomes
            state.backend = state.backend or child.backend
        skus.update({n: fp.get("gpu_model") or "" for n, fp in state.nodes.items()})
        return [
            _measurement(p, state.store.job_results(state.run_id, job.index), outs)
            for p, job, outs in zip(planned, jobs, outcomes, strict=True)
        ]

    return measure


def _together(jobs: list[Job], children: list[RunState], suite: Suite) -> list[list[StepOutcome]]:
    """Run the jobs side by side, their steps starting together once every job's ranks are up.

    NOTE: one thread per job: each blocks on its own Ray waits, all with deadlines. Jobs of
    a round are judged against each other, so they measure at the same time, under the same
    load (rank start-up on other nodes would otherwise land in some jobs' timings).
    """
    lineup = threading.Barrier(len(jobs))
    wait_s = suite.timeouts.placement_s + suite.timeouts.rendezvous_s

    def ready() -> None:
        with suppress(threading.BrokenBarrierError):
            lineup.wait(timeout=wait_s)

    def one(job: Job, child: RunState) -> list[StepOutcome]:
        try:
            return run_job(job, child, ready)
        finally:
            lineup.abort()  # a job that could not start frees the others at once

    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="sweep-job") as pool:
        return list(pool.map(one, jobs, children))


def _child(state: RunState) -> RunState:
    """A job's own state (its outcomes apart), sharing the run's id, store, nodes and cancel."""
    return dataclasses.replace(state, outcomes=[], done_steps=0)


def _measurement(p: Planned, rows: list[dict], outcomes: list[StepOutcome]) -> Measurement:
    """The job's measurement. A job the cluster could not place measured nothing: that is
    the cluster's answer (busy, or no such node), never evidence against its nodes."""
    failed = [(o.step, o.message) for o in outcomes if o.status == Status.FAIL.value]
    if failed and all(msg.startswith(NOT_PLACED) for _, msg in failed):
        return Measurement(p, None)
    return measurement(p, rows, failed)


def _verdict_outcome(v: FleetVerdict) -> StepOutcome:
    """The sweep's verdict as the run's last step, so `show` and exit statuses see it."""
    lines = [f"{n.state.value} {n.node}: {n.reason}" for n in v.named]
    lines += [f"slow link {' <-> '.join(link.nodes)}" for link in v.bad_links]
    lines += [f"slow trunk {t.level} {' <-> '.join(t.groups)}" for t in v.bad_trunks]
    lines += list(v.findings)
    lines += [f"{x.subject()} estimated slow, not proven" for x in v.unproven]
    status = {1: Status.FAIL, 5: Status.UNJUDGED, 0: Status.PASS}[v.exit_code].value
    message = "; ".join(lines) or f"fleet healthy: {len(v.nodes)} nodes in {v.rounds} rounds"
    return StepOutcome(-1, 0, "verdict", "sweep", status, message, 0.0)
