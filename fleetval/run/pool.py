"""Warm rank actors: a pool of placement groups with their actors, kept between jobs.

Starting a job's actors costs seconds (a process each, importing torch); a service that runs
one small suite after another pays it every time. With a pool, a job that ends cleanly gives
its group and actors back instead of tearing them down, and the next job of the same shape
takes them. Safety comes first:

- Only a job that ended cleanly gives its ranks back; one that broke (a crash, hang, error,
  cancel) tears them down as before.
- Given back, every rank is reset before it is kept: its process group destroyed, the
  environment a run set undone, its per-run state cleared; a rank that does not answer the
  reset within a deadline sends the whole group to teardown.
- Taken, every rank must answer a health ping (`describe`) within a deadline first; a
  pooled rank that is dead or hung is never reused: its group and actors are torn down and
  the job starts fresh ones.
- Idle groups hold cluster resources, so a job of another shape first frees every idle
  group (a job never waits for resources the pool sits on), and a group idle for longer
  than `idle_s` is freed (`expire`), leaving the GPUs to other drivers.

The deadlines (`ping_s`, `reset_s`, `idle_s`) are the failure policy's (`fleetval.policy`):
each job's suite's for its ping and reset, the pool's own for its idle time.

`fleetval run` passes no pool (each job tears down at its end, as always); the service keeps
a `RankPool` for its process and closes it on shutdown; a fleet sweep keeps a `NodePool` (one
warm rank per slot on each node) for all its jobs and rounds, and closes it at its end, or
leaves it to the next sweep inside `sweep.keep_warm` (back-to-back sweeps, a nightly loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ray.util.placement_group import PlacementGroup

from fleetval.policy import FailurePolicy
from fleetval.run.job import (
    Pooled,
    RankHandle,
    create_group,
    gather,
    start_ranks,
    teardown,
)
from fleetval.run.plan import Job, PlanError

log = logging.getLogger(__name__)

# What makes two jobs' ranks interchangeable: world size, bundle, strategy and node set.
PoolKey = tuple[int, tuple[tuple[str, float], ...], str, tuple[str, ...] | None]


def pool_key(job: Job) -> PoolKey:
    return (job.world_size, tuple(sorted(job.bundle().items())), job.strategy.value, job.nodes)


class RankPool:
    """Idle groups of rank actors by job shape; thread-safe; `close` tears everything down."""

    def __init__(self, policy: FailurePolicy | None = None) -> None:
        self.idle_s = (policy or FailurePolicy()).idle_s
        self._idle: dict[PoolKey, Pooled] = {}
        self._lock = threading.Lock()
        self.reused = 0  # jobs that took pooled ranks (for tests and benchmarks)

    def take(self, job: Job, policy: FailurePolicy) -> Pooled | None:
        """Healthy pooled ranks for this job's shape, or None (the caller starts fresh ones).

        Every idle group of another shape is torn down first, so the cold path finds the
        resources free; a group with a rank that fails its ping is torn down, never reused."""
        key = pool_key(job)
        with self._lock:
            entry = self._idle.pop(key, None)
            others, self._idle = list(self._idle.values()), {}
        for other in others:
            teardown(other.ranks, other.pg)
        if entry is None:
            return None
        answers = gather(
            [r.actor.describe.remote() for r in entry.ranks], time.monotonic() + policy.ping_s
        )
        bad = [
            r.placed.pid for r, (kind, _) in zip(entry.ranks, answers, strict=True) if kind != "ok"
        ]
        if bad:
            log.warning("pooled ranks %s did not answer a health ping: replaced", bad)
            teardown(entry.ranks, entry.pg)
            return None
        for rank, (_, placed) in zip(entry.ranks, answers, strict=True):
            rank.placed, rank.ctx = placed, None
        self.reused += 1
        return entry

    def give_back(
        self, job: Job, pg: PlacementGroup | None, ranks: list[RankHandle], policy: FailurePolicy
    ) -> None:
        """Reset the ranks of a job that ended cleanly and keep them; on any failure (or a
        group of this shape already idle) tear them down."""
        entry = Pooled(pg, ranks, time.monotonic())
        deadline = time.monotonic() + policy.reset_s
        answers = gather([r.actor.reset.remote() for r in entry.ranks], deadline)
        if any(kind != "ok" for kind, _ in answers):
            log.warning("a rank did not reset within %gs: its group is torn down", policy.reset_s)
            teardown(entry.ranks, entry.pg)
            return
        key = pool_key(job)
        with self._lock:
            spare = self._idle.get(key)
            if spare is None:
                self._idle[key] = entry
        if spare is not None:
            teardown(entry.ranks, entry.pg)

    def expire(self) -> None:
        """Free the groups idle for longer than `idle_s` (call it when there is no work)."""
        cutoff = time.monotonic() - self.idle_s
        with self._lock:
            old = [k for k, e in self._idle.items() if e.since < cutoff]
            gone = [self._idle.pop(k) for k in old]
        for entry in gone:
            teardown(entry.ranks, entry.pg)

    def close(self) -> None:
        """Tear down every idle group (the service's shutdown)."""
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
        for entry in idle:
            teardown(entry.ranks, entry.pg)

    def actor_ids(self) -> list[str]:
        """The idle actors' ids (for tests: which actors a later job reuses)."""
        with self._lock:
            return [r.actor._actor_id.hex() for e in self._idle.values() for r in e.ranks]

    def group_ids(self) -> list[str]:
        """The idle placement groups' ids (for tests: what the pool holds)."""
        with self._lock:
            return [e.pg.id.hex() for e in self._idle.values() if e.pg is not None]


class NodePool:
    """A fleet sweep's warm ranks: one rank actor per slot on each node (its own placement
    group, kept on it by the node's label), for all the sweep's jobs and rounds.

    A job over any set of nodes takes their ranks (starting those a node does not have yet,
    or no longer has) and forms its process group among them; a job that ends cleanly gives
    them back reset. A rank that died or hung is replaced, never reused: a job that broke
    tears its actors down (job_ranks), a rank that fails its health ping or its reset is torn
    down with its node's others, and the node's next job starts fresh ones in its group.
    Thread-safe: a round's jobs take and give back side by side (NOTE: a node is in one job
    of a round at most, as the planner pairs them; its slots hold one rank each). `close`
    frees everything.
    """

    def __init__(self, per_node: Callable[[str], Job] | None = None) -> None:
        self._per_node = per_node  # the one-node job whose bundles are the node's slots
        # Each node's placement group, and the slot shape it was made for.
        self._groups: dict[str, tuple[PlacementGroup, PoolKey]] = {}
        self._idle: dict[str, list[RankHandle]] = {}
        self._lock = threading.Lock()
        self.started = 0  # rank actors started (for tests and benchmarks)
        self.reused = 0  # jobs whose ranks were all warm

    def serve(self, per_node: Callable[[str], Job]) -> None:
        """Serve another sweep (`sweep.keep_warm`): a node whose slots that sweep shapes
        differently (ranks per node, bundle) has its ranks and group freed, to be started
        anew; the others stay warm. Call it between sweeps, never during one."""
        with self._lock:
            self._per_node = per_node
            stale = [n for n, (_, key) in self._groups.items() if _key_or_none(per_node, n) != key]
            ranks, groups = self._take_out(stale)
        _tear_down(ranks, groups)

    def take(self, job: Job, policy: FailurePolicy) -> Pooled:
        """The ranks of every node of `job`, in rank order; JobAborted (culprits named) if a
        node's ranks cannot be started."""
        assert job.nodes is not None  # NOTE: a sweep's jobs always name their nodes
        with self._lock:
            warm = {n: self._idle.pop(n) for n in job.nodes if n in self._idle}
        warm = self._healthy(warm, policy)
        cold = [n for n in job.nodes if n not in warm]
        if not cold:
            self.reused += 1
        with ThreadPoolExecutor(max(1, len(cold)), thread_name_prefix="rank-start") as ex:
            starts = {n: ex.submit(self._start, n, policy) for n in cold}
        failed = [err for f in starts.values() if (err := f.exception()) is not None]
        fresh = {n: f.result() for n, f in starts.items() if f.exception() is None}
        if failed:  # JobAborted: the other nodes' ranks stay warm for their next jobs
            with self._lock:
                self._idle.update(warm | fresh)
            raise failed[0]
        ranks = [r for rs in (warm | fresh).values() for r in rs]
        ranks.sort(key=lambda r: (r.placed.node, r.placed.gpu_ids, r.placed.node_id))
        return Pooled(None, ranks)

    def give_back(
        self, job: Job, pg: PlacementGroup | None, ranks: list[RankHandle], policy: FailurePolicy
    ) -> None:
        """Reset the ranks of a job that ended cleanly and keep them, node by node; a node
        with a rank that did not reset in time has its ranks torn down."""
        answers = gather([r.actor.reset.remote() for r in ranks], time.monotonic() + policy.reset_s)
        by_node: dict[str, list[RankHandle]] = {}
        failed: set[str] = set()
        for r, (kind, _) in zip(ranks, answers, strict=True):
            by_node.setdefault(r.placed.node, []).append(r)
            if kind != "ok":
                failed.add(r.placed.node)
        for node, mine in by_node.items():
            if node in failed:
                log.warning(
                    "node %s: a rank did not reset within %gs: replaced", node, policy.reset_s
                )
                teardown(mine, None)
                continue
            for r in mine:
                r.ctx = None
            with self._lock:
                self._idle[node] = mine

    def close(self) -> None:
        """Tear down every rank and placement group (the sweep's end, on every path)."""
        with self._lock:
            ranks, groups = self._take_out([*self._groups, *self._idle])
        _tear_down(ranks, groups)

    def _take_out(self, nodes: list[str]) -> tuple[list[RankHandle], list[PlacementGroup]]:
        """These nodes' idle ranks and groups, no longer kept (the caller holds the lock and
        tears them down once it is released)."""
        ranks = [r for n in nodes for r in self._idle.pop(n, [])]
        groups = [self._groups.pop(n)[0] for n in dict.fromkeys(nodes) if n in self._groups]
        return ranks, groups

    def _healthy(
        self, warm: dict[str, list[RankHandle]], policy: FailurePolicy
    ) -> dict[str, list[RankHandle]]:
        """The nodes whose warm ranks all answer a health ping in time; the others' ranks are
        torn down (their node then starts fresh ones)."""
        ranks = [r for rs in warm.values() for r in rs]
        answers = gather(
            [r.actor.describe.remote() for r in ranks], time.monotonic() + policy.ping_s
        )
        bad = {r.placed.node for r, (kind, _) in zip(ranks, answers, strict=True) if kind != "ok"}
        for node in sorted(bad):
            log.warning("node %s: a warm rank did not answer its health ping: replaced", node)
            teardown(warm.pop(node), None)
        return warm

    def _start(self, node: str, policy: FailurePolicy) -> list[RankHandle]:
        """Fresh ranks in the node's placement group (made on first use, then kept); a node
        whose ranks cannot start raises JobAborted (start_ranks tore its actors down)."""
        assert self._per_node is not None, "a NodePool serves a sweep before it starts ranks"
        job = self._per_node(node)
        with self._lock:
            kept = self._groups.get(node)
        pg = kept[0] if kept else None
        if pg is None:
            pg = create_group(job, policy)
            with self._lock:
                self._groups[node] = pg, pool_key(job)
        ranks = start_ranks(job, pg, policy)
        self.started += len(ranks)
        return ranks


def _key_or_none(per_node: Callable[[str], Job], node: str) -> PoolKey | None:
    """A node's slot shape for a sweep; None where that sweep cannot place it (left the
    cluster, or no longer eligible)."""
    try:
        return pool_key(per_node(node))
    except PlanError:
        return None


def _tear_down(ranks: list[RankHandle], groups: list[PlacementGroup]) -> None:
    teardown(ranks, None)
    for pg in groups:
        teardown([], pg)
