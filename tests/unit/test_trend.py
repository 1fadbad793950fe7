"""Change points over a nightly history: a planted step is located within one night."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from fleetval.analysis.trend import change_points, find_trends
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row

STEP_AT = 37


def _nightly(
    store: Store,
    nights: int,
    rng: np.random.Generator,
    step: float,
    *,
    recover_at: int | None = None,
    suite_json: str = "",
) -> list[str]:
    """60 nights of a 4-rank all_reduce at 16 MiB; from night STEP_AT on, `step` x the time
    (until `recover_at`); RCCL 2.21 from STEP_AT on."""
    ids = []
    for night in range(nights):
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=night)
        run_id = f"{started:%Y%m%d}-020000-{night:06x}"
        stepped = night >= STEP_AT and (recover_at is None or night < recover_at)
        slow = step if stepped else 1.0
        rccl = "2.21" if night >= STEP_AT else "2.20"
        base = (10 + (16 << 20) / 1e4) * slow * (1 + 0.01 * rng.standard_normal())  # night-to-night
        shared = 1 + 0.025 * rng.standard_normal(20)
        rows = []
        for rank in range(4):
            t = base * shared * (1 + 0.003 * rng.standard_normal(20))
            med = float(np.median(t))
            rows.append(
                Row(run_id=run_id, check="bandwidth", collective="all_reduce", op="sum", dtype="float32",
                    size_bytes=16 << 20, world_size=4, rank=rank, node=f"node-{rank // 2}",
                    time_us_median=med, busbw_gbps=(16 << 20) / med / 1e3 * 1.5, samples_us=tuple(t))
            )  # fmt: skip
        store.write_results(run_id, "bandwidth", rows)
        nodes = [
            {"node": f"node-{n}", "gpu_model": "MI300X", "rccl_version": rccl} for n in range(2)
        ]
        store.write_nodes(run_id, nodes)
        store.write_run(
            Run(
                run_id=run_id,
                suite="nightly",
                status="pass",
                started_at=started,
                labels={"kind": "nightly"},
                suite_json=suite_json,
            )
        )
        ids.append(run_id)
    return ids


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_step_in_60_nights_is_named_within_one_night(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # durability is not under test
    store = Store(tmp_path)
    ids = _nightly(store, 60, np.random.default_rng(seed), step=1 / 0.93)  # 7% less busbw
    report = find_trends(store, where={"kind": "nightly"})
    assert report.series == 1 and report.worst_exit_code == 1
    (trend,) = report.trends
    (point,) = trend.change_points
    assert abs(ids.index(point.run_id) - STEP_AT) <= 1
    assert point.worse and point.change_pct == pytest.approx(-7, abs=2)
    assert trend.identity.metric == "busbw_gbps"


def test_flat_history_has_no_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    store = Store(tmp_path)
    _nightly(store, 60, np.random.default_rng(7), step=1.0)
    report = find_trends(store, where={"kind": "nightly"}, select={"collective": "all_reduce"})
    assert report.series == 1 and report.trends == () and report.worst_exit_code == 0


def test_change_points_on_pure_noise_and_on_a_step() -> None:
    rng = np.random.default_rng(0)
    false_steps = sum(bool(change_points(100 + rng.standard_normal(60))) for _ in range(100))
    assert false_steps <= 5
    x = np.r_[100 + rng.standard_normal(30), 90 + rng.standard_normal(30)]
    assert change_points(x) == [30]


def test_a_step_that_recovered_names_the_version_and_does_not_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    store = Store(tmp_path)
    ids = _nightly(store, 60, np.random.default_rng(3), step=1 / 0.9, recover_at=50)
    report = find_trends(store, where={"kind": "nightly"})
    (trend,) = report.trends
    worse, back = trend.change_points
    assert worse.worse and worse.recovered_at == back.run_id and back.worse is False
    assert abs(ids.index(back.run_id) - 50) <= 1 and report.worst_exit_code == 0
    (env,) = worse.env_changes
    assert (env.key, env.baseline, env.candidate) == ("rccl_version", ("2.20",), ("2.21",))


def test_the_suites_threshold_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 7% step under a suite threshold of 10% is jitter; --threshold still overrides."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    store = Store(tmp_path)
    suite = '{"name": "nightly", "compare": {"threshold_pct": 10}}'
    _nightly(store, 60, np.random.default_rng(0), step=1 / 0.93, suite_json=suite)
    assert find_trends(store, where={"kind": "nightly"}).trends == ()
    assert find_trends(store, where={"kind": "nightly"}, threshold_pct=5).worst_exit_code == 1


def test_the_linear_kernel_finds_pelts_l2_breaks() -> None:
    """`change_points` segments with ruptures' C kernel on a linear kernel: it finds the
    breaks ruptures' Python PELT on the L2 cost finds, on noise, one step and two steps, at
    every minimum segment length."""
    import ruptures as rpt

    rng = np.random.default_rng(7)
    for i in range(24):
        n, min_size, pen = int(rng.integers(8, 50)), 1 + i % 4, 3 * np.log(50)
        z = rng.normal(size=(n, 1))
        z[n // 2 :] += (i % 3) * 2.0
        z[n // 4 :] -= (i % 2) * 3.0
        pelt = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(z).predict(pen=pen)
        kernel = rpt.KernelCPD(kernel="linear", min_size=min_size).fit(z).predict(pen=pen)
        assert kernel == pelt, (i, n, min_size)
