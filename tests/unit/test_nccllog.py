"""NCCL/RCCL debug-log parsing against captured (h100/) and hand-written RCCL-shaped logs."""

from pathlib import Path

import pytest

from fleetval.formats.nccllog import NcclLogSummary, parse_nccl_log, read_nccl_log

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden" / "h100"
LOGS = DATA / "logs"


def test_nccl_info_log_from_h100() -> None:
    s = read_nccl_log(GOLDEN / "nccl-debug-info.log")
    assert s is not None
    assert (s.library, s.version, s.cuda_version) == ("nccl", "2.28.9", "13.0")
    assert s.hostname == "vm"
    # "NET/Plugin: Could not find: libnccl-net.so"; the ENV/PROFILER/TUNER lookups don't count.
    assert s.net_plugin is None and s.net_plugin_missing
    assert s.network == "Socket"
    assert s.socket_interfaces == ("eth0",)
    assert s.ib_devices == ()  # "NET/IB : Using [RO]; OOB eth0..." lists no HCA
    assert s.gdr_enabled is False
    assert (s.channels, s.nranks, s.nnodes) == (64, 1, 1)
    assert s.init_complete and s.ok
    assert s.warnings == () and s.errors == ()


def test_nccl_bad_ifname_log_from_h100() -> None:
    s = read_nccl_log(GOLDEN / "nccl-debug-bad-ifname.log")
    assert s is not None
    assert s.warnings == ("Bootstrap : no socket interface found",)
    # From "init.cc:126 -> 5" and from the exception text in the same file.
    assert s.errors == ("ncclInvalidUsage",)
    assert not s.init_complete and not s.ok
    assert s.network is None


def test_nccl_error_code_alone_names_the_error() -> None:
    """NCCL_DEBUG_FILE holds only NCCL's lines: the "-> N" code must name the error by itself."""
    s = parse_nccl_log(
        "h:1:1 [0] NCCL INFO bootstrap.cc:88 -> 2\nh:1:1 [0] NCCL INFO init.cc:1 -> 2\n"
    )
    assert s.errors == ("ncclSystemError",)


def test_rccl_ofi_plugin_on_slingshot() -> None:
    s = read_nccl_log(LOGS / "rccl-ofi-slingshot.log")
    assert s is not None
    assert (s.library, s.version) == ("rccl", "2.21.5")
    assert s.hip_version == "6.2.41133-dd7f95766"
    assert s.rocm_version == "6.2.4.0-139-fe4e4ad"
    assert s.net_plugin == "aws-ofi-rccl 1.4.0" and not s.net_plugin_missing
    assert s.ofi_provider == "cxi"
    assert s.network == "AWS Libfabric"
    assert s.socket_interfaces == ("hsn0", "hsn1", "hsn2", "hsn3")
    # The net name holds a space and RCCL appends "comm 0x..."; GDRDMA on the NET path.
    assert s.transports == ("NET/AWS Libfabric", "P2P/IPC")
    assert s.gdr_enabled is True
    assert (s.nranks, s.nnodes, s.channels) == (16, 2, 16)
    assert s.ok


def test_rccl_ib_without_plugin() -> None:
    s = read_nccl_log(LOGS / "rccl-ib-mlx5.log")
    assert s is not None
    assert (s.library, s.version) == ("rccl", "2.20.5")
    assert s.net_plugin is None and s.net_plugin_missing
    assert s.network == "IB"
    assert s.ib_devices == ("mlx5_0:1/IB", "mlx5_1:1/IB")  # the link layer is kept
    assert s.transports == ("NET/IB", "P2P/IPC", "SHM/direct")
    assert s.gdr_enabled is True
    assert s.ok


def test_rccl_socket_on_management_network_that_fails() -> None:
    s = read_nccl_log(LOGS / "rccl-no-plugin-mgmt-net.log")
    assert s is not None
    assert s.library == "rccl" and s.net_plugin_missing
    assert s.network == "Socket"
    assert s.socket_interfaces == ("nmn0", "hsn0", "hsn1")
    assert s.warnings[0].startswith('Missing "iommu=pt"')
    assert s.warnings[1] == "NET/Socket : peer 10.100.0.44<51822> connection closed"
    assert s.errors == ("ncclRemoteError",)
    assert not s.init_complete and not s.ok


def test_nccl_with_aws_ofi_nccl() -> None:
    s = read_nccl_log(LOGS / "nccl-ofi-efa.log")
    assert s is not None
    assert (s.library, s.version, s.cuda_version) == ("nccl", "2.21.5", "12.4")
    # The OFI line is more precise than the loader's "Loaded net plugin AWS Libfabric".
    assert s.net_plugin == "aws-ofi-nccl 1.9.1-aws"
    assert s.ofi_provider == "efa"
    assert s.transports == ("NET/AWS Libfabric", "P2P/CUMEM")
    assert s.channels == 32


def test_rccl_version_from_nccl_line_with_hip_tag() -> None:
    s = parse_nccl_log("n:1:1 [0] NCCL INFO NCCL version 2.19.4+hip6.1 HEAD:1a2b3c\n")
    assert (s.library, s.version, s.hip_version) == ("rccl", "2.19.4", "6.1")


def test_lines_of_other_programs_are_ignored() -> None:
    s = parse_nccl_log("Traceback (most recent call last):\nUsing network IB\nRing 0 : 0 -> 1\n")
    assert s == NcclLogSummary()


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_empty_log(text: str) -> None:
    s = parse_nccl_log(text)
    assert s.library is None and not s.init_complete and not s.ok


def test_missing_file_gives_none(tmp_path: Path) -> None:
    assert read_nccl_log(tmp_path / "absent.log") is None
