"""Sign-off reports of real runs (Ray, gloo, Parquet): a passing run, a planted straggler that
also regresses against the passing run as baseline, and a hang; the HTML opened in headless
Chromium with the network off."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetval.analysis.baselines import Baselines
from fleetval.cli import app
from fleetval.reports import build_signoff, render
from fleetval.run.execute import run_suite
from fleetval.signoff.gates import GateName
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.vocab import GateStatus
from tests.helpers.ray import assert_no_leaks
from tests.helpers.tools import tool_missing

pytestmark = [pytest.mark.slow]
runner = CliRunner()

SIZES = {"min": 4096, "max": 65536, "factor": 4}
SUITE: dict[str, Any] = {
    "name": "signoff-e2e",
    "placement": {"world_sizes": [1, 2], "gpus_per_rank": 0},
    "steps": [
        {"name": "correct", "check": "collectives", "size": 4096, "repeats": 1,
         "collectives": ["all_reduce", "all_gather", "broadcast"], "ops": ["sum"],
         "dtypes": ["float32"]},
        {"name": "bw", "check": "bandwidth", "sizes": SIZES, "warmup": 2, "iters": 15},
        {"name": "ddp", "check": "ddp_scaling", "hidden": 32, "layers": 2,
         "batch_per_rank": 8, "steps": 5, "warmup": 1},
        {"name": "straggler", "check": "straggler", "iters": 20, "warmup": 3},
    ],
    # gloo over loopback on 2 shared cores drifts tens of percent between runs; a 30 ms
    # delay per collective is ~100x. A CPU has no per-SKU busbw floor: the suite gives one.
    "compare": {"threshold_pct": 60},
    "gates": {
        "correctness": {},
        "busbw": {"minimums": [{"gpu_model": "cpu", "collective": "all_reduce",
                                "min_busbw_gbps": 0.0001, "min_size": 65536}]},
        "scaling": {"min_efficiency": 0.05},
        "health": {"checks": ["straggler"]},
    },
}  # fmt: skip


def _suite(*, world: list[int], faults: list[dict], straggler_timeout: float | None = None) -> Any:
    steps = [dict(s) for s in SUITE["steps"]]
    if straggler_timeout:
        steps[-1]["timeout_s"] = straggler_timeout
    if world == [2]:  # DDP scaling needs world size 1 too; the faulted runs skip it
        steps = [s for s in steps if s["check"] != "ddp_scaling"]
    return parse_suite({**SUITE, "steps": steps, "faults": faults,
                        "placement": {**SUITE["placement"], "world_sizes": world}})  # fmt: skip


@pytest.fixture(scope="module")
def runs(ray_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One store with three real runs: clean (the baseline), a delayed rank 1, a hung rank 1.

    NOTE: on fresh ranks, not the session's warm pool (`warm_pool`): there, the clean run's
    DDP step, on ranks test_ddp had used, read rank 0 late (0.8 ms, 8.7x the noise) in 2 of
    9 runs; not explained yet (collecting garbage at the ranks' reset did not remove it)."""
    assert_no_leaks()
    store = Store(tmp_path_factory.mktemp("signoff") / "data")
    clean = run_suite(_suite(world=[1, 2], faults=[]), store, labels={"stack": "base"})
    slow = run_suite(_suite(world=[2], faults=[{"kind": "delay", "rank": 1, "ms": 30}]), store)
    hang = run_suite(
        _suite(world=[2], faults=[{"kind": "hang", "rank": 1, "step": "straggler"}],
               straggler_timeout=6),
        store,
    )  # fmt: skip
    assert_no_leaks()
    Baselines(store).set("base", run_ids=[clean.run_id])
    yield {"store": store, "clean": clean.run_id, "slow": slow.run_id, "hang": hang.run_id}


def gates_of(signoff: Any) -> dict[GateName, Any]:
    return {g.gate: g for g in signoff.gates}


def node_of(store: Store, run_id: str, rank: int, world: int = 2) -> str:
    rows = store.results([run_id], columns=["rank", "node", "world_size"]).to_pylist()
    return next(r["node"] for r in rows if r["rank"] == rank and r["world_size"] == world)


def test_clean_run_passes_every_gate(runs):
    s = build_signoff(runs["store"], runs["clean"])
    g = gates_of(s)
    assert s.verdict == GateStatus.PASS, [(x.gate, x.summary) for x in s.gates]
    assert set(g) == {GateName.COMPLETED, GateName.CORRECTNESS, GateName.BUSBW,
                      GateName.SCALING, GateName.HEALTH}  # fmt: skip
    assert g[GateName.BUSBW].evidence[0].size_bytes == 65536  # the largest bandwidth-bound size
    assert [p.world_size for p in s.views.scaling] == [1, 2]
    assert not s.views.incidents


def test_straggler_and_regression_are_named(runs):
    store = runs["store"]
    s = build_signoff(store, runs["slow"], baseline="base")
    g = gates_of(s)
    assert s.verdict == GateStatus.FAIL and s.exit_code == 1
    assert g[GateName.CORRECTNESS].status == GateStatus.PASS
    # The straggler: rank 1 and the node it ran on.
    late = g[GateName.HEALTH].failing
    assert g[GateName.HEALTH].status == GateStatus.FAIL
    # Named by the straggler check and, from the samples, in every timed step it slowed.
    assert {(e.rank, e.node) for e in late} == {(1, node_of(store, runs["slow"], 1))}
    assert "straggler" in {e.check for e in late}
    # The regression: all_reduce at each swept size, at world size 2.
    reg = g[GateName.REGRESSION]
    assert reg.status == GateStatus.FAIL
    hit = {(e.collective, e.size_bytes, e.world_size) for e in reg.failing}
    assert ("all_reduce", 65536, 2) in hit
    for e in reg.failing:  # slower: less busbw, more latency (small sizes are judged on it)
        if e.value is not None:  # missing measurements (the steps the fault cut) have none
            assert e.value < e.expected if e.unit == "GB/s" else e.value > e.expected
    incidents = [(i.kind, i.rank) for i in s.views.incidents]
    assert ("straggler", 1) in incidents


def test_hang_is_named_with_rank_and_node(runs):
    store = runs["store"]
    s = build_signoff(store, runs["hang"])
    g = gates_of(s)
    assert s.verdict == GateStatus.FAIL
    hung = [e for e in g[GateName.HEALTH].failing if e.text.startswith("hang")]
    assert [(e.rank, e.node, e.step) for e in hung] == [
        (1, node_of(store, runs["hang"], 1), "straggler")
    ]
    assert g[GateName.CORRECTNESS].status == GateStatus.PASS  # the steps before it ran
    md = render(s, "md")
    assert "| health | **FAIL** |" in md and "| hang | straggler | 1 |" in md


def test_cli_writes_all_three_forms(runs, tmp_path):
    data = str(runs["store"].root)
    for suffix in ("html", "md", "json"):
        out = tmp_path / f"clean.{suffix}"
        res = runner.invoke(app, ["report", runs["clean"], "-o", str(out), "--data", data])
        assert res.exit_code == 0, res.output
        assert out.stat().st_size > 300
    out = tmp_path / "slow.json"
    res = runner.invoke(app, ["report", runs["slow"], "-b", "base", "-o", str(out), "--data", data])
    assert res.exit_code == 1 and "failed regression, scaling, health" in res.output
    got = json.loads(out.read_text())
    assert got["verdict"] == "FAIL" and got["run"]["faults"] == [
        {"kind": "delay", "rank": 1, "ms": 30.0}
    ]
    assert all(Path(p).exists() for p in got["parquet_paths"])


# -- a real browser -------------------------------------------------------------------------

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--window-size=1280,2400"]  # fmt: skip


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        tool_missing(
            "chromium and chromedriver not installed (scripts/setup.sh test installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in [*CHROME_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chrome-profile')}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})  # fmt: skip
        yield driver
    finally:
        driver.quit()


def _open(browser: Any, path: Path) -> dict[str, Any]:
    """Load the file, then what the page shows: the verdict, each plot's drawn size, errors."""
    from selenium.webdriver.common.by import By

    browser.get(path.as_uri())
    verdict = browser.find_element(By.ID, "verdict")
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.plot")
    drawn = {f.get_attribute("data-plot"): f.find_element(By.TAG_NAME, "svg").size for f in figures}
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    return {"verdict": verdict.get_attribute("data-verdict"), "text": verdict.text,
            "plots": drawn, "errors": errors}  # fmt: skip


def test_html_report_in_headless_chromium_offline(runs, browser, tmp_path):
    store = runs["store"]
    passing = tmp_path / "clean.html"
    passing.write_text(render(build_signoff(store, runs["clean"]), "html"))
    failing = tmp_path / "slow.html"
    failing.write_text(render(build_signoff(store, runs["slow"], baseline="base"), "html"))
    for path in (passing, failing):
        html = path.read_text()
        assert "<script" not in html and "https://" not in html and "<link" not in html

    seen = _open(browser, passing)
    assert seen["verdict"] == "PASS" and seen["text"].startswith("PASS")
    assert set(seen["plots"]) == {"busbw-all_reduce", "scaling", "heat"}
    assert all(sz["width"] > 200 and sz["height"] > 100 for sz in seen["plots"].values())
    assert seen["errors"] == []

    seen = _open(browser, failing)
    assert seen["verdict"] == "FAIL"
    assert set(seen["plots"]) == {"busbw-all_reduce", "heat"}  # one world size: no scaling
    assert all(sz["width"] > 200 and sz["height"] > 100 for sz in seen["plots"].values())
    assert seen["errors"] == []
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("FLEETVAL_UPDATE_SCREENSHOT"):  # refresh docs/report-screenshot.png
        shutil.copy(shot, Path(__file__).resolve().parents[2] / "docs" / "report-screenshot.png")


def test_sweep_report_in_headless_chromium_offline(browser, tmp_path):
    """A fleet sweep's report (stored sweeps, no Ray): the history table draws a cell per
    sweep and a trend per node, with the network off and no console error."""
    from selenium.webdriver.common.by import By

    from fleetval.testing.sweeps import SWEEPS, write_sweep

    store = Store(tmp_path / "data")
    ids = [write_sweep(store, i, s) for i, s in enumerate(SWEEPS)]
    page = tmp_path / "sweep.html"
    page.write_text(render(build_signoff(store, ids[-1]), "html"))
    seen = _open(browser, page)
    assert seen["verdict"] == "FAIL" and seen["errors"] == []
    row = browser.find_element(By.CSS_SELECTOR, '#sweep-history-table tr[data-node="node-3"]')
    cells = row.find_elements(By.CSS_SELECTOR, "span.cell")
    assert [c.text for c in cells] == ["D", "H", "D"]
    assert all(c.size["width"] >= 10 and c.size["height"] >= 10 for c in cells)
    assert [c.value_of_css_property("background-color") for c in cells[:2]] == [
        "rgba(229, 57, 53, 1)", "rgba(76, 175, 80, 1)"]  # fmt: skip
    spark = row.find_element(By.CSS_SELECTOR, "svg.spark")
    assert spark.size["width"] > 100 and spark.size["height"] > 15
    flags = [f.text for f in row.find_elements(By.CSS_SELECTOR, ".flag")]
    assert flags == ["repeat offender", "flapping"]
