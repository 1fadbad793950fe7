"""compare_runs on generated stores with planted changes: detection, false positives, matching."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from fleetval.analysis.baselines import Baselines, UnknownBaseline
from fleetval.analysis.compare import CompareError, compare_runs, fleet_outliers
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row
from fleetval.vocab import CULPRIT_METRIC, Verdict

SIZES = (1024, 16384, 262144, 4 << 20)  # two latency-bound, two bandwidth-bound
DROP_SIZE = 262144


class Fleet:
    """Writes runs shaped like the bandwidth check's rows: one row per rank per size."""

    def __init__(self, root: Path, seed: int = 0) -> None:
        self.store = Store(root)
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def run(
        self,
        *,
        slow: dict[int, float] | None = None,
        sizes: tuple[int, ...] = SIZES,
        noise: float | None = None,
        world: int = 4,
        iters: int = 20,
        nodes: tuple[str, ...] = ("node-0", "node-1"),
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        wrong: dict[tuple[int, int], int] | None = None,
        suite_json: str = "",
        extra_rows: list[Row] | None = None,
    ) -> str:
        """One run; `slow` multiplies the time of a size (1/0.95: 5% less busbw)."""
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=self.count)
        run_id = f"{started:%Y%m%d}-020000-{self.count:06x}"
        self.count += 1
        sigma = noise if noise is not None else self.rng.uniform(0.02, 0.03)
        rows = [
            row
            for size in sizes
            for row in self._rows(
                run_id, size, world, iters, nodes, sigma, (slow or {}).get(size, 1.0), wrong or {}
            )
        ]
        rows += [Row(**{**r.__dict__, "run_id": run_id}) for r in extra_rows or []]
        self.store.write_results(run_id, "bandwidth", rows)
        fingerprint = {"gpu_model": "MI300X", "rocm_version": "6.1.2", "driver_version": "6.7.0"}
        self.store.write_nodes(run_id, [{"node": n, **fingerprint, **(env or {})} for n in nodes])
        self.store.write_run(
            Run(
                run_id=run_id, suite="bandwidth", status="pass", started_at=started,
                finished_at=started, labels=labels or {}, suite_json=suite_json,
            )
        )  # fmt: skip
        return run_id

    def _rows(self, run_id, size, world, iters, nodes, sigma, slow, wrong) -> list[Row]:
        base = (10 + size / 1e4) * slow  # microseconds: latency floor + 10 GB/s
        shared = 1 + sigma * self.rng.standard_normal(iters)  # the collective's per-iteration noise
        out = []
        for rank in range(world):
            t = base * shared * (1 + 0.003 * self.rng.standard_normal(iters))
            med = float(np.median(t))
            algbw = size / med / 1e3
            bad = wrong.get((size, rank), 0)
            out.append(
                Row(
                    run_id=run_id, step="bandwidth", check="bandwidth", collective="all_reduce",
                    op="sum", dtype="float32", size_bytes=size, world_size=world, rank=rank,
                    node=nodes[rank * len(nodes) // world], iters=iters, time_us_median=med,
                    algbw_gbps=algbw, busbw_gbps=algbw * 2 * (world - 1) / world,
                    samples_us=tuple(t.tolist()), wrong=bad, status="fail" if bad else "pass",
                )
            )  # fmt: skip
        return out


def _baseline(fleet: Fleet, runs: int = 5, **kw) -> list[str]:
    ids = [fleet.run(**kw) for _ in range(runs)]
    Baselines(fleet.store).set("rocm6.1", run_ids=ids)
    return ids


def _by_size(comparison) -> dict[int, Verdict]:
    return {r.identity.size_bytes: r.verdict for r in comparison.results}


def test_planted_busbw_drop_is_a_regression_and_nothing_else(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=1)
    _baseline(fleet)
    cand = [fleet.run(slow={DROP_SIZE: 1 / 0.95}, env={"rocm_version": "6.2.0"}) for _ in range(5)]
    c = compare_runs(fleet.store, "rocm6.1", cand)
    verdicts = _by_size(c)
    assert verdicts.pop(DROP_SIZE) == Verdict.REGRESSION
    assert set(verdicts.values()) == {Verdict.UNCHANGED}
    reg = c.having(Verdict.REGRESSION, Verdict.FAILED)[0]
    assert reg.identity.metric == "busbw_gbps" and reg.identity.group == "MI300X"
    assert -6.5 < reg.change_pct < -3.5 and reg.ci_high_pct < 0 and reg.p_value < 0.01
    assert c.exit_code() == 1
    assert [(e.key, e.baseline, e.candidate) for e in c.env_diff] == [
        ("rocm_version", ("6.1.2",), ("6.2.0",))
    ]


def test_undeclared_metrics_get_a_direction_from_their_unit() -> None:
    """Runs stored before declarations: rates up, times down, anything else no direction."""
    from fleetval.metrics import Direction, infer

    assert infer("gemm_tflops", "TFLOP/s").direction == Direction.HIGHER
    assert infer("whatever", "ms").direction == Direction.LOWER
    assert infer("finding", None).direction == Direction.NONE


def test_latency_regression_on_small_messages(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=2)
    _baseline(fleet)
    c = compare_runs(fleet.store, "rocm6.1", [fleet.run(slow={1024: 1.2}) for _ in range(3)])
    reg = {r.identity.size_bytes: r for r in c.results}[1024]
    assert reg.identity.metric == "latency_us" and reg.verdict == Verdict.REGRESSION
    assert reg.change_pct > 15  # the time went up: worse for latency


def test_faster_is_an_improvement(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=3)
    _baseline(fleet)
    c = compare_runs(fleet.store, "rocm6.1", [fleet.run(slow={4 << 20: 0.8}) for _ in range(3)])
    assert _by_size(c)[4 << 20] == Verdict.IMPROVEMENT
    assert c.exit_code() == 0


def test_correctness_is_absolute(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=4)
    _baseline(fleet, wrong={(1024, 1): 3})  # a wrong baseline does not excuse the candidate
    cand = fleet.run(wrong={(16384, 2): 7})
    c = compare_runs(fleet.store, "rocm6.1", [cand])
    failed = [r for r in c.results if r.verdict == Verdict.FAILED]
    assert [(r.identity.size_bytes, r.wrong) for r in failed] == [(16384, 7)]
    assert "7 wrong elements" in failed[0].reason
    assert c.exit_code() == 1


def test_rows_on_one_side_are_missing_or_new(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=5)
    _baseline(fleet, sizes=(1024, 16384))
    c = compare_runs(fleet.store, "rocm6.1", [fleet.run(sizes=(16384, 4 << 20))])
    assert _by_size(c) == {1024: Verdict.MISSING, 16384: Verdict.UNCHANGED, 4 << 20: Verdict.NEW}
    assert c.exit_code() == 1  # missing fails the gate: a job that did not run is no pass
    assert c.gate_reasons() == ["1 missing"]


def test_a_late_rank_in_the_baseline_is_no_missing_measurement(tmp_path: Path) -> None:
    """A culprit's row (who was late) is not a measurement: a candidate without a late rank
    lacks nothing (it failed the gate in CI when the baseline run had been late)."""
    fleet = Fleet(tmp_path, seed=12)
    late = Row(step="bandwidth", check="bandwidth", world_size=4, rank=2, node="node-1",
               metric=CULPRIT_METRIC, status="warn", message="late: 40 ms behind")  # fmt: skip
    _baseline(fleet, sizes=(16384,), extra_rows=[late])
    c = compare_runs(fleet.store, "rocm6.1", [fleet.run(sizes=(16384,))])
    assert [r.verdict for r in c.results] == [Verdict.UNCHANGED] and c.exit_code() == 0


def test_per_node_matching_and_nothing_in_common_is_explained(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=6)
    _baseline(fleet)
    same = compare_runs(fleet.store, "rocm6.1", [fleet.run()], per="node")
    assert {r.identity.group for r in same.results} == {"node-0", "node-1"}
    other = fleet.run(nodes=("node-7", "node-8"))
    assert {r.identity.group for r in compare_runs(fleet.store, "rocm6.1", [other]).results} == {
        "MI300X"
    }
    with pytest.raises(
        CompareError, match="group: baseline node-0, node-1; candidate node-7, node-8"
    ):
        compare_runs(fleet.store, "rocm6.1", [other], per="node")


def test_threshold_from_the_suite_and_the_command_line(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=7)
    _baseline(fleet)
    suite = json.dumps(
        {"name": "bw", "compare": {"threshold_pct": 5, "metrics": {"busbw_gbps": 15}}}
    )
    cand = [fleet.run(slow={DROP_SIZE: 1 / 0.9}, suite_json=suite) for _ in range(3)]
    assert _by_size(compare_runs(fleet.store, "rocm6.1", cand))[DROP_SIZE] == Verdict.UNCHANGED
    loose = compare_runs(fleet.store, "rocm6.1", cand, threshold_pct=5)
    assert _by_size(loose)[DROP_SIZE] == Verdict.REGRESSION
    assert loose.settings.threshold_pct == 5


def test_noisy_evidence_is_not_a_verdict(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=8)
    _baseline(fleet, runs=1, iters=3, noise=0.3)
    c = compare_runs(fleet.store, "rocm6.1", [fleet.run(iters=3, noise=0.3, slow={DROP_SIZE: 1.1})])
    assert Verdict.REGRESSION not in _by_size(c).values()
    assert Verdict.NOISY in _by_size(c).values()


def test_value_metrics_use_their_direction(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=9)

    def gemm(tflops: float) -> list[Row]:
        rng = fleet.rng
        return [
            Row(check="microbench", metric="gemm_tflops", unit="TFLOP/s", dtype="bfloat16", world_size=4,
                rank=r, node=f"node-{r // 2}", value=tflops * (1 + 0.01 * rng.standard_normal()))
            for r in range(4)
        ]  # fmt: skip

    ids = [fleet.run(sizes=(), extra_rows=gemm(700.0)) for _ in range(5)]
    Baselines(fleet.store).set("rocm6.1", run_ids=ids)
    cand = [fleet.run(sizes=(), extra_rows=gemm(600.0)) for _ in range(5)]
    (r,) = compare_runs(fleet.store, "rocm6.1", cand).results
    assert r.identity.metric == "gemm_tflops" and r.verdict == Verdict.REGRESSION
    assert r.n_baseline == 5 and r.change_pct == pytest.approx(-14.3, abs=2)


def test_fleet_outlier_without_baseline(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=10)
    nodes = tuple(f"node-{i}" for i in range(8))
    rows = [
        Row(check="microbench", metric="gemm_tflops", unit="TFLOP/s", dtype="bfloat16", world_size=1,
            rank=0, node=n, device_id=f"GPU-{n}", value=(560.0 if n == "node-5" else 700.0) * (1 + 0.01 * i))
        for i, n in enumerate(nodes)
    ]  # fmt: skip
    run_id = fleet.run(sizes=(), nodes=nodes, world=8, extra_rows=rows)
    (o,) = fleet_outliers(fleet.store, run_id)
    assert o.unit == "node-5/GPU-node-5" and o.deviation_pct < -15 and o.peers == 8


def test_baseline_side_excludes_the_candidate(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=11)
    ids = [fleet.run() for _ in range(3)]
    Baselines(fleet.store).set("all", where={"rocm_version": "6.1.*"})
    c = compare_runs(fleet.store, "all", [ids[-1]])
    assert c.baseline_runs == tuple(ids[:-1]) and c.notes
    with pytest.raises(CompareError, match="only to the candidate"):
        Baselines(fleet.store).set("one", run_ids=[ids[0]])
        compare_runs(fleet.store, "one", [ids[0]])


def test_unknown_baseline_lists_the_known_ones(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path)
    _baseline(fleet, runs=1)
    with pytest.raises(UnknownBaseline, match=r"known: rocm6\.1"):
        compare_runs(fleet.store, "rocm6.2", [fleet.run()])


def test_same_data_same_verdict(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, seed=12)
    _baseline(fleet)
    cand = [fleet.run()]
    a, b = (compare_runs(fleet.store, "rocm6.1", cand) for _ in range(2))
    assert a == b
