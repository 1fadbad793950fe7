"""The gate on stores with a hierarchical noise model: runs are the unit of evidence.

Rates over hundreds of trials are in bench/bench_gate.py (figures in bench/RESULTS.md);
here a few seeded trials each, so the suite stays fast.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import compare_runs, fleet_outliers
from fleetval.metrics import Direction, MetricDecl
from fleetval.store.dataset import Store
from fleetval.store.schema import Row
from fleetval.testing.bandwidth import FleetModel, GenStore
from fleetval.vocab import Verdict

BUSBW_IDENT = 20  # all_reduce float32 64 MiB: judged on busbw


def _gen(tmp_path: Path, seed: int, **model) -> GenStore:
    return GenStore(tmp_path / f"s{seed}", FleetModel(**model), seed)


def test_the_seed_19_case_of_24_identities_is_a_regression(tmp_path: Path) -> None:
    """Issue 19: all_reduce and all_gather x 12 sizes (4 KiB .. 8 MiB), seed 19, 5+1, a 30%
    drop on all_gather float32 2 MiB. Its family (16 busbw identities) was too small for the
    old prior, so it was judged by its own 4-df variance: p = 4.3e-4, q = 0.01, noisy."""
    sizes = tuple(1 << e for e in range(12, 24))
    g = _gen(tmp_path, 19, collectives={"all_reduce": 2.0, "all_gather": 1.0},
             dtypes=("float32",), sizes=sizes)  # fmt: skip
    g.baseline(5)
    target = g.model.identities().index(("all_gather", "float32", 2 << 20))
    c = compare_runs(g.store, "base", [g.run(drop={target: 0.3})])
    (reg,) = c.having(Verdict.REGRESSION)
    assert reg.identity.label() == "bandwidth all_gather float32 2MiB n=8 MI300X busbw_gbps"
    assert reg.q_value < 1e-6 and reg.run_sd_pct < 2.6 and reg.ci_high_pct < -20
    assert len(c.results) == 24 and c.exit_code() == 1


@pytest.mark.parametrize("cands", [1, 5])
def test_clean_candidates_pass_at_a_2pct_run_to_run_spread(tmp_path: Path, cands: int) -> None:
    failed = 0
    for seed in range(4):
        g = _gen(tmp_path, seed)
        g.baseline(5)
        c = compare_runs(g.store, "base", [g.run() for _ in range(cands)], threshold_pct=2)
        failed += c.exit_code()
        said = tuple(n for n in c.notes if "noisy (unproven) change" not in n)  # said when any
        assert len(c.results) == 200 and said == (
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

    from fleetval.store.records import Run

    store = Store(tmp_path)
    for run_id, late in (("r-late", 2), ("r-clean", None)):
        _late_rank_run(store, run_id, late)
        store.write_run(
            Run(run_id=run_id, suite="smoke", status="pass", started_at=datetime.now(UTC))
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

    from fleetval.store.records import Run

    ids = []
    for i, level in enumerate([100, 101, 99, 100, 100.5, 70]):
        run_id = f"r{i}"
        rows = [Row(run_id=run_id, check="newcheck", metric="tokens", value=level, rank=r, node="n")
                for r in range(2)]  # fmt: skip
        store.write_results(run_id, "s", rows)
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=i)
        store.write_run(
            Run(run_id=run_id, suite="x", status="pass", started_at=started, metrics=[decl])
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


def test_a_small_familys_history_finds_a_10pct_drop_its_5_runs_alone_miss(tmp_path: Path) -> None:
    """One identity, 12 earlier nightly runs, a baseline of 5, one candidate 10% down (about
    4.5 run sds): on the baseline's 4 df alone the drop is noisy; with the history's 11 more
    it is a regression, and the results say what the run sd rests on."""
    g = _gen(tmp_path, 0, collectives={"all_reduce": 2.0}, dtypes=("float32",), sizes=(16 << 20,))
    earlier = [g.run() for _ in range(12)]
    g.baseline(5)
    cand = g.run(drop={0: 0.10})
    with_history = compare_runs(g.store, "base", [cand], threshold_pct=2)
    alone = compare_runs(g.store, "base", [cand], threshold_pct=2, history=0)
    (found,), (missed,) = with_history.results, alone.results
    assert with_history.history_runs == tuple(earlier) and alone.history_runs == ()
    assert (found.verdict, found.variance_from, found.history_runs) == (
        Verdict.REGRESSION, "history", 12)  # fmt: skip
    assert (missed.verdict, missed.variance_from, missed.history_runs) == (Verdict.NOISY, "own", 0)
    assert found.q_value < missed.q_value / 10 and "12 earlier" in found.reason


def test_the_service_compares_with_the_same_history(tmp_path: Path) -> None:
    """POST /v1/compare applies the rule `compare` does: the history by default, `history: 0`
    for none, the same verdicts and the same JSON as the library."""
    from fastapi.testclient import TestClient

    from fleetval.analysis.compare_format import to_json
    from fleetval.api.app import create_app
    from fleetval.api.db import Scope
    from fleetval.api.settings import Settings

    g = _gen(tmp_path, 0, collectives={"all_reduce": 2.0}, dtypes=("float32",), sizes=(16 << 20,))
    earlier = [g.run() for _ in range(12)]
    g.baseline(5)
    cand = g.run(drop={0: 0.10})
    app = create_app(Settings(data_dir=g.store.root, run_executor=False, run_scheduler=False))
    auth = {"Authorization": f"Bearer {app.state.db.create_token(Scope.READ, 'r')}"}
    with TestClient(app) as client:
        ask = lambda **kw: client.post(  # noqa: E731
            "/v1/compare", json={"baseline": "base", "runs": [cand], **kw}, headers=auth
        )
        found, alone, bad = ask(threshold_pct=2), ask(threshold_pct=2, history=0), ask(history=-1)
    assert found.json() == json.loads(
        to_json(compare_runs(g.store, "base", [cand], threshold_pct=2))
    )
    assert [r["verdict"] for r in found.json()["results"]] == ["regression"]
    assert [r["verdict"] for r in alone.json()["results"]] == ["noisy"]
    assert found.json()["history_runs"] == earlier and alone.json()["history_runs"] == []
    assert bad.status_code == 422 and "history" in bad.text


# -- issue 29: a first compare leans on the whole family, and says so --------------------------

_SUITE_29 = dict(nodes=1, ranks_per_node=4, iters=20, dtypes=("float32",),
                 collectives={"all_reduce": 2.0, "all_gather": 1.0},
                 sizes=tuple(1 << e for e in range(10, 22)))  # fmt: skip


def test_a_first_compare_of_24_identities_leans_on_all_of_them(tmp_path: Path) -> None:
    """Issue 29's suite (6 latency and 6 busbw sizes of two collectives), no history, 5+1:
    a 10% drop (4.5 run sds; its own 4 df find it 6% of the time) is a regression
    judged on the other 23 measurements' df, and the JSON and reason say so."""
    from fleetval.analysis.compare_format import to_json, to_markdown

    g = _gen(tmp_path, 3, **_SUITE_29)
    g.baseline(5)
    target = g.model.identities().index(("all_gather", "float32", 2 << 20))
    c = compare_runs(g.store, "base", [g.run(drop={target: 0.10})], threshold_pct=2)
    (reg,) = c.having(Verdict.REGRESSION)
    assert reg.identity.size_bytes == 2 << 20 and reg.identity.collective == "all_gather"
    assert (reg.own_df, reg.history_df, reg.family_size) == (4, 0, 23) and reg.family_df > 40
    assert reg.df == 4 + reg.family_df and "from 23 others" in reg.reason
    (doc,) = [r for r in json.loads(to_json(c))["results"] if r["verdict"] == "regression"]
    assert (doc["df"], doc["own_df"], doc["family_df"]) == (reg.df, 4, reg.family_df)
    assert f"{reg.df} df (4 own, {reg.family_df} from 23 others)" in to_markdown(c)


def test_a_noisier_regime_is_judged_on_its_own(tmp_path: Path) -> None:
    """The same suite with its latency-bound sizes 3x noisier (6% against 2%): no identity
    leans on the other regime, so clean candidates pass and the noisy ones say `4 own`."""
    g = _gen(tmp_path, 4, **_SUITE_29)
    latency = np.array([s < 64 << 10 for _, _, s in g.model.identities()])
    g.run_sd = np.where(latency, 0.06, 0.02)
    g.baseline(5)
    c = compare_runs(g.store, "base", [g.run()], threshold_pct=2)
    assert c.exit_code() == 0
    tested = [r for r in c.results if r.df is not None]
    assert len(tested) == 24 and all(r.family_size in (0, 11) for r in tested)
    assert all((r.family_size == 0) == (r.family_df == 0) for r in tested)
