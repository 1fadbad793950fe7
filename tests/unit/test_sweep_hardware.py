"""A sweep's verdict and drain list carry the node's GPU hardware finding beside its
performance evidence: rows built from real captured files (tests/data/hw, sources in
tests/data/README.md) through the health check's own row code, judged on a simulated fleet."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from fleetval.checks.health.hardware import NodeHardware, node_hardware_rows, read_node_hardware
from fleetval.detect.hardware import HwThresholds
from fleetval.fleet.drain import drain_lines
from fleetval.fleet.judge import Measurement, Planned
from fleetval.fleet.score import hardware_notes, measurement
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.simulate import SimFleet
from fleetval.fleet.verdict import FleetVerdict, run_rounds
from fleetval.store.schema import Row
from fleetval.vocab import NodeState, Status, SweepPhase

HW = Path(__file__).resolve().parents[1] / "data" / "hw"
EIGHT = [f"node-{i}" for i in range(8)]
XID79 = "hardware: Xid 79 (GPU has fallen off the bus) on PCI 0000:01:00 -> reboot node"


HEALTHY = "no slower than the fleet's level by more than 15% (95%)"


def health_rows(node: str, *files: str, **update: object) -> list[dict]:
    """The health step's hardware rows for `node` as the store reads them back; `update`
    changes fields of its first GPU's reading (no public capture is a watch-only node)."""
    hw = read_node_hardware("captured", [str(HW / f) for f in files], node)
    if update:
        first = hw.readings[0].model_copy(update=update)
        hw = NodeHardware(hw.source, [first, *hw.readings[1:]], hw.events)
    return [
        Row(run_id="r1", step="health", check="health", node=node, **f).to_record()
        for f in node_hardware_rows(hw, HwThresholds(), node)
    ]


def busbw_row(node: str, gbps: float) -> dict:
    return Row(run_id="r1", step="ar", check="all_reduce", node=node, collective="all_reduce",
               size_bytes=1 << 26, world_size=2, busbw_gbps=gbps,
               status=Status.PASS.value).to_record()  # fmt: skip


def test_a_step_failed_only_by_hardware_is_scored_and_the_finding_rides_beside_it() -> None:
    alone = Planned(1, SweepPhase.ALONE, ("node-2",))
    rows = [*health_rows("node-2", "journal-xid-79-fallen-off-bus.log"), busbw_row("node-2", 41.0)]
    drain = next(r["message"] for r in rows if r["status"] == Status.FAIL.value)
    m = measurement(alone, rows, [("health", drain)])
    assert not m.failed and m.score == 41.0  # busbw still judged
    note = m.hardware["node-2"]
    assert (note.action, note.drain) == ("reboot node", True) and note.text() == XID79
    # a health failure that is not the hardware's (a software row) still fails the job
    broken = {**busbw_row("node-2", 1.0), "step": "health", "metric": "nccl_env",
              "status": Status.FAIL.value, "message": "NCCL_IB_HCA names no device"}  # fmt: skip
    failed = measurement(alone, [*rows, broken], [("health", broken["message"])])
    assert failed.failed and failed.detail == "health: NCCL_IB_HCA names no device"
    assert failed.hardware["node-2"].drain  # said even when the job failed


WATCH = {"ecc_volatile_corrected": 5000}  # the real idle Titan V, with many corrected errors


def test_healthy_hardware_says_nothing_and_a_watch_finding_drains_nothing() -> None:
    assert hardware_notes(health_rows("n0", "nvsmi-q-560-titanv-idle.txt")) == {}
    assert hardware_notes([busbw_row("n2", 90.0)]) == {}
    (watch,) = hardware_notes(health_rows("n1", "nvsmi-q-560-titanv-idle.txt", **WATCH)).values()
    assert (watch.action, watch.drain) == ("watch", False)
    assert watch.finding.startswith("ecc_corrected_high (many corrected errors often precede")
    rma = hardware_notes(health_rows("n3", "nvsmi-q-535-retired-pages-dbe.txt"))["n3"]
    assert (rma.action, rma.drain) == ("drain and RMA", True)


def sweep_with_hardware(fleet: SimFleet, hardware: dict[str, list[dict]]) -> FleetVerdict:
    """The simulated fleet's measurements, each alone job with its node's hardware rows."""

    def measure(jobs: list[Planned]) -> list[Measurement]:
        out = fleet.measure(jobs)
        return [
            dataclasses.replace(m, hardware=hardware_notes(hardware.get(m.job.nodes[0], [])))
            if m.job.phase == SweepPhase.ALONE
            else m
            for m in out
        ]

    return run_rounds(fleet.nodes, measure, SweepSettings(max_drain_share=0.3))


def test_drain_list_says_the_hardware_reason_next_to_the_performance_evidence() -> None:
    fleet = SimFleet(list(EIGHT), compute={"node-2": 0.4}, noise=0.02, disturbed=0.0)
    xid = health_rows("node-2", "journal-xid-79-fallen-off-bus.log")
    v = sweep_with_hardware(fleet, {"node-2": xid})
    (n2,) = v.drain
    assert n2.node == "node-2" and "alone" in n2.reason and n2.reason.endswith(XID79)
    assert XID79 in n2.evidence and n2.hardware_action == "reboot node"
    (line,) = drain_lines(v, "slurm", "run-1")
    assert "alone" in line and "Xid 79 (GPU has fallen off the bus)" in line
    assert f"# node-2: fleetval: {n2.reason} (run run-1)" in drain_lines(v, "kubectl", "run-1")
    assert any("-> reboot node" in x for x in drain_lines(v, "ray", "run-1"))
    (entry,) = json.loads(drain_lines(v, "json", "run-1")[0])["drain"]
    assert entry["hardware"] == {
        "finding": "Xid 79 (GPU has fallen off the bus) on PCI 0000:01:00",
        "action": "reboot node",
    }
    assert FleetVerdict.from_dict(v.to_dict()).drain[0] == n2


def test_hardware_drains_a_node_whose_busbw_is_fine_and_says_so() -> None:
    fleet = SimFleet(list(EIGHT), noise=0.02, disturbed=0.0)
    hardware = {
        "node-4": health_rows("node-4", "journal-xid-79-fallen-off-bus.log"),
        "node-6": health_rows("node-6", "nvsmi-q-560-titanv-idle.txt", **WATCH),
    }
    v = sweep_with_hardware(fleet, hardware)
    assert [n.node for n in v.drain] == ["node-4"] and v.flagged
    n4 = v.drain[0]
    assert n4.confidence == "high" and n4.reason == f"{HEALTHY}; {XID79}"
    assert n4.evidence[-1] == (
        f"drained on its hardware finding alone: on performance it was healthy ({HEALTHY})"
    )
    n6 = next(n for n in v.nodes if n.node == "node-6")  # watch: said, stays in service
    assert n6.state == NodeState.HEALTHY and n6.reason.endswith("-> watch")
    assert n6.hardware_action == "watch"


def test_sweep_history_lists_gpus_whose_counters_grow_over_the_sweeps(tmp_path: Path) -> None:
    """Two stored sweeps, each with node-1's health rows from the real 8x H100 capture; in
    the second, GPU 0's PCIe replays grew from the 120 it printed to 150."""
    from typer.testing import CliRunner

    from fleetval.cli import app
    from fleetval.store.dataset import Store
    from fleetval.testing.sweeps import write_sweep

    store = Store(tmp_path)
    ok = {n: ("healthy", 10.0) for n in ("node-0", "node-1")}
    ids = [write_sweep(store, i, ok) for i in range(2)]
    first = health_rows("node-1", "nvsmi-q-535-h100x8-replays.txt")
    later = health_rows("node-1", "nvsmi-q-535-h100x8-replays.txt", pcie_replays=150)
    for run_id, rows in zip(ids, (first, later), strict=True):
        recs = [{**r, "run_id": run_id, "details": json.loads(r["details"])} for r in rows]
        store.write_results(run_id, "job0-health", [Row(**r) for r in recs])
    uuid = json.loads(first[1]["details"])["reading"]["uuid"]  # GPU 0, after the node row
    data = ["--data", str(tmp_path)]
    res = CliRunner().invoke(app, ["sweep-history", "--json", *data])
    assert res.exit_code == 0, res.output
    watch = json.loads(res.output)["hardware_watch"]
    grew = [w for w in watch if w["what"] == "pcie_replays"]
    assert grew == [{"node": "node-1", "device_id": uuid, "what": "pcie_replays", "runs": 2,
                     "evidence": f"+30: 120 ({ids[0]}) -> 150 ({ids[1]})"}]  # fmt: skip
    assert ("node-1", "finding hw_slowdown") in {(w["node"], w["what"]) for w in watch}
    res = CliRunner().invoke(app, ["sweep-history", *data])
    assert res.exit_code == 0, res.output
    assert f"watch node-1 {uuid}: pcie_replays +30: 120 ({ids[0]}) -> 150" in res.output
    assert f"hardware watch: {len(watch)} counter(s) or finding(s)" in res.output
    for cut in (["--last", "1"], ["--node", "node-0"]):  # one sweep grows nothing; no GPUs read
        res = CliRunner().invoke(app, ["sweep-history", "--json", *cut, *data])
        assert res.exit_code == 0 and json.loads(res.output)["hardware_watch"] == []


def test_a_job_the_cluster_could_not_place_is_no_evidence_against_its_nodes():
    from fleetval.run.job import NOT_PLACED
    from fleetval.run.outcome import StepOutcome
    from fleetval.run.sweep import _measurement

    job = Planned(2, SweepPhase.PAIR, ("node-1", "node-2"), "pair")
    placed = StepOutcome(
        3, 2, "allreduce", "bandwidth", "fail", f"{NOT_PLACED}group not ready", 60.0
    )
    m = _measurement(job, [], [placed])
    assert m.score is None and not m.failed  # measured nothing: not a failed job
    broke = StepOutcome(3, 2, "allreduce", "bandwidth", "fail", "rank 1 died", 1.0)
    assert _measurement(job, [], [broke]).failed
