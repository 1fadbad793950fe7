"""The pair-matrix heat map: a sweep's links against the model's level, flagged links and
trunks outlined; from the sign-off report and `fleetval sweep-history --links --plot`."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.fleet.coverage import Fabric
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet, planted, racked
from fleetval.fleet.verdict import run_rounds
from fleetval.reports.plots import link_matrix_figure, link_matrix_svg
from fleetval.signoff.sweep import link_matrix
from fleetval.store.dataset import Store
from fleetval.testing.sweeps import write_sweep

EIGHT = [f"node-{i}" for i in range(8)]


def test_eight_nodes_a_cell_a_link_with_the_flagged_trunk_outlined():
    racks = racked(EIGHT, 2)
    fleet = SimFleet(list(EIGHT), topology=racks, seed=1, trunks={("rack-00", "rack-01"): 0.05})
    v = run_rounds(EIGHT, fleet.measure, SweepSettings(), fabric=Fabric(racks))
    mx = link_matrix(v, v.to_dict(), [])
    assert mx is not None and mx.level == "node" and len(mx.rows) == 8
    assert ("rack-00", "rack-01") in mx.trunks and not mx.flagged
    fig = link_matrix_figure(mx)
    (ax, _) = fig.axes  # the matrix and its colour bar
    outlined = [p for p in ax.patches if p.get_edgecolor()[:3] != (0, 0, 0)]
    # the trunk's blocks, both halves of the matrix: rows of one rack, columns of the other
    assert len(outlined) == 2
    assert all(p.get_width() == 4 and p.get_height() == 4 for p in outlined)
    assert "<svg" in link_matrix_svg(mx, "t")


def test_a_thousand_nodes_read_as_rack_by_rack():
    fleet = planted(1024, 0, 0, seed=3, racks=64, bad_trunks=1)
    v = run_rounds(fleet.nodes, fleet.measure, SweepSettings(seed=3), fabric=Fabric(fleet.topology))
    mx = link_matrix(v, v.to_dict(), [])
    assert mx is not None and mx.level == "rack" and len(mx.rows) == 64
    (trunk,) = fleet.trunks
    assert trunk in mx.trunks
    ax = link_matrix_figure(mx).axes[0]
    assert len(ax.get_xticklabels()) == 64 and len(ax.patches) >= 1


def test_sweep_history_plots_the_newest_sweep_and_refuses_bad_paths(tmp_path: Path):
    store = Store(tmp_path)
    racks = racked(EIGHT, 2)
    fleet = SimFleet(list(EIGHT), topology=racks, seed=2, links={("node-1", "node-6"): 0.05})
    v = run_rounds(EIGHT, fleet.measure, SweepSettings(), fabric=Fabric(racks))
    write_sweep(store, 0, {}, verdict=v)
    runner = CliRunner()
    out = tmp_path / "links.svg"
    res = runner.invoke(
        app, ["sweep-history", "--data", str(tmp_path), "--links", "--plot", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))
    png = tmp_path / "links.png"
    res = runner.invoke(
        app, ["sweep-history", "--data", str(tmp_path), "--links", "--plot", str(png)]
    )
    assert res.exit_code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    for args in (["--plot", str(tmp_path / "x.pdf"), "--links"], ["--plot", str(out)]):
        res = runner.invoke(app, ["sweep-history", "--data", str(tmp_path), *args])
        assert res.exit_code == 2, res.output
