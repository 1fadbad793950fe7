"""Warm rank actors (fleetval.run.pool) on real Ray and gloo: a second job reuses the pool's
actors; a pooled rank killed or stopped from outside is replaced, never reused; a sweep's
node pool forms each job's group among its nodes' warm ranks; nothing leaks once a pool is
closed (the `ray_session` fixture checks)."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from fleetval.policy import FailurePolicy
from fleetval.run.execute import cluster_shape, recording, run_job, run_suite
from fleetval.run.plan import node_job
from fleetval.run.pool import NodePool, RankPool
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite

SUITE = parse_suite(
    {
        "name": "pooled",
        "placement": {"world_sizes": [2], "gpus_per_rank": 0},
        "steps": [{"check": "collectives", "collectives": ["all_reduce"], "repeats": 1}],
    },
    "test",
)


def pids(pool: RankPool) -> list[int]:
    return [r.placed.pid for e in pool._idle.values() for r in e.ranks]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pooled_ranks_are_reused_and_bad_ones_replaced(ray_session, tmp_path):
    store, pool = Store(tmp_path), RankPool()
    try:
        assert run_suite(SUITE, store, pool=pool).status == "pass"
        first = pool.actor_ids()
        assert len(first) == 2  # given back after a clean job

        # A second run takes the same actors (reset between the runs), and passes.
        assert run_suite(SUITE, store, pool=pool).status == "pass"
        assert pool.actor_ids() == first and pool.reused == 1

        # Killed from outside while idle: the ping fails, the group is torn down and the
        # run starts fresh actors.
        os.kill(pids(pool)[1], signal.SIGKILL)
        assert run_suite(SUITE, store, pool=pool).status == "pass"
        second = pool.actor_ids()
        assert len(second) == 2 and not set(second) & set(first) and pool.reused == 1

        # Stopped (hung) while idle: it cannot answer the ping within its deadline.
        stopped = pids(pool)[0]
        os.kill(stopped, signal.SIGSTOP)
        try:
            assert run_suite(SUITE, store, pool=pool).status == "pass"
        finally:
            with contextlib.suppress(ProcessLookupError):  # ray.kill has removed it, normally
                os.kill(stopped, signal.SIGCONT)
        assert not set(pool.actor_ids()) & set(second) and pool.reused == 1
    finally:
        pool.close()


@pytest.mark.timeout(120)
def test_idle_groups_expire_and_close_frees_everything(ray_session, tmp_path):
    pool = RankPool(FailurePolicy(idle_s=0.001))
    try:
        assert run_suite(SUITE, Store(tmp_path), pool=pool).status == "pass"
        assert len(pool.actor_ids()) == 2
        pool.expire()  # idle longer than 0 s: freed (the fixture checks nothing is left)
        assert pool.actor_ids() == []
    finally:
        pool.close()


SWEEP = parse_suite(
    {
        "name": "warm-sweep",
        "placement": {"world_sizes": [2], "gpus_per_rank": 0, "cpus_per_rank": 2},
        "steps": [{"check": "collectives", "collectives": ["all_reduce"], "repeats": 1}],
    },
    "test",
)

SWEEP_HALVES = parse_suite(
    SWEEP.model_dump(mode="json", exclude_none=True)
    | {"placement": {"world_sizes": [4], "gpus_per_rank": 0, "cpus_per_rank": 1}},
    "test",
)


@pytest.mark.timeout(300)
def test_a_sweeps_node_pool_reuses_each_nodes_ranks_and_replaces_a_dead_one(ray_session, tmp_path):
    """Jobs over different node pairs (as a sweep's rounds) form their groups among the same
    warm ranks, one per node here; a rank killed between jobs is replaced, the others reused;
    a later sweep of another slot shape replaces every node's group."""
    cluster = cluster_shape()
    pool = NodePool(lambda node: node_job(SWEEP, cluster, (node,), -1, []))
    pairs = [("node-a", "node-b"), ("node-b", "node-c"), ("node-a", "node-c")]
    jobs = [node_job(SWEEP, cluster, pair, i, None) for i, pair in enumerate(pairs)]
    try:
        with recording(SWEEP, Store(tmp_path), pool=pool) as state:
            assert [o.status for o in run_job(jobs[0], state)] == ["pass"]
            assert pool.started == 2
            assert [o.status for o in run_job(jobs[1], state)] == ["pass"]
            assert pool.started == 3  # node-b's rank was warm; node-c's started
            warm = {n: [r.placed.pid for r in rs] for n, rs in pool._idle.items()}
            os.kill(warm["node-a"][0], signal.SIGKILL)  # dies while idle
            assert [o.status for o in run_job(jobs[2], state)] == ["pass"]
            assert pool.started == 4  # node-a's rank replaced, node-c's reused
            now = {n: [r.placed.pid for r in rs] for n, rs in pool._idle.items()}
            assert now["node-c"] == warm["node-c"] and now["node-a"] != warm["node-a"]
        # The next sweep (`sweep.keep_warm`) shapes each node's slots anew: two ranks of one
        # CPU. Every node's group of the old shape is freed (a node has 2 CPUs: a group left
        # behind would keep the new one from being placed), and two ranks start on each.
        pool.serve(lambda node: node_job(SWEEP_HALVES, cluster, (node,), -1, []))
        assert pool._idle == {}
        with recording(SWEEP_HALVES, Store(tmp_path), pool=pool) as state:
            job = node_job(SWEEP_HALVES, cluster, ("node-a", "node-b"), 3, None)
            assert [o.status for o in run_job(job, state)] == ["pass"]
            assert pool.started == 8 and sorted(len(rs) for rs in pool._idle.values()) == [2, 2]
    finally:
        pool.close()
