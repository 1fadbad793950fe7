"""The gate on stores with a hierarchical noise model: runs are the unit of evidence.

Rates over hundreds of trials are in bench/bench_gate.py (figures in bench/RESULTS.md);
here a few seeded trials each, so the suite stays fast.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fleetval.analysis import statistics as st
from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import compare_runs, fleet_outliers
from fleetval.metrics import Direction, MetricDecl
from fleetval.store.dataset import Store
from fleetval.store.schema import Row
from fleetval.vocab import Verdict
from tests.storegen import FleetModel, GenStore

BUSBW_IDENT = 20  # all_reduce float32 64 MiB: judged on busbw


def _gen(tmp_path: Path, seed: int, **model) -> GenStore:
    return GenStore(tmp_path / f"s{seed}", FleetModel(**model), seed)


def test_verdict_rule_is_monotone_in_the_size_of_the_change() -> None:
    """With the spread fixed, a growing drop moves unchanged -> noisy -> regression, never back."""
    se = 0.02
    drops = np.linspace(0, 0.3, 301)
    z = np.log1p(-drops) / se
    from scipy import special

    p = 2 * special.stdtr(8, -np.abs(z))
    q = st.bh_adjust(np.r_[p, np.full(199, 0.5)])[: len(p)]  # among 200 identities
    v = st.verdicts(-drops * 100, q, np.full(len(drops), 5.0), 0.01)
    order = {Verdict.UNCHANGED.value: 0, Verdict.NOISY.value: 1, Verdict.REGRESSION.value: 2}
    ranks = [order[x] for x in v]
    assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[-1] == 2
    assert set(v[drops < 0.05]) == {Verdict.UNCHANGED.value}  # below the threshold: never


def test_a_change_below_the_threshold_is_never_a_regression_however_significant() -> None:
    v = st.verdicts(
        np.array([-2.6, -9.0, -9.0]), np.array([1e-9, 1e-9, 0.2]), np.full(3, 5.0), 0.01
    )
    assert list(v) == ["unchanged", "regression", "noisy"]


def test_bh_matches_scipy() -> None:
    from scipy.stats import false_discovery_control

    p = np.random.default_rng(0).random(300) ** 3
    p[[3, 77]] = np.nan
    q = st.bh_adjust(p)
    ok = np.isfinite(p)
    assert np.allclose(q[ok], false_discovery_control(p[ok])) and np.isnan(q[~ok]).all()


def _null_family(rng: np.random.Generator, sd: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """moments() of log run values: 5 baseline and k candidate runs per identity, no change."""
    x0 = rng.standard_normal((len(sd), 5)) * sd[:, None]
    x1 = rng.standard_normal((len(sd), k)) * sd[:, None]
    n = np.c_[np.full(len(sd), 5.0), np.full(len(sd), float(k))]
    mean = np.c_[x0.mean(1), x1.mean(1)]
    ss = np.c_[((x0 - mean[:, :1]) ** 2).sum(1), ((x1 - mean[:, 1:]) ** 2).sum(1)]
    return n, mean, ss


def test_prior_finds_the_one_spread_a_family_shares() -> None:
    rng = np.random.default_rng(0)
    s2 = 0.02**2 * rng.chisquare(4, 500) / 4
    prior = st.VariancePrior.fit(s2, np.full(500, 4.0))
    assert prior is not None
    mean_var = float((prior.weights * prior.grid).sum())
    assert mean_var == pytest.approx(0.02**2, rel=0.15)
    assert prior.weights[np.abs(np.log(prior.grid / 0.02**2)) < 0.5].sum() > 0.8


def test_prior_bounds_a_noisy_variance_by_what_the_family_shows() -> None:
    """Spreads 1..4%: an identity whose 4-df estimate says 7% is judged near 4%, not 7%."""
    rng = np.random.default_rng(1)
    sd = rng.uniform(0.01, 0.04, 500)
    s2 = sd**2 * rng.chisquare(4, 500) / 4
    prior = st.VariancePrior.fit(s2, np.full(500, 4.0))
    assert prior is not None
    post = prior.posterior(np.array([0.07**2]), np.array([4.0]))
    assert 0.03 < np.sqrt((post * prior.grid).sum()) < 0.05


@pytest.mark.parametrize("spread", ["alike", "unlike"])
@pytest.mark.parametrize("k", [1, 5])
def test_p_values_are_uniform_on_clean_data(spread: str, k: int) -> None:
    """The gate's false alarms rest on this: P(p <= a) ~ a on clean data, tail included;
    and the 95% interval covers no change 95% of the time."""
    rng = np.random.default_rng(k)
    ps, covered = [], []
    for _ in range(60):
        sd = np.full(300, 0.02) if spread == "alike" else rng.uniform(0.01, 0.04, 300)
        n, mean, ss = _null_family(rng, sd, k)
        t = st.tests(n, mean, ss, np.zeros(300, int), 0.95)
        ps.append(t.p)
        covered.append((t.lo <= 0) & (t.hi >= 0))
    p = np.concatenate(ps)
    for a in (0.1, 0.01, 0.001):
        assert np.mean(p <= a) == pytest.approx(a, rel=0.35)
    assert np.mean(np.concatenate(covered)) == pytest.approx(0.95, abs=0.01)


def test_ndtr_matches_scipy_in_both_tails() -> None:
    from scipy import special

    x = np.linspace(-37, 8, 100_001)
    assert np.abs(st.ndtr(x) / special.ndtr(x) - 1).max() < 2e-7


def test_students_t_matches_scipy() -> None:
    from scipy import special

    t = np.tile(np.r_[np.linspace(0, 12, 300), 1e3], 60)
    df = np.repeat(np.arange(1, 61), 301)
    assert np.abs(st.t_within(t, df) - (1 - 2 * special.stdtr(df, -t))).max() < 1e-12


def test_a_small_family_falls_back_to_students_t() -> None:
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(2)
    x0, x1 = rng.normal(0, 0.02, (3, 5)), rng.normal(0.03, 0.02, (3, 5))
    n = np.full((3, 2), 5.0)
    mean = np.c_[x0.mean(1), x1.mean(1)]
    ss = np.c_[((x0 - mean[:, :1]) ** 2).sum(1), ((x1 - mean[:, 1:]) ** 2).sum(1)]
    t = st.tests(n, mean, ss, np.zeros(3, int), 0.95)
    ref = ttest_ind(x1, x0, axis=1)
    assert np.allclose(t.p, ref.pvalue)
    ci = ref.confidence_interval(0.95)
    assert np.allclose(t.lo, ci.low) and np.allclose(t.hi, ci.high)


@pytest.mark.parametrize("cands", [1, 5])
def test_clean_candidates_pass_at_a_2pct_run_to_run_spread(tmp_path: Path, cands: int) -> None:
    failed = 0
    for seed in range(4):
        g = _gen(tmp_path, seed)
        g.baseline(5)
        c = compare_runs(g.store, "base", [g.run() for _ in range(cands)], threshold_pct=2)
        failed += c.exit_code()
        assert len(c.results) == 200 and c.notes == (
            ("one candidate run: judged by a prediction interval from the 5 baseline runs' spread",)
            if cands == 1
            else ()
        )
        shutil.rmtree(g.store.root)
    assert failed == 0


def test_a_30pct_drop_is_found_with_one_candidate_run(tmp_path: Path) -> None:
    for seed in range(3):
        g = _gen(tmp_path, seed)
        g.baseline(5)
        c = compare_runs(g.store, "base", [g.run(drop={BUSBW_IDENT: 0.30})], threshold_pct=2)
        (reg,) = [r for r in c.results if r.verdict == Verdict.REGRESSION]
        assert (
            reg.identity.label() == "bandwidth all_reduce sum float32 64MiB n=8 MI300X busbw_gbps"
        )
        assert -35 < reg.change_pct < -25 and reg.ci_high_pct < 0 and reg.n_candidate == 1
        assert "prediction interval for one run" in reg.reason and c.exit_code() == 1


def test_one_run_per_side_is_at_most_noisy(tmp_path: Path) -> None:
    g = _gen(tmp_path, 0)
    g.baseline(1)
    c = compare_runs(g.store, "base", [g.run(drop={BUSBW_IDENT: 0.3})])
    verdicts = {r.verdict for r in c.results}
    assert Verdict.REGRESSION not in verdicts and Verdict.NOISY in verdicts
    assert c.exit_code() == 0 and c.exit_code(strict=True) == 1
    assert "one run per side" in c.notes[0]


def test_a_failed_candidate_run_cannot_pass(tmp_path: Path) -> None:
    g = _gen(tmp_path, 0, sizes=(1 << 20, 1 << 24))
    g.baseline(5)
    cand = g.run(status="fail")
    c = compare_runs(g.store, "base", [cand])
    assert {r.verdict for r in c.results} <= {Verdict.UNCHANGED, Verdict.NOISY}
    assert c.failed_candidates == (cand,) and c.exit_code() == 1


def test_runs_with_injected_faults_stay_out_of_filter_baselines(tmp_path: Path) -> None:
    g = _gen(tmp_path, 0, sizes=(1 << 20,))
    clean = [g.run(labels={"nightly": "1"}) for _ in range(2)]
    faulty = g.run(labels={"nightly": "1"}, faults=[{"kind": "delay", "rank": 2, "ms": 30}])
    base = Baselines(g.store)
    assert base.set("n", where={"nightly": "1"}).run_ids == tuple(clean)
    every = base.set("all", where={"nightly": "1"}, include_faulty=True)
    assert every.run_ids == (*clean, faulty) and "faulty runs included" in every.baseline.describe()


def _late_rank_run(store: Store, run_id: str, late: int | None, ms: float = 30.0) -> None:
    """4 ranks of one all_reduce; a late rank arrives `ms` after the others: they wait."""
    rng = np.random.default_rng(1)
    rows = []
    for size in (8, 1024, 65536):
        op = 50.0 + size / 1e3
        for rank in range(4):
            wait = 0.0 if rank == late or late is None else ms * 1e3
            t = (op + wait) * (1 + 0.01 * rng.standard_normal(10))
            rows.append(
                Row(run_id=run_id, check="bandwidth", collective="all_reduce", op="sum",
                    dtype="float32", size_bytes=size, world_size=4, rank=rank,
                    node=f"node-{rank // 2}", time_us_median=float(np.median(t)),
                    busbw_gbps=1.0, samples_us=tuple(t))
            )  # fmt: skip
    store.write_results(run_id, "bandwidth", rows)


def test_the_late_rank_is_named_not_the_ranks_that_waited(tmp_path: Path) -> None:
    """The late rank measures the SHORTEST own time; lateness points at it."""
    from datetime import UTC, datetime

    from fleetval.store.dataset import RunRecord

    store = Store(tmp_path)
    for run_id, late in (("r-late", 2), ("r-clean", None)):
        _late_rank_run(store, run_id, late)
        store.write_run(
            RunRecord(run_id=run_id, suite="smoke", status="pass", started_at=datetime.now(UTC))
        )
    (o,) = fleet_outliers(store, "r-late")
    assert o.kind == "late_rank" and o.rank == 2 and o.unit == "rank 2 (node-1)"
    assert o.value > 90 and o.identity.collective == "all_reduce"
    assert fleet_outliers(store, "r-clean") == ()


def test_summaries_are_written_with_the_rows_and_rebuilt_when_absent(tmp_path: Path) -> None:
    g = _gen(tmp_path, 0, sizes=(1 << 20,))
    run_id = g.run()
    stored = g.store.summaries([run_id])
    assert len(stored) == 8 * 2  # 8 identities x 2 nodes
    for f in (g.store.root / "summaries" / run_id).glob("*.parquet"):
        f.unlink()
    rebuilt = g.store.summaries([run_id])
    assert rebuilt.to_pylist() == stored.to_pylist()


def test_a_declared_direction_beats_the_unit(tmp_path: Path) -> None:
    """A new check's metric has a direction without touching compare: it is declared."""
    store = Store(tmp_path)
    decl = MetricDecl(name="tokens", unit="", direction=Direction.HIGHER, shared=True)
    from datetime import UTC, datetime, timedelta

    from fleetval.store.dataset import RunRecord

    ids = []
    for i, level in enumerate([100, 101, 99, 100, 100.5, 70]):
        run_id = f"r{i}"
        rows = [Row(run_id=run_id, check="newcheck", metric="tokens", value=level, rank=r, node="n")
                for r in range(2)]  # fmt: skip
        store.write_results(run_id, "s", rows)
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=i)
        store.write_run(
            RunRecord(run_id=run_id, suite="x", status="pass", started_at=started, metrics=[decl])
        )
        ids.append(run_id)
    assert store.run("r0").metrics == [decl]
    Baselines(store).set("b", run_ids=ids[:5])
    (r,) = compare_runs(store, "b", ["r5"]).results
    assert r.direction == Direction.HIGHER and r.verdict == Verdict.REGRESSION


def test_the_identity_shows_in_an_80_column_terminal(tmp_path: Path) -> None:
    from rich.console import Console

    from fleetval.analysis.compare_format import to_rich

    g = _gen(tmp_path, 1)
    g.baseline(5)
    c = compare_runs(g.store, "base", [g.run(drop={BUSBW_IDENT: 0.3})], threshold_pct=2)
    console = Console(width=80, record=True, color_system=None)
    console.print(to_rich(c, width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "bandwidth all_reduce sum float32 n=8 MI300X" in text
    (line,) = [ln for ln in text.splitlines() if "regression" in ln and "64MiB" in ln]
    assert "busbw_gbps" in line and "-3" in line  # the size, the metric and the change
