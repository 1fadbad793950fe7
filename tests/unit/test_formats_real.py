"""The parsers on output collected from public issue threads and repositories, exactly as found
(tests/data/README.md names each source): the fields a human reads in each sample."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetval.checks.health.rank import judge_net_plugin, judge_transport, network_matches
from fleetval.formats import nvsmi, smi
from fleetval.formats.ingest import IngestError, read_results
from fleetval.formats.nccllog import NcclLogSummary, parse_nccl_log
from fleetval.vocab import Status

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def log(name: str) -> NcclLogSummary:
    return parse_nccl_log((REAL / name).read_text())


def text(name: str) -> str:
    return (REAL / name).read_text()


# ---- NCCL/RCCL debug logs -------------------------------------------------------------------


def test_hpcx_ibext_with_sharp() -> None:
    s = log("nccl-1357-ibext-sharp.log")
    assert (s.network, s.fabric, s.link_layer, s.sharp) == ("IBext", "IB", "IB", True)
    assert s.ib_devices[0] == "mlx5_0:1/IB/SHARP" and len(s.ib_devices) == 4
    assert s.net_plugin == "NCCL RDMA Plugin v6" and s.collnet_plugin == "SHARP"
    assert s.net_plugin_path == "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"
    assert s.hosts == ("qh100-gpu19", "qh100-gpu20")


def test_ibext_v8_over_roce_is_roce_and_meets_ib() -> None:
    s = log("nccl-1538-ibext_v8-roce.log")
    assert (s.network, s.link_layer, s.fabric) == ("IBext_v8", "RoCE", "RoCE")
    assert s.ib_devices[-1] == "mlx5_7:1/RoCE" and len(s.ib_devices) == 8
    assert network_matches(s, "IB") and network_matches(s, "RoCE")
    # the issue: expect_network IB judged IBext logs FAIL
    finding = judge_transport(s, why_none="", multinode=True, expect_network="IB")
    assert finding.status != Status.FAIL


def test_lines_without_host_prefix() -> None:
    s = log("nccl-1120-ibext_v6.log")
    assert s.network == "IBext_v6" and s.transports == ("NET/IBext_v6",)


def test_bare_nccl_version_line() -> None:
    s = log("nccl-1292-bare-version.log")
    assert (s.library, s.version, s.cuda_version) == ("nccl", "2.20.3", "12.4")


def test_hpcx_plugin_path_and_redacted_host() -> None:
    s = log("nccl-952-hpcx-plugin-path.log")
    assert s.net_plugin == "nccl_rdma_sharp_plugin" and s.network == "IBext"
    assert s.hostname == "<cluster_name>"
    assert judge_net_plugin(s, why_none="", expect_plugin="nccl_rdma").status == Status.PASS


def test_roce_with_internal_plugin() -> None:
    s = log("nccl-tests-185-roce.log")
    assert (s.version, s.cuda_version, s.network, s.fabric) == ("2.19.3", "12.3", "IB", "RoCE")
    assert s.ib_devices == ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE")
    assert s.net_plugin is None and s.net_plugin_missing
    assert s.hosts == ("dgxh100-4", "dgxh100-3")


def test_aws_ofi_libfabric_efa() -> None:
    s = log("nccl-1597-efa-libfabric.log")
    assert (s.network, s.fabric, s.ofi_provider) == ("Libfabric", "Libfabric", "efa")
    assert s.net_plugin == "aws-ofi-nccl"
    assert network_matches(s, "AWS Libfabric")
    assert judge_net_plugin(s, why_none="", expect_plugin="aws-ofi-nccl").status == Status.PASS


def test_log_shipper_prefix() -> None:
    s = log("ofi-889-log-shipper.log")
    assert (s.library, s.version, s.cuda_version) == ("nccl", "2.21.5", "12.8")
    assert s.hosts == ("ip-10-36-29-253",)


def test_aws_libfabric_with_timestamp_lines() -> None:
    s = log("ofi-715-efa-aws-libfabric.log")
    assert (s.network, s.ofi_provider, s.net_plugin) == ("AWS Libfabric", "efa", "aws-ofi-nccl")


def test_ofi_warning_with_function_source() -> None:
    s = log("ofi-1020-warn.log")
    assert s.warnings == ("NET/OFI OFI fi_getinfo() call failed: No data available",)
    assert s.hostname == "ip-172-31-3-90"


def test_mpirun_prefixed_log() -> None:
    s = log("ofi-24-mpirun-prefix.log")
    assert s.transports == ("NET/AWS Libfabric", "P2P/IPC")
    assert s.network == "AWS Libfabric" and s.net_plugin == "aws-ofi-nccl"
    assert s.warnings == ("NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument",)
    assert "ncclSystemError" in s.errors and len(s.hosts) == 4


def test_old_ring_lines() -> None:
    s = log("nccl-229-aws-libfabric-ring.log")
    assert s.network == "AWS Libfabric" and "P2P/IPC" in s.transports
    assert s.errors == ("ncclSystemError",)  # include/net.h:24 -> 2


def test_rccl_banner_without_prefix() -> None:
    s = log("rccl-tests-163-banner-socket.log")
    assert (s.library, s.version) == ("rccl", "2.21.5")
    assert (s.hip_version, s.rocm_version) == ("6.3.42134-a9a80e791", "6.3.3.0-74-cbc70b5")
    assert s.network == "Socket" and s.socket_interfaces == ("eno2np1",)
    assert s.net_plugin_missing


def test_rccl_banner_in_rccl_tests_output() -> None:
    s = log("rccl-1454-rccl-tests-banner.log")
    assert (s.version, s.hip_version, s.rocm_version) == ("2.21.5", "6.2.41134-", "6.2.4.0-139")
    assert s.warnings[0].startswith("[rocprofiler-sdk-rccl][2421] rocprofiler-register failed")


def test_bare_rccl_version_with_hip_tag_and_iommu_warning() -> None:
    s = log("rccl-1454-iommu-warn.log")
    assert (s.library, s.version, s.hip_version) == ("rccl", "2.20.5", "6.2")
    assert s.warnings == (
        'Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!',
    )


def test_rccl_kernel_and_environment_warnings() -> None:
    s = log("rccl-1026-mi250x-warn.log")
    assert [w.split('"')[1] for w in s.warnings] == [
        "HSA_FORCE_FINE_GRAIN_PCIE=1", "amd_iommu=on", "iommu=pt"]  # fmt: skip


def test_rccl_bare_version_with_build_tag() -> None:
    s = log("rccl-908-bare-version-warn.log")
    assert (s.library, s.version, s.hip_version) == ("rccl", "2.18.3", "5.5")
    assert s.warnings[-1] == "hipIpcGetMemHandle failed : invalid argument"
    assert s.hostname == "sharbox-ultra"


def test_warn_from_comm_libs_path_and_prefixed_banner() -> None:
    s = log("rccl-therock-comm-libs.log")
    assert (s.library, s.version) == ("rccl", "2.30.4")
    assert (s.hip_version, s.rocm_version) == ("7.14.60850-0000000", "7.14.0.7-9999-2b22ab0195")
    assert s.warnings == (
        'Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!',
    )
    assert (s.network, s.nranks, s.hosts) == ("Socket", 4, ("macpro2019-01",))


# ---- GPU tools --------------------------------------------------------------------------------


def test_amd_smi_list_form_with_na() -> None:
    info = smi.parse_amd_smi_static(text("amd-smi-openlinkhub-117-static-asic.json"))
    (gpu,) = info["gpus"]
    assert gpu["name"] == "Granite Ridge [Radeon Graphics]" and gpu["gfx"] == "gfx1036"
    assert gpu["uuid"] is None  # "asic_serial": "N/A"


def test_amd_smi_banner_before_json() -> None:
    raw = text("amd-smi-ajean-39-banner-gpu_data.txt")
    banner, body = smi.split_banner(raw)
    assert len(banner) == 4 and banner[0].endswith("SyntaxWarning: 'return' in a 'finally' block")
    assert body.startswith("{")
    # the thread's excerpt ends mid-document: a clear error, never "0 GPUs"
    with pytest.raises(smi.SmiError, match="cut off or malformed"):
        smi.parse_amd_smi_static(raw)
    # the real non-root banner before the real list-form document parses to its GPU
    nonroot = text("amd-smi-amdsmi-130-nonroot-banner.txt").splitlines()[0]
    info = smi.parse_amd_smi_static(
        nonroot + "\n" + text("amd-smi-openlinkhub-117-static-asic.json")
    )
    assert len(info["gpus"]) == 1 and info["banner"] == [nonroot]


def test_amd_smi_without_json_says_what_it_expected() -> None:
    with pytest.raises(smi.SmiError, match="expected a JSON document"):
        smi.parse_amd_smi_static(text("amd-smi-amdsmi-130-nonroot-banner.txt"))


def test_rocm_smi_csv() -> None:
    info = smi.parse_rocm_smi_csv(text("rocm-smi-easybuild-3978-productname.csv"))
    assert [g["model"] for g in info["gpus"]] == ["AMD Instinct MI100"] * 2
    assert info["gpus"][0]["name"] == "Arcturus GL-XL [AMD Instinct MI100]"
    driver = smi.parse_rocm_smi_csv(text("rocm-smi-easybuild-3978-driver.csv"))
    assert driver["driver_version"] == "4.18.0-348.12.2.el8_5.x86_64" and driver["gpus"] == []


def test_rocm_smi_text() -> None:
    info = smi.parse_rocm_smi_text(text("rocm-smi-rocm-3124-mi300x.txt"))
    (gpu,) = info["gpus"]
    assert (gpu["name"], gpu["model"]) == ("AMD Instinct MI300X OAM", "AMD Instinct MI300X")
    tabs = smi.parse_rocm_smi_text(text("rocm-smi-rocm-1351-mi100-tabs.txt"))
    assert tabs["gpus"][0]["model"] == "AMD Instinct MI100"  # from device id 0x738c


def test_rocm_smi_json_mi200_mcm_is_mi250x() -> None:
    (gpu,) = smi.parse_rocm_smi(text("rocm-smi-rocm_smi_lib-159-mi200-mcm.json"))["gpus"]
    assert gpu["gfx"] == "gfx90a" and gpu["model"] == "AMD Instinct MI250X"


@pytest.mark.parametrize(
    ("name", "driver", "cuda", "product", "model"),
    [
        ("nvidia-smi-q-h100-golden.txt", "580.159.04", "13.0", "NVIDIA H100 80GB HBM3",
         "NVIDIA H100 SXM"),
        ("nvidia-smi-q-sysmon-12.txt", "450.66", "11.0", "GeForce GTX 780", "GeForce GTX 780"),
        ("nvidia-smi-q-k8s-265-k40c.txt", "440.64.00", "10.2", "Tesla K40c", "Tesla K40c"),
    ],
)  # fmt: skip
def test_nvidia_smi_q(name: str, driver: str, cuda: str, product: str, model: str) -> None:
    # NOTE: the hardware reader (fleetval.formats.nvsmi) reads these; CUDA is no GPU's field
    assert re.search(rf"^CUDA Version\s+: {re.escape(cuda)}$", text(name), re.MULTILINE)
    (gpu,) = nvsmi.read_nvidia_smi_q(text(name))
    assert (gpu.driver_version, gpu.name, gpu.model) == (driver, product, model)
    assert gpu.uuid.startswith("GPU-") and gpu.pci_bus_id.startswith("0000")


@pytest.mark.parametrize(
    ("raw", "gfx", "sku"),
    [
        ("NVIDIA H100 80GB HBM3", None, "NVIDIA H100 SXM"),
        ("NVIDIA H100 PCIe", None, "NVIDIA H100 PCIe"),
        ("NVIDIA H100 NVL", None, "NVIDIA H100 NVL"),
        ("NVIDIA A100-SXM4-40GB", None, "NVIDIA A100 SXM"),
        ("AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", "gfx9010", "AMD Instinct MI250X"),
        ("AMD Instinct MI250X/MI250", "gfx90a", "AMD Instinct MI250X"),
        ("AMD Instinct MI300X OAM", "gfx942", "AMD Instinct MI300X"),
    ],
)
def test_gpu_model_normalisation(raw: str, gfx: str | None, sku: str) -> None:
    assert smi.gpu_model(raw, gfx) == sku


def test_gpu_label_uses_the_sku_for_expectations() -> None:
    from fleetval.checks.bandwidth import BUSBW_DEFAULTS, busbw_rule_for
    from fleetval.checks.spec import gpu_label

    mi250 = {"gpu_model": "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", "gpu_count": 8,
             "extra": json.dumps({"gpu_gfx": "gfx90a"})}  # fmt: skip
    assert gpu_label(mi250) == "AMD Instinct MI250X"
    sxm = gpu_label({"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8})
    pcie = gpu_label({"gpu_model": "NVIDIA H100 PCIe", "gpu_count": 8})
    assert busbw_rule_for(BUSBW_DEFAULTS, sxm, "all_reduce", 8, 1) is not None
    assert busbw_rule_for(BUSBW_DEFAULTS, pcie, "all_reduce", 8, 1) is None


# ---- results files ----------------------------------------------------------------------------


def test_nccl_tests_table_two_nodes() -> None:
    ing = read_results(text("nccl-tests-a3mega-h100-2node.txt"), "a3mega.txt")
    assert (ing.tool, ing.fmt, ing.collective, ing.world_size, ing.iters) == (
        "nccl-tests", "table", "all_reduce", 16, 20)  # fmt: skip
    assert len(ing.results) == 62 and {d.host for d in ing.devices} == {
        "ztan-mig-235z", "ztan-mig-gq73"}  # fmt: skip
    last_oop = [r for r in ing.results if not r.in_place][-1]
    assert (last_oop.size, last_oop.dtype, last_oop.op, last_oop.time_us) == (
        8589934592, "float32", "sum", 47535.0)  # fmt: skip
    assert (last_oop.algbw, last_oop.busbw, last_oop.wrong) == (180.71, 338.82, 0)
    assert ing.devices[0].model == "NVIDIA H100 80GB HBM3"


def test_table_without_rank_lines_takes_world_size_from_busbw() -> None:
    ing = read_results(text("nccl-tests-252-in-place-tail.txt"), "x", collective="all_reduce")
    assert ing.world_size == 8 and ing.notes["world_size_from"] == "busbw/algbw"
    assert [r.size for r in ing.results if r.in_place][-1] == 8589934592


def test_mpirun_tagged_table() -> None:
    raw = text("nccl-tests-aws-k8s-503-mpirun-prefix.txt")
    with pytest.raises(IngestError, match="no world size"):  # no rank lines, busbw 0.00
        read_results(raw, "all_reduce_perf.log")
    ing = read_results(raw, "all_reduce_perf.log", world_size=16)
    assert ing.collective == "all_reduce"  # from the file name
    assert [r.size for r in ing.results if not r.in_place] == [8, 16, 32]
    assert ing.results[-1].time_us == 13.34 and ing.results[-1].in_place


def test_gb200_and_rccl_tests_tables() -> None:
    gb = read_results(text("nccl-tests-coreweave-gb200.txt"), "x")
    assert gb.devices[0].host == "slurm-gb200-207-171" and gb.world_size == 72
    assert max(r.busbw or 0 for r in gb.results) == 846.82
    mi = read_results(text("rccl-tests-hpe-mi300x.txt"), "all_reduce_perf.out")
    assert mi.tool == "rccl-tests" and mi.world_size == 8
    assert mi.devices[7].model == "AMD Instinct MI300X" and mi.results[0].busbw == 161.14


def test_rccl_tests_json_lines_and_spec_derived_csv() -> None:
    js = read_results(text("rccl-tests-pr93-jsonl.json"), "r.json")
    assert (js.tool, js.fmt, js.world_size) == ("rccl-tests", "rccl-tests-json", 4)
    assert [(r.size, r.in_place) for r in js.results[:2]] == [(1024, False), (1024, True)]
    assert js.collective_of(js.results[0]) == "all_reduce" and js.results[0].wrong == 0
    csv_ = read_results(text("rccl-tests-spec-derived.csv"), "r.csv")
    assert csv_.fmt == "rccl-tests-csv" and csv_.world_size == 4
    assert [r.busbw for r in csv_.results] == [0.080936, 0.080047, 0.16131, 0.152377]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("nccl-340-old-table.txt", "not a results file"),
        ("nccl-tests-107-v100-old-error-column.txt", "not a results file"),
        ("rccl-1490-all-gather-srun-label.txt", "fits all_gather and all_to_all alike"),
        ("nccl-1357-ibext-sharp.log", "not a results file"),
    ],
)
def test_files_that_cannot_be_ingested_say_what_was_expected(name: str, why: str) -> None:
    with pytest.raises(IngestError, match=why):
        read_results(text(name), name)


def test_nccl_tests_json_spec_derived_from_the_real_table() -> None:
    """No public -J file was found: the document is built in the shape NVIDIA/nccl-tests
    src/util.cu writes (jsonOutputInit, writeDeviceReport, writeBenchmarkLine*), from the
    values of the real table, and must read back as the same results."""
    table = read_results(text("nccl-tests-a3mega-h100-2node.txt"), "t")
    by_size: dict[int, dict] = {}
    for r in table.results:
        rec = by_size.setdefault(r.size, {"size": r.size, "count": r.count, "type": "float",
                                          "redop": "sum", "root": "    -1"})  # fmt: skip
        rec["in_place" if r.in_place else "out_of_place"] = {
            "time": r.time_us, "alg_bw": r.algbw, "bus_bw": r.busbw, "nwrong": float(r.wrong or 0)}  # fmt: skip
    doc = {
        "version": 2, "start_time": "2025-01-01 00:00:00",
        "args": ["/opt/src/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "8G"],
        "env": [], "nccl_version": 22305,
        "config": {"nthreads": 1, "ngpus": 1, "iterations": 20,
                   "devices": [{"rank": d.rank, "group": 0, "pid": 1, "hostname": d.host,
                                "device": d.device, "device_hex": d.bus, "device_info": d.model}
                               for d in table.devices]},
        "results": list(by_size.values()),
        "out_of_bounds": {"count": 0, "okay": "true"},
    }  # fmt: skip
    ing = read_results(json.dumps(doc), "a3.json")
    assert (ing.fmt, ing.collective, ing.world_size, ing.iters) == (
        "nccl-tests-json", "all_reduce", 16, 20)  # fmt: skip
    assert sorted(ing.results, key=lambda r: (r.size, r.in_place)) == sorted(
        table.results, key=lambda r: (r.size, r.in_place))  # fmt: skip


# ---- what a table says without its program's name ---------------------------------------------


def without_name(name: str) -> str:
    """The real file cut to what a paste without the program's name keeps."""
    return "\n".join(line for line in text(name).splitlines() if "_perf" not in line)


def test_pasted_tail_named_by_its_closing_line() -> None:
    """ROCm/rccl#2078: four rows and the closing lines, no header; world size from the factor."""
    ing = read_results(text("rccl-2078-ainic-all-reduce-tail.txt"), "pasted.txt")
    assert (ing.collective, ing.world_size, ing.inferred) == ("all_reduce", 16, ("world_size",))
    assert [r.size for r in ing.results if r.in_place][-1] == 17179869184
    assert ing.results[-1].busbw == 361.17


@pytest.mark.parametrize(
    ("name", "collective", "world", "world_from"),
    [
        ("rccl-2078-ainic-all-reduce-tail.txt", "all_reduce", 16, "busbw/algbw"),
        ("nccl-tests-252-in-place-tail.txt", "all_reduce", 8, "busbw/algbw"),
        ("nccl-tests-128-reduce-scatter.txt", "reduce_scatter", 8, "size/count"),
        ("nccl-tests-a3mega-h100-2node.txt", "all_reduce", 16, None),  # rank lines
        ("nccl-tests-coreweave-gb200.txt", "all_reduce", 72, None),  # "Rank 71" only
        ("rccl-tests-hpe-mi300x.txt", "all_reduce", 8, None),
    ],
)
def test_collective_and_world_inferred_from_the_numbers(
    name: str, collective: str, world: int, world_from: str | None
) -> None:
    ing = read_results(without_name(name), "table.txt")
    assert (ing.collective, ing.world_size) == (collective, world)
    assert "collective" in ing.inferred
    assert ("world_size" in ing.inferred) == (world_from is not None)
    assert ing.notes.get("world_size_from") == world_from


def test_broadcast_tail_named_or_inferred_but_its_world_size_is_not_in_the_table() -> None:
    """ROCm/rccl#2075: busbw = algbw for broadcast at any world size: the table cannot say it."""
    for raw in (text("rccl-2075-broadcast-tail.txt"), without_name("rccl-2075-broadcast-tail.txt")):
        with pytest.raises(IngestError, match=r"no world size: .*broadcast's busbw/algbw = 1"):
            read_results(raw, "tail.txt")
    named = read_results(text("rccl-2075-broadcast-tail.txt"), "tail.txt", world_size=2)
    assert (named.collective, named.inferred) == ("broadcast", ())
    inferred = read_results(without_name("rccl-2075-broadcast-tail.txt"), "t.txt", world_size=2)
    assert (inferred.collective, inferred.inferred) == ("broadcast", ("collective",))
    assert {r.root for r in inferred.results} == {0} and inferred.results[0].op is None


@pytest.mark.parametrize(
    ("name", "world"),
    [("rccl-1490-all-gather-srun-label.txt", 32), ("rccl-2075-none-redop-table.txt", 2)],
)
def test_all_gather_and_alltoall_tables_are_ambiguous_until_named(name: str, world: int) -> None:
    """Both have redop none, root -1, a per-rank count and busbw/algbw = (n-1)/n."""
    with pytest.raises(IngestError, match=f"{name}: which collective.*all_gather and all_to_all"):
        read_results(text(name), name)
    ing = read_results(text(name), name, collective="all_gather")
    assert (ing.collective, ing.world_size, ing.inferred) == ("all_gather", world, ("world_size",))
    assert ing.notes["world_size_from"] == "size/count"


def test_alltoall_named_by_its_program_and_ambiguous_without() -> None:
    raw = text("rccl-tests-oci-mi355x-alltoall.txt")
    ing = read_results(raw, "x.txt")
    assert (ing.collective, ing.world_size, ing.inferred) == ("all_to_all", 8, ())
    assert [r.wrong for r in ing.results] == [0, None, 0, None]  # in place: "N/A"
    with pytest.raises(IngestError, match="fits all_gather and all_to_all alike"):
        read_results(without_name("rccl-tests-oci-mi355x-alltoall.txt"), "x.txt")
    table_only = "\n".join(line for line in raw.splitlines() if not line.startswith(
        ("# Collective", "#  Rank")))  # fmt: skip
    named = read_results(table_only, "x.txt", collective="alltoall")
    assert (named.collective, named.world_size, named.inferred) == ("all_to_all", 8,
                                                                   ("world_size",))  # fmt: skip
    assert named.notes["world_size_from"] == "size/count"


def test_srun_label_prefix_is_unwrapped() -> None:
    ing = read_results(text("rccl-1490-all-gather-srun-label.txt"), "x", collective="all_gather")
    assert [r.size for r in ing.results if not r.in_place] == [65536, 131072, 262144, 524288,
                                                                1048576]  # fmt: skip
    assert ing.results[0].count == 512 and ing.results[0].dtype == "float32"


def test_a_named_collective_the_numbers_contradict_is_refused() -> None:
    with pytest.raises(IngestError, match="is not all_gather's at any world size"):
        read_results(text("nccl-tests-252-in-place-tail.txt"), "t.txt", collective="all_gather")


def test_world_size_contradicting_the_numbers_is_refused() -> None:
    """Rank lines (or --label world_size) that no collective fits: named, not guessed."""
    with pytest.raises(IngestError, match="fits none of"):
        read_results(without_name("nccl-tests-a3mega-h100-2node.txt"), "t.txt", world_size=4)


def test_cuda_driver_version_is_read_as_cuda_major_minor() -> None:
    """NVIDIA/nccl-tests#320: cudaDriverVersion 12060 next to nvidia-smi's "CUDA Version: 12.6"."""
    summary = log("nccl-tests-320-cuda-driver-12060.log")
    assert (summary.cuda_driver_version, summary.cuda_version, summary.version) == (
        "12.6", "12.6", "2.26.2")  # fmt: skip
    assert log("nccl-1292-bare-version.log").cuda_driver_version == "12.4"
    assert log("nccl-tests-185-roce.log").cuda_driver_version == "12.0"


def test_ingested_node_records_carry_the_cuda_driver_version() -> None:
    """A table whose file also holds NCCL_DEBUG lines: the node rows say the driver's CUDA."""
    from dataclasses import replace

    from fleetval.formats.ingest import node_records

    table = read_results(text("nccl-tests-a3mega-h100-2node.txt"), "a3mega.txt")
    records = node_records(replace(table, log=log("nccl-tests-320-cuda-driver-12060.log")))
    assert [r["node"] for r in records] == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert {json.loads(r["extra"])["cuda_driver_version"] for r in records} == {"12.6"}
