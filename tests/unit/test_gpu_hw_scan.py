"""The scanner on real pasted captures (tests/data/README.md names each source): the blocks it
finds, what a person reads in each (GPU, value), and the finding and action drawn from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetval.cli.app import app
from fleetval.detect.hardware import Action, HwThresholds, judge_node
from fleetval.formats import hwcapture
from fleetval.formats.smi import SmiError

HW = Path(__file__).resolve().parents[1] / "data" / "hw"
T = HwThresholds()
runner = CliRunner()


def scan(name: str) -> hwcapture.Capture:
    return hwcapture.scan((HW / name).read_text())


def findings(c: hwcapture.Capture) -> dict[str, set[tuple[str, str]]]:
    """GPU label -> {(finding code, action)}."""
    vs = judge_node(c.readings, c.events, T, c.observations)
    return {v.label: {(f.code, f.action.value) for f in v.findings} for v in vs if v.findings}


def blocks(c: hwcapture.Capture) -> list[tuple[str, bool]]:
    return [(b.kind, b.partial) for b in c.blocks]


# ---- dcgmi diag, three layouts ---------------------------------------------------------------


def test_dcgm_31_persistence_mode_fails_on_each_gpu_it_names() -> None:
    c = scan("dcgmi-diag-3.1-persistence-fail-h200.txt")
    assert blocks(c) == [("dcgmi diag", False)]
    failed = [o for o in c.observations if not o.ok]
    assert [o.index for o in failed] == [0, 1, 2, 3, 4, 5]  # the message names GPUs 0-5
    assert {o.subject for o in failed} == {"Persistence Mode"}
    # the wrapped cell ("disab" / "led.") read back as one message, only GPU 3's part for GPU 3
    assert failed[3].detail.startswith("Persistence mode for GPU 3 is currently disabled.")
    f = findings(c)
    assert f["GPU 0"] == {("dcgm_persistence_mode", "watch")}  # configuration, not hardware


def test_dcgm_2x_r4_all_pass_with_nvlink_status_in_the_same_paste() -> None:
    c = scan("dcgmi-diag-2x-r4-nvlink-gcm.txt")
    assert blocks(c) == [("dcgmi diag", False), ("dcgmi nvlink", False)]
    assert len(c.observations) == 18 and all(o.ok for o in c.observations)
    assert {o.subject for o in c.observations} >= {"Blacklist", "Pulse Test", "Memtest"}
    assert [(r.index, r.nvlink_up, r.nvlink_total) for r in c.readings][:2] == [
        (0, 12, 12),
        (1, 12, 12),
    ]
    assert findings(c) == {}


def test_dcgm_40_per_gpu_rows() -> None:
    c = scan("dcgmi-diag-4.0-r3-docs.txt")
    assert blocks(c) == [("dcgmi diag", False)]
    tests = {o.subject for o in c.observations}
    assert tests == {"software", "memory", "diagnostic", "pcie", "memory_bandwidth",
                     "targeted_stress", "targeted_power"}  # fmt: skip
    assert {o.index for o in c.observations} == {0, 1, 2, 3} and findings(c) == {}


def test_dcgm_2x_failed_deployment_names_no_gpu_so_the_node() -> None:
    f = findings(scan("dcgmi-diag-2x-deployment-fail-prolog.txt"))
    assert ("dcgm_inforom", "watch") in f["node"] and len(f["node"]) == 5


def test_dcgm_pcie_fail_excerpt_starts_mid_table_and_names_gpu_0() -> None:
    c = scan("dcgmi-diag-2.4-pcie-nvlink-warning-dcgm-49.txt")
    assert blocks(c) == [("dcgmi diag", True)]
    (o,) = c.observations
    assert (o.category, o.subject, o.value, o.index) == ("Integration", "PCIe", "Fail", 0)
    assert "NvLink link 0 is currently down" in o.detail
    assert findings(c) == {"GPU 0": {("dcgm_pcie", "reboot node")}}


def test_dcgm_nvlinks_down_beside_a_diag_cut_off_mid_row() -> None:
    c = scan("dcgmi-nvlink-down-and-diag-3.3-dcgm-198.txt")
    assert blocks(c) == [("dcgmi nvlink", False), ("dcgmi diag", True)]
    assert [(r.index, r.nvlink_up, r.nvlink_total) for r in c.readings] == [(0, 0, 18), (1, 0, 18)]
    f = findings(c)
    assert f["GPU 0"] == {("nvlink_down", "reset GPU")} and "GPU 1" in f


def test_dcgm_nvlink_status_h100x8_all_up() -> None:
    c = scan("dcgmi-nvlink-s-h100x8-up-exporter-576.txt")
    assert [(r.nvlink_up, r.nvlink_total) for r in c.readings] == [(18, 18)] * 8
    assert findings(c) == {}


# ---- nvidia-smi -q excerpts: the Fabric block --------------------------------------------------


def test_fabric_insufficient_resources_is_a_finding_with_the_clique() -> None:
    c = scan("nvsmi-q-fabric-insufficient-azhpc-506.txt")
    assert blocks(c) == [("nvidia-smi -q section", True)]
    (o,) = c.observations
    assert o.value == "State Completed, Status Insufficient Resources"
    assert o.detail == "CliqueId 0, ClusterUUID 00000000-0000-0000-0000-000000000000"
    assert findings(c) == {"node": {("nvlink_fabric", "reboot node")}}


def test_fabric_completed_but_health_unhealthy_from_a_grep() -> None:
    (o,) = scan("nvsmi-q-fabric-unhealthy-dra-626.txt").observations
    assert not o.ok and o.value.endswith("Health Summary Unhealthy") and "CliqueId 2" in o.detail


def test_fabric_in_a_full_q_is_read_per_gpu_and_healthy() -> None:
    c = scan("nvsmi-q-535-h100x8-power-brake.txt")
    fabric = [o for o in c.observations if o.kind == "fabric"]
    assert len(fabric) == 8 and all(o.ok and o.pci_bus_id for o in fabric)


# ---- nvidia-smi nvlink, topo -m, lspci ---------------------------------------------------------


def test_nvlink_pasted_with_ellipsis_and_no_uuid() -> None:
    c = scan("nvlink-s-v100-inactive-azhpc-diag-73.txt")
    assert blocks(c) == [("nvidia-smi nvlink", True)]
    (r,) = c.readings
    assert (r.index, r.uuid, r.nvlink_up, r.nvlink_total) == (3, None, 4, 6)
    assert findings(c) == {"GPU 3": {("nvlink_down", "reset GPU")}}


def test_nvlink_all_links_inactive_any_case_b200() -> None:
    (r,) = scan("nvlink-s-b200-all-inactive-gpud-1085.txt").readings
    assert (r.index, r.name, r.nvlink_up) == (2, "NVIDIA B200", 0)


def test_gb200_nvlink_s_cut_off_then_nvlink_info() -> None:
    c = scan("nvlink-s-info-gb200-k8s-test-infra-371.txt")
    assert blocks(c) == [("nvidia-smi nvlink", True), ("nvidia-smi nvlink", False)]
    gpu0 = next(r for r in c.readings if r.index == 0)
    assert (gpu0.uuid, gpu0.nvlink_up, gpu0.nvlink_total) == (
        "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde",
        18,
        18,
    )
    assert findings(hwcapture.Capture("x", hwcapture.merge(c.readings))) == {}


@pytest.mark.parametrize(
    ("name", "pairs", "usual", "whole"),
    [
        ("topo-m-a100x8-nccl-1505.txt", 22, "NV12", False),  # GPU4-7 rows cut off
        ("topo-m-h100x8-deepep-145.txt", 22, "NV18", False),
        ("topo-m-h800x8-nv8-nccl-933.txt", 28, "NV8", False),
        ("topo-m-h100x4-nv6-nccl-1617.txt", 6, "NV6", True),
        ("topo-m-2x5090-phb-club3090-1229.txt", 0, None, True),  # PHB, no NVLink
    ],
)
def test_topo_matrix_pairs_and_partial(
    name: str, pairs: int, usual: str | None, whole: bool
) -> None:
    c = scan(name)
    assert blocks(c) == [("nvidia-smi topo -m", not whole)]
    links = [o for o in c.observations if o.kind == "nvlink_pair"]
    assert len(links) == pairs and {o.value for o in links} <= {usual}
    assert all(o.ok for o in links) and findings(c) == {}


def test_topo_nearest_nic_per_gpu() -> None:
    c = scan("topo-m-h100x4-nv6-nccl-1617.txt")
    near = {o.subject: o.value for o in c.observations if o.kind == "nic_affinity"}
    assert near == {"GPU0": "PIX NIC0", "GPU1": "PIX NIC1", "GPU2": "PIX NIC2", "GPU3": "PIX NIC3"}


def test_lspci_gpu_link_against_capability_bridges_skipped() -> None:
    c = scan("lspci-vvv-h100-gpud.txt")
    (r,) = c.readings  # the downgraded PCIe switch above it is not a GPU
    assert (r.pci_bus_id, r.pcie_gen, r.pcie_gen_max, r.pcie_width, r.pcie_width_max) == (
        "19:00.0",
        5,
        5,
        16,
        16,
    )
    assert findings(c) == {}


# ---- kernel messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dmesg-rminitadapter-gpu-operator-649.log",
         {"PCI 0000:04:01": {("rm_init_failed", "reboot node")},
          "PCI 0000:04:02": {("rm_init_failed", "reboot node")}}),
        ("syslog-rminitadapter-gpu-operator-1146.log",
         {"PCI 0000:0a:00": {("rm_init_failed", "reboot node")}}),
        ("dmesg-rminitadapter-gsp-ogkm-789.log",
         {"PCI 0000:98:00": {("rm_init_failed", "reboot node")}}),
        ("dmesg-nvrm-fallen-off-bus-multiline-nvsentinel-155.log",
         {"PCI 0000:b3:00": {("xid_79", "reboot node")}}),
        ("dmesg-amdgpu-athub-aca-mi300x-rocm-4021.log",
         {"PCI 0000:1c:00": {("athub_uncorrectable", "reset GPU")},
          "PCI 0000:42:00": {("aca_event", "reset GPU")},
          "PCI 0000:55:00": {("aca_event", "reset GPU")}}),
        ("dmesg-amdgpu-smu-reset-nixpkgs-176915.log",
         {"PCI 0000:03:00": {("smu_unresponsive", "watch"), ("reset_failed", "reboot node")}}),
        ("dmesg-amdgpu-smu-busy-rocm-2196.log",
         {"PCI 0000:0d:00": {("smu_unresponsive", "watch")}}),
    ],
)  # fmt: skip
def test_kernel_messages(name: str, expected: dict[str, set[tuple[str, str]]]) -> None:
    c = scan(name)
    assert blocks(c) == [("kernel log", False)]
    assert findings(c) == expected


def test_xid_149_from_the_catalog_of_current_drivers() -> None:
    f = findings(scan("dmesg-gb200-xid-149-154.log"))
    assert ("xid_149", "reset GPU") in f["PCI 0008:01:00"]


# ---- prefixes, mixed files, nothing found --------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    ["0: ", "12: ", "[pod/node-a/health] ", "2025-10-16T10:34:29.644Z ", "> "],
)
def test_launcher_and_log_prefixes_are_stripped(prefix: str) -> None:
    # NOTE: the real capture with the prefix srun --label / kubectl logs --prefix/--timestamps
    # or a quote would put before each line
    text = (HW / "dcgmi-nvlink-down-and-diag-3.3-dcgm-198.txt").read_text()
    c = hwcapture.scan("".join(prefix + ln for ln in text.splitlines(keepends=True)))
    assert [b.kind for b in c.blocks] == ["dcgmi nvlink", "dcgmi diag"]
    assert [r.nvlink_up for r in c.readings] == [0, 0]


def test_several_tools_in_one_file_merge_per_gpu() -> None:
    text = "\n".join((HW / n).read_text() for n in ("nvlink-s-a100x8-up.txt",
                     "dmesg-xid-119-gsp-timeout.log", "topo-m-a100x8-nccl-1505.txt"))  # fmt: skip
    c = hwcapture.scan(text)
    assert [b.kind for b in c.blocks] == ["nvidia-smi nvlink", "kernel log", "nvidia-smi topo -m"]
    assert len(c.readings) == 8 and len(c.events) == 5


def test_prose_without_tool_output_is_refused_naming_what_was_looked_for() -> None:
    with pytest.raises(SmiError, match=r"dcgmi diag.*lspci.*kernel log"):
        hwcapture.scan("the GPUs look fine to me\n$ echo done\n")


def test_cli_lists_blocks_marks_partial_and_exits_1_on_a_finding() -> None:
    res = runner.invoke(
        app, ["gpu-health", str(HW / "dcgmi-diag-2.4-pcie-nvlink-warning-dcgm-49.txt")]
    )
    assert res.exit_code == 1, res.output
    assert "dcgmi diag (lines 4-14, partial)" in res.output
    assert "dcgm_pcie" in res.output and "reboot node" in res.output
    res = runner.invoke(app, ["gpu-health", str(HW / "topo-m-h100x4-nv6-nccl-1617.txt"), "--json"])
    out = json.loads(res.output)
    assert res.exit_code == 0 and out["action"] == Action.NONE.value
    assert next(iter(out["blocks"].values()))[0]["kind"] == "nvidia-smi topo -m"
