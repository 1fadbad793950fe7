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
one for its process and closes it on shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ray.util.placement_group import PlacementGroup

from fleetval.policy import FailurePolicy
from fleetval.run.job import RankHandle, gather, teardown
from fleetval.run.plan import Job

log = logging.getLogger(__name__)

# What makes two jobs' ranks interchangeable: world size, bundle, strategy and node set.
PoolKey = tuple[int, tuple[tuple[str, float], ...], str, tuple[str, ...] | None]


def pool_key(job: Job) -> PoolKey:
    return (job.world_size, tuple(sorted(job.bundle().items())), job.strategy.value, job.nodes)


@dataclass
class Pooled:
    """An idle placement group and its rank actors (driver-side handles, in rank order)."""

    pg: PlacementGroup
    ranks: list[RankHandle]
    since: float = 0.0  # time.monotonic() when it became idle


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
        self, job: Job, pg: PlacementGroup, ranks: list[RankHandle], policy: FailurePolicy
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
