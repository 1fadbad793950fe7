"""GPU hardware evidence on real captures (tests/data/README.md names each source): the values
a person reads in each file, the finding and action the judge draws, and `fleetval gpu-health`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetval.cli.app import app
from fleetval.detect.hardware import (
    Action,
    HwThresholds,
    firmware_drift,
    judge_node,
    judge_reading,
    node_action,
    peer_findings,
)
from fleetval.formats import amdsmi, hwcapture, kernlog, nvsmi
from fleetval.formats.gpuhw import GpuReading, merge, pci_key, tree
from fleetval.formats.smi import SmiError
from fleetval.vocab import Status

DATA = Path(__file__).resolve().parents[1] / "data"
HW = DATA / "hw"
T = HwThresholds()
runner = CliRunner()


def text(name: str) -> str:
    return (HW / name).read_text()


def codes(r: GpuReading, t: HwThresholds = T) -> dict[str, tuple[str, str]]:
    return {f.code: (f.status.value, f.action.value) for f in judge_reading(r, t)}


# ---- nvidia-smi -q across driver generations -------------------------------------------------


def test_580_h100_healthy_recovery_action_none_and_tlimit_margin() -> None:
    (g,) = nvsmi.read_nvidia_smi_q((DATA / "real" / "nvidia-smi-q-h100-golden.txt").read_text())
    assert (g.driver_version, g.vbios, g.serial) == (
        "580.159.04",
        "96.00.DA.00.0C",
        "1752624018887",
    )
    assert (g.ecc_enabled, g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (True, 0, 0)
    assert (g.remap_pending, g.remap_failed, g.remap_histogram["max"]) == (False, False, 2560)
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_replays) == (5, 5, 16, 0)
    assert g.clock_reasons == [] and g.recovery_action == "None"  # "Clocks Event Reasons"
    # "GPU T.Limit Temp: 46 C", "GPU Slowdown T.Limit Temp: -2 C": 48 C before slowdown
    assert (g.temp_c, g.temp_slowdown_margin_c, g.temp_slowdown_c) == (41, 48, None)
    assert (g.power_w, g.power_limit_w) == (126.96, 700)
    assert codes(g) == {}


def test_535_a10_row_remap_pending_needs_a_reset() -> None:
    (g,) = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-a10-remap-pending.txt"))
    assert (g.name, g.driver_version) == ("NVIDIA A10", "535.129.03")
    assert (g.remap_uncorrected, g.remap_pending, g.remap_failed) == (4, True, False)
    # "GPU Reset Status: Reset Required: No, Drain and Reset Recommended: N/A" (535)
    assert g.recovery_action == "None"
    assert g.temp_slowdown_c == 98  # absolute "GPU Slowdown Temp" before 545
    assert codes(g) == {"row_remap_pending": ("fail", "reset GPU")}


def test_535_h100_power_brake_slowdown_on_all_eight() -> None:
    gpus = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-h100x8-power-brake.txt"))
    assert len(gpus) == 8 and {g.driver_version for g in gpus} == {"535.161.08"}
    g = gpus[0]
    assert g.clock_reasons == ["hw_slowdown", "hw_power_brake"]
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.pcie_replays) == (86, 1980, 67)
    assert all(codes(x) == {"hw_slowdown": ("fail", "reboot node")} for x in gpus)
    action, reason = node_action(judge_node(gpus, [], T))
    assert action == Action.REBOOT_NODE and "hw_power_brake, hw_slowdown; SM 86 of 1980" in reason


def test_535_h100_pcie_replays_are_watched_not_failed() -> None:
    gpus = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-h100x8-replays.txt"))
    replays = [g.pcie_replays for g in gpus]
    assert replays[:2] == [120, 111]
    assert codes(gpus[0]) == {"pcie_replays": ("warn", "watch")}
    assert codes(gpus[0], HwThresholds(pcie_replays_watch=500)) == {}


def test_idle_gen1_is_not_a_downtrained_link() -> None:
    gpus = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-rtx4090x8-idle-gen1.txt"))
    idle, busy = gpus[0], gpus[1]
    assert (idle.pcie_gen, idle.pcie_gen_max, idle.perf_state, idle.clock_reasons) == (
        1, 4, "P8", ["idle"])  # fmt: skip
    assert codes(idle) == {}  # ASPM lowers the generation at idle: not a fault
    assert busy.clock_reasons == ["sw_power_cap"] and busy.power_w == 445.38
    assert codes(busy) == {}  # at its power cap under load is normal
    # the same reading, busy: a generation below max is a finding
    loaded = idle.model_copy(update={"clock_reasons": [], "perf_state": "P0"})
    assert codes(loaded) == {"pcie_gen_downtrained": ("warn", "reboot node")}
    narrow = idle.model_copy(update={"pcie_width": 8})
    assert codes(narrow)["pcie_width_downtrained"] == ("fail", "reboot node")


def test_560_titan_v_without_ecc_or_remapper() -> None:
    (g,) = nvsmi.read_nvidia_smi_q(text("nvsmi-q-560-titanv-idle.txt"))
    assert (g.name, g.driver_version, g.vbios) == ("NVIDIA TITAN V", "560.35.03", "88.00.36.00.01")
    assert g.remap_pending is None and g.ecc_volatile_uncorrected is None  # N/A: no evidence
    assert codes(g) == {}


def test_retired_pages_rma_line_and_pending_blacklist() -> None:
    gpus = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-retired-pages-dbe.txt"))
    assert [(g.retired_sbe, g.retired_dbe, g.retired_pending) for g in gpus[:2]] == [
        (60, 5, False), (2, 61, True)]  # fmt: skip
    assert codes(gpus[1]) == {
        "retired_pages_rma": ("fail", "drain and RMA"),
        "retired_pages_pending": ("fail", "reset GPU"),
    }
    assert codes(gpus[3]) == {"retired_pages_pending": ("fail", "reset GPU")}  # 6 SBE, pending
    assert codes(gpus[2]) == {}


def test_old_driver_block_without_health_sections_reads_as_no_evidence() -> None:
    (g,) = nvsmi.read_nvidia_smi_q((DATA / "real" / "nvidia-smi-q-k8s-265-k40c.txt").read_text())
    assert (g.name, g.driver_version) == ("Tesla K40c", "440.64.00")
    assert g.clock_reasons is None and g.pcie_gen is None and codes(g) == {}


# ---- nvidia-smi -q -x, --query-gpu, nvlink ---------------------------------------------------


def test_xml_575_recovery_action_and_event_reasons() -> None:
    (g,) = nvsmi.read_nvidia_smi_xml(text("nvsmi-qx-575-rtx4070-laptop.xml"))
    assert (g.driver_version, g.uuid) == ("575.51.02", "GPU-529b3263-c96d-b557-bc75-697f04917eda")
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (2, 4, 8, 8)
    assert g.clock_reasons == ["idle"] and g.recovery_action == "None"
    assert (g.remap_pending, g.remap_histogram["max"]) == (False, 64)
    assert (g.power_w, g.power_limit_w, g.power_default_limit_w) == (11.15, 95, 55)
    assert (g.temp_c, g.temp_slowdown_margin_c) == (41, 48)
    assert codes(g) == {}  # idle at gen 2: not down-trained


def test_query_gpu_csv_identity() -> None:
    (g,) = nvsmi.read_nvidia_smi_csv(text("nvsmi-query-580-h100-golden.csv"))
    assert (g.index, g.pci_bus_id, g.vbios, g.driver_version) == (
        0, "00000000:00:06.0", "96.00.DA.00.0C", "580.159.04")  # fmt: skip
    with pytest.raises(SmiError, match="line 2 has"):
        nvsmi.read_nvidia_smi_csv("index, uuid, pci.bus_id\n0, GPU-x\n")


def test_nvlink_all_up_and_all_inactive() -> None:
    up = nvsmi.read_nvidia_smi_nvlink(text("nvlink-s-a100x8-up.txt"))
    assert len(up) == 8 and {(g.nvlink_up, g.nvlink_total) for g in up} == {(12, 12)}
    assert all(codes(g) == {} for g in up)
    (down,) = nvsmi.read_nvidia_smi_nvlink(text("nvlink-s-a100-inactive.txt"))
    assert (down.index, down.nvlink_up, down.nvlink_total) == (6, 0, None)
    assert codes(down) == {"nvlink_inactive": ("info", "none")}  # no fabric in use: no drain
    assert codes(down, HwThresholds(expect_nvlinks=12)) == {"nvlink_down": ("fail", "reset GPU")}


def test_nvlink_reading_merges_into_the_q_reading_by_uuid() -> None:
    (q,) = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-a10-remap-pending.txt"))
    link = GpuReading(vendor="nvidia", source="nvidia-smi nvlink", index=0, uuid=q.uuid,
                      nvlink_up=3, nvlink_total=4)  # fmt: skip
    (m,) = merge([q, link])
    assert (m.remap_pending, m.nvlink_up, m.source) == (
        True,
        3,
        "nvidia-smi -q + nvidia-smi nvlink",
    )
    assert set(codes(m)) == {"row_remap_pending", "nvlink_down"}


# ---- amd-smi ---------------------------------------------------------------------------------


def test_amd_smi_ecc_blocks_including_xgmi_wafl() -> None:
    (g,) = amdsmi.read_amd_smi_metric(text("amd-smi-metric-ecc-block.txt"))
    assert list(g.ecc_blocks) == ["UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "HDP", "XGMI_WAFL"]
    assert g.ecc_blocks["XGMI_WAFL"] == {"correctable": 0, "uncorrectable": 0, "deferred": 0}
    assert codes(g) == {}
    bad = g.model_copy(update={"ecc_blocks": {**g.ecc_blocks, "XGMI_WAFL": {
        "correctable": 250, "uncorrectable": 1, "deferred": 0}}})  # fmt: skip
    assert codes(bad) == {"xgmi_uncorrectable": ("fail", "reset GPU"),
                          "xgmi_corrected_errors": ("warn", "watch")}  # fmt: skip


def test_amd_smi_ecc_totals_and_pcie() -> None:
    (g,) = amdsmi.read_amd_smi_metric(text("amd-smi-metric-ecc-totals.txt"))
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected, g.ecc_deferred) == (0, 0, 0)
    assert list(g.ecc_blocks) == ["UMC", "SDMA"]  # the "..." of the excerpt is no block
    gpus = amdsmi.read_amd_smi_metric(text("amd-smi-metric-pcie-mi300.txt"))
    assert [(x.index, x.pcie_gen, x.pcie_width, x.pcie_replays) for x in gpus] == [
        (0, 5, 16, 0),
        (1, 5, 16, 0),
    ]  # fmt: skip  "SPEED: 32 GT/s" is gen 5


def test_amd_smi_json_with_units() -> None:
    (g,) = amdsmi.read_amd_smi_metric(text("amd-smi-metric-power.json.txt"))
    assert (g.source, g.power_w, g.clock_reasons) == ("amd-smi metric --json", 10, [])


def test_amd_smi_xgmi_table_all_peers_reachable() -> None:
    gpus = amdsmi.read_amd_smi_xgmi(text("amd-smi-xgmi-mi300x8.txt"))
    assert [g.pci_bus_id for g in gpus][:2] == ["0000:0c:00.0", "0000:22:00.0"]
    assert len(gpus) == 8 and {(g.xgmi_up, g.xgmi_total) for g in gpus} == {(7, 7)}
    assert codes(gpus[7], HwThresholds(expect_xgmi_links=7)) == {}
    assert codes(gpus[7].model_copy(update={"xgmi_up": 5})) == {"xgmi_down": ("fail", "reset GPU")}


# ---- kernel logs -----------------------------------------------------------------------------


def test_xid_79_fallen_off_the_bus_reboots_the_node() -> None:
    events = kernlog.read_kernel_log(text("journal-xid-79-fallen-off-bus.log"))
    assert [(e.kind, e.code, pci_key(e.pci_bus_id or "")) for e in events] == [
        ("xid", 79, "0000:01:00"), ("fallen_off_bus", None, "0000:01:00")]  # fmt: skip
    (v,) = judge_node([], events, T)
    (f,) = v.findings
    assert (f.code, f.status, f.action) == ("xid_79", Status.FAIL, Action.REBOOT_NODE)
    assert f.evidence.startswith("2x, last: ")


def test_xid_119_gsp_timeouts_on_one_gpu() -> None:
    events = kernlog.read_kernel_log(text("dmesg-xid-119-gsp-timeout.log"))
    assert {(e.code, e.pci_bus_id) for e in events} == {(119, "0000:9b:00")} and len(events) == 5
    (v,) = judge_node([], events, T)
    assert [(f.code, f.action) for f in v.findings] == [("xid_119", Action.REBOOT_NODE)]


def test_xid_154_takes_the_drivers_stated_action() -> None:
    events = kernlog.read_kernel_log(text("dmesg-gb200-xid-149-154.log"))
    first = next(e for e in events if e.code == 154)
    assert (first.pci_bus_id, first.recovery_action) == ("0009:01:00", "Drain and Reset")
    verdicts = {v.key: v for v in judge_node([], events, T)}
    assert set(verdicts) == {"0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00"}
    by = {f.code: f for f in verdicts["0008:01:00"].findings}
    assert by["xid_149"].evidence.startswith("2x") and by["xid_149"].action == Action.RESET_GPU
    assert "'GPU Reset Required'" in by["xid_154"].reason


def test_application_xids_are_not_node_faults_unless_they_recur() -> None:
    line = "[1.0] NVRM: Xid (PCI:0000:00:06): 31, pid={}, name=exe, Ch 0000000a"
    one = kernlog.read_kernel_log("\n".join(line.format(7) for _ in range(5)))
    (v,) = judge_node([], one, T)
    assert (v.findings[0].status, v.action, v.bad) == (Status.INFO, Action.NONE, [])
    many = kernlog.read_kernel_log("\n".join(line.format(p) for p in (7, 8, 9)))
    (v,) = judge_node([], many, T)
    assert (v.findings[0].status, v.action) == (Status.WARN, Action.WATCH)


def test_amdgpu_ras_poison_and_bad_page_threshold() -> None:
    events = kernlog.read_kernel_log(text("dmesg-amdgpu-ras-poison.log"))
    assert [(e.kind, e.pci_bus_id) for e in events] == [
        ("poison_consumed", "0000:68:00.0"),
        ("poison_created", "0000:68:00.0"),
        ("bad_page_threshold", "0000:08:00.0"),
    ]  # the APEI and "Error Address" lines name no GPU event
    verdicts = {v.key: v for v in judge_node([], events, T)}
    assert verdicts["0000:68:00"].action == Action.RESET_GPU
    assert verdicts["0000:08:00"].action == Action.DRAIN_RMA


def test_events_attach_to_the_gpu_at_their_pci_address() -> None:
    (g,) = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-a10-remap-pending.txt"))
    events = kernlog.read_kernel_log("[5.0] NVRM: Xid (PCI:0000:07:00): 63, pid=1, Row Remapper")
    (v,) = judge_node([g], events, T)
    assert {f.code for f in v.findings} == {"row_remap_pending", "xid_63"}


# ---- which reader, and bad input ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("nvsmi-q-560-titanv-idle.txt", "nvidia-smi -q"),
        ("nvsmi-qx-575-rtx4070-laptop.xml", "nvidia-smi -q -x"),
        ("nvlink-s-a100x8-up.txt", "nvidia-smi nvlink"),
        ("amd-smi-metric-pcie-mi300.txt", "amd-smi metric"),
        ("amd-smi-metric-power.json.txt", "amd-smi metric"),
        ("amd-smi-xgmi-mi300x8.txt", "amd-smi xgmi"),
        ("dmesg-xid-119-gsp-timeout.log", "kernel log"),
    ],
)
def test_kind_of_each_capture(name: str, kind: str) -> None:
    assert hwcapture.read_capture(text(name)).kind == kind


def test_not_a_capture_names_what_it_reads() -> None:
    with pytest.raises(SmiError, match=r"not a capture fleetval reads .*nvidia-smi -q"):
        hwcapture.read_capture((DATA / "real" / "nccl-1292-bare-version.log").read_text())


def test_tree_nests_by_indent_and_keeps_values() -> None:
    t = tree(["A", "    B : 1", "    C", "        D : x", "E : N/A"])
    assert t == {"A": {"B": "1", "C": {"D": "x"}}, "E": None}


# ---- fleetval gpu-health ---------------------------------------------------------------------


def test_cli_finding_exits_1_and_names_evidence_and_action() -> None:
    res = runner.invoke(app, ["gpu-health", str(HW / "nvsmi-q-535-a10-remap-pending.txt"),
                              str(HW / "journal-xid-79-fallen-off-bus.log")])  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "Remapped Rows Pending: Yes (uncorrectable 4, correctable 0)" in res.output
    assert "-> reset GPU" in res.output and "node: reboot node" in res.output


def test_cli_json_healthy_exits_0() -> None:
    res = runner.invoke(app, ["gpu-health", str(HW / "nvlink-s-a100x8-up.txt"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["action"] == "none" and len(doc["gpus"]) == 8
    assert doc["gpus"][0]["reading"]["nvlink_up"] == 12


def test_cli_expect_nvlinks_turns_inactive_links_into_a_failure() -> None:
    res = runner.invoke(app, ["gpu-health", str(HW / "nvlink-s-a100-inactive.txt"), "--json",
                              "--expect-nvlinks", "12"])  # fmt: skip
    assert res.exit_code == 1
    (gpu,) = json.loads(res.output)["gpus"]
    assert gpu["findings"][0]["severity"] == "fail" and gpu["action"] == "reset GPU"


def test_cli_unreadable_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    res = runner.invoke(app, ["gpu-health", str(bad)])
    assert res.exit_code == 2 and "not a capture fleetval reads" in res.output
    res = runner.invoke(app, ["gpu-health", str(tmp_path / "missing.txt")])
    assert res.exit_code == 2 and "cannot read" in res.output


def test_memory_rules_on_a_real_reading_with_one_field_changed() -> None:
    """No public capture shows these; the real A10 reading with the one field a failing GPU
    prints differently stands in."""
    (g,) = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-a10-remap-pending.txt"))
    healthy = g.model_copy(update={"remap_pending": False, "remap_uncorrected": 0})
    assert codes(healthy) == {}
    failed = healthy.model_copy(update={"remap_failed": True})
    assert codes(failed) == {"row_remap_failed": ("fail", "drain and RMA")}
    agg = healthy.model_copy(update={"ecc_aggregate_uncorrected": 2})
    assert codes(agg) == {"ecc_uncorrected_aggregate": ("warn", "watch")}
    vol = healthy.model_copy(update={"ecc_volatile_uncorrected": 1})
    assert codes(vol) == {"ecc_uncorrected_volatile": ("fail", "reset GPU")}
    spares = healthy.model_copy(update={"remap_histogram": {"max": 190, "low": 2, "none": 0}})
    assert codes(spares) == {"row_remap_spares_low": ("warn", "watch")}
    driver = healthy.model_copy(update={"recovery_action": "Drain and Reset"})
    assert codes(driver) == {"driver_recovery_action": ("fail", "reset GPU")}


# ---- peers within a node, firmware across a fleet --------------------------------------------


def test_peer_relative_clocks_need_three_busy_gpus() -> None:
    gpus = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-rtx4090x8-idle-gen1.txt"))
    # two busy GPUs (2640 and 2520 MHz, 445 and 446 W) and six idle: nothing to compare
    assert peer_findings(gpus, T) == {}
    # the power-brake node: all eight equally slow, so no GPU strays (hw_slowdown names it)
    assert (
        peer_findings(nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-h100x8-power-brake.txt")), T) == {}
    )
    # four idle ones (210 MHz) made busy, power left out, one clocked up
    busy = [g.model_copy(update={"clock_reasons": ["sw_power_cap"], "perf_state": "P2",
                                 "power_w": None}) for g in (gpus[2], gpus[3], gpus[5], gpus[6])]  # fmt: skip
    busy[3] = busy[3].model_copy(update={"sm_clock_mhz": 1800.0})
    found = peer_findings(busy, T)
    assert list(found) == [busy[3].key()]  # three at 210 MHz, one at 1800
    (f,) = found[busy[3].key()]
    assert f.code == "peer_sm" and f.action == Action.WATCH
    assert f.evidence == "SM clock 1800 MHz, +757% from the others' median 210 MHz (tolerance 10%)"


def test_firmware_drift_across_two_real_h100_nodes() -> None:
    n1 = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-h100x8-replays.txt"))
    n2 = nvsmi.read_nvidia_smi_q(text("nvsmi-q-535-h100x8-power-brake.txt"))
    drift = firmware_drift({"n1": n1, "n2": n2}, T)
    # 8 GPUs on 96.00.74.00.01 / 535.183.01 and 8 on 96.00.74.00.0D / 535.161.08: no majority
    assert len(drift) == 8 and {node for node, _ in drift} == {"n2"}
    f = drift[("n2", n2[0].key())][0]
    assert f.evidence == ("vbios 96.00.74.00.0D on n2; the most common (8 of 16 GPUs; no "
                          "majority): 96.00.74.00.01")  # fmt: skip
    golden = HwThresholds(golden={"NVIDIA H100 SXM": {"vbios": "96.00.74.00.0D",
                                                      "driver_version": "535.161.08"}})  # fmt: skip
    drift = firmware_drift({"n1": n1, "n2": n2}, golden)
    assert {node for node, _ in drift} == {"n1"}
    assert [f.code for f in drift[("n1", n1[0].key())]] == ["vbios_drift", "driver_drift"]


def test_cli_directories_are_nodes_checked_for_drift(tmp_path: Path) -> None:
    for node, name in (("n1", "nvsmi-q-535-h100x8-replays.txt"),
                       ("n2", "nvsmi-q-535-h100x8-power-brake.txt")):  # fmt: skip
        (tmp_path / node).mkdir()
        (tmp_path / node / "q.txt").write_text(text(name))
    res = runner.invoke(app, ["gpu-health", str(tmp_path / "n1"), str(tmp_path / "n2"), "--json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["nodes"] == {"n1": "reboot node", "n2": "reboot node"}
    n2 = [g for g in doc["gpus"] if g["node"] == "n2"]
    assert {f["code"] for f in n2[0]["findings"]} == {"hw_slowdown", "vbios_drift", "driver_drift"}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner.invoke(app, ["gpu-health", str(empty)]).exit_code == 2


@pytest.mark.parametrize(
    ("name", "models"),
    [
        ("rocm-smi-rocm-3124-mi300x.txt", ["AMD Instinct MI300X"]),
        ("rocm-smi-easybuild-3978-productname.csv", ["AMD Instinct MI100"] * 2),
        ("rocm-smi-rocm_smi_lib-159-mi200-mcm.json", ["AMD Instinct MI250X"]),
    ],
)
def test_rocm_smi_names_the_gpus_and_judges_nothing(name: str, models: list[str]) -> None:
    capture = hwcapture.read_capture((DATA / "real" / name).read_text())
    assert capture.kind == "rocm-smi" and [r.model for r in capture.readings] == models
    assert all(codes(r) == {} for r in capture.readings)  # identity only: no evidence
