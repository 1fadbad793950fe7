"""`fleetval gpu-health` names what it reads as one node: plain files are one node's captures,
each directory a node of its own (README: "a directory is one node")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from fleetval.cli import app

HW = Path(__file__).resolve().parents[1] / "data" / "hw"
A, B = HW / "nvsmi-q-535-h100x8-replays.txt", HW / "nvsmi-q-560-titanv-idle.txt"
runner = CliRunner()


def test_several_plain_files_are_said_to_be_read_as_one_node():
    res = runner.invoke(app, ["gpu-health", str(A), str(B), "--json"])
    doc = json.loads(res.output)
    assert set(doc["nodes"]) == {"this node"}
    [note] = doc["notes"]
    assert note.startswith("2 files read as one node ('this node')") and "directory" in note
    text = runner.invoke(app, ["gpu-health", str(A), str(B)]).output
    assert "note: 2 files read as one node" in " ".join(text.split())


def test_a_directory_per_node_keeps_nodes_apart_without_a_note(tmp_path: Path):
    for node, capture in (("node-a", A), ("node-b", B)):
        (tmp_path / node).mkdir()
        shutil.copy(capture, tmp_path / node)
    res = runner.invoke(app, ["gpu-health", str(tmp_path / "node-a"), str(tmp_path / "node-b"),
                              "--json"])  # fmt: skip
    doc = json.loads(res.output)
    assert set(doc["nodes"]) == {"node-a", "node-b"} and doc["notes"] == []
    one = runner.invoke(app, ["gpu-health", str(A), "--json"])
    assert json.loads(one.output)["notes"] == []
