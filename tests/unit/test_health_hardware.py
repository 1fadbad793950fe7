"""The health check's hardware side without a cluster: captured files standing in for the
node's tools, its rows (per GPU and the node's drain line), the `gpus/` Parquet table read
back by pandas and DuckDB, and NVML's answers converted (no GPU here: only the conversion,
`fleetval.formats.nvml.from_nvml`, is tested; the calls into NVML run on a GPU host)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from fleetval.checks.health.hardware import (
    ENV_CAPTURES,
    NODE_METRIC,
    NodeHardware,
    node_hardware_rows,
    read_node_hardware,
)
from fleetval.checks.health.rank import HealthParams
from fleetval.cli.app import app
from fleetval.detect.hardware import HwThresholds, judge_reading, watch_list
from fleetval.formats import amdsmi, nvsmi
from fleetval.formats.nvml import clock_reasons, from_nvml
from fleetval.store.dataset import Store
from fleetval.store.schema import GPU_METRIC, Row
from fleetval.vocab import Status

HW = Path(__file__).resolve().parents[1] / "data" / "hw"
REAL = Path(__file__).resolve().parents[1] / "data" / "real"
T = HwThresholds()


def rows_of(hw: NodeHardware, node: str = "node-a", run_id: str = "r1") -> list[Row]:
    return [
        Row(run_id=run_id, step="health", check="health", node=node, **f)
        for f in node_hardware_rows(hw, T, node)
    ]


def test_captured_files_stand_in_for_the_tools(tmp_path: Path) -> None:
    node = tmp_path / "node-a"
    node.mkdir()
    (node / "q.txt").write_text((HW / "nvsmi-q-535-a10-remap-pending.txt").read_text())
    (node / "dmesg.log").write_text((HW / "journal-xid-79-fallen-off-bus.log").read_text())
    hw = read_node_hardware("auto", [str(tmp_path / "{node}" / "*")], "node-a")
    assert hw.source == "captured files" and len(hw.readings) == 1 and len(hw.events) == 2
    rows = {(r.metric, r.device_id): r for r in rows_of(hw)}
    gpu = rows[(GPU_METRIC, "GPU-73d12ef7-f589-f867-4259-c7090ab44736")]
    assert gpu.status == Status.FAIL and gpu.value == 1
    assert "row_remap_pending: Remapped Rows Pending: Yes" in gpu.message
    assert gpu.details["reading"]["remap_uncorrected"] == 4
    ghost = rows[(GPU_METRIC, "0000:01:00")]  # Xid 79 at an address no reading names
    assert ghost.status == Status.FAIL and "xid_79" in ghost.message
    node_row = rows[(NODE_METRIC, None)]
    assert node_row.status == Status.FAIL
    assert node_row.message.startswith("drain node-a: reboot node: PCI 0000:01:00: xid_79")
    assert node_row.details["drain"] is True


def test_env_var_names_captures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CAPTURES, str(HW / "nvlink-s-a100x8-up.txt"))
    hw = read_node_hardware("auto", [], "n0")
    assert hw.source == "captured files" and len(hw.readings) == 8


def test_healthy_node_passes_only_what_was_judged() -> None:
    q = REAL / "nvidia-smi-q-h100-golden.txt"
    hw = read_node_hardware("captured", [str(q)], "n0")
    node, gpu = rows_of(hw)
    assert (gpu.status, node.status) == (Status.PASS, Status.PASS)
    assert node.message == "1 GPU(s), no action (captured files)"
    # nvlink -s alone says nothing of ECC, PCIe or clocks: not judged, never a pass
    links = read_node_hardware("captured", [str(HW / "nvlink-s-a100x8-up.txt")], "n0")
    rows = rows_of(links)
    assert {r.status for r in rows} == {Status.SKIP}
    assert "not judged: ECC, PCIe link, clock-limit reasons" in rows[1].message
    assert rows[0].message == "8 GPU(s) read, none judged (captured files)"


def test_unreadable_sources_are_skipped_with_the_reason(tmp_path: Path) -> None:
    missing = read_node_hardware("captured", [str(tmp_path / "none-*.txt")], "n0")
    (row,) = rows_of(missing)
    assert row.status == Status.SKIP and "no captured file matches" in row.message
    bad = tmp_path / "x.txt"
    bad.write_text("hello\n")
    (row,) = rows_of(read_node_hardware("captured", [str(bad)], "n0"))
    assert row.status == Status.SKIP and "not a capture fleetval reads" in row.message
    (row,) = rows_of(read_node_hardware("off", [], "n0"))
    assert row.status == Status.SKIP and "off" in row.message


def test_dcgm_and_fabric_findings_judged_and_stored(tmp_path: Path) -> None:
    """A node's captures holding no GPU reading at all, only other tools' results (a DCGM 2.4
    diag whose PCIe test failed on GPU 0's NVLinks, a Fabric block pasted alone): the health
    check judges them as `gpu-health` does, and the gpus table keeps the findings."""
    node = tmp_path / "node-a"
    node.mkdir()
    (node / "diag.txt").write_text((HW / "dcgmi-diag-2.4-pcie-nvlink-warning-dcgm-49.txt")
                                   .read_text())  # fmt: skip
    (node / "fabric.txt").write_text((HW / "nvsmi-q-fabric-insufficient-azhpc-506.txt")
                                     .read_text())  # fmt: skip
    hw = read_node_hardware("captured", [str(tmp_path / "{node}" / "*")], "node-a")
    assert hw.readings == [] and {o.kind for o in hw.observations} >= {"dcgm_test", "fabric"}
    rows = {(r.metric, r.device_id): r for r in rows_of(hw)}
    gpu0 = rows[(GPU_METRIC, "index:0")]
    assert gpu0.status == Status.FAIL and gpu0.details["action"] == "reboot node"
    assert "dcgm_pcie: dcgmi diag Integration PCIe: Fail: GPU 0" in gpu0.message
    assert "NvLink link 0 is currently down" in gpu0.message
    fabric = rows[(GPU_METRIC, "node")]
    assert fabric.status == Status.FAIL
    assert "nvlink_fabric: Fabric: State Completed, Status Insufficient Resources" in fabric.message
    assert rows[(NODE_METRIC, None)].message.startswith("drain node-a: reboot node: ")

    store = Store(tmp_path / "data")
    store.write_results("r1", "job0-health", rows_of(hw))
    gpus = {r["device_id"]: r for r in store.gpus(["r1"]).to_pylist()}
    assert set(gpus) == {"index:0", "node"}
    assert (gpus["index:0"]["findings"], gpus["index:0"]["action"]) == (["dcgm_pcie"],
                                                                        "reboot node")  # fmt: skip
    assert gpus["node"]["findings"] == ["nvlink_fabric"] and gpus["node"]["status"] == "fail"
    assert gpus["index:0"]["pcie_replays"] is None and gpus["index:0"]["nvlink_errors"] is None


def test_fabric_health_summary_unhealthy_drains_the_node() -> None:
    """`nvidia-smi -q | grep -C3` output (dra-driver-nvidia-gpu #626): Fabric Completed/Success
    but its Health Summary Unhealthy. The grep kept no GPU header, so the finding is the
    node's, and the node's row drains it."""
    hw = read_node_hardware("captured", [str(HW / "nvsmi-q-fabric-unhealthy-dra-626.txt")], "n0")
    (node_row, fabric) = rows_of(hw)
    assert fabric.status == Status.FAIL and "Health Summary Unhealthy" in fabric.message
    assert fabric.details["findings"][0]["code"] == "nvlink_fabric"
    assert node_row.details["drain"] is True


def test_live_tools_go_through_the_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: `nvidia-smi -q` and `topo -m` answered by real captures of an 8x H100 node
    (the -q's Fabric blocks, the topo matrix's NVLink pairs), read as `gpu-health` reads them."""
    from fleetval.checks.health import hardware as live

    answers = {
        ("nvidia-smi", "-q"): HW / "nvsmi-q-535-h100x8-power-brake.txt",
        ("nvidia-smi", "topo", "-m"): HW / "topo-m-h100x8-deepep-145.txt",
    }

    def tool(*argv: str, timeout_s: float = 0) -> str | None:
        path = answers.get(argv)
        return path.read_text() if path else None

    monkeypatch.setattr(live, "run_tool", tool)
    monkeypatch.setattr(live, "_nvml", lambda: None)
    monkeypatch.setattr(live, "_amdsmi_lib", lambda: None)
    hw = read_node_hardware("auto", [], "n0")
    assert hw.source == "nvidia-smi" and len(hw.readings) == 8
    kinds = [o.kind for o in hw.observations]
    assert kinds.count("fabric") == 8 and "nvlink_pair" in kinds
    assert all(o.ok for o in hw.observations)  # Completed/Success, NV18 everywhere printed
    assert "kernel log: dmesg not readable" in hw.unread
    gpus = [r for r in rows_of(hw) if r.metric == GPU_METRIC]
    assert len(gpus) == 8 and {r.details["findings"][0]["code"] for r in gpus} == {"hw_slowdown"}


def test_suite_sets_thresholds_and_refuses_typos() -> None:
    p = HealthParams(check="health", hardware={"pcie_replays_watch": 500, "expect_nvlinks": 12},
                     hardware_captures=["/x/{node}/*"])  # fmt: skip
    assert p.hardware.pcie_replays_watch == 500 and p.hardware_source == "auto"
    with pytest.raises(ValueError, match="pcie_replay_watch"):
        HealthParams(check="health", hardware={"pcie_replay_watch": 5})


def test_gpus_table_written_once_read_by_pandas_and_duckdb(tmp_path: Path) -> None:
    hw = read_node_hardware("captured", [str(HW / "nvsmi-q-535-h100x8-power-brake.txt")], "n1")
    store = Store(tmp_path)
    store.write_results("r1", "job0-health", rows_of(hw, "n1"))
    gpus = store.gpus(["r1"]).to_pandas()
    assert len(gpus) == 8 and set(gpus["node"]) == {"n1"}
    first = gpus.sort_values("index").iloc[0]
    assert (first["pcie_replays"], first["sm_clock_mhz"], first["action"]) == (
        67,
        86.0,
        "reboot node",
    )
    assert list(first["clock_reasons"]) == ["hw_slowdown", "hw_power_brake"]
    assert list(first["findings"]) == ["hw_slowdown"] and first["status"] == "fail"
    con = duckdb.connect()
    n, brake = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE list_contains(clock_reasons, 'hw_power_brake')) "
        f"FROM read_parquet('{tmp_path}/gpus/*/*.parquet')"
    ).fetchone()
    assert (n, brake) == (8, 8)
    store.write_results("r2", "job0-other", [Row(run_id="r2", check="p2p", metric="x")])
    assert not (tmp_path / "gpus" / "r2").exists()  # no hardware rows, no gpus file


# ---- NVML's answers, converted -------------------------------------------------------------


def test_nvml_answers_convert_like_nvidia_smi_prints_them() -> None:
    """The golden H100's nvidia-smi -q values as NVML returns them (milliwatts, a clocks-event
    bitmask, the recovery-action enum, per-link states) read the same as the text."""
    (text,) = nvsmi.read_nvidia_smi_q((REAL / "nvidia-smi-q-h100-golden.txt").read_text())
    raw = {
        "Name": b"NVIDIA H100 80GB HBM3", "UUID": text.uuid, "Serial": "1752624018887",
        "PciBusId": "00000000:00:06.0", "VbiosVersion": "96.00.DA.00.0C",
        "DriverVersion": "580.159.04", "EccMode": 1,
        "EccCorrectedVolatile": 0, "EccUncorrectedVolatile": 0,
        "EccCorrectedAggregate": 0, "EccUncorrectedAggregate": 0,
        "RemappedRows": (0, 0, 0, 0), "RowRemapperHistogram": (2560, 0, 0, 0, 0),
        "CurrPcieLinkGeneration": 5, "MaxPcieLinkGeneration": 5, "CurrPcieLinkWidth": 16,
        "MaxPcieLinkWidth": 16, "PcieReplayCounter": 0, "PerformanceState": 0,
        "ClocksEventReasons": 0, "ClockSm": 1980, "MaxClockSm": 1980, "Temperature": 41,
        "PowerUsage": 126960, "EnforcedPowerLimit": 700000, "PowerDefaultLimit": 700000,
        "GpuRecoveryAction": 0,
    }  # fmt: skip
    live = from_nvml(0, raw)
    same = ("uuid", "pci_bus_id", "model", "vbios", "ecc_enabled", "remap_pending",
            "remap_histogram", "pcie_gen", "pcie_width", "pcie_replays", "perf_state",
            "clock_reasons", "sm_clock_mhz", "temp_c", "power_w", "power_limit_w",
            "recovery_action")  # fmt: skip
    assert {f: getattr(live, f) for f in same} == {f: getattr(text, f) for f in same}
    assert live.nvlink_up is None and judge_reading(live, T) == []


def test_nvml_bitmask_enum_and_links() -> None:
    assert clock_reasons(0x1) == ["idle"]
    assert clock_reasons(0x8 | 0x80) == ["hw_slowdown", "hw_power_brake"]
    r = from_nvml(3, {"NvLinkStates": [True] * 17 + [False], "GpuRecoveryAction": 4,
                      "NvLinkErrors": {"replay": 0, "recovery": 0, "crc": 120}})  # fmt: skip
    assert (r.nvlink_up, r.nvlink_total, r.recovery_action) == (17, 18, "Drain and Reset")
    codes = {f.code: f.action.value for f in judge_reading(r, T)}
    assert codes == {"driver_recovery_action": "reset GPU", "nvlink_down": "reset GPU",
                     "nvlink_crc_errors": "watch"}  # fmt: skip


def test_amdsmi_library_answers_convert_like_amd_smi_prints_them() -> None:
    """The amd-smi CHANGELOG's `metric --pcie` and `--ecc --ecc-blocks` GPU 0, as the amdsmi
    library returns them (amdsmi_get_pcie_info, amdsmi_get_gpu_total_ecc_count,
    amdsmi_get_gpu_ecc_count per block), read the same as the CLI text."""
    (pcie, _) = amdsmi.read_amd_smi_metric((HW / "amd-smi-metric-pcie-mi300.txt").read_text())
    (ecc,) = amdsmi.read_amd_smi_metric((HW / "amd-smi-metric-ecc-totals.txt").read_text())
    zero = {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}
    raw = {
        "pcie": {"pcie_static": {"max_pcie_width": 16, "pcie_interface_version": 5},
                 "pcie_metric": {"pcie_width": 16, "pcie_speed": 32000, "pcie_replay_count": 0}},
        "ecc": zero, "ecc_blocks": {"UMC": zero, "SDMA": zero, "GFX": None},
    }  # fmt: skip
    lib = amdsmi.from_amdsmi(0, raw)
    assert (lib.pcie_gen, lib.pcie_width, lib.pcie_replays) == (
        pcie.pcie_gen, pcie.pcie_width, pcie.pcie_replays)  # fmt: skip
    assert (lib.ecc_volatile_corrected, lib.ecc_volatile_uncorrected, lib.ecc_deferred) == (
        ecc.ecc_volatile_corrected, ecc.ecc_volatile_uncorrected, ecc.ecc_deferred)  # fmt: skip
    assert lib.ecc_blocks == ecc.ecc_blocks  # GFX refused: no block, not zeros
    assert (lib.pcie_gen_max, lib.pcie_width_max) == (5, 16) and judge_reading(lib, T) == []
    worse = amdsmi.from_amdsmi(0, {**raw, "ecc_blocks": {"XGMI_WAFL": {
        "correctable_count": 0, "uncorrectable_count": 3, "deferred_count": 0}}})  # fmt: skip
    assert [f.code for f in judge_reading(worse, T)] == ["xgmi_uncorrectable"]


def test_watch_list_over_runs_names_growing_counters_and_recurring_findings(
    tmp_path: Path,
) -> None:
    """Two sweeps of the real 8x H100 node: in the second, GPU 0's PCIe replays grew from the
    120 it printed to 150 (one field changed: no public capture pairs two readings of a GPU)."""
    first = read_node_hardware("captured", [str(HW / "nvsmi-q-535-h100x8-replays.txt")], "n1")
    later = list(first.readings)
    later[0] = later[0].model_copy(update={"pcie_replays": 150})
    store = Store(tmp_path)
    store.write_results("20260101-000000-aaaaaa", "job0-health",
                        rows_of(first, "n1", "20260101-000000-aaaaaa"))  # fmt: skip
    again = NodeHardware(first.source, later)
    store.write_results("20260102-000000-bbbbbb", "job0-health",
                        rows_of(again, "n1", "20260102-000000-bbbbbb"))  # fmt: skip
    items = watch_list(store.gpus().to_pylist())
    grew = [i for i in items if i.what == "pcie_replays"]
    assert [(i.device_id, i.evidence) for i in grew] == [(
        later[0].uuid,
        "+30: 120 (20260101-000000-aaaaaa) -> 150 (20260102-000000-bbbbbb)")]  # fmt: skip
    recurring = {(i.device_id, i.what) for i in items if i.what.startswith("finding")}
    assert (later[2].uuid, "finding hw_slowdown") in recurring  # power brake in both runs
    assert (later[0].uuid, "finding pcie_replays") in recurring
    res = CliRunner().invoke(app, ["gpu-watch", "--data", str(tmp_path)])
    assert res.exit_code == 0 and "pcie_replays +30: 120" in res.output
