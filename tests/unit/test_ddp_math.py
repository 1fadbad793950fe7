"""Pure functions of the DDP and micro-benchmark checks: efficiency, hash majority, tolerances."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
import torch
from pydantic import ValidationError

from fleetval.checks.ddp import ScalingPoint, scaling_efficiency
from fleetval.checks.ddp.rank import (
    GRAD_RTOL,
    DdpHealthParams,
    DdpScalingParams,
    Parity,
    build_mlp,
    comm_share,
    grad_parity,
    hash_finding,
    loss_verdict,
    majority_hash,
    param_hash,
)
from fleetval.checks.microbench.rank import (
    MicrobenchParams,
    expectation,
    expectations_for,
    gbps,
    gemm_tflops,
    judge,
)
from fleetval.store.schema import Row, rows_to_table
from fleetval.vocab import DType, Status


def throughput_rows(per_world: dict[int, list[float]], **extra: object) -> list[Row]:
    return [
        Row(run_id="r1", step="scale", check="ddp_scaling", world_size=n, rank=k,
            metric="throughput", value=v, unit="samples/s", **extra)
        for n, values in per_world.items()
        for k, v in enumerate(values)
    ]  # fmt: skip


# -- scaling efficiency ---------------------------------------------------------------------


def test_efficiency_is_job_throughput_over_n_times_single_rank():
    rows = throughput_rows({1: [100.0], 2: [90.0, 90.0], 4: [80.0, 80.0, 80.0, 80.0]})
    points = scaling_efficiency(rows)
    assert [p.world_size for p in points] == [1, 2, 4]
    assert [p.throughput for p in points] == pytest.approx([100.0, 180.0, 320.0])
    assert [p.efficiency for p in points] == pytest.approx([1.0, 0.9, 0.8])
    assert [p.ranks_reporting for p in points] == [1, 2, 4]


def test_efficiency_accepts_stored_records_and_arrow_tables():
    rows = throughput_rows({1: [50.0], 2: [50.0, 40.0]})
    table = rows_to_table(rows)
    assert isinstance(table, pa.Table)
    expected = [ScalingPoint(1, 50.0, 1.0, 1), ScalingPoint(2, 90.0, 0.9, 2)]
    assert scaling_efficiency(table) == pytest.approx(expected)
    assert scaling_efficiency(table.to_pylist()) == scaling_efficiency(table)


def test_efficiency_is_none_without_a_world_size_one_job():
    points = scaling_efficiency(throughput_rows({2: [10.0, 10.0], 4: [9.0] * 4}))
    assert [p.efficiency for p in points] == [None, None]
    assert points[1].throughput == pytest.approx(36.0)


def test_a_missing_rank_row_does_not_shrink_the_job_throughput():
    rows = throughput_rows({1: [10.0], 4: [9.0, 9.0, 9.0]})  # one rank's row lost
    four = scaling_efficiency(rows)[1]
    assert four.throughput == pytest.approx(36.0) and four.ranks_reporting == 3


def test_efficiency_ignores_other_rows_and_failed_ones():
    rows = throughput_rows({1: [10.0], 2: [10.0, 10.0]})
    rows += throughput_rows({2: [1.0, 1.0]}, status="fail")
    rows += [Row(run_id="r1", check="ddp_scaling", world_size=2, metric="comm_share", value=0.3)]
    rows += [Row(run_id="r1", check="bandwidth", world_size=2, busbw_gbps=5.0)]
    assert [p.efficiency for p in scaling_efficiency(rows)] == pytest.approx([1.0, 1.0])


def test_efficiency_refuses_mixed_runs_and_asks_for_a_step():
    other_run = Row(run_id="r2", check="ddp_scaling", metric="throughput", value=1.0)
    mixed = [*throughput_rows({1: [1.0]}), other_run]
    with pytest.raises(ValueError, match="from 2 runs"):
        scaling_efficiency(mixed)
    other_step = Row(run_id="r1", step="other", check="ddp_scaling", metric="throughput", value=2.0)
    two_steps = [*throughput_rows({1: [1.0]}), other_step]
    with pytest.raises(ValueError, match="several ddp_scaling steps"):
        scaling_efficiency(two_steps)
    assert scaling_efficiency(two_steps, step="other")[0].throughput == 2.0


def test_comm_share_is_clamped():
    assert comm_share(10.0, 7.0) == pytest.approx(0.3)
    assert comm_share(10.0, 12.0) == 0.0  # compute-only measured slower: noise, not negative comm
    assert comm_share(0.0, 1.0) == 0.0


# -- parameter hashes ------------------------------------------------------------------------


def test_param_hash_sees_one_ulp_and_dtype():
    a = build_mlp(8, 2, seed=3)
    b = build_mlp(8, 2, seed=3)
    assert param_hash(a.parameters()) == param_hash(b.parameters())
    with torch.no_grad():
        w = next(b.parameters())
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(math.inf))
    assert param_hash(a.parameters()) != param_hash(b.parameters())
    x = torch.zeros(4)
    assert param_hash([x]) != param_hash([x.double()])
    assert param_hash([torch.ones(2, dtype=torch.bfloat16)])  # 2-byte types hash too


def test_majority_names_the_odd_rank_out():
    assert majority_hash(["a", "a", "a", "a"]) == ("a", [])
    assert majority_hash(["a", "b", "a", "a"]) == ("a", [1])
    assert majority_hash(["b", "a", "a", "c"]) == ("a", [0, 3])


def test_majority_tie_goes_to_rank_zero():
    assert majority_hash(["a", "b"]) == ("a", [1])
    assert majority_hash(["a", "b", "b", "a"]) == ("a", [1, 2])
    # rank 0 alone, two groups of two tied: the lowest rank's tied hash wins
    assert majority_hash(["x", "b", "b", "c", "c"]) == ("b", [0, 3, 4])
    with pytest.raises(ValueError):
        majority_hash([])


def test_hash_finding_fails_every_rank_and_names_the_culprit():
    hashes = ["h", "bad", "h"]
    on_culprit = hash_finding(hashes, 1)
    on_peer = hash_finding(hashes, 0)
    for f in (on_culprit, on_peer):
        assert f.status == Status.FAIL.value
        assert "rank 1 " in f.reason and f.details["disagreeing_ranks"] == [1]
    assert on_culprit.value == 0.0 and "this rank is off" in on_culprit.reason
    assert on_peer.value == 1.0
    clean = hash_finding(["h", "h"], 1)
    assert clean.status == Status.PASS.value and clean.value == 1.0


# -- gradient parity and loss ----------------------------------------------------------------


def test_parity_tolerance_is_relative_to_the_largest_gradient():
    want = [torch.tensor([1.0, -2.0]), torch.tensor([0.5])]
    close = [torch.tensor([1.0, -2.0001]), torch.tensor([0.5])]
    p = grad_parity(close, want, rtol=1e-4)
    assert p.scale == 2.0 and p.tolerance == pytest.approx(2e-4)
    assert p.max_abs_err == pytest.approx(1e-4, rel=1e-2) and p.ok  # float32 rounding
    assert not grad_parity(close, want, rtol=1e-5).ok


def test_parity_fails_on_nan_and_on_missing_gradients():
    want = [torch.tensor([1.0])]
    assert not grad_parity([torch.tensor([math.nan])], want, 1e-4).ok
    assert not grad_parity([None], want, 1e-4).ok  # a parameter DDP never reduced: zero grad
    with pytest.raises(ValueError, match="1 gradients to compare with 2"):
        grad_parity([torch.tensor([1.0])], [*want, *want], 1e-4)


def test_worst_parity_compares_relative_to_tolerance():
    small_scale = Parity(max_abs_err=1e-5, scale=0.01, rtol=1e-4)  # 10x over
    big_scale = Parity(max_abs_err=1e-3, scale=100.0, rtol=1e-4)  # within
    assert small_scale.worst(big_scale) is small_scale
    assert big_scale.worst(small_scale) is small_scale
    assert Parity(0.0, 0.0, 1e-4).ok  # all-zero gradients compare equal


def test_dtype_tolerances_loosen_with_precision():
    order = [DType.FLOAT64, DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16]
    rtols = [GRAD_RTOL[d] for d in order]
    assert rtols == sorted(rtols)
    # a float32 gradient rounding error passes, a real difference does not
    want = [torch.randn(64, generator=torch.Generator().manual_seed(0))]
    rounded = [want[0].half().float()]
    assert not grad_parity(rounded, want, GRAD_RTOL[DType.FLOAT32]).ok
    assert grad_parity(rounded, want, GRAD_RTOL[DType.FLOAT16]).ok


def test_loss_verdict():
    assert loss_verdict([1.0, 0.9, 0.95, 0.8]) == (True, True)
    assert loss_verdict([1.0, 1.1]) == (True, False)
    assert loss_verdict([1.0, math.nan, 0.5]) == (False, False)
    assert loss_verdict([1.0]) == (True, False)  # one step proves nothing about decreasing


# -- params ------------------------------------------------------------------------------------


def test_params_validate_dtype_and_micro_batches():
    assert DdpScalingParams(check="ddp_scaling", dtype="bfloat16").dtype == DType.BFLOAT16
    with pytest.raises(ValidationError, match="floating-point"):
        DdpScalingParams(check="ddp_scaling", dtype="int32")
    with pytest.raises(ValidationError, match="split evenly"):
        DdpHealthParams(check="ddp_health", batch_per_rank=8, no_sync_accumulation=3)
    with pytest.raises(ValidationError, match="at least 2 samples per micro-batch"):
        DdpHealthParams(
            check="ddp_health", batch_per_rank=4, no_sync_accumulation=4, sync_batchnorm=True
        )
    with pytest.raises(ValidationError, match="Extra inputs"):
        DdpHealthParams(check="ddp_health", hiden=3)


# -- micro-benchmark judging -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("AMD Instinct MI250X", "MI250X (one GCD)"),
        ("AMD Instinct MI250X/MI250", "MI250X (one GCD)"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_gpu_names_map_to_their_spec(name, model):
    spec = expectations_for(name)
    assert spec is not None and spec.model == model
    assert set(spec.tflops) == {"bfloat16", "float16", "float32"}


def test_unknown_gpu_has_no_expectations():
    assert expectations_for("NVIDIA GeForce RTX 4090") is None


def test_judge_bands():
    assert judge(700.0, 989.0, 0.6, 0.5) == Status.PASS
    assert judge(400.0, 989.0, 0.6, 0.5) == Status.WARN  # under 593, over 297
    assert judge(200.0, 989.0, 0.6, 0.5) == Status.FAIL
    assert judge(0.001, None, 0.6, 0.5) == Status.INFO  # nothing to judge against: recorded only
    assert expectation(None, 0.6, 0.5) is None
    assert expectation(100.0, 0.6, 0.5) == pytest.approx(
        {"peak": 100.0, "pass_at": 60.0, "fail_below": 30.0}
    )


def test_rates():
    assert gemm_tflops(8192, 1e6) == pytest.approx(2 * 8192**3 / 1e12)
    assert gbps(2e9, 1e6) == pytest.approx(2.0)


def test_microbench_params_refuse_non_gemm_dtypes():
    assert MicrobenchParams(check="microbench").pass_fraction == 0.6
    with pytest.raises(ValidationError, match="GEMM runs"):
        MicrobenchParams(check="microbench", dtypes=["int32"])
