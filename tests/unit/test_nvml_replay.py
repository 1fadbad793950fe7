"""The health check's live NVML path on replayed answers: `pynvml` stands in with the values
a real host gave (tests/data/real/nvidia-smi-q-h100-golden.txt: one H100 80GB HBM3 SXM in a
VM, driver 580.159.04), through `read_node_hardware` and the rows it becomes."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleetval.checks.health.hardware import node_hardware_rows, read_node_hardware
from fleetval.detect.hardware import HwThresholds
from fleetval.formats.nvml import from_nvml


class NVMLError(Exception):
    """pynvml's error: NVML_ERROR_NOT_SUPPORTED and the like."""


def golden_h100(links: Callable[[int], int], counters: Callable[[int, int], int]) -> dict[str, Any]:
    """NVML's answers for the golden H100 (nvidia-smi -q's values, in NVML's units)."""
    pci = types.SimpleNamespace(busId="00000000:00:06.0")
    hist = types.SimpleNamespace(max=2560, high=0, partial=0, low=0, none=0)
    return {
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: "GPU-8820b3cc-ff52-fc76-f238-e0bc8f3c6a51",
        "nvmlDeviceGetSerial": lambda h: "1752624018887",
        "nvmlDeviceGetPciInfo": lambda h: pci,
        "nvmlDeviceGetVbiosVersion": lambda h: "96.00.DA.00.0C",
        "nvmlDeviceGetEccMode": lambda h: (1, 1),
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: 0,
        "nvmlDeviceGetRemappedRows": lambda h: (0, 0, 0, 0),
        "nvmlDeviceGetRowRemapperHistogram": lambda h: hist,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetPcieReplayCounter": lambda h: 0,
        "nvmlDeviceGetPerformanceState": lambda h: 0,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0,
        "nvmlDeviceGetClockInfo": lambda h, clock: 1980,
        "nvmlDeviceGetMaxClockInfo": lambda h, clock: 1980,
        "nvmlDeviceGetTemperature": lambda h, sensor: 41,
        "nvmlDeviceGetPowerUsage": lambda h: 126960,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700000,
        "nvmlDeviceGetNvLinkState": lambda h, link: links(link),
        "nvmlDeviceGetNvLinkErrorCounter": lambda h, link, counter: counters(link, counter),
    }


def not_supported(*_: Any) -> int:
    raise NVMLError("Not Supported")


@pytest.fixture
def replay(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[dict[str, Any]], None]]:
    def install(answers: dict[str, Any]) -> None:
        nv = types.ModuleType("pynvml")
        nv.NVMLError = NVMLError
        nv.NVML_NVLINK_MAX_LINKS = 18
        nv.NVML_CLOCK_SM = 1
        nv.NVML_TEMPERATURE_GPU = 0
        nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
        nv.nvmlInit = nv.nvmlShutdown = lambda: None

        def missing(name: str) -> Any:  # a call NVML does not support on this GPU
            if name.startswith("nvml"):
                return not_supported
            raise AttributeError(name)

        nv.__getattr__ = missing  # type: ignore[method-assign]
        for name, fn in answers.items():
            setattr(nv, name, fn)
        monkeypatch.setitem(__import__("sys").modules, "pynvml", nv)

    yield install


def rows(node: str = "vm-1") -> tuple[dict[str, Any], dict[str, Any]]:
    hw = read_node_hardware("nvml", [], node)
    assert hw.source == "nvml", hw.unread
    node_row, gpu_row = node_hardware_rows(hw, HwThresholds(), node)
    return node_row, gpu_row


def test_a_lone_sxm_gpu_with_every_link_inactive_is_no_fabric_not_a_drain(replay):
    """NVML answers a state for all 18 links of an SXM H100 in a one-GPU VM, every one
    inactive: no NVLink fabric in use, not 0 of 18 links down."""
    replay(golden_h100(links=lambda link: 0, counters=not_supported))
    node_row, gpu_row = rows()
    assert (node_row["status"], node_row["details"]["drain"]) == ("pass", False)
    assert gpu_row["status"] == "pass", gpu_row["message"]
    reading = gpu_row["details"]["reading"]
    assert (reading["nvlink_up"], reading["nvlink_total"]) == (0, None)
    assert [f["code"] for f in gpu_row["details"]["findings"]] == ["nvlink_inactive"]


def test_unanswered_link_error_counters_are_not_read_never_zero(replay):
    """Links up, but NVML does not support the DL error counters (NVLink 4 reads them as field
    values): the row says so, rather than judging them clean."""
    replay(golden_h100(links=lambda link: 1, counters=not_supported))
    _, gpu_row = rows()
    assert gpu_row["details"]["reading"]["nvlink_errors"] == {}
    assert gpu_row["details"]["not_judged"] == ["NVLink replay/recovery/crc error counters"]
    assert gpu_row["status"] == "skip" and "not judged" in gpu_row["message"]


def test_one_links_counter_unanswered_makes_that_counter_unread(replay):
    crc_on_link_5_only = lambda link, counter: not_supported() if (link, counter) == (5, 2) else 1  # noqa: E731
    replay(golden_h100(links=lambda link: 1, counters=crc_on_link_5_only))
    _, gpu_row = rows()
    assert gpu_row["details"]["reading"]["nvlink_errors"] == {"replay": 18, "recovery": 18}
    assert gpu_row["details"]["not_judged"] == ["NVLink crc error counters"]


def test_answered_counters_and_a_down_link_are_judged(replay):
    replay(golden_h100(links=lambda link: link != 17, counters=lambda link, counter: 0))
    node_row, gpu_row = rows()
    assert gpu_row["status"] == "fail" and "NVLinks up: 17 of 18" in gpu_row["message"]
    assert node_row["details"]["drain"] is True


def test_the_conversion_alone_reads_no_active_link_as_no_fabric():
    r = from_nvml(0, {"NvLinkStates": [False] * 18, "NvLinkErrors": {"replay": None}})
    assert (r.nvlink_up, r.nvlink_total, r.nvlink_errors) == (0, None, {})
