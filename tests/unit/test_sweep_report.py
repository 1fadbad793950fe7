"""A fleet sweep's sign-off report (no Ray): the verdict, each node over the last N sweeps up
to the reported one, the `sweep` gate that keeps a flagged sweep from signing off, in HTML,
Markdown and JSON, read from sweeps stored in a real Parquet store."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.fleet.verdict import LinkMeasured, LinkVerdict
from fleetval.reports import build_signoff, render
from fleetval.signoff.gates import GateName, Waiver
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.testing.sweeps import NODES, SWEEPS, write_sweep
from fleetval.vocab import GateStatus, LinkState

runner = CliRunner()


@pytest.fixture
def sweeps(tmp_path: Path) -> tuple[Store, list[str]]:
    store = Store(tmp_path / "data")
    return store, [write_sweep(store, i, s) for i, s in enumerate(SWEEPS)]


class _Rows(HTMLParser):
    """The history table's rows as the page shows them: node -> (cell letters, flags)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, tuple[str, list[str]]] = {}
        self._in, self._node, self._cls = False, "", ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._in = a.get("id") == "sweep-history-table"
        elif self._in and tag == "tr" and a.get("data-node"):
            self._node = a["data-node"] or ""
            self.rows[self._node] = ("", [])
        self._cls = a.get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        self._in = self._in and tag != "table"
        self._cls = ""

    def handle_data(self, data: str) -> None:
        if not (self._in and self._node):
            return
        cells, flags = self.rows[self._node]
        if self._cls.startswith("cell "):
            self.rows[self._node] = (cells + data, flags)
        elif self._cls == "flag":
            flags.append(data)


def html_history(html: str) -> dict[str, tuple[str, list[str]]]:
    p = _Rows()
    p.feed(html)
    return p.rows


def test_report_of_the_third_sweep_shows_each_node_over_three(sweeps):
    store, ids = sweeps
    s = build_signoff(store, ids[2])
    assert s.verdict == GateStatus.FAIL and s.exit_code == 1  # node-3 drained tonight

    doc = json.loads(render(s, "json"))
    hist = doc["sweep"]["history"]
    assert hist["runs"] == ids and hist["last"] == 10
    by_node = {h["node"]: h for h in hist["nodes"]}
    assert [x["state"] for x in by_node["node-3"]["sweeps"]] == ["drain", "healthy", "drain"]
    assert [x["state"] for x in by_node["node-5"]["sweeps"]] == ["healthy", "suspect", "healthy"]
    assert (
        by_node["node-3"]["repeat_offender"] and "repeat offender" in by_node["node-3"]["findings"]
    )
    assert by_node["node-5"]["flapping"] and not by_node["node-5"]["repeat_offender"]
    assert by_node["node-1"]["drift"] == pytest.approx(-0.2)
    assert by_node["node-1"]["findings"] == ["slow drift -20%"]
    assert by_node["node-0"]["findings"] == []
    assert doc["sweep"]["verdict"]["drain"] == ["node-3"]
    assert doc["sweep"]["drain_lines"]["slurm"][0].startswith(
        'scontrol update nodename=node-3 state=drain reason="fleetval: slow in 2 pairs'
    )

    md = render(s, "md")
    assert (
        "### Fleet sweep: 7 nodes, 3 rounds, 9 jobs: **1 node named, 0 slow links, 0 findings" in md
    )
    assert "| node-3 | **drain** | high |" in md
    assert "| node-3 | `DHD` | 3 → 10 → 2.5 | repeat offender, flapping |" in md
    assert "| node-5 | `HSH` | 10 → 9 → 10 | flapping |" in md
    assert "| node-1 | `HHH` | 10 → 9 → 7 | slow drift -20% |" in md
    assert "| node-6 | `--H` |" not in md  # healthy whenever seen: counted, not listed
    assert "4 other nodes healthy in every sweep shown" in md

    html = render(s, "html")
    rows = html_history(html)
    assert rows["node-3"] == ("DHD", ["repeat offender", "flapping"])
    assert rows["node-5"] == ("HSH", ["flapping"])
    assert rows["node-1"] == ("HHH", ["slow drift -20%"])
    assert rows["node-6"] == ("--H", [])  # joined the fleet in the third sweep
    assert list(rows) == sorted([*NODES, "node-6"])
    assert '<tr data-node="node-3" data-state="drain">' in html
    assert 'id="sweep-drain"><b>node-3</b>' in html and "kubectl cordon node-3" in html
    assert html.count('<svg class="spark"') == 6  # node-6, seen once, has no trend yet


def test_report_of_the_second_sweep_shows_no_later_one(sweeps):
    store, ids = sweeps
    s = build_signoff(store, ids[1])
    doc = json.loads(render(s, "json"))
    assert doc["sweep"]["history"]["runs"] == ids[:2]
    by_node = {h["node"]: h for h in doc["sweep"]["history"]["nodes"]}
    assert "node-6" not in by_node
    assert by_node["node-3"]["findings"] == [] and by_node["node-5"]["findings"] == []
    html = render(s, "html")
    assert html_history(html)["node-3"] == ("DH", [])
    assert ids[2] not in html and ids[2] not in render(s, "md")
    assert "History per node over the last 2 sweeps" in html


def test_sweeps_shown_is_a_window_ending_at_the_run(sweeps, tmp_path):
    store, ids = sweeps
    out = tmp_path / "r.json"
    args = ["report", ids[2], "-o", str(out), "--data", str(store.root), "--sweeps", "2"]
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and "failed sweep" in res.output, res.output
    assert json.loads(out.read_text())["sweep"]["history"]["runs"] == ids[1:]
    res = runner.invoke(app, [*args[:-1], "0"])
    assert res.exit_code == 2  # bad input: the report written before is left as it was
    assert json.loads(out.read_text())["sweep"]["history"]["runs"] == ids[1:]
    with pytest.raises(ValueError, match="at least 1"):
        build_signoff(store, ids[2], sweeps=0)  # the service's call says it too


def test_sweep_history_until_a_run_is_the_same_cut(sweeps):
    store, ids = sweeps
    data = ["--data", str(store.root)]
    res = runner.invoke(app, ["sweep-history", "--until", ids[1], "--json", *data])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["runs"] == ids[:2]
    res = runner.invoke(app, ["sweep-history", "--until", "20990101-000000-ffffff", *data])
    assert res.exit_code == 2 and "20990101-000000-ffffff" in res.output


def test_a_flagged_sweep_never_signs_off_and_a_clean_one_does(tmp_path):
    store = Store(tmp_path)
    clean = write_sweep(store, 0, {n: ("healthy", 10.0) for n in NODES})
    s = build_signoff(store, clean)
    assert s.verdict == GateStatus.PASS, [(g.gate, g.summary) for g in s.gates]
    assert [g.gate for g in s.gates] == [GateName.COMPLETED, GateName.SWEEP, GateName.HEALTH]
    assert "default gates were applied (completed, sweep, health;" in s.notes[0]
    assert s.gates[1].summary == "6 nodes healthy in 3 rounds (9 jobs)"

    # A slow link between two healthy nodes, and a finding about the whole fleet: no node
    # is named, and the sweep still flagged.
    link = LinkVerdict(("node-0", "node-1"), True, ("pair 2.1 GB/s, fleet 10 GB/s",))
    breaker = "circuit breaker: 4 of 6 nodes would be drained, more than the limit of 2"
    flagged = write_sweep(store, 1, {n: ("healthy", 10.0) for n in NODES}, links=(link,),
                          findings=(breaker,))  # fmt: skip
    s = build_signoff(store, flagged)
    gate = next(g for g in s.gates if g.gate == GateName.SWEEP)
    assert s.verdict == GateStatus.FAIL and gate.status == GateStatus.FAIL
    assert gate.summary == "the sweep flagged: 1 slow link, 1 fleet finding"
    assert [e.text for e in gate.failing] == [
        "slow link node-0 <-> node-1: pair 2.1 GB/s, fleet 10 GB/s",
        breaker,
    ]
    md = render(s, "md")
    assert "| sweep | **FAIL** | the sweep flagged: 1 slow link, 1 fleet finding |" in md
    assert f"- **{breaker}**" in md
    waived = build_signoff(
        store,
        flagged,
        waivers=[Waiver(gate=GateName.SWEEP, by="ops@example.com", reason="link tracked in FAB-7")],
    )
    assert waived.verdict == GateStatus.PASS  # fmt: skip


def test_a_sweep_that_left_a_link_estimated_slow_and_unproven_does_not_sign_off(tmp_path):
    store = Store(tmp_path)
    link = LinkVerdict(("node-0", "node-1"), False, ("link node-0 <-> node-1: 13%, z 2.4",))
    run = write_sweep(store, 0, {n: ("healthy", 10.0) for n in NODES}, links=(link,))
    s = build_signoff(store, run)
    gate = next(g for g in s.gates if g.gate == GateName.SWEEP)
    assert s.verdict != GateStatus.PASS and gate.status != GateStatus.PASS
    assert gate.summary.endswith("1 estimated slow link(s) or trunk(s) not judged (nothing flagged)")
    assert [e.text for e in gate.failing] == [
        "estimated slow, not proven: link node-0 <-> node-1: 13%, z 2.4"
    ]


def test_declared_gates_of_a_sweep_suite_still_judge_its_verdict(tmp_path):
    store = Store(tmp_path)
    run = write_sweep(store, 0, {**{n: ("healthy", 10.0) for n in NODES},
                                 "node-2": ("suspect", 4.0)}, gates={"health": {"checks": []}})  # fmt: skip
    s = build_signoff(store, run)
    assert [g.gate for g in s.gates] == [GateName.COMPLETED, GateName.SWEEP, GateName.HEALTH]
    gate = s.gates[1]
    assert gate.status == GateStatus.FAIL and [e.node for e in gate.failing] == ["node-2"]
    assert gate.failing[0].text == "suspect node-2: slow in a pair once (confidence medium)"


def test_a_run_that_is_not_a_sweep_has_no_sweep_section(tmp_path):
    store = Store(tmp_path)
    started = datetime(2026, 1, 1, tzinfo=UTC)
    store.write_run(Run(run_id="20260101-000000-aaaaaa", suite="release", status="pass",
                        started_at=started, suite_json='{"name": "release"}',
                        summary={"steps": []}))  # fmt: skip
    write_sweep(store, 1, SWEEPS[0])  # a sweep in the same store is not this run's
    s = build_signoff(store, "20260101-000000-aaaaaa")
    assert s.views.sweep is None and GateName.SWEEP not in {g.gate for g in s.gates}
    assert json.loads(render(s, "json"))["sweep"] is None
    assert 'id="sweep"' not in render(s, "html") and "Fleet sweep" not in render(s, "md")


def test_the_sweep_report_is_one_self_contained_file(sweeps):
    store, ids = sweeps
    html = render(build_signoff(store, ids[2]), "html")
    assert re.findall(r"https?://[^\s\"'<>]+", html.replace("http://www.w3.org/", "")) == []
    assert "<script" not in html and "<link" not in html and " src=" not in html


def test_a_stored_verdict_reads_back_as_the_sweep_judged_it():
    """A simulated sweep with two bad nodes and the breaker loosened: what the report and the
    gate read back from the stored dict is what the sweep decided."""
    from fleetval.fleet.settings import SweepSettings
    from fleetval.fleet.simulate import SimFleet
    from fleetval.fleet.verdict import FleetVerdict, run_rounds

    fleet = SimFleet([f"node-{i}" for i in range(8)], noise=0.02, disturbed=0.0,
                     nic={"node-2": 0.1, "node-5": 0.1})  # fmt: skip
    v = run_rounds(fleet.nodes, fleet.measure, SweepSettings(max_drain_share=0.3))
    back = FleetVerdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert [n.node for n in back.drain] == ["node-2", "node-5"]
    assert (back.nodes, back.links, back.findings, back.flagged) == (
        v.nodes, v.links, v.findings, v.flagged)  # fmt: skip
    assert (back.rounds, back.jobs, back.breaker, back.drain_limit) == (
        v.rounds, v.jobs, v.breaker, v.drain_limit)  # fmt: skip


def test_the_service_report_takes_the_same_window(sweeps):
    """GET /v1/runs/{id}/report?sweeps=N is `fleetval report --sweeps N`: the same window,
    ending at the run; 0 is a 422 naming the parameter."""
    from fastapi.testclient import TestClient

    from fleetval.api.app import create_app
    from fleetval.api.db import Scope
    from fleetval.api.settings import Settings

    store, ids = sweeps
    app = create_app(Settings(data_dir=store.root, run_executor=False, run_scheduler=False))
    auth = {"Authorization": f"Bearer {app.state.db.create_token(Scope.READ, 'r')}"}
    accept = {**auth, "Accept": "application/json"}
    with TestClient(app) as client:
        two = client.get(f"/v1/runs/{ids[2]}/report?sweeps=2", headers=accept).json()
        default = client.get(f"/v1/runs/{ids[2]}/report", headers=accept).json()
        bad = client.get(f"/v1/runs/{ids[2]}/report?sweeps=0", headers=accept)
    assert two["sweep"]["history"]["runs"] == ids[1:3]
    assert default["sweep"]["history"]["runs"] == ids[:3]
    library = json.loads(render(build_signoff(store, ids[2], sweeps=2), "json"))
    assert two | {"generated_at": None} == library | {"generated_at": None}
    assert bad.status_code == 422 and "sweeps" in bad.text


def test_sweep_history_shows_link_coverage_measured_when_and_last_verdict(tmp_path):
    store = Store(tmp_path)
    ok = {n: ("healthy", 10.0) for n in NODES}
    first = (LinkMeasured(("node-0", "node-1"), LinkState.FAST, 10.0, 1),
             LinkMeasured(("node-2", "node-3"), LinkState.SLOW, 4.0, 2))  # fmt: skip
    second = (LinkMeasured(("node-0", "node-1"), LinkState.UNCLEAR, 8.0, 1),)
    ids = [write_sweep(store, 0, ok, coverage=first), write_sweep(store, 1, ok, coverage=second)]
    data = ["--data", str(store.root)]
    res = runner.invoke(app, ["sweep-history", "--json", *data])
    assert res.exit_code == 0, res.output
    cover = json.loads(res.output)["coverage"]
    assert cover["links_total"] == 15 and cover["links_measured"] == 2
    assert cover["links"] == [
        {"nodes": ["node-0", "node-1"], "run_id": ids[1], "verdict": "unclear", "gbps": 8.0},
        {"nodes": ["node-2", "node-3"], "run_id": ids[0], "verdict": "slow", "gbps": 4.0},
    ]
    res = runner.invoke(app, ["sweep-history", "--links", *data])
    assert res.exit_code == 0, res.output
    assert "link coverage: 2 of 15 links (13%) measured in the last 2 sweep(s)" in res.output
    assert re.search(r"node-2 <-> node-3 .*" + ids[0] + r".* slow .* 4 ", res.output)
    res = runner.invoke(app, ["sweep-history", "--until", ids[0], "--json", *data])
    assert json.loads(res.output)["coverage"]["links"][0]["verdict"] == "fast"


def _racked_sweep(store: Store, i: int, trunk: float) -> str:
    """A sweep of eight simulated nodes in two racks, its trunk at `trunk` of full speed."""
    from fleetval.fleet.coverage import Fabric
    from fleetval.fleet.settings import SweepSettings
    from fleetval.fleet.simulate import SimFleet, racked
    from fleetval.fleet.verdict import run_rounds

    nodes = [f"node-{k}" for k in range(8)]
    topo = racked(nodes, 2)
    trunks = {("rack-00", "rack-01"): trunk} if trunk < 1 else {}
    fleet = SimFleet(nodes, noise=0.02, disturbed=0.0, seed=i, topology=topo, trunks=trunks)
    v = run_rounds(nodes, fleet.measure, SweepSettings(max_drain_share=0.3), fabric=Fabric(topo))
    return write_sweep(store, i, {}, verdict=v)


def test_the_report_draws_pair_busbw_node_by_node_in_racks(tmp_path):
    store = Store(tmp_path)
    _racked_sweep(store, 0, 1.0)
    run_id = _racked_sweep(store, 1, 0.3)
    signoff = build_signoff(store, run_id)
    html = render(signoff, "html")
    matrix = html[html.index('<table id="sweep-matrix">') :]
    matrix = matrix[: matrix.index("</table>")]
    assert matrix.count('class="block') == 2 and ">rack-00<" in matrix and ">rack-01<" in matrix
    found = re.findall(r'<td class="m (\w+)[^"]*" data-link="([^"]+)"', matrix)
    cells = {tuple(link.split("|")): verdict for verdict, link in found}
    assert {cells[(a, b)] for a, b in cells if (a < "node-4") != (b < "node-4")} == {"slow"}
    assert {cells[(a, b)] for a, b in cells if (a < "node-4") == (b < "node-4")} == {"fast"}
    assert "against the sweeps before" in matrix  # the change against the earlier sweep
    assert 'id="sweep-trunks"' in html and "slow trunk: nobody drained" in html
    md = render(signoff, "md")
    assert "slow trunk rack rack-00 <-> rack-01 (nobody drained)" in md
    rows = md[md.index("Pair busbw node by node") :].split("```")[1].strip().splitlines()
    assert len(rows) == 8 and rows[0].startswith("node-0") and any("S" in r for r in rows)
    doc = json.loads(render(signoff, "json"))["sweep"]["matrix"]
    assert doc["level"] == "node" and doc["blocks_by"] == "rack"
    assert [b["rows"] for b in doc["blocks"]] == [4, 4] and doc["earlier_sweeps"] == 1
