"""Environment fingerprint: parsers on captured tool output, and fingerprint() end to end."""

import json
import pickle
import platform
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fleetval.checks import environment as env
from fleetval.store.schema import NODES_SCHEMA

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden" / "h100"
SMI = DATA / "smi"
H100_UUID = "GPU-8820b3cc-ff52-fc76-f238-e0bc8f3c6a51"


def test_nvidia_smi_query_golden() -> None:
    rows = env.parse_nvidia_smi_query((GOLDEN / "nvidia-smi-query.csv").read_text())
    assert rows == [
        {
            "index": "0",
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": H100_UUID,
            "pci.bus_id": "00000000:00:06.0",
            "driver_version": "580.159.04",
            "memory.total": "81559 MiB",
            "vbios_version": "96.00.DA.00.0C",
        }
    ]


def test_nvidia_smi_query_several_gpus_and_na() -> None:
    text = (
        "index, name, uuid, pci.bus_id\n"
        "0, NVIDIA A100-SXM4-80GB, GPU-aaaa, 00000000:07:00.0\n"
        "1, NVIDIA A100-SXM4-80GB, [N/A], 00000000:0F:00.0\n"
    )
    rows = env.parse_nvidia_smi_query(text)
    assert [r["pci.bus_id"] for r in rows] == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert rows[1]["uuid"] is None
    assert env.parse_nvidia_smi_query("") == []


def test_nvidia_smi_header_golden() -> None:
    info = env.parse_nvidia_smi_header((GOLDEN / "nvidia-smi.txt").read_text())
    assert info == {"driver_version": "580.159.04", "cuda_version": "13.0"}
    assert env.parse_nvidia_smi_header("no banner") == {
        "driver_version": None,
        "cuda_version": None,
    }


def test_nvidia_smi_topo_golden() -> None:
    topo = env.parse_nvidia_smi_topo((GOLDEN / "nvidia-smi-topo.txt").read_text())
    assert topo == {"GPU0": {"cpu_affinity": "0-15", "numa_affinity": "0"}}


def test_lscpu_golden() -> None:
    info = env.parse_lscpu((GOLDEN / "lscpu.txt").read_text())
    assert info["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert (info["cpus"], info["sockets"], info["numa_nodes"]) == (16, 1, 1)
    assert info["numa_cpus"] == {0: "0-15"}


def test_lscpu_two_numa_nodes() -> None:
    text = "Model name: AMD EPYC 9654 96-Core Processor\nNUMA node(s): 2\n"
    text += "NUMA node0 CPU(s): 0-95,192-287\nNUMA node1 CPU(s): 96-191,288-383\n"
    info = env.parse_lscpu(text)
    assert info["numa_cpus"] == {0: "0-95,192-287", 1: "96-191,288-383"}
    assert len(env.parse_cpulist(info["numa_cpus"][1])) == 192


def test_cpuinfo() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7A53 64-Core Processor\n"
    )
    assert env.parse_cpuinfo(text) == "AMD EPYC 7A53 64-Core Processor"
    assert env.parse_cpuinfo("") is None


def test_cpulist_round_trip() -> None:
    assert env.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert env.format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert env.parse_cpulist("") == set()
    assert env.format_cpulist(set()) == ""


@pytest.mark.parametrize(
    ("raw", "sysfs"),
    [
        ("00000000:00:06.0", "0000:00:06.0"),
        ("0000:C1:00.0", "0000:c1:00.0"),
        ("c1:00.0", "0000:c1:00.0"),
    ],
)
def test_normalize_pci_id(raw: str, sysfs: str) -> None:
    assert env.normalize_pci_id(raw) == sysfs


def test_rocm_smi_json() -> None:
    info = env.parse_rocm_smi((SMI / "rocm-smi.json").read_text())
    assert info["driver_version"] == "6.7.0"
    assert [g["name"] for g in info["gpus"]] == ["AMD Instinct MI250X"] * 2
    assert [g["pci_bus_id"] for g in info["gpus"]] == ["0000:C1:00.0", "0000:C6:00.0"]
    assert info["gpus"][0]["uuid"] == "0x5f2a0c4e1b7d9a33"
    assert env.parse_rocm_smi("not json") == {"gpus": [], "driver_version": None}


def test_amd_smi_static_json_both_shapes() -> None:
    text = (SMI / "amd-smi-static.json").read_text()
    info = env.parse_amd_smi_static(text)
    assert info["driver_version"] == "6.8.5"
    assert [g["pci_bus_id"] for g in info["gpus"]] == ["0000:0c:00.0", "0000:22:00.0"]
    assert info["gpus"][1]["name"] == "AMD Instinct MI300X"
    assert info["gpus"][0]["gfx"] == "gfx942"
    # Older amd-smi prints the bare list.
    legacy = env.parse_amd_smi_static(json.dumps(json.loads(text)["gpu_data"]))
    assert legacy == info


@pytest.mark.parametrize(
    ("raw", "text"),
    [((2, 28, 9), "2.28.9"), ((2, 21, 5, "rc1"), "2.21.5-rc1"), (22809, "2.28.9"), (2708, "2.7.8")],
)
def test_version_string(raw: object, text: str) -> None:
    assert env.version_string(raw) == text


def test_numa_from_sysfs(tmp_path: Path) -> None:
    for node, cpus in ((0, "0-7"), (1, "8-15")):
        (tmp_path / "node" / f"node{node}").mkdir(parents=True)
        (tmp_path / "node" / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (tmp_path / "node" / "possible").write_text("0-1\n")  # not a node directory
    assert env.numa_cpus(str(tmp_path / "node")) == {0: set(range(8)), 1: set(range(8, 16))}
    dev = tmp_path / "pci" / "0000:c1:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    assert env.pci_numa_node("00000000:C1:00.0", str(tmp_path / "pci")) == 1
    assert env.pci_numa_node("0000:00:01.0", str(tmp_path / "pci")) is None


def test_run_tool_missing_failing_and_hanging(tmp_path: Path) -> None:
    assert env.run_tool("fleetval-no-such-tool-xyz") is None
    assert env.run_tool("false") is None
    assert env.run_tool("sleep", "5", timeout_s=0.2) is None
    assert env.run_tool("echo", "hi") == "hi\n"


def _fake_nvidia_smi(bin_dir: Path) -> None:
    """An nvidia-smi on PATH that replays the H100 captures by argument."""
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n'
        f'  --query-gpu=*) cat "{GOLDEN}/nvidia-smi-query.csv" ;;\n'
        f'  topo) cat "{GOLDEN}/nvidia-smi-topo.txt" ;;\n'
        f'  *) cat "{GOLDEN}/nvidia-smi.txt" ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_fingerprint_keys_and_local_facts() -> None:
    fp = env.fingerprint()
    assert tuple(fp) == env.FINGERPRINT_KEYS == tuple(env.Fingerprint.__annotations__)
    # Every fingerprint key is a NODES_SCHEMA column (run_id/node/ray_node_id come from the driver).
    assert set(fp) <= set(NODES_SCHEMA.names)
    assert fp["python_version"] == platform.python_version()
    assert fp["torch_version"] == torch.__version__
    assert fp["kernel"] == platform.release()
    assert isinstance(fp["gpu_count"], int) and isinstance(fp["gpu_ids"], list)
    extra = json.loads(fp["extra"])
    assert "numa_nodes" in extra and "env" in extra


def test_a_fingerprint_reaches_the_driver_without_importing_torch() -> None:
    """A rank's fingerprint is unpickled in the driver (the CLI, the service): no value may be
    a torch type, whose unpickling imports torch there."""
    code = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('torch' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(env.fingerprint()), capture_output=True
    )
    assert proc.stdout.decode().strip() == "False", proc.stderr.decode()[-2000:]


def test_fingerprint_reads_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    fp = env.fingerprint()
    assert fp["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert (fp["gpu_count"], fp["gpu_ids"]) == (1, [H100_UUID])
    assert (fp["driver_version"], fp["cuda_version"]) == ("580.159.04", "13.0")
    assert fp["rocm_version"] is None
    extra = json.loads(fp["extra"])
    assert extra["gpu_tool"] == "nvidia-smi"
    assert extra["gpu_pci_bus_ids"] == ["00000000:00:06.0"]
    assert extra["nvidia_topo"]["GPU0"]["cpu_affinity"] == "0-15"
    assert extra["env"]["NCCL_SOCKET_IFNAME"] == "eth0"


def test_fingerprint_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("driver fell over")

    monkeypatch.setattr(env, "node_gpus", broken)
    fp = env.fingerprint()
    assert tuple(fp) == env.FINGERPRINT_KEYS
    assert fp["hostname"]  # gathered before the failure
    assert fp["gpu_model"] is None


MAPS = """\
7f1c2a000000-7f1c2a200000 r-xp 00000000 08:01 123 /usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so
7f1c3b000000-7f1c3b100000 r--p 00000000 08:01 456 /usr/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2
7f1c3b100000-7f1c3b900000 r-xp 00100000 08:01 456 /usr/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2
7f1c4c000000-7f1c4c100000 r-xp 00000000 08:01 789 /opt/rocm-6.2.0/lib/librccl.so.1.0.60200
7f1c5d000000-7f1c5d100000 r-xp 00000000 08:01 999 /usr/lib/libnccl-net.so
"""


def test_loaded_collective_libraries_from_proc_maps() -> None:
    assert env.loaded_collective_libraries(MAPS) == [
        "/usr/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2",
        "/opt/rocm-6.2.0/lib/librccl.so.1.0.60200",
    ]  # the net plugin is not the library
    assert env.loaded_collective_libraries("") == []


def test_runtime_collective_version_is_none_without_a_loaded_library() -> None:
    assert env.runtime_collective_version() == (None, None)  # CPU torch loads no NCCL
