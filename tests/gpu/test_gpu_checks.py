"""GPU paths of microbench and the DDP checks: CUDA events, pinned copies, nccl (run with -m gpu).

Most tests run the checks in this process on cuda:0, exactly as a rank actor calls them
(a CheckContext on a formed process group); the last goes through Ray end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import torch

from fleetval.checks.base import CheckContext
from fleetval.checks.ddp import scaling_efficiency
from fleetval.checks.ddp.rank import (
    DdpHealthParams,
    DdpScalingParams,
    run_ddp_health,
    run_ddp_scaling,
)
from fleetval.checks.microbench.rank import MicrobenchParams, expectations_for, run_microbench
from fleetval.store.schema import Row
from tests.helpers.lone_rank import lone_rank, one_rank_group

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU"),
]


@pytest.fixture(scope="module")
def nccl_ctx() -> Iterator[CheckContext]:
    """A one-rank nccl process group on cuda:0 and the context a rank actor would build."""
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    rank = lone_rank("nccl", "cuda:0", run_id="gpu", node="local")
    with one_rank_group(rank, "gpu", timeout=timedelta(seconds=60), device_id=device) as ctx:
        yield ctx


def by_metric(rows: list[Row]) -> dict[tuple[str | None, str | None, int | None], Row]:
    return {(r.metric, r.dtype, r.size_bytes): r for r in rows}


def test_microbench_reaches_the_gpu_models_expectations(nccl_ctx):
    spec = expectations_for(torch.cuda.get_device_name(0))
    params = MicrobenchParams(check="microbench", gemm_sizes=[8192], iters=10)
    rows = run_microbench(nccl_ctx, params)
    metrics = {r.metric for r in rows}
    assert metrics == {"gemm_tflops", "memory_bw_gbps", "h2d_gbps", "d2h_gbps"}
    assert all(r.value and r.value > 0 and len(r.samples_us) == 10 for r in rows)
    if spec is None:
        pytest.skip(f"no expectations for {torch.cuda.get_device_name(0)!r}; rows recorded only")
    # The host link depends on the slot and platform (a PCIe 4.0 host halves it): not FAIL
    # is enough there; the GPU's own GEMM and memory must pass.
    own = [r for r in rows if r.metric in ("gemm_tflops", "memory_bw_gbps")]
    failing = [(r.metric, r.dtype, r.value, r.message) for r in own if r.status != "pass"]
    assert not failing, failing
    links = [(r.metric, r.value, r.message) for r in rows if r.metric in ("h2d_gbps", "d2h_gbps")]
    assert all(r.status != "fail" for r in rows), links
    bf16 = next(r for r in rows if r.metric == "gemm_tflops" and r.dtype == "bfloat16")
    assert bf16.details["expectation"]["peak"] == spec.tflops["bfloat16"]
    assert bf16.details["gpu_model"] == spec.model


def test_microbench_judges_an_impossible_expectation_as_fail(nccl_ctx):
    """pass_fraction 1.0 of the peak for a tiny GEMM: no GPU reaches it, so it cannot pass."""
    if expectations_for(torch.cuda.get_device_name(0)) is None:
        pytest.skip("no expectations for this GPU model")
    params = MicrobenchParams(check="microbench", gemm_sizes=[256], dtypes=["bfloat16"],
                              copy_bytes="1MiB", host_bytes="1MiB", pass_fraction=1.0,
                              bandwidth_pass_fraction=1.0, iters=3)  # fmt: skip
    rows = run_microbench(nccl_ctx, params)
    gemm = next(r for r in rows if r.metric == "gemm_tflops")
    assert gemm.status in ("warn", "fail") and "vs peak" in gemm.message


def test_ddp_scaling_on_nccl_one_rank(nccl_ctx):
    params = DdpScalingParams(check="ddp_scaling", hidden=1024, layers=4, batch_per_rank=64,
                              steps=5, warmup=2)  # fmt: skip
    rows = run_ddp_scaling(nccl_ctx, params)
    metrics = {r.metric for r in rows}
    assert {"step_time_ms", "compute_time_ms", "throughput", "comm_share"} <= metrics
    assert all(r.backend == "nccl" and r.device == "cuda:0" for r in rows)
    step = next(r for r in rows if r.metric == "step_time_ms")
    assert len(step.samples_us) == 5 and step.value > 0
    allreduce = next(r for r in rows if r.collective == "all_reduce")
    assert allreduce.size_bytes == 4 * (1024 * 1024 + 1024) * 4 and allreduce.algbw_gbps > 0
    assert scaling_efficiency(rows)[0].efficiency == pytest.approx(1.0)


@pytest.mark.parametrize(
    "variant",
    [{}, {"no_sync_accumulation": 4}, {"sync_batchnorm": True}],
    ids=["plain", "accumulation", "sync_batchnorm"],
)
def test_ddp_health_on_nccl_one_rank(nccl_ctx, variant: dict[str, Any]):
    params = DdpHealthParams(check="ddp_health", batch_per_rank=16, **variant)
    rows = run_ddp_health(nccl_ctx, params)
    assert {r.metric for r in rows} == {
        "param_hash_agree", "grad_parity_max_abs_err", "loss_finite", "loss_decreasing"
    }  # fmt: skip
    assert all(r.status == "pass" for r in rows), [(r.metric, r.message) for r in rows]


def test_run_suite_end_to_end_on_the_gpu(tmp_path):
    """Embedded Ray with the host's real GPUs: one nccl rank per GPU, world size 1."""
    import ray

    from fleetval.run.execute import run_suite
    from fleetval.store.dataset import Store
    from fleetval.suite import parse_suite

    if ray.is_initialized():
        pytest.skip("Ray is already connected (simulated cluster); run with -m gpu alone")
    spec = parse_suite({
        "name": "gpu", "backend": "nccl",
        "placement": {"world_sizes": [1], "gpus_per_rank": 1},
        "steps": [
            {"check": "microbench", "gemm_sizes": [4096], "copy_bytes": "256MiB", "iters": 5},
            {"check": "ddp_health", "steps": 3},
        ],
    })  # fmt: skip
    store = Store(tmp_path)
    try:
        record = run_suite(spec, store)
    finally:
        ray.shutdown()
    assert record.backend == "nccl"
    statuses = {s["step"]: s["status"] for s in record.summary["steps"]}
    assert statuses["ddp_health"] == "pass", record.summary
    assert statuses["microbench"] in ("pass", "warn"), record.summary
    got = store.results([record.run_id]).to_pylist()
    assert {r["device"] for r in got} == {"cuda:0"}
