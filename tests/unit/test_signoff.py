"""Sign-off gates on synthetic stores (Store + Row, no Ray): each gate's PASS, FAIL, no-evidence
and WAIVED paths, the evidence they name, and the three report formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.reports import (
    build_signoff,
    format_for_accept,
    format_for_path,
    render,
    render_for_accept,
)
from fleetval.signoff.gates import GateName, Waiver, parse_waiver
from fleetval.store.dataset import Store
from fleetval.suite import SuiteError, parse_suite
from fleetval.testing.signoff import (
    ALL_GATES,
    GiB,
    bw_rows,
    correct_rows,
    healthy,
    micro_rows,
    planted_regression,
    straggler_rows,
    write_run,
)
from fleetval.vocab import GateStatus

runner = CliRunner()


def gate(signoff: Any, name: GateName) -> Any:
    return next(g for g in signoff.gates if g.gate == name)


def test_healthy_h100_run_passes_every_gate(tmp_path):
    store = Store(tmp_path)
    run = write_run(store, "r1", healthy("r1", np.random.default_rng(1)), gates=ALL_GATES)
    s = build_signoff(store, run)
    assert s.verdict == GateStatus.PASS and s.exit_code == 0
    assert [g.gate for g in s.gates] == [GateName.COMPLETED, GateName.CORRECTNESS,
                                         GateName.BUSBW, GateName.HEALTH, GateName.MICROBENCH]  # fmt: skip
    assert all(g.status == GateStatus.PASS for g in s.gates)
    busbw = gate(s, GateName.BUSBW).evidence[0]
    assert busbw.collective == "all_reduce" and busbw.size_bytes == 16 * GiB  # bandwidth-bound
    assert busbw.expected == 460.0 and busbw.value >= 460.0


def test_busbw_below_the_sku_minimum_fails_naming_the_slowest_rank(tmp_path):
    store = Store(tmp_path)
    rows = [*bw_rows("r1", 470.0, np.random.default_rng(2), slow_rank=5), *correct_rows("r1")]
    run = write_run(store, "r1", rows, gates={"busbw": {}})
    g = gate(build_signoff(store, run), GateName.BUSBW)
    assert g.status == GateStatus.FAIL and not g.no_evidence
    bad = g.failing[0]
    assert (bad.collective, bad.size_bytes, bad.rank, bad.node) == (
        "all_reduce",
        16 * GiB,
        5,
        "gpu-1",
    )
    assert bad.device_id == "GPU-5" and bad.value < 460.0
    assert "16GiB" in bad.text and "rank 5 on gpu-1" in bad.text


def test_cpu_run_has_no_busbw_evidence_and_fails_unless_waived(tmp_path):
    store = Store(tmp_path)
    rows = bw_rows("r1", 5.0, np.random.default_rng(3), world=2)
    run = write_run(store, "r1", rows, gates={"busbw": {}, "microbench": {}}, gpu_model=None)
    s = build_signoff(store, run)
    g = gate(s, GateName.BUSBW)
    assert g.status == GateStatus.FAIL and g.no_evidence
    assert "cpu" in g.summary and "no minimum declared" in g.summary
    assert gate(s, GateName.MICROBENCH).no_evidence
    waived = build_signoff(store, run, waivers=[
        Waiver(gate=GateName.BUSBW, by="jane", reason="CPU CI"),
        Waiver(gate=GateName.MICROBENCH, by="jane", reason="CPU CI"),
    ])  # fmt: skip
    assert waived.verdict == GateStatus.PASS
    assert gate(waived, GateName.BUSBW).status == GateStatus.WAIVED
    assert gate(waived, GateName.BUSBW).waiver.by == "jane"
    # The same waiver declared in the suite; one for a gate that is not evaluated is a note.
    waivers = [{"gate": "busbw", "by": "ci", "reason": "CPU runners"},
               {"gate": "scaling", "by": "ci", "reason": "no DDP step"}]  # fmt: skip
    rows = [*bw_rows("r2", 5.0, np.random.default_rng(4), world=2), *correct_rows("r2")]
    run = write_run(store, "r2", rows,
                    gates={"busbw": {}, "waivers": waivers}, gpu_model=None)  # fmt: skip
    s = build_signoff(store, run)
    assert s.verdict == GateStatus.PASS and gate(s, GateName.BUSBW).waiver.reason == "CPU runners"
    assert any("waiver for scaling by ci ignored" in n for n in s.notes)


def test_suite_minimum_for_cpu_is_checked(tmp_path):
    store = Store(tmp_path)
    rows = bw_rows("r1", 5.0, np.random.default_rng(3), world=2)
    mins = [
        {"gpu_model": "cpu", "collective": "all_reduce", "min_busbw_gbps": 50, "min_size": "1GiB"}
    ]
    run = write_run(store, "r1", rows, gates={"busbw": {"minimums": mins}}, gpu_model=None)
    g = gate(build_signoff(store, run), GateName.BUSBW)
    assert g.status == GateStatus.FAIL and not g.no_evidence and g.failing[0].expected == 50


def test_correctness_and_health_name_rank_and_node(tmp_path):
    store = Store(tmp_path)
    steps = [{"job": 0, "world_size": 8, "step": "bw", "check": "bandwidth", "status": "fail",
              "message": "timed out", "seconds": 5.0,
              "culprits": [{"rank": 3, "node": "gpu-1", "device_id": "GPU-3", "reason": "hang",
                            "detail": "did not finish; last reached in bw all_reduce iteration 4"}]}]  # fmt: skip
    rows = [*correct_rows("r1", wrong_rank=2), *straggler_rows("r1", late=6)]
    run = write_run(store, "r1", rows, gates=ALL_GATES, steps=steps, status="fail")
    s = build_signoff(store, run)
    assert s.verdict == GateStatus.FAIL and s.exit_code == 1
    wrong = gate(s, GateName.CORRECTNESS).failing
    assert [(e.rank, e.collective, e.value) for e in wrong] == [(2, "all_gather", 12.0)]
    health = gate(s, GateName.HEALTH).failing
    assert {(e.rank, e.node) for e in health} == {(3, "gpu-1"), (6, "gpu-1")}
    assert any(e.text.startswith("hang: rank 3 on gpu-1 (GPU-3)") for e in health)
    kinds = {(i.kind, i.rank) for i in s.views.incidents}
    assert kinds == {("hang", 3), ("straggler", 6)}


def test_microbench_below_expected_fraction(tmp_path):
    store = Store(tmp_path)
    run = write_run(store, "r1", micro_rows("r1", tflops=400.0), gates={"microbench": {}})
    g = gate(build_signoff(store, run), GateName.MICROBENCH)
    assert g.status == GateStatus.FAIL and len(g.failing) == 7  # rank 0 is at 900
    assert g.failing[0].expected == pytest.approx(593.4)


@pytest.fixture
def regression_store(tmp_path: Path) -> Store:
    return planted_regression(tmp_path)


def test_planted_regression_fails_the_regression_gate(regression_store):
    s = build_signoff(regression_store, "cand", baseline="old")
    g = gate(s, GateName.REGRESSION)
    assert g.status == GateStatus.FAIL
    sizes = {e.size_bytes for e in g.failing}
    assert {e.collective for e in g.failing} == {"all_reduce"} and 16 * GiB in sizes
    assert all(e.value < e.expected for e in g.failing)
    assert ("nccl_version", "2.21.5", "2.23.4") in s.views.env_diff
    curves = s.views.busbw["all_reduce"]
    assert [c.baseline for c in curves] == [False, True]
    base = curves[1]
    assert all(lo <= mid <= hi for lo, mid, hi in zip(base.low, base.busbw, base.high, strict=True))


def test_clean_candidate_passes_regression(regression_store):
    rng = np.random.default_rng(9)
    write_run(regression_store, "again", healthy("again", rng), gates=ALL_GATES)
    s = build_signoff(regression_store, "again", baseline="old")
    assert gate(s, GateName.REGRESSION).status == GateStatus.PASS
    assert s.verdict == GateStatus.PASS


def test_unknown_run_or_baseline_is_bad_input(regression_store):
    with pytest.raises(ValueError, match="no run 'nope'"):
        build_signoff(regression_store, "nope")
    with pytest.raises(ValueError, match="no baseline 'nope'; known: old"):
        build_signoff(regression_store, "cand", baseline="nope")


def test_suite_without_gates_gets_the_defaults_and_says_so(tmp_path):
    store = Store(tmp_path)
    run = write_run(store, "r1", correct_rows("r1"), gates=None)
    s = build_signoff(store, run)
    assert [g.gate for g in s.gates] == [GateName.COMPLETED, GateName.CORRECTNESS, GateName.HEALTH]
    assert s.verdict == GateStatus.PASS and not s.gates_declared
    assert "declares no gates" in s.notes[0]


def test_cancelled_run_fails_completed(tmp_path):
    store = Store(tmp_path)
    run = write_run(store, "r1", correct_rows("r1"), status="cancelled")
    g = gate(build_signoff(store, run), GateName.COMPLETED)
    assert g.status == GateStatus.FAIL and "cancelled" in g.summary


def test_a_run_that_warned_completed(tmp_path):
    """Warnings (late ranks) are the health gate's to judge, not a run cut short."""
    store = Store(tmp_path)
    run = write_run(store, "r1", correct_rows("r1"), status="warn")
    assert gate(build_signoff(store, run), GateName.COMPLETED).status == GateStatus.PASS


def test_gates_section_is_validated_with_field_paths():
    base = {"name": "x", "steps": [{"check": "collectives"}]}
    with pytest.raises(SuiteError) as err:
        parse_suite({**base, "gates": {"busbw": {"minimum": []}}})
    assert "gates.busbw.minimum: unknown key 'minimum'" in str(err.value)
    with pytest.raises(SuiteError) as err:
        parse_suite({**base, "gates": {"waivers": [{"gate": "busbw", "by": "", "reason": "x"}]}})
    assert "gates.waivers.0.by" in str(err.value)
    with pytest.raises(SuiteError) as err:
        parse_suite({**base, "gates": {"scaling": {"min_efficiency": -1}}})
    assert "gates.scaling.min_efficiency" in str(err.value)
    with pytest.raises(SuiteError) as err:
        parse_suite({**base, "gates": {"health": {"checks": ["stragler"]}}})
    assert "gates: health.checks: unknown check stragler; known: collectives" in str(err.value)
    ok = parse_suite({**base, "gates": {"scaling": {"min_efficiency": 0.9}}})
    assert ok.gates is not None and ok.gates.scaling.min_efficiency == 0.9


def test_parse_waiver():
    w = parse_waiver("busbw:jane@example.com:fabric firmware: FAB-12")
    assert (w.gate, w.by, w.reason) == (
        GateName.BUSBW,
        "jane@example.com",
        "fabric firmware: FAB-12",
    )
    with pytest.raises(ValueError, match="unknown gate 'speed'"):
        parse_waiver("speed:jane:x")
    with pytest.raises(ValueError, match="GATE:WHO:REASON"):
        parse_waiver("busbw:jane")


def test_formats_by_suffix_and_accept():
    assert format_for_path("a/b.HTML") == "html" and format_for_path("x.md") == "md"
    with pytest.raises(ValueError, match=r"\.html, \.md or \.json"):
        format_for_path("x.pdf")
    assert format_for_accept(None) == "html"
    assert format_for_accept("application/json") == "json"
    assert format_for_accept("text/markdown;q=0.9, text/html") == "md"
    assert format_for_accept("text/html,application/xhtml+xml,*/*;q=0.8") == "html"


def test_renders_all_three_formats(regression_store):
    s = build_signoff(regression_store, "cand", baseline="old")
    data = json.loads(render(s, "json"))
    assert data["verdict"] == "FAIL" and data["exit_code"] == 1
    assert {g["gate"]: g["status"] for g in data["gates"]}["regression"] == "FAIL"
    md = render(s, "md")
    assert md.startswith("## ❌ Release sign-off FAIL") and "| regression | **FAIL** |" in md
    assert "| nccl_version | 2.21.5 | 2.23.4 |" in md
    html = render(s, "html")
    assert 'id="verdict" data-verdict="FAIL"' in html
    assert html.count("<svg") == 2  # all_reduce busbw + the node x check map
    assert "http://" not in html.replace("http://www.w3.org/", "")  # nothing fetched
    assert "https://" not in html and "<script" not in html


def test_cli_report_exit_codes(regression_store, tmp_path):
    data = str(regression_store.root)
    out = tmp_path / "r.json"
    res = runner.invoke(
        app, ["report", "cand", "--baseline", "old", "-o", str(out), "--data", data]
    )
    assert res.exit_code == 1, res.output
    assert "FAIL" in res.output and json.loads(out.read_text())["verdict"] == "FAIL"
    res = runner.invoke(app, ["report", "base2", "-o", str(tmp_path / "r.md"), "--data", data])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "latest", "-b", "old", "-o", str(out), "--data", data])
    assert res.exit_code == 1 and json.loads(out.read_text())["run"]["run_id"] == "cand"
    waive = [
        "--waive",
        "regression:jane:known NCCL 2.23 change, tracked in NET-7",
        "--waive",
        "busbw:jane:same cause",
    ]  # the slower run is also below 460 GB/s
    res = runner.invoke(
        app, ["report", "cand", "-b", "old", *waive, "-o", str(out), "--data", data]
    )
    assert res.exit_code == 0, res.output
    assert {g["gate"]: g["status"] for g in json.loads(out.read_text())["gates"]}[
        "regression"
    ] == "WAIVED"
    for bad in (["report", "cand", "-o", str(tmp_path / "r.pdf")],
                ["report", "nope", "-o", str(out)],
                ["report", "cand", "-b", "nope", "-o", str(out)],
                ["report", "cand", "--waive", "busbw", "-o", str(out)],
                ["report", "cand", "-o", str(tmp_path / "missing" / "r.md")]):  # fmt: skip
        res = runner.invoke(app, [*bad, "--data", data])
        assert res.exit_code == 2, (bad, res.output)


def test_render_for_accept_is_the_service_call(regression_store):
    body, media = render_for_accept(regression_store, "cand", "application/json", baseline="old")
    assert media == "application/json" and json.loads(body)["verdict"] == "FAIL"
    body, media = render_for_accept(regression_store, "base0", None)
    assert media.startswith("text/html") and 'data-verdict="PASS"' in body
    body, media = render_for_accept(regression_store, "base0", "text/markdown")
    assert media.startswith("text/markdown") and body.startswith("## ✅")
    with pytest.raises(ValueError, match="no run 'nope'"):
        render_for_accept(regression_store, "nope", None)
