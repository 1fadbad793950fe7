"""DDP scaling, DDP health and micro-benchmarks end to end: real Ray, real gloo, CPU ranks."""

from __future__ import annotations

from typing import Any

import pytest

from fleetval.checks.ddp import scaling_efficiency
from fleetval.run.execute import run_suite
from fleetval.store.dataset import Store
from fleetval.suite import load_suite, parse_suite

pytestmark = pytest.mark.usefixtures("ray_session")

SMALL_MLP = {"hidden": 32, "layers": 2, "batch_per_rank": 8}


def suite(steps: list[dict[str, Any]], world_sizes: list[int], **extra: Any) -> Any:
    placement = {"world_sizes": world_sizes, "gpus_per_rank": 0}
    return parse_suite({"name": "t", "placement": placement, "steps": steps, **extra})


def rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    return store.results([run_id]).to_pylist()


def by_metric(got: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return sorted((r for r in got if r["metric"] == metric), key=lambda r: r["rank"])


def test_ddp_scaling_rows_and_efficiency_across_world_sizes(tmp_path, warm_pool):
    store = Store(tmp_path)
    step = {"check": "ddp_scaling", **SMALL_MLP, "steps": 4, "warmup": 1}
    record = run_suite(suite([step], [1, 2]), store, pool=warm_pool)
    # Measured, not judged: efficiency is judged by a sign-off's scaling gate, not the step.
    assert record.status == "unjudged", record.summary
    got = rows(store, record.run_id)
    assert {r["status"] for r in got} == {"info"}
    throughput = by_metric(got, "throughput")
    assert [(r["world_size"], r["rank"]) for r in throughput] == [(1, 0), (2, 0), (2, 1)]
    assert all(r["value"] > 0 and r["unit"] == "samples/s" for r in throughput)
    steps = by_metric(got, "step_time_ms")
    assert all(len(r["samples_us"]) == 4 and r["backend"] == "gloo" for r in steps)
    assert all(0.0 <= r["value"] <= 1.0 for r in by_metric(got, "comm_share"))
    allreduce = [r for r in got if r["collective"] == "all_reduce"]
    grad_bytes = (32 * 32 + 32) * 2 * 4  # two float32 Linear(32, 32) layers
    assert {(r["world_size"], r["size_bytes"]) for r in allreduce} == {
        (1, grad_bytes),
        (2, grad_bytes),
    }
    two = [r for r in allreduce if r["world_size"] == 2]
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) for r in two)  # 2(n-1)/n = 1

    points = scaling_efficiency(store.results([record.run_id]))
    assert [p.world_size for p in points] == [1, 2]
    assert points[0].efficiency == pytest.approx(1.0)
    assert points[1].efficiency is not None and points[1].efficiency > 0
    assert points[1].throughput == pytest.approx(sum(r["value"] for r in throughput[1:]))

    from typer.testing import CliRunner

    from fleetval.cli import app

    shown = CliRunner().invoke(app, ["show", record.run_id, "--data", str(tmp_path)])
    assert shown.exit_code == 0 and "weak scaling: ddp_scaling" in shown.output
    assert f"{points[1].efficiency:.2f}" in shown.output


def test_ddp_health_passes_clean_with_accumulation(tmp_path, warm_pool):
    store = Store(tmp_path)
    steps = [
        {"name": "plain", "check": "ddp_health", **SMALL_MLP, "steps": 3},
        {
            "name": "accumulate",
            "check": "ddp_health",
            **SMALL_MLP,
            "steps": 3,
            "no_sync_accumulation": 4,
        },
        {"name": "syncbn", "check": "ddp_health", **SMALL_MLP, "sync_batchnorm": True},
    ]
    record = run_suite(suite(steps, [3]), store, pool=warm_pool)
    assert record.status == "pass", record.summary
    got = rows(store, record.run_id)
    for name in ("plain", "accumulate"):
        mine = [r for r in got if r["step"] == name]
        assert {r["metric"] for r in mine} == {
            "param_hash_agree", "grad_parity_max_abs_err", "loss_finite", "loss_decreasing"
        }  # fmt: skip
        assert len(mine) == 4 * 3 and all(r["status"] == "pass" for r in mine), mine
        assert all(r["value"] < 1.0 for r in by_metric(mine, "loss_decreasing"))
    accumulated = by_metric(
        [r for r in got if r["step"] == "accumulate"], "grad_parity_max_abs_err"
    )
    assert all('"no_sync_accumulation": 4' in r["details"] for r in accumulated)
    skipped = [r for r in got if r["step"] == "syncbn"]
    assert [r["status"] for r in skipped] == ["skip"] * 3
    assert all("GPU" in r["message"] for r in skipped)


def test_corrupt_rank_fails_ddp_health_and_is_named(tmp_path, warm_pool):
    store = Store(tmp_path)
    step = {"check": "ddp_health", **SMALL_MLP, "steps": 2}
    record = run_suite(
        suite([step], [3], faults=[{"kind": "corrupt", "rank": 1}]), store, pool=warm_pool
    )
    assert record.status == "fail"
    outcome = record.summary["steps"][0]
    assert (
        outcome["status"] == "fail" and "differ from the majority on rank 1 " in outcome["message"]
    )
    hashes = by_metric(rows(store, record.run_id), "param_hash_agree")
    assert [r["value"] for r in hashes] == [1.0, 0.0, 1.0]
    assert all(r["status"] == "fail" and '"disagreeing_ranks": [1]' in r["details"] for r in hashes)


def test_microbench_on_cpu_records_unjudged_rows_and_skips_host_links(tmp_path, warm_pool):
    """No expectation for 'cpu': recorded (info), the step and run unjudged, never pass;
    the same step with the suite's own expectation for the device is judged."""
    store = Store(tmp_path)
    step = {"check": "microbench", "cpu_gemm_sizes": [64], "dtypes": ["float32", "bfloat16"],
            "cpu_copy_bytes": "1MiB", "warmup": 1, "iters": 3}  # fmt: skip
    own = {**step, "name": "own", "dtypes": ["float32"],
           "expectations": [{"gpu_model": "^cpu$", "tflops": {"float32": 1e-6},
                             "hbm_gbps": 1e-6, "source": "test floor"}]}  # fmt: skip
    record = run_suite(suite([step], [2]), store, pool=warm_pool)
    assert record.status == "unjudged", record.summary
    (only,) = record.summary["steps"]
    assert only["status"] == "unjudged", only
    judged = run_suite(suite([own], [2]), store, pool=warm_pool)
    assert judged.status == "pass", judged.summary
    mine = [
        r for r in rows(store, judged.run_id) if r["metric"] in ("gemm_tflops", "memory_bw_gbps")
    ]
    assert len(mine) == 4 and {r["status"] for r in mine} == {"pass"}
    assert all('"peak": 1e-06' in r["details"] for r in mine)
    got = rows(store, record.run_id)
    gemm = by_metric(got, "gemm_tflops")
    assert [(r["rank"], r["dtype"]) for r in gemm] == [
        (0, "float32"), (0, "bfloat16"), (1, "float32"), (1, "bfloat16")
    ]  # fmt: skip
    copies = by_metric(got, "memory_bw_gbps")
    for r in gemm + copies:
        assert r["status"] == "info" and r["value"] > 0 and len(r["samples_us"]) == 3
        assert '"expectation": null' in r["details"]
        assert "no expectation for 'cpu'" in r["message"] and "expectations:" in r["message"]
    assert copies[0]["size_bytes"] == 1024**2
    links = [r for r in got if r["metric"] in ("h2d_gbps", "d2h_gbps")]
    assert len(links) == 4 and all(r["status"] == "skip" and "GPU" in r["message"] for r in links)


def test_shipped_suites_parse_with_the_new_checks():
    assert [s.check for s in load_suite("scaling").steps] == ["bandwidth", "ddp_scaling"]
    assert load_suite("scaling").placement.world_sizes == [1, 2, 4]
    assert {s.check for s in load_suite("health").steps} == {"health", "microbench"}
