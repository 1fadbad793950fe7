"""Health check: every judgement on plain values, then run_health in-process on a gloo group."""

import dataclasses
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from pydantic import ValidationError

from fleetval.checks import CHECKS
from fleetval.checks.base import CheckContext, Heartbeat, RankContext
from fleetval.checks.health import rank as h
from fleetval.finding import RowFinding
from fleetval.formats.nccllog import read_nccl_log
from fleetval.suite import parse_suite
from fleetval.vocab import Status

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden" / "h100"
LOGS = DATA / "logs"
SLINGSHOT = {"lo", "nmn0", "hsn0", "hsn1", "hsn2", "hsn3"}


# ---- params -------------------------------------------------------------------------------


def test_params_registered_and_validated() -> None:
    assert CHECKS["health"].params is h.HealthParams
    suite = parse_suite(
        {
            "name": "h",
            "steps": [{"check": "health", "expect_gpus_per_node": 8, "memory_balance_pct": 5}],
        }
    )
    step = suite.steps[0]
    assert isinstance(step, h.HealthParams) and step.expect_gpus_per_node == 8
    with pytest.raises(ValidationError, match="memory_balance_fail_pct"):
        h.HealthParams(check="health", memory_balance_pct=30, memory_balance_fail_pct=20)
    with pytest.raises(ValidationError):
        h.HealthParams(check="health", min_nccl_version="latest")
    with pytest.raises(ValidationError):
        h.HealthParams(check="health", expect_gpu=8)  # typo: extra keys are refused


# ---- visible devices, GPU count, affinity -------------------------------------------------


def test_visible_devices_match() -> None:
    f = h.judge_visible_devices({"CUDA_VISIBLE_DEVICES": "3"}, 1, rocm=False)
    assert f.status == Status.PASS and "CUDA_VISIBLE_DEVICES=3" in f.reason


def test_visible_devices_mismatch_fails() -> None:
    f = h.judge_visible_devices({"CUDA_VISIBLE_DEVICES": "0,1"}, 1, rocm=False)
    assert f.status == Status.FAIL
    assert f.reason == "CUDA_VISIBLE_DEVICES='0,1' names 2 device(s) but torch sees 1"


def test_visible_devices_unset_with_many_gpus_warns() -> None:
    assert h.judge_visible_devices({}, 8, rocm=False).status == Status.WARN
    assert h.judge_visible_devices({}, 1, rocm=False).status == Status.PASS


def test_visible_devices_rocm_layers() -> None:
    # HIP indexes within ROCR's list: 1 of (4,5) is fine, 2 is past its end.
    ok = h.judge_visible_devices(
        {"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "1"}, 1, rocm=True
    )
    assert ok.status == Status.PASS
    bad = h.judge_visible_devices(
        {"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "2"}, 0, rocm=True
    )
    assert bad.status == Status.FAIL and "indexes past ROCR_VISIBLE_DEVICES=4,5" in bad.reason
    # On CUDA, ROCR/HIP variables mean nothing.
    cuda = h.judge_visible_devices({"ROCR_VISIBLE_DEVICES": "0,1"}, 1, rocm=False)
    assert cuda.status == Status.PASS


@pytest.mark.parametrize(
    ("found", "expected", "status"),
    [
        (8, 8, Status.PASS),
        (7, 8, Status.FAIL),
        (9, 8, Status.WARN),
        (8, None, Status.INFO),  # counted, nothing declared to judge it against
        (None, None, Status.SKIP),  # no tool, nothing declared
    ],
)
def test_gpu_count(found: int | None, expected: int | None, status: Status) -> None:
    f = h.judge_gpu_count(found, expected, "nvidia-smi" if found is not None else None)
    assert f.status == status
    if status == Status.FAIL:
        assert f.reason == "nvidia-smi lists 7 GPUs, fewer than the 8 expected"


def test_a_declared_gpu_count_without_evidence_fails_unless_optional() -> None:
    """nvidia-smi failed: the suite's expect_gpus_per_node has nothing to judge it by."""
    f = h.judge_gpu_count(None, 8, None)
    assert f.status == Status.FAIL
    assert f.reason.startswith("expect_gpus_per_node=8 declared, but no evidence: no GPU tool")
    assert "optional" in f.reason  # says how to accept it
    assert h.judge_gpu_count(None, 8, None, optional=True).status == Status.SKIP


def test_declared_nccl_expectations_without_a_log_fail_unless_optional() -> None:
    why = "no NCCL log: backend is gloo"
    net = h.judge_transport(None, why_none=why, multinode=True, expect_network="IB")
    assert net.status == Status.FAIL and "expect_network=IB declared" in net.reason
    assert why in net.reason
    assert h.judge_transport(None, why_none=why, multinode=True, expect_network="IB",
                             optional=True).status == Status.SKIP  # fmt: skip
    plugin = h.judge_net_plugin(None, why_none=why, expect_plugin="aws-ofi-rccl")
    assert plugin.status == Status.FAIL
    version = h.judge_nccl_version(None, "2.18", "nccl", why_none=why)
    assert version.status == Status.FAIL and why in version.reason
    assert h.judge_nccl_version(None, "2.18", "nccl", optional=True).status == Status.SKIP


TWO_NODES = {0: set(range(0, 8)), 1: set(range(8, 16))}


@pytest.mark.parametrize(
    ("affinity", "gpu_node", "numa", "status"),
    [
        (set(range(8, 12)), 1, TWO_NODES, Status.PASS),
        (set(range(0, 4)), 1, TWO_NODES, Status.FAIL),
        (set(range(16)), 1, TWO_NODES, Status.WARN),  # not pinned at all
        (set(range(16)), -1, TWO_NODES, Status.SKIP),  # sysfs numa_node -1: platform doesn't say
        (set(range(16)), 0, {0: set(range(16))}, Status.PASS),  # one NUMA node (the H100 VM)
    ],
)
def test_cpu_affinity(affinity: set[int], gpu_node: int, numa: dict, status: Status) -> None:
    f = h.judge_cpu_affinity(affinity, gpu_node, numa)
    assert f.status == status
    if status == Status.FAIL:
        assert f.reason == "pinned to CPUs 0-3, none on the GPU's NUMA node 1 (CPUs 8-15)"


# ---- NCCL version and environment ---------------------------------------------------------


def test_nccl_version() -> None:
    assert h.judge_nccl_version("2.28.9", "2.18", "nccl").status == Status.PASS
    old = h.judge_nccl_version("2.18.3", "2.20.0", "rccl")
    assert (
        old.status == Status.FAIL and old.reason == "RCCL 2.18.3 is older than the minimum 2.20.0"
    )
    assert h.judge_nccl_version(None, None, "nccl").status == Status.SKIP
    assert h.judge_nccl_version("2.28.9", None, "nccl").status == Status.INFO  # no minimum
    # Numeric, not lexical: 2.9 < 2.10.
    assert h.judge_nccl_version("2.9.6", "2.10", "nccl").status == Status.FAIL


def test_nccl_filter_syntax() -> None:
    assert h.parse_nccl_filter("hsn0,hsn1") == (False, False, ["hsn0", "hsn1"])
    assert h.parse_nccl_filter("^docker,lo") == (True, False, ["docker", "lo"])
    assert h.parse_nccl_filter("=eth0") == (False, True, ["eth0"])
    assert h.parse_nccl_filter("^=mlx5_1:1") == (True, True, ["mlx5_1"])


def test_socket_ifname_names_no_interface_fails() -> None:
    """The golden bad-ifname capture: NCCL_SOCKET_IFNAME=doesnotexist0."""
    f = h.judge_socket_ifname("doesnotexist0", {"lo", "eth0"})
    assert f.status == Status.FAIL
    assert f.reason == (
        "NCCL_SOCKET_IFNAME=doesnotexist0 selects no interface on this node (have: eth0, lo)"
    )


@pytest.mark.parametrize(
    ("value", "status", "selected"),
    [
        ("hsn0,hsn1,hsn2,hsn3", Status.PASS, ["hsn0", "hsn1", "hsn2", "hsn3"]),
        ("hsn", Status.PASS, ["hsn0", "hsn1", "hsn2", "hsn3"]),  # a prefix
        ("=hsn", Status.FAIL, []),  # exact: no interface is called "hsn"
        ("^nmn,lo", Status.PASS, ["hsn0", "hsn1", "hsn2", "hsn3"]),
        ("^hsn,nmn,lo", Status.FAIL, []),
        ("hsn0,hsn7", Status.WARN, ["hsn0"]),
        ("lo", Status.WARN, ["lo"]),
    ],
)
def test_socket_ifname(value: str, status: Status, selected: list[str]) -> None:
    f = h.judge_socket_ifname(value, SLINGSHOT)
    assert f.status == status, f.reason
    assert f.details["selected"] == selected


def test_socket_ifname_unset_beside_management_network_warns() -> None:
    f = h.judge_socket_ifname(None, SLINGSHOT)
    assert f.status == Status.WARN and "NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3" in f.reason
    assert h.judge_socket_ifname(None, {"lo", "eth0"}).status == Status.PASS


def test_ib_hca() -> None:
    hcas = {"mlx5_0", "mlx5_1"}
    assert h.judge_ib_hca("mlx5_0:1,mlx5_1:1", hcas).status == Status.PASS
    assert h.judge_ib_hca("mlx5", hcas).status == Status.PASS
    assert h.judge_ib_hca("mlx5_0,mlx5_4", hcas).status == Status.WARN
    none = h.judge_ib_hca("mlx5_0", set())
    assert none.status == Status.FAIL and "(have: none)" in none.reason
    assert h.judge_ib_hca(None, set()).status == Status.PASS


@pytest.mark.parametrize(
    ("value", "status"),
    [(None, Status.PASS), ("PHB", Status.PASS), ("sys", Status.PASS), ("2", Status.WARN),
     ("FAST", Status.FAIL), ("9", Status.FAIL)],
)  # fmt: skip
def test_gdr_level(value: str | None, status: Status) -> None:
    assert h.judge_gdr_level(value).status == status


# ---- transport and plugin from the NCCL log -----------------------------------------------


def _log(name: str):
    path = GOLDEN / name if (GOLDEN / name).exists() else LOGS / name
    return read_nccl_log(path)


def test_transport_from_golden_logs() -> None:
    ok = h.judge_transport(
        _log("nccl-debug-info.log"), why_none="", multinode=False, expect_network=None
    )
    assert ok.status == Status.PASS
    assert ok.reason == "network Socket; over eth0; GDR disabled"
    bad = h.judge_transport(
        _log("nccl-debug-bad-ifname.log"), why_none="", multinode=False, expect_network=None
    )
    assert bad.status == Status.FAIL
    assert bad.reason == (
        "NCCL reported ncclInvalidUsage; last warning: Bootstrap : no socket interface found"
    )


def test_transport_expectations() -> None:
    ib = _log("rccl-ib-mlx5.log")
    assert h.judge_transport(ib, why_none="", multinode=True, expect_network="IB").status == (
        Status.PASS
    )
    wrong = h.judge_transport(ib, why_none="", multinode=True, expect_network="AWS Libfabric")
    assert wrong.status == Status.FAIL and wrong.reason == (
        "NCCL used IB; the suite expects AWS Libfabric"
    )
    sockets = _log("nccl-debug-info.log")
    tcp = h.judge_transport(sockets, why_none="", multinode=True, expect_network=None)
    assert tcp.status == Status.WARN and "TCP sockets" in tcp.reason
    mgmt = h.judge_transport(
        _log("rccl-no-plugin-mgmt-net.log"), why_none="", multinode=True, expect_network=None
    )
    assert mgmt.status == Status.FAIL and "ncclRemoteError" in mgmt.reason
    skip = h.judge_transport(None, why_none="no NCCL log: backend is gloo", multinode=False,
                             expect_network=None)  # fmt: skip
    assert (skip.status, skip.reason) == (Status.SKIP, "no NCCL log: backend is gloo")


def test_net_plugin() -> None:
    ofi = _log("rccl-ofi-slingshot.log")
    found = h.judge_net_plugin(ofi, why_none="", expect_plugin="aws-ofi-rccl")
    assert (found.status, found.reason) == (Status.PASS, "aws-ofi-rccl 1.4.0 (provider cxi)")
    missing = h.judge_net_plugin(
        _log("rccl-ib-mlx5.log"), why_none="", expect_plugin="aws-ofi-rccl"
    )
    assert missing.status == Status.FAIL and "no external plugin" in missing.reason
    internal = h.judge_net_plugin(_log("nccl-debug-info.log"), why_none="", expect_plugin=None)
    assert internal.status == Status.INFO  # nothing expected: recorded only
    assert h.judge_net_plugin(None, why_none="x", expect_plugin=None).status == Status.SKIP


def test_expand_debug_file() -> None:
    assert h.expand_debug_file("/tmp/nccl.%h.%p.log", "nid001234", 51200) == (
        "/tmp/nccl.nid001234.51200.log"
    )
    assert h.expand_debug_file("/tmp/100%%-%p", "h", 7) == "/tmp/100%-7"


# ---- ROCm-only findings -------------------------------------------------------------------


def test_rocm_findings_skip_off_rocm() -> None:
    assert h.judge_miopen_cache(False, []).status == Status.SKIP
    assert h.judge_fine_grain_pcie(False, None).status == Status.SKIP
    assert h.judge_kernel_args(False, "ro quiet", ["iommu=pt"]).status == Status.SKIP


def test_miopen_cache() -> None:
    good = [
        ("MIOPEN_USER_DB_PATH", "/scratch/db", True),
        ("default", "/home/u/.cache/miopen", True),
    ]
    assert h.judge_miopen_cache(True, good).status == Status.PASS
    set_bad = [("MIOPEN_USER_DB_PATH", "/ro/db", False), ("default", "/home/u/.cache", True)]
    f = h.judge_miopen_cache(True, set_bad)
    assert f.status == Status.FAIL and "MIOPEN_USER_DB_PATH=/ro/db" in f.reason
    default_bad = [("default", "/home/u/.config/miopen", False)]
    assert h.judge_miopen_cache(True, default_bad).status == Status.WARN


def test_miopen_dirs_probe_real_paths(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        env = {"HOME": str(tmp_path), "MIOPEN_USER_DB_PATH": str(ro / "db")}
        dirs = dict((var, ok) for var, _, ok in h._miopen_dirs(env))
        # A non-existent dir under a writable parent is creatable; root ignores modes.
        assert dirs["default"] is True
        if os.geteuid() != 0:
            assert dirs["MIOPEN_USER_DB_PATH"] is False
    finally:
        ro.chmod(0o700)


def test_fine_grain_pcie() -> None:
    assert h.judge_fine_grain_pcie(True, "1").status == Status.PASS
    unset = h.judge_fine_grain_pcie(True, None)
    assert unset.status == Status.WARN and "HSA_FORCE_FINE_GRAIN_PCIE unset" in unset.reason
    assert h.judge_fine_grain_pcie(True, "0").status == Status.WARN


def test_kernel_args() -> None:
    wanted = ["iommu=pt", "amd_iommu=on"]
    cmd = "BOOT_IMAGE=/vmlinuz ro amd_iommu=on iommu=pt quiet"
    assert h.judge_kernel_args(True, cmd, wanted).status == Status.PASS
    f = h.judge_kernel_args(True, "BOOT_IMAGE=/vmlinuz ro quiet iommu=on", wanted)
    assert f.status == Status.WARN and "lacks iommu=pt, amd_iommu=on" in f.reason
    assert h.judge_kernel_args(True, None, wanted).status == Status.SKIP


def test_required_env() -> None:
    req = {"NCCL_IB_GID_INDEX": "3", "NCCL_CROSS_NIC": "1"}
    assert h.judge_required_env({"NCCL_IB_GID_INDEX": "3", "NCCL_CROSS_NIC": "1"}, req).status == (
        Status.PASS
    )
    f = h.judge_required_env({"NCCL_IB_GID_INDEX": "0"}, req)
    assert f.status == Status.FAIL
    assert f.reason == "NCCL_IB_GID_INDEX is '0', needs '3'; NCCL_CROSS_NIC is unset, needs '1'"
    assert h.judge_required_env({}, {}).status == Status.SKIP


# ---- memory balance -----------------------------------------------------------------------


def test_memory_balance_names_the_low_rank() -> None:
    free = [79.0, 79.2, 40.0, 78.8]
    low = h.judge_memory_balance(free, 2, 10, 25, "device memory free")
    assert low.status == Status.FAIL
    assert low.reason == (
        "rank 2: 40.0 GiB device memory free, 49.3% below the median 78.9 GiB of 4 rank(s)"
    )
    assert low.details["worst_rank"] == 2
    assert (low.value, low.unit) == (40.0, "GiB")
    assert h.judge_memory_balance(free, 0, 10, 25, "free").status == Status.PASS


def test_memory_balance_thresholds() -> None:
    free = [100.0, 100.0, 85.0]  # 15% below the median
    assert h.judge_memory_balance(free, 2, 10, 25, "free").status == Status.WARN
    assert h.judge_memory_balance(free, 2, 20, 25, "free").status == Status.PASS
    assert h.judge_memory_balance([None, 5.0], 0, 10, 25, "free").status == Status.SKIP


def test_meminfo() -> None:
    text = "MemTotal:       16318904 kB\nMemFree:         1023448 kB\nMemAvailable:   12000000 kB\n"
    assert h.parse_meminfo_available(text) == 12000000 * 1024
    assert h.parse_meminfo_available("MemTotal: 1 kB\n") is None


# ---- run_health in-process on a 1-rank gloo group -----------------------------------------


@pytest.fixture
def gloo_group() -> Iterator[None]:
    # Port 0: the OS binds a free port in the same call (one found free first can be taken).
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _ctx(backend: str) -> CheckContext:
    rank = RankContext(
        run_id="r1", job=0, rank=0, world_size=1, local_rank=0, local_world_size=1,
        node="n0", node_rank=0, backend=backend, device="cpu", device_id=None, seed=0,
    )  # fmt: skip
    return CheckContext(rank, "health", (), Heartbeat())


def test_run_health_on_cpu(gloo_group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "doesnotexist0")
    monkeypatch.setenv("FLEETVAL_TEST_MODE", "on")
    params = h.HealthParams(check="health", required_env={"FLEETVAL_TEST_MODE": "on"})
    rows = h.run_health(_ctx("gloo"), params)
    by = {r.metric: r for r in rows}
    assert all(r.check == "health" and r.step == "health" and r.node == "n0" for r in rows)
    assert len(by) == len(rows)  # one row per finding
    assert by["memory_balance"].status == "pass" and by["memory_balance"].unit == "GiB"
    assert by["nccl_env_socket_ifname"].status == "fail"
    assert by["required_env"].status == "pass"
    assert by["nccl_transport"].status == "skip"
    assert by["nccl_transport"].message == "no NCCL log: backend is gloo"
    assert by["visible_devices"].message == "rank runs on cpu: no GPU to see"
    assert {"gpu_count", "rccl_kernel_args"} <= set(by)  # node-wide, on local rank 0
    assert all(r.status in {s.value for s in Status} for r in rows)
    assert all(r.message for r in rows if r.status != "pass")


def test_run_health_reads_the_nccl_debug_file(
    gloo_group: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor's NCCL_DEBUG_FILE (with %h/%p) is found and judged.

    The group is gloo; the rank is labelled nccl only so the check looks for the log.
    """
    host = socket.gethostname().split(".")[0]
    shutil.copy(GOLDEN / "nccl-debug-bad-ifname.log", tmp_path / f"nccl.{host}.{os.getpid()}.log")
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "nccl.%h.%p.log"))
    by = {r.metric: r for r in h.run_health(_ctx("nccl"), h.HealthParams(check="health"))}
    assert by["nccl_transport"].status == "fail"
    assert "ncclInvalidUsage" in by["nccl_transport"].message
    assert by["net_plugin"].status == "info"
    # No log at the expanded path: SKIP says where it looked.
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "other.%p.log"))
    by = {r.metric: r for r in h.run_health(_ctx("nccl"), h.HealthParams(check="health"))}
    assert by["nccl_transport"].status == "skip"
    assert by["nccl_transport"].message == f"no NCCL log at {tmp_path}/other.{os.getpid()}.log"


def test_run_health_without_process_group_skips_balance() -> None:
    assert not dist.is_initialized()
    rows = h.run_health(_ctx("gloo"), h.HealthParams(check="health"))
    bal = next(r for r in rows if r.metric == "memory_balance")
    assert (bal.status, bal.message) == ("skip", "one rank: nothing to compare")


def test_run_health_without_the_jobs_process_group_fails_balance() -> None:
    """A rank of a 2-rank job whose group is gone compared nothing: that is a failure."""
    assert not dist.is_initialized()
    ctx = _ctx("gloo")
    ctx.rank = dataclasses.replace(ctx.rank, world_size=2, local_world_size=2)
    bal = next(r for r in h.run_health(ctx, h.HealthParams(check="health"))
               if r.metric == "memory_balance")  # fmt: skip
    assert bal.status == "fail" and "no process group in a job of 2 ranks" in bal.message


def test_a_probe_that_raises_is_a_fail_with_its_error() -> None:
    def broken() -> RowFinding:
        raise OSError("nvidia-smi: couldn't communicate with the NVIDIA driver")

    f = h._safe("gpu_count", broken)
    assert f.status == Status.FAIL
    assert f.reason == (
        "probe failed: OSError: nvidia-smi: couldn't communicate with the NVIDIA driver"
    )


def test_loopback_ifname_where_the_job_meets_on_loopback_passes(
    gloo_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NCCL_SOCKET_IFNAME=lo is what fleetval sets where a job's ranks meet on 127.0.0.1 (the
    embedded local Ray): a clean health run there passes; the same setting in a job across
    nodes, or on a group that met elsewhere, still warns that other nodes cannot connect."""
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    rows = h.run_health(_ctx("gloo"), h.HealthParams(check="health"))
    (row,) = [r for r in rows if r.metric == "nccl_env_socket_ifname"]
    assert row.status == "pass" and "as fleetval sets it" in row.message
    assert h.judge_socket_ifname("lo", {"lo", "eth0"}).status == Status.WARN
