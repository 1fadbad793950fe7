"""The hardware reader registry, and the readers added to it, on real captures (sources in
tests/data/README.md): the blocks found, what a person reads (GPU, value) and the finding and
action drawn from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetval.detect.hardware import Action, HwThresholds, judge_node
from fleetval.formats import hwcapture, kernlog
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
    assert [(b.kind, b.first, b.last, b.partial) for b in c.blocks] == [
        ("nvidia-smi --query-gpu", 2, 10, False),  # the noheader CSV under its command line
        ("dcgmi dmon", 13, 22, False),
        ("dcgmi health", 29, 41, False),
    ]
    xids = {o.index: o.value for o in c.observations if o.kind == "xid"}
    assert xids == {0: "0", 1: "120", 2: "0", 3: "0", 4: "0", 5: "0", 6: "0", 7: "0"}
    # Xid 120 (GSP error) on GPU 1 while dcgmi health calls the node healthy: the point
    health = [o for o in c.observations if o.kind == "dcgm_health"]
    assert [(o.subject, o.value, o.ok) for o in health] == [("Overall Health", "Healthy", True)]
    assert findings(c) == {
        "GPU 1": {
            ("xid_120", Action.REBOOT_NODE, "1x, last: dcgmi dmon: GPU 1 XIDER 120"),
            ("driver_recovery_action", Action.RESET_GPU, "GPU Recovery Action: GPU Reset"),
        }
    }


def test_query_gpu_csv_without_header_reads_the_fields_its_command_line_names() -> None:
    # `--query-gpu=index,gpu_recovery_action --format=csv,noheader`; the note the person put
    # after GPU 1's row ("<= GPU is unusable, reset required") is not a cell
    c = scan("dcgmi-dmon-xid-120-health-json-dcgm-263.txt")
    actions = {r.index: r.recovery_action for r in c.readings}
    assert actions == {0: "None", 1: "GPU Reset", **{i: "None" for i in range(2, 8)}}
    assert {r.source for r in c.readings} == {"nvidia-smi --query-gpu"}


def test_query_gpu_rows_without_header_or_command_line_are_not_guessed() -> None:
    text = (HW / "dcgmi-dmon-xid-120-health-json-dcgm-263.txt").read_text()
    c = hwcapture.scan(text.replace("--format=csv,noheader", "--format=csv"))
    assert "nvidia-smi --query-gpu" not in [b.kind for b in c.blocks]


def test_dcgmi_health_table_names_the_gpu_the_system_and_its_message() -> None:
    c = scan("dcgmi-health-c-warning-power-l4.txt")  # DCGM 4.6.1, one L4
    assert [(b.kind, b.first, b.last, b.partial) for b in c.blocks] == [
        ("dcgmi health", 2, 13, False)
    ]
    (o,) = c.observations
    assert (o.index, o.category, o.subject, o.value, o.ok) == (
        0,
        "Errors",
        "Power system",
        "Warning",
        False,
    )
    # the message wrapped over three rows, read back as one
    assert o.detail == (
        "Detected clocks event due to power violation in GPU 0. Monitor the power conditions. "
        "This GPU can still perform workload."
    )
    assert findings(c) == {"GPU 0": {("dcgm_health", Action.WATCH, "Power system: Warning")}}


def test_dcgmi_health_table_healthy_is_the_nodes_overall_health() -> None:
    c = scan("dcgmi-health-c-healthy-gb200-dcgm-313.txt")  # DCGM 4.5.2, GB200
    assert [(b.kind, b.first, b.last, b.partial) for b in c.blocks] == [
        ("dcgmi health", 5, 9, False)
    ]
    assert [(o.subject, o.value, o.ok, o.index) for o in c.observations] == [
        ("Overall Health", "Healthy", True, None)
    ]
    assert findings(c) == {}
    cut = "\n".join((HW / "dcgmi-health-c-healthy-gb200-dcgm-313.txt").read_text().splitlines()[:7])
    assert [(b.kind, b.partial) for b in hwcapture.scan(cut).blocks] == [("dcgmi health", True)]


def test_amdgpu_umc_error_counts_per_gpu() -> None:
    events = kernlog.read_kernel_log((HW / "dmesg-amdgpu-umc-skriptoteket.log").read_text())
    assert [(e.kind, e.pci_bus_id, e.count) for e in events] == [
        ("umc_correctable", "0000:0b:00.0", 1048560),
        ("umc_uncorrectable", "0000:0b:00.0", 1048560),
    ]
    f = findings(scan("dmesg-amdgpu-umc-skriptoteket.log"))
    assert {(code, action) for fs in f.values() for code, action, _ in fs} == {
        ("umc_correctable", Action.WATCH),
        ("umc_uncorrectable", Action.RESET_GPU),
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
    older = "amdgpu 0000:0b:00.0: 3 uncorrectable hardware errors and 2 deferred hardware errors"
    assert [
        (e.kind, e.count) for e in kernlog.read_kernel_log(older + " detected in UMC block")
    ] == [
        ("umc_uncorrectable", 3),
        ("umc_deferred", 2),
    ]  # the spelling of kernels before 6.x (drivers/gpu/drm/amd/amdgpu/amdgpu_umc.c)
