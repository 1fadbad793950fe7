"""The hardware reader registry, and the readers added to it, on real captures (sources in
tests/data/README.md): the blocks found, what a person reads (GPU, value) and the finding and
action drawn from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetval.detect.hardware import Action, HwThresholds, judge_node
from fleetval.formats import hwcapture
from fleetval.formats.smi import SmiError

HW = Path(__file__).resolve().parents[1] / "data" / "hw"


def scan(name: str) -> hwcapture.Capture:
    return hwcapture.scan((HW / name).read_text())


def findings(c: hwcapture.Capture) -> dict[str, set[tuple[str, Action, str]]]:
    """GPU label -> {(finding code, action, evidence)}."""
    vs = judge_node(c.readings, c.events, HwThresholds(), c.observations)
    return {v.label: {(f.code, f.action, f.evidence) for f in v.findings} for v in vs if v.findings}


def test_each_reader_is_registered_once_and_named_when_nothing_is_found() -> None:
    kinds = [r.kind for r in hwcapture.READERS]
    assert len({id(r) for r in hwcapture.READERS}) == len(kinds)
    assert set(hwcapture.KINDS) == set(kinds)
    with pytest.raises(SmiError) as err:
        hwcapture.scan("nothing a GPU tool printed\n")
    assert all(k in str(err.value) for k in hwcapture.KINDS)


def test_dcgmi_dmon_xid_column_names_the_gpu_and_the_xid_catalog_gives_the_action() -> None:
    c = scan("dcgmi-dmon-xid-120-health-json-dcgm-263.txt")
    assert [(b.kind, b.partial) for b in c.blocks] == [
        ("dcgmi dmon", False),
        ("dcgmi health", False),
    ]
    xids = {o.index: o.value for o in c.observations if o.kind == "xid"}
    assert xids == {0: "0", 1: "120", 2: "0", 3: "0", 4: "0", 5: "0", 6: "0", 7: "0"}
    # Xid 120 (GSP error) on GPU 1 while dcgmi health calls the node healthy: the point
    health = [o for o in c.observations if o.kind == "dcgm_health"]
    assert [(o.subject, o.value, o.ok) for o in health] == [("Overall Health", "Healthy", True)]
    assert findings(c) == {
        "GPU 1": {("xid_120", Action.REBOOT_NODE, "1x, last: dcgmi dmon: GPU 1 XIDER 120")}
    }


def test_amd_smi_xgmi_link_status_counts_down_links_not_disabled_ones() -> None:
    c = scan("amd-smi-xgmi-link-status-changelog.txt")
    assert [(b.kind, b.partial) for b in c.blocks] == [("amd-smi xgmi --link-status", True)]
    # U U U U D U D X: five up, two down, the eighth configured off
    assert [(r.index, r.pci_bus_id, r.xgmi_up, r.xgmi_total) for r in c.readings] == [
        (0, "0000:08:00.0", 5, 7),
        (1, "0000:44:00.0", 5, 7),
    ]
    f = findings(c)
    assert {code for code, _, _ in f["GPU 0 (0000:08:00)"]} == {"xgmi_down"}
    assert {action for _, action, _ in f["GPU 1 (0000:44:00)"]} == {Action.RESET_GPU}
