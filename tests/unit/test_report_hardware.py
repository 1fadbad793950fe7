"""The sign-off report's GPU hardware section, and its fleet-sized listings, without Ray: a
1,024-node run whose health rows come from the real judge on real captured files
(tests/data/hw, tests/data/real; sources in tests/data/README.md), written through the store
and reported in Markdown, HTML and JSON."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleetval.checks.health.hardware import NodeHardware, node_hardware_rows, read_node_hardware
from fleetval.detect.hardware import HwThresholds
from fleetval.nodesets import SHOWN
from fleetval.reports import build_signoff, render
from fleetval.signoff.evaluate import Signoff
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row

HW = Path(__file__).resolve().parents[1] / "data" / "hw"
REAL = Path(__file__).resolve().parents[1] / "data" / "real"
NODES = 1024
REMAP_EVERY = 100  # node-0, node-100, ..., node-1000: an A10 with row remapping pending (11)
XID_NODE = "node-7"  # Xid 79 in its kernel log, at an address no reading names
RUN = "20260101-000000-0abc00"


def _hw(*files: Path) -> NodeHardware:
    return read_node_hardware("captured", [str(f) for f in files], "n")


def _run(root: Path) -> Store:
    healthy = _hw(REAL / "nvidia-smi-q-h100-golden.txt")
    remap = _hw(HW / "nvsmi-q-535-a10-remap-pending.txt")
    xid = _hw(REAL / "nvidia-smi-q-h100-golden.txt", HW / "journal-xid-79-fallen-off-bus.log")
    t = HwThresholds()
    rows = []
    for j in range(NODES):
        node = f"node-{j}"
        hw = remap if j % REMAP_EVERY == 0 else xid if node == XID_NODE else healthy
        rows += [Row(run_id=RUN, step="health", check="health", node=node, **f)
                 for f in node_hardware_rows(hw, t, node)]  # fmt: skip
    store = Store(root)
    store.write_results(RUN, "job0-health", rows)
    store.write_nodes(RUN, [{"node": f"node-{j}", "hostname": f"node-{j}"} for j in range(NODES)])
    at = datetime(2026, 1, 1, tzinfo=UTC)
    store.write_run(Run(run_id=RUN, suite="health", status="fail", started_at=at,
                        finished_at=at, summary={"steps": []}))  # fmt: skip
    return store


@pytest.fixture(scope="module")
def signoff(tmp_path_factory: pytest.TempPathFactory) -> Signoff:
    return build_signoff(_run(tmp_path_factory.mktemp("hw") / "store"), RUN)


def test_hardware_view_groups_findings_by_finding_and_action(signoff: Signoff) -> None:
    hw = signoff.views.hardware
    assert hw is not None
    remap_nodes = NODES // REMAP_EVERY + 1  # 0, 100, ..., 1000
    # every node has one GPU row; node-7 has a second, the Xid 79 at an unread address
    assert hw.gpus == NODES + 1
    assert hw.healthy == NODES - remap_nodes  # node-7's own H100 reads healthy
    groups = {(g.code, g.action): g for g in hw.groups}
    pending = groups[("row_remap_pending", "reset GPU")]
    assert pending.gpus == remap_nodes and pending.severity == "fail"
    assert pending.nodes[:2] == ("node-0", "node-100")
    assert pending.evidence == "Remapped Rows Pending: Yes (uncorrectable 4, correctable 0)"
    xid = groups[("xid_79", "reboot node")]
    assert xid.nodes == (XID_NODE,) and xid.severity == "fail"
    # the worst action first: the reboot before the resets
    assert hw.findings[0].node == XID_NODE and hw.findings[0].action == "reboot node"
    assert hw.node_actions["reboot node"] == (XID_NODE,)
    assert len(hw.node_actions["reset GPU"]) == remap_nodes


def test_markdown_hardware_section_reads_at_1024_nodes(signoff: Signoff) -> None:
    md = render(signoff, "md")
    section = md.split("### GPU hardware", 1)[1].split("\n### ", 1)[0]
    remap_nodes = NODES // REMAP_EVERY + 1
    findings = len(signoff.views.hardware.findings)
    assert f"{NODES + 1} GPUs read: {NODES - remap_nodes} healthy" in section
    assert f"**{findings} findings on {remap_nodes + 1} nodes**" in section
    assert "- **reboot node**: 1 node `node-7`" in section
    assert f"- **reset GPU**: {remap_nodes} nodes `node-[0,100,200,300,400,500,600,700" in section
    row = re.search(r"^\| row_remap_pending \| fail \| \*\*reset GPU\*\* \| (\d+) \| `(.*?)` \|",
                    section, re.M)  # fmt: skip
    assert row and int(row.group(1)) == remap_nodes and "and 1 more node" in row.group(2)
    per_gpu = [line for line in section.splitlines() if line.startswith("| node-")]
    assert len(per_gpu) == SHOWN and per_gpu[0].startswith("| node-7 |")
    assert f"and {findings - SHOWN} more findings: the JSON report lists every one" in section
    assert len(section.splitlines()) < 40


def test_json_holds_every_finding_and_heat_cell(signoff: Signoff) -> None:
    doc = json.loads(render(signoff, "json"))
    hw = doc["hardware"]
    assert len(hw["findings"]) == len(signoff.views.hardware.findings) > SHOWN
    assert {f["node"] for f in hw["findings"] if f["code"] == "row_remap_pending"} == {
        f"node-{j}" for j in range(0, NODES, REMAP_EVERY)
    }
    assert len(doc["heat"]["nodes"]) == NODES and doc["heat"]["checks"] == ["health"]
    assert doc["heat"]["nodes"]["node-100"] == ["fail"]


def test_html_at_1024_nodes_draws_the_worst_nodes_and_counts_the_rest(signoff: Signoff) -> None:
    html = render(signoff, "html")
    heat = html.split('<section id="heat">', 1)[1].split("</section>", 1)[0]
    drawn = signoff.views.heat_view
    # the 12 failing nodes first, then passing ones, up to the cap
    assert "node-7" in drawn.nodes and "node-1000" in drawn.nodes
    assert drawn.left == NODES - len(drawn.nodes) > 0
    assert f"and {drawn.left:,} more nodes" in heat and f"worst status pass on {drawn.left}" in heat
    section = html.split('<section id="hardware">', 1)[1].split("</section>", 1)[0]
    assert section.count('<tr class="bad">') == 2 + SHOWN  # two groups, SHOWN per-GPU rows
    assert "Remapped Rows Pending: Yes" in section and "node-7" in section
