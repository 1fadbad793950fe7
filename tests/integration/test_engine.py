"""The engine end to end on real Ray and real gloo collectives: correctness, faults, placement."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from fleetval.run.execute import run_suite
from fleetval.run.plan import PlanError
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.vocab import Collective, DType, ReduceOp

pytestmark = pytest.mark.usefixtures("ray_session")


def suite(steps: list[dict[str, Any]], **extra: Any) -> Any:
    placement = {"world_sizes": [4], "gpus_per_rank": 0, **extra.pop("placement", {})}
    return parse_suite({"name": "t", "placement": placement, "steps": steps, **extra})


def one_all_reduce(dtype: str) -> dict[str, Any]:
    """A step of one all_reduce (sum), once: what a test of where ranks are placed runs."""
    return {
        "check": "collectives",
        "collectives": ["all_reduce"],
        "ops": ["sum"],
        "dtypes": [dtype],
        "repeats": 1,
    }


def rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    return store.results([run_id]).to_pylist()


def steps_of(record: Any) -> dict[str, dict[str, Any]]:
    return {f"{s['job']}:{s['step']}": s for s in record.summary["steps"]}


def test_every_collective_and_dtype_exact_on_four_ranks(tmp_path, warm_pool):
    store = Store(tmp_path)
    record = run_suite(
        suite([{"check": "collectives", "size": "8KiB", "repeats": 1}]), store, pool=warm_pool
    )
    assert record.status == "pass", record.summary
    got = rows(store, record.run_id)
    assert {r["rank"] for r in got} == {0, 1, 2, 3}
    measured = {(r["collective"], r["op"], r["dtype"]) for r in got if r["status"] == "pass"}
    for c in Collective:
        assert any(m[0] == c.value for m in measured), c
    for d in (DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16, DType.INT32, DType.INT64):
        for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT):
            assert ("all_reduce", op.value, d.value) in measured
    skipped = [r for r in got if r["status"] == "skip"]
    assert skipped and all(r["op"] == "avg" and "gloo" in r["message"] for r in skipped)
    assert all(r["wrong"] == 0 for r in got)
    assert {r["backend"] for r in got} == {"gloo"} and record.backend == "gloo"


def test_corrupt_rank_fails_the_step_and_is_traced(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [
            {
                "check": "collectives",
                "collectives": ["all_reduce", "all_gather", "send_recv"],
                "dtypes": ["float32"],
                "size": "4KiB",
                "repeats": 1,
            }
        ],
        faults=[{"kind": "corrupt", "rank": 2}],
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert record.status == "fail"
    step = record.summary["steps"][0]
    assert step["status"] == "fail" and "traced to rank 2" in step["message"]
    got = rows(store, record.run_id)
    allreduce = [r for r in got if r["collective"] == "all_reduce" and r["op"] == "sum"]
    assert all(r["wrong"] == 1024 for r in allreduce)  # every element off by the corruption
    gather = [r for r in got if r["collective"] == "all_gather"]
    assert all(r["wrong"] == 256 and '"2": 256' in r["details"] for r in gather)
    ring = {r["rank"]: r["wrong"] for r in got if r["collective"] == "send_recv"}
    assert ring == {0: 0, 1: 0, 2: 0, 3: 1024}  # only rank 2's receiver sees it
    assert record.faults == [{"kind": "corrupt", "rank": 2}]


def test_bandwidth_sweep_rows_have_samples_and_busbw(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [
            {
                "check": "bandwidth",
                "collectives": ["all_reduce", "all_gather"],
                "sizes": {"min": 1024, "max": "64KiB", "factor": 4},
                "warmup": 1,
                "iters": 5,
            }
        ]
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert record.status == "pass"
    got = rows(store, record.run_id)
    ar = [r for r in got if r["collective"] == "all_reduce" and r["rank"] == 0]
    assert [r["size_bytes"] for r in ar] == [1024, 4096, 16384, 65536]
    for r in ar:
        assert len(r["samples_us"]) == 5 and r["iters"] == 5
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * 3 / 4)
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / (r["time_us_median"] * 1e3))
    ag = [r for r in got if r["collective"] == "all_gather" and r["rank"] == 1]
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 3 / 4) for r in ag)


def test_hang_is_named_within_the_deadline_and_the_run_goes_on(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [
            {
                "name": "bw",
                "check": "bandwidth",
                "sizes": {"min": 1024, "max": 4096},
                "iters": 50,
                "timeout_s": 6,
            },
            {"name": "after", "check": "collectives", "collectives": ["barrier"]},
        ],
        placement={"world_sizes": [4, 2]},
        faults=[{"kind": "hang", "rank": 3, "step": "bw"}],
    )
    t0 = time.monotonic()
    record = run_suite(spec, store, pool=warm_pool)
    assert time.monotonic() - t0 < 6 + 15 + 20  # deadline + detection slack + two jobs' start-up
    steps = steps_of(record)
    hung = steps["0:bw"]
    assert hung["status"] == "fail" and "timed out" in hung["message"]
    assert 6 <= hung["seconds"] <= 6 + 15  # detected within the step deadline + 15 s
    assert [c["rank"] for c in hung["culprits"]] == [3]
    assert hung["culprits"][0]["reason"] == "hang"
    assert steps["0:after"]["status"] == "skip"
    assert steps["1:bw"]["status"] == "pass"  # rank 3 does not exist in the 2-rank job
    culprit_rows = [r for r in rows(store, record.run_id) if r["metric"] == "step_outcome"]
    assert [(r["rank"], r["status"]) for r in culprit_rows] == [(3, "fail")]


def test_crash_is_named_and_earlier_results_are_kept(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [
            {
                "name": "first",
                "check": "collectives",
                "collectives": ["all_reduce"],
                "dtypes": ["float32"],
            },
            {"name": "boom", "check": "bandwidth", "sizes": {"min": 1024, "max": 4096}},
        ],
        faults=[{"kind": "crash", "rank": 1, "step": "boom"}],
    )
    record = run_suite(spec, store, pool=warm_pool)
    steps = steps_of(record)
    assert steps["0:first"]["status"] == "pass"
    boom = steps["0:boom"]
    assert boom["status"] == "fail"
    assert [(c["rank"], c["reason"]) for c in boom["culprits"]] == [(1, "crash")]
    kept = [r for r in rows(store, record.run_id) if r["step"] == "first"]
    assert len(kept) == 5 * 4  # 5 ops (avg a skip on gloo) x 4 ranks, measured before the crash


def test_strict_spread_places_one_rank_per_node_ordered_by_node(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [one_all_reduce("float32")],
        placement={"world_sizes": [3], "strategy": "STRICT_SPREAD"},
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert record.status == "pass"
    by_rank = {r["rank"]: r["node"] for r in rows(store, record.run_id)}
    nodes = [by_rank[k] for k in range(3)]
    assert len(set(nodes)) == 3 and nodes == sorted(nodes)  # one per node, ranks in node order
    assert {n["node"] for n in store.nodes([record.run_id]).to_pylist()} == set(nodes)


def test_gpu_bundles_land_on_gpu_nodes_with_local_ranks(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [{"check": "collectives", "collectives": ["barrier"]}],
        backend="gloo",
        placement={"world_sizes": [4], "gpus_per_rank": 1, "strategy": "PACK"},
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert record.status == "pass"
    got = sorted(rows(store, record.run_id), key=lambda r: r["rank"])
    nodes = [r["node"] for r in got]
    assert nodes == sorted(nodes) and "head" not in nodes  # ranks in node order, on GPU nodes
    assert all(nodes.count(n) <= 2 for n in nodes)  # no node holds more bundles than GPUs
    assert [r["local_rank"] for r in got] == [nodes[:i].count(n) for i, n in enumerate(nodes)]


def test_node_restriction_uses_labels(tmp_path, warm_pool):
    store = Store(tmp_path)
    spec = suite(
        [{"check": "collectives", "collectives": ["barrier"]}],
        placement={"world_sizes": [2], "nodes": ["node-b"]},
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert {r["node"] for r in rows(store, record.run_id)} == {"node-b"}


def test_unplaceable_world_size_fails_fast_before_anything_runs(tmp_path):
    store = Store(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(
        PlanError,
        match=r"world size 64 needs 64 bundles of 1 CPU; the cluster has 6 GPUs and 10 CPUs on 4 node",
    ):
        run_suite(suite([{"check": "collectives"}], placement={"world_sizes": [64]}), store)
    with pytest.raises(PlanError, match="STRICT_SPREAD needs 5 nodes; 4 can take a rank"):
        run_suite(
            suite(
                [{"check": "collectives"}],
                placement={"world_sizes": [5], "strategy": "STRICT_SPREAD"},
            ),
            store,
        )
    assert time.monotonic() - t0 < 5
    assert store.runs() == []  # nothing written


def test_placement_group_that_never_becomes_ready_is_removed(tmp_path):
    import ray
    from ray.util import placement_group, remove_placement_group

    # Hold one of the head's 4 CPUs, so a 4-CPU rank fits the cluster's totals but never now.
    holder = placement_group([{"CPU": 1}], bundle_label_selector=[{"fleetval/node": "head"}])
    ray.get(holder.ready(), timeout=10)
    try:
        store = Store(tmp_path)
        spec = suite(
            [{"check": "collectives", "collectives": ["barrier"]}],
            placement={"world_sizes": [1], "cpus_per_rank": 4},
            timeouts={"placement_s": 2},
        )
        record = run_suite(spec, store)
    finally:
        remove_placement_group(holder)
    step = record.summary["steps"][0]
    assert record.status == "fail"
    assert step["status"] == "fail" and "not ready within 2s" in step["message"]


@pytest.mark.parametrize(("strategy", "nodes_used"), [("STRICT_PACK", {1}), ("SPREAD", {2, 3})])
def test_pack_and_spread_strategies(tmp_path, strategy, nodes_used, warm_pool):
    """STRICT_PACK: one node. SPREAD is best effort in Ray: more than one node, not always all."""
    store = Store(tmp_path)
    spec = suite(
        [one_all_reduce("int32")],
        backend="gloo",
        placement={
            "world_sizes": [3 if strategy == "SPREAD" else 2],
            "gpus_per_rank": 1,
            "strategy": strategy,
        },
    )
    record = run_suite(spec, store, pool=warm_pool)
    assert record.status == "pass"
    got = sorted(rows(store, record.run_id), key=lambda r: r["rank"])
    assert len({r["node"] for r in got}) in nodes_used
    assert [r["local_rank"] for r in got] == [
        [g["node"] for g in got][:i].count(r["node"]) for i, r in enumerate(got)
    ]


def test_the_leak_check_sees_a_live_actor_and_group():
    """The no-leak assertion every integration test ends with is not vacuous."""
    import ray
    from ray.util import placement_group, remove_placement_group

    from tests.helpers.ray import assert_no_leaks, clean_up, leftovers

    @ray.remote(num_cpus=0)
    class Idle:
        def ping(self) -> int:
            return 1

    actor, group = Idle.remote(), placement_group([{"CPU": 1}])
    ray.get([actor.ping.remote(), group.ready()], timeout=30)
    try:
        actors, groups = leftovers()
        assert actor._actor_id.hex() in actors
        assert group.id.hex() in groups
        # What the fixture does after a test leaked, so that the next test starts clean.
        clean_up([actor._actor_id.hex()], [group.id.hex()])
        assert_no_leaks(30)
    finally:
        ray.kill(actor)
        with contextlib.suppress(Exception):  # removed above, normally
            remove_placement_group(group)


def test_cancel_event_stops_the_run_tears_down_and_records_cancelled(tmp_path, warm_pool):
    """The service's cancel: a set event ends the running step within a poll, status cancelled."""
    import threading

    store = Store(tmp_path)
    cancel = threading.Event()
    cancelled_at: list[float] = []
    spec = suite(  # NOTE: uncancelled, rank 1 alone would take 40 s (20 calls, 2 s late each)
        [{"check": "bandwidth", "collectives": ["all_reduce"], "sizes": {"min": 8, "max": 8},
          "warmup": 0, "iters": 20}],
        faults=[{"kind": "delay", "rank": 1, "ms": 2000}],
    )  # fmt: skip

    def cancel_now() -> None:
        cancelled_at.append(time.monotonic())
        cancel.set()

    def on_event(e: Any) -> None:
        if e.kind == "step_start":
            threading.Timer(1.0, cancel_now).start()

    record = run_suite(
        spec,
        store,
        run_id="20990101-000000-cafe01",
        cancel=cancel,
        on_event=on_event,
        pool=warm_pool,
    )
    assert record.run_id == "20990101-000000-cafe01"
    assert record.status == "cancelled", record
    # NOTE: from the cancel, not from the start: four rank start-ups on a loaded 2-core box
    # took up to 25 s before the step began (the bound used to include them)
    assert time.monotonic() - cancelled_at[0] < 15
    assert store.run(record.run_id).status == "cancelled"
