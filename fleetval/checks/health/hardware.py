"""The node's GPU hardware, read at the edge: captured files when the suite (or
$FLEETVAL_HW_CAPTURES) names them, else NVML (nvidia-ml-py), else `nvidia-smi` or `amd-smi`
on the node; and its kernel log. Captured files and the tools' text go through the same
scanner as `fleetval gpu-health` (`fleetval.formats.hwcapture`), so what DCGM, the NVLink
Fabric block and `nvidia-smi topo -m` print is judged here too, by the same code
(`fleetval.detect.hardware`); turned into the health check's rows here.

No torch here: the rank module calls `node_hardware_rows` once per node.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from fleetval.checks.environment import run_tool
from fleetval.checks.health import NODE_HW_METRIC as NODE_METRIC  # its drain line
from fleetval.checks.health.params import HardwareSource
from fleetval.detect.hardware import (
    ACTION_RANK,
    Action,
    GpuVerdict,
    HwThresholds,
    judge_node,
    node_action,
)
from fleetval.formats import amdsmi, kernlog, nvsmi
from fleetval.formats.amdsmi import AmdsmiAnswers
from fleetval.formats.gpuhw import GpuReading, KernelEvent, merge
from fleetval.formats.hwcapture import scan, scan_files
from fleetval.formats.hwobs import Observation
from fleetval.formats.nvml import NvmlAnswers, from_nvml, unread_link_counters
from fleetval.formats.smi import SmiError
from fleetval.store.records import JsonObject
from fleetval.store.schema import GPU_METRIC  # one row per GPU, its reading in details
from fleetval.vocab import Status

ENV_CAPTURES = "FLEETVAL_HW_CAPTURES"  # os.pathsep-separated paths or globs; {node} is filled
# "nvml" means the vendor library: NVML (nvidia-ml-py), else amdsmi


@dataclass(frozen=True)
class NodeHardware:
    """What could be read on one node, and why the rest could not."""

    source: str | None  # "captured files", "nvml", "nvidia-smi", "amd-smi"; None: nothing
    readings: list[GpuReading] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # one reason per source tried and failed
    # what other tools printed (dcgmi diag, the NVLink Fabric block, topo -m), healthy or not
    observations: list[Observation] = field(default_factory=list)


# ---- reading ---------------------------------------------------------------------------------


def read_node_hardware(source: HardwareSource, captures: list[str], node: str) -> NodeHardware:
    """The first source that answers, in the order `source` allows."""
    unread: list[str] = []
    patterns = captures or [p for p in os.environ.get(ENV_CAPTURES, "").split(os.pathsep) if p]
    if source in ("auto", "captured") and patterns:
        return _captured(patterns, node)
    if source == "captured":
        return NodeHardware(None, unread=[f"no captured files named (suite or ${ENV_CAPTURES})"])
    if source in ("auto", "nvml"):
        for name, library in (("nvml", _nvml), ("amdsmi", _amdsmi_lib)):
            hw = _try(name, library, unread)
            if hw is not None:
                return _with_kernel_log(hw, unread)
    if source in ("auto", "tools"):
        for reader in (_nvidia_smi, _amd_smi):
            hw = _try(reader.__name__.strip("_").replace("_", "-"), reader, unread)
            if hw is not None:
                return _with_kernel_log(hw, unread)
    return NodeHardware(None, unread=unread or ["hardware reading is off in this suite"])


def _try(name: str, reader: Callable[[], NodeHardware | None], unread: list[str]) -> Any:
    try:
        hw = reader()
    except Exception as e:  # NOTE: a source that breaks is unread with its reason, never a pass
        unread.append(f"{name}: {type(e).__name__}: {e}")
        return None
    if hw is None:
        unread.append(f"{name}: not available on this node")
    return hw


def _captured(patterns: list[str], node: str) -> NodeHardware:
    paths = sorted({Path(p) for pat in patterns for p in glob.glob(pat.replace("{node}", node))})
    if not paths:
        return NodeHardware(None, unread=[f"no captured file matches {', '.join(patterns)}"])
    try:
        found = scan_files(paths)
    except SmiError as e:
        return NodeHardware(None, unread=[f"captured files: {e}"])
    return NodeHardware("captured files", found.readings, found.events,
                        observations=found.observations)  # fmt: skip


def _with_kernel_log(hw: NodeHardware | None, unread: list[str]) -> NodeHardware:
    if hw is None:
        return NodeHardware(None, unread=unread)
    log = run_tool("dmesg")
    if log is None:
        unread = [*unread, "kernel log: dmesg not readable"]
        return NodeHardware(hw.source, hw.readings, [], unread, hw.observations)
    return NodeHardware(hw.source, hw.readings, kernlog.read_kernel_log(log), unread,
                        hw.observations)  # fmt: skip


def _nvidia_smi() -> NodeHardware | None:
    text = run_tool("nvidia-smi", "-q", timeout_s=30)
    if text is None:
        return None
    q = scan(text)  # the -q reader, and its Fabric blocks
    readings, observations = q.readings, list(q.observations)
    links = run_tool("nvidia-smi", "nvlink", "-s")
    if links and "UUID:" in links:
        readings = merge(readings + nvsmi.read_nvidia_smi_nvlink(links))
    topo = run_tool("nvidia-smi", "topo", "-m")  # NVLinks per GPU pair: a pair short of links
    if topo is not None:
        with contextlib.suppress(SmiError):  # NOTE: a driver without topo -m: nothing more said
            observations += scan(topo).observations
    return NodeHardware("nvidia-smi", readings, observations=observations)


def _amd_smi() -> NodeHardware | None:
    text = run_tool("amd-smi", "metric", "--ecc", "--ecc-blocks", "--pcie", "--power", "--json")
    if text is None:
        return None
    readings = amdsmi.read_amd_smi_metric(text)
    xgmi = run_tool("amd-smi", "xgmi")
    if xgmi and "LINK METRIC TABLE" in xgmi:
        readings = merge(readings + amdsmi.read_amd_smi_xgmi(xgmi))
    return NodeHardware("amd-smi", readings)


def _from_library(
    kind: str, module: str, start: str, stop: str, read: Callable[[Any], list[GpuReading]]
) -> NodeHardware | None:
    """The readings of a vendor library (an optional extra of fleetval), the library started
    before them and stopped after; None where it is not installed."""
    try:
        lib = importlib.import_module(module)
    except ImportError:
        return None
    getattr(lib, start)()
    try:
        return NodeHardware(kind, read(lib))
    finally:
        getattr(lib, stop)()


def _nvml() -> NodeHardware | None:  # nvidia-ml-py: the optional extra fleetval[nvidia]
    return _from_library("nvml", "pynvml", "nvmlInit", "nvmlShutdown", _nvml_readings)


def _nvml_readings(pynvml: Any) -> list[GpuReading]:
    driver = _ask(pynvml, pynvml.nvmlSystemGetDriverVersion)
    count = pynvml.nvmlDeviceGetCount()
    return [
        from_nvml(
            i, {**_nvml_raw(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)), "DriverVersion": driver}
        )
        for i in range(count)
    ]


def _amdsmi_lib() -> NodeHardware | None:  # the optional extra fleetval[amd]
    return _from_library("amdsmi", "amdsmi", "amdsmi_init", "amdsmi_shut_down", _amdsmi_readings)


def _amdsmi_readings(lib: Any) -> list[GpuReading]:
    handles = lib.amdsmi_get_processor_handles()
    return [amdsmi.from_amdsmi(i, _amdsmi_raw(lib, h)) for i, h in enumerate(handles)]


def _amdsmi_raw(lib: Any, h: Any) -> AmdsmiAnswers:
    """The answers `fleetval.formats.amdsmi.from_amdsmi` converts."""

    def ask(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except lib.AmdSmiException:
            return None

    blocks = {b.name: ask(lib.amdsmi_get_gpu_ecc_count, h, b) for b in lib.AmdSmiGpuBlock
              if b.name not in ("INVALID", "RESERVED")}  # fmt: skip
    return {
        "bdf": ask(lib.amdsmi_get_gpu_device_bdf, h),
        "uuid": ask(lib.amdsmi_get_gpu_device_uuid, h),
        "asic": ask(lib.amdsmi_get_gpu_asic_info, h),
        "vbios": ask(lib.amdsmi_get_gpu_vbios_info, h),
        "driver": ask(lib.amdsmi_get_gpu_driver_info, h),
        "ecc": ask(lib.amdsmi_get_gpu_total_ecc_count, h),
        "ecc_blocks": blocks,
        "pcie": ask(lib.amdsmi_get_pcie_info, h),
        "power": ask(lib.amdsmi_get_power_info, h),
    }


def _ask(nv: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """One NVML answer; None where this GPU or driver does not support the call."""
    try:
        return fn(*args)
    except nv.NVMLError:
        return None


def _nvml_raw(nv: Any, h: Any) -> NvmlAnswers:
    """The answers `fleetval.formats.nvml.from_nvml` converts (its docstring names them)."""
    ecc = nv.nvmlDeviceGetTotalEccErrors
    mode = _ask(nv, nv.nvmlDeviceGetEccMode, h)
    pci = _ask(nv, nv.nvmlDeviceGetPciInfo, h)
    # NOTE: nvidia-ml-py 12.535 renamed "throttle reasons" to "clocks event reasons"
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons = reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    hist = _ask(nv, nv.nvmlDeviceGetRowRemapperHistogram, h)
    return {
        "Name": _ask(nv, nv.nvmlDeviceGetName, h),
        "UUID": _ask(nv, nv.nvmlDeviceGetUUID, h),
        "Serial": _ask(nv, nv.nvmlDeviceGetSerial, h),
        "PciBusId": pci.busId if pci is not None else None,
        "VbiosVersion": _ask(nv, nv.nvmlDeviceGetVbiosVersion, h),
        "EccMode": mode[0] if mode is not None else None,
        "EccCorrectedVolatile": _ask(nv, ecc, h, 0, 0),
        "EccUncorrectedVolatile": _ask(nv, ecc, h, 1, 0),
        "EccCorrectedAggregate": _ask(nv, ecc, h, 0, 1),
        "EccUncorrectedAggregate": _ask(nv, ecc, h, 1, 1),
        "RetiredPagesSbe": _len(_ask(nv, nv.nvmlDeviceGetRetiredPages, h, 0)),
        "RetiredPagesDbe": _len(_ask(nv, nv.nvmlDeviceGetRetiredPages, h, 1)),
        "RetiredPagesPending": _ask(nv, nv.nvmlDeviceGetRetiredPagesPendingStatus, h),
        "RemappedRows": _ask(nv, nv.nvmlDeviceGetRemappedRows, h),
        "RowRemapperHistogram": None
        if hist is None
        else (hist.max, hist.high, hist.partial, hist.low, hist.none),
        "CurrPcieLinkGeneration": _ask(nv, nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "MaxPcieLinkGeneration": _ask(nv, nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "CurrPcieLinkWidth": _ask(nv, nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        "MaxPcieLinkWidth": _ask(nv, nv.nvmlDeviceGetMaxPcieLinkWidth, h),
        "PcieReplayCounter": _ask(nv, nv.nvmlDeviceGetPcieReplayCounter, h),
        "PerformanceState": _ask(nv, nv.nvmlDeviceGetPerformanceState, h),
        "ClocksEventReasons": _ask(nv, reasons, h),
        "ClockSm": _ask(nv, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        "MaxClockSm": _ask(nv, nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
        "Temperature": _ask(nv, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        "TemperatureSlowdown": _ask(
            nv, nv.nvmlDeviceGetTemperatureThreshold, h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        "PowerUsage": _ask(nv, nv.nvmlDeviceGetPowerUsage, h),
        "EnforcedPowerLimit": _ask(nv, nv.nvmlDeviceGetEnforcedPowerLimit, h),
        "PowerDefaultLimit": _ask(nv, nv.nvmlDeviceGetPowerManagementDefaultLimit, h),
        **_nvlinks(nv, h),
        "GpuRecoveryAction": _recovery_action(nv, h),
    }


def _len(pages: Any) -> int | None:
    return None if pages is None else len(pages)


def _nvlinks(nv: Any, h: Any) -> NvmlAnswers:
    """Link states of the links this GPU has (NVML refuses the others), and the DL error
    counters summed over them."""
    states: list[bool] = []
    errors: dict[str, int | None] = {"replay": 0, "recovery": 0, "crc": 0}
    counters = (("replay", 0), ("recovery", 1), ("crc", 2), ("crc", 3))  # DL_REPLAY, ... CRC_DATA
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _ask(nv, nv.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            continue
        states.append(bool(state))
        for name, counter in counters:
            n = _ask(nv, nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
            total = errors[name]  # NOTE: an unanswered counter is not read, never 0
            errors[name] = None if n is None or total is None else total + n
    return {"NvLinkStates": states or None, "NvLinkErrors": errors if states else {}}


def _recovery_action(nv: Any, h: Any) -> int | None:
    field_id = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field_id is None:  # an nvidia-ml-py older than the driver field
        return None
    values = _ask(nv, nv.nvmlDeviceGetFieldValues, h, [field_id])
    if not values or values[0].nvmlReturn != 0:
        return None
    return int(values[0].value.uiVal)


# ---- rows ------------------------------------------------------------------------------------


class HardwareRow(TypedDict):
    """A hardware row's columns (a Row's, with `device_id`)."""

    metric: str
    status: str
    message: str
    value: NotRequired[float]
    unit: NotRequired[str]
    device_id: str | None
    details: JsonObject  # the row's JSON details: the reading, the findings, the action


def node_hardware_rows(hw: NodeHardware, t: HwThresholds, node: str) -> list[HardwareRow]:
    """The health check's hardware rows (Row fields, with `device_id`): the node's, with its
    action and drain line, then one per GPU carrying its reading."""
    if hw.source is None:
        why = "; ".join(hw.unread)
        return [HardwareRow(metric=NODE_METRIC, status=Status.SKIP.value, device_id=None,
                            message=f"GPU hardware not read, so not judged: {why}",
                            details={"unread": hw.unread})]  # fmt: skip
    verdicts = judge_node(hw.readings, hw.events, t, hw.observations)
    rows = [_gpu_row(v, hw) for v in verdicts]
    # NOTE: the node row first: a failing step is summed up by its first failing row, and
    # this one is the drain line (a sweep carries it as the failed job's reason)
    return [_node_row(verdicts, hw, node), *rows]


def not_judged(r: GpuReading) -> list[str]:
    """What a reading could not be judged on: the source printed nothing for it (a VF hides
    ECC, an old driver has no clock reasons)."""
    missing = []
    if r.ecc_enabled is None and r.ecc_volatile_uncorrected is None and not r.ecc_blocks:
        missing.append("ECC")
    if r.pcie_gen is None and r.pcie_width is None:
        missing.append("PCIe link")
    if r.clock_reasons is None:
        missing.append("clock-limit reasons")
    if unread_link_counters(r):
        missing.append(f"NVLink {'/'.join(unread_link_counters(r))} error counters")
    return missing


def _gpu_row(v: GpuVerdict, hw: NodeHardware) -> HardwareRow:
    r = v.reading
    missing = not_judged(r) if r is not None else []
    bad = v.bad
    if bad:
        status = Status.FAIL if any(f.status == Status.FAIL for f in bad) else Status.WARN
        text = "; ".join(f"{f.code}: {f.evidence} -> {f.action.value}" for f in bad)
    elif r is not None and not missing:
        status, text = Status.PASS, f"no hardware finding ({r.source})"
    else:
        status, text = Status.SKIP, f"not judged: {', '.join(missing)} not in {hw.source}"
    if missing and bad:
        text += f" (not judged: {', '.join(missing)})"
    device = (r.uuid or r.pci_bus_id) if r is not None else v.key
    return {
        "metric": GPU_METRIC,
        "status": status.value,
        "message": f"{v.label}: {text}",
        "value": float(len(bad)),
        "unit": "findings",
        "device_id": device,
        "details": {
            "gpu": v.label,
            "action": v.action.value,
            "source": hw.source,
            "not_judged": missing,
            "reading": r.model_dump() if r is not None else None,
            "findings": [f.to_json() for f in v.findings],
        },
    }


def _node_row(verdicts: list[GpuVerdict], hw: NodeHardware, node: str) -> HardwareRow:
    action, reason = node_action(verdicts)
    drain = ACTION_RANK[action] >= ACTION_RANK[Action.RESET_GPU]
    judged = any(v.bad or (v.reading is not None and not not_judged(v.reading)) for v in verdicts)
    if drain:
        status, text = Status.FAIL, f"drain {node}: {action.value}: {reason}"
    elif action == Action.WATCH:
        status, text = Status.WARN, f"watch {node}: {reason}"
    elif not judged:
        status, text = Status.SKIP, f"{len(hw.readings)} GPU(s) read, none judged ({hw.source})"
    else:
        status, text = Status.PASS, f"{len(hw.readings)} GPU(s), no action ({hw.source})"
    if hw.unread:
        text += f" [unread: {'; '.join(hw.unread)}]"
    return {
        "metric": NODE_METRIC,
        "status": status.value,
        "message": text,
        "device_id": None,
        "details": {
            "action": action.value,
            "reason": reason,
            "drain": drain,
            "source": hw.source,
            "unread": hw.unread,
        },
    }
