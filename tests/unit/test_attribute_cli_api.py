"""`fleetval attribute` and POST /v1/attribute over a store written by fleetval's own writer
(simulated nightly runs from `fleetval.testing.rollouts`, each night a run with a 2-rank job per node)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fleetval.analysis.attribute import attribute, attribute_store
from fleetval.api import Settings, create_app
from fleetval.api.db import Scope
from fleetval.cli.app import app
from fleetval.store.dataset import Store
from fleetval.testing.rollouts import simulate, write_history

SIZES = (1 << 20, 256 << 20)


def _store(root: Path, scenario: str) -> Path:
    h = simulate(nodes=8, nights=16, seed=11, scenario=scenario, sizes=SIZES)
    write_history(h, Store(root), labels={"cluster": "mi300x-a"})
    return root


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    return _store(tmp_path_factory.mktemp("planted"), "planted")


@pytest.fixture(scope="module")
def null(tmp_path_factory) -> Path:
    return _store(tmp_path_factory.mktemp("null"), "null")


def cli(*args: str):
    return CliRunner().invoke(app, ["attribute", *args])


def test_cli_names_the_rccl_change_and_exits_1(planted):
    out = cli("--data", str(planted), "--format", "json", "--where", "cluster=mi300x-*")
    assert out.exit_code == 1, out.output
    d = json.loads(out.stdout)
    hits = [f for f in d["findings"] if f["verdict"] == "regression"]
    assert [(f["component"], f["size_bytes"], f["metric"]) for f in hits] == [
        ("rccl", 256 << 20, "busbw_gbps")
    ]
    assert hits[0]["from"] == "2.18.6" and hits[0]["to"] == "2.20.5"
    assert hits[0]["ci_pct"][0] < -8 < hits[0]["ci_pct"][1]
    assert d["confounded"] == [] and hits[0]["nodes"] == 8


def test_cli_table_and_markdown(planted):
    table = cli("--data", str(planted))
    md = cli("--data", str(planted), "--format", "markdown", "--all")
    assert table.exit_code == md.exit_code == 1
    assert "regression" in table.stdout and "rccl" in table.stdout
    assert "| driver | 6.8.5 -> 6.10.5 |" in md.stdout  # --all: unchanged rows too


def test_cli_nothing_planted_exits_0(null):
    out = cli("--data", str(null), "--metric", "busbw")
    assert out.exit_code == 0, out.output
    assert "regression" not in out.stdout and "unchanged" in out.stdout


def test_cli_since_leaves_earlier_changes_out(planted):
    d = json.loads(cli("--data", str(planted), "--format", "json", "--since", "2026-01-11").stdout)
    assert {f["component"] for f in d["findings"]} == {"rccl"}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--since", "2026-02-30"], "--since"),
        (["--metric", "watts"], "metric"),
        (["--format", "xml"], "--format"),
        (["--where", "nope=1"], "unknown filter key 'nope'"),
        (["--where", "cluster=other"], "no run matches"),
        (["--metric", "latency"], "no busbw or latency measurement"),
    ],
)
def test_cli_bad_input_exits_2(planted, args, said):
    out = cli("--data", str(planted), *args)
    assert out.exit_code == 2 and said in out.output


def test_rest_is_the_same_json_as_the_library(planted):
    api = create_app(Settings(data_dir=planted, run_executor=False, run_scheduler=False))
    read = {"Authorization": f"Bearer {api.state.db.create_token(Scope.READ, 'r')}"}
    with TestClient(api) as client:
        body = {"where": {"cluster": "mi300x-a"}, "last": 1000}
        ok = client.post("/v1/attribute", json=body, headers=read)
        since = client.post(
            "/v1/attribute", json={"since": "2026-01-11", "metric": "busbw"}, headers=read
        )
        bad = client.post("/v1/attribute", json={"since": "2026-02-30"}, headers=read)
        extra = client.post("/v1/attribute", json={"metric": "watts", "x": 1}, headers=read)
        none = client.post(
            "/v1/attribute", json={"where": {"cluster": "b"}, "last": 5}, headers=read
        )
        anon = client.post("/v1/attribute", json={})
    assert ok.status_code == 200
    assert ok.json() == json.loads(
        attribute_store(Store(planted), where={"cluster": "mi300x-a"}, last=1000).to_json()
    )
    assert {f["component"] for f in since.json()["findings"]} == {"rccl"}
    assert bad.status_code == 422 and "since" in bad.text
    assert extra.status_code == 422 and "metric" in extra.text and '"x"' in extra.text
    assert none.status_code == 409 and "no run matches" in none.text
    assert anon.status_code == 401


def test_compare_and_trend_point_at_attribute_when_a_version_changed(tmp_path):
    from fleetval.testing.bandwidth import FleetModel, GenStore

    model = FleetModel(collectives={"all_reduce": 2.0}, dtypes=("float32",), sizes=(16 << 20,))
    g = GenStore(tmp_path, model, seed=0)
    g.baseline(5)
    late = [g.run(drop={0: 0.2}, env={"rccl_version": "2.20.5"}) for _ in range(3)]
    same = g.run(drop={0: 0.2})  # the same drop, no version changed: no pointer
    runner = CliRunner()

    def said(*args: str) -> tuple[int, str]:
        out = runner.invoke(app, [*args, "--data", str(tmp_path)])
        return out.exit_code, " ".join(out.stdout.split())

    code, text = said("compare", "-b", "base", "--run", late[-1])
    assert code == 1 and "rccl changed with this regression: `fleetval attribute`" in text
    code, text = said("compare", "-b", "base", "--run", same)
    assert code == 1 and "fleetval attribute" not in text
    code, text = said("compare", "-b", "base", "--run", late[-1], "--format", "markdown")
    assert "- rccl changed with this regression" in text
    code, text = said("trend")
    assert code == 1 and "`fleetval attribute` says which change did it" in text


def test_signoff_report_says_what_changed_and_what_it_did(planted, tmp_path):
    from fleetval.analysis.baselines import Baselines

    store = Store(planted)
    runs = [r.run_id for r in store.runs()]
    if "early" not in Baselines(store).names():
        Baselines(store).set("early", run_ids=runs[:2])  # before any rollout
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    for out in (md, html):
        got = CliRunner().invoke(
            app, ["report", runs[-1], "-b", "early", "-o", str(out), "--data", str(planted)]
        )
        assert got.exception is None or isinstance(got.exception, SystemExit), got.output
    text = md.read_text()
    section = text[text.index("### What changed and what it did") :]
    assert "- rccl 2.18.6 -> 2.20.5: regression" in section and "256MiB" in section
    assert "- driver: unchanged at every measurement" in section
    assert (
        "What changed and what it did" in html.read_text()
        and 'id="what-it-did"' in html.read_text()
    )


def test_ingested_rccl_tests_runs_are_read_and_multi_node_files_left_out(tmp_path):
    """Real captured files (tests/data/README.md): an 8-rank single-node MI300X rccl-tests
    run is a per-node measurement; a 72-rank GB200 nccl-tests run is not."""
    from fleetval.analysis.runvalues import run_values

    real = Path(__file__).resolve().parents[1] / "data" / "real"
    data = ["--data", str(tmp_path)]
    for night in ("a", "b"):
        got = CliRunner().invoke(app, ["ingest", str(real / "rccl-tests-hpe-mi300x.txt"), "--label",
                                       f"night={night}", "--label", "collective=all_reduce", *data])  # fmt: skip
        assert got.exit_code in (0, 1), got.output
    alone = attribute_store(Store(tmp_path))
    assert alone.findings == () and alone.notes == ("no component changed version in these runs",)
    got = CliRunner().invoke(app, ["ingest", str(real / "nccl-tests-coreweave-gb200.txt"),
                                   "--label", "collective=all_reduce", *data])  # fmt: skip
    assert got.exit_code in (0, 1), got.output
    mixed = attribute_store(Store(tmp_path))
    assert any(n.startswith("10 multi-node measurements left out") for n in mixed.notes), (
        mixed.notes
    )

    # The two single-node runs, as if the second ran a new RCCL: read from the stored rows.
    store = Store(tmp_path)
    runs = [r.run_id for r in store.runs() if r.labels.get("night")]
    values = run_values(store.summaries(runs), models=None, cutoff_bytes=64 << 10)
    values = values.rename_columns(["node" if c == "group" else c for c in values.column_names])
    nodes = store.nodes(runs)
    new = pc.if_else(pc.equal(nodes["run_id"], runs[1]), "2.99.0", "2.18.3")
    nodes = nodes.set_column(nodes.schema.get_field_index("rccl_version"), "rccl_version", new)
    a = attribute(values, nodes, {r: f"2026-01-0{k + 1}" for k, r in enumerate(runs)})
    assert {(f.component, f.identity["gpu_model"]) for f in a.findings} == {
        ("rccl", "AMD Instinct MI300X")
    }
    assert {f.verdict for f in a.findings} == {"confounded"}
