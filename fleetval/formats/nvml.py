"""NVML's answers (nvidia-ml-py) as a GpuReading: units, bitmasks and enums converted here,
purely, so they are tested without a GPU. `fleetval.checks.health.hardware` asks NVML and
hands the raw answers over, None for each call NVML did not support.

Raw keys are the NVML calls' names without `nvmlDeviceGet`: "Name", "UUID", "Serial",
"PciBusId", "VbiosVersion", "DriverVersion" (nvmlSystemGetDriverVersion), "EccMode" (current),
"EccCorrectedVolatile" ... (nvmlDeviceGetTotalEccErrors), "RetiredPagesSbe"/"Dbe" (page
counts), "RetiredPagesPending", "RemappedRows" (corr, unc, pending, failure),
"RowRemapperHistogram" (max, high, partial, low, none), "CurrPcieLinkGeneration",
"MaxPcieLinkGeneration", "CurrPcieLinkWidth", "MaxPcieLinkWidth", "PcieReplayCounter",
"PerformanceState", "ClocksEventReasons" (bitmask), "ClockSm", "MaxClockSm", "Temperature",
"TemperatureSlowdown", "PowerUsage", "EnforcedPowerLimit", "PowerDefaultLimit" (milliwatts),
"NvLinkStates" (one bool per link that exists), "NvLinkErrors" ({counter: total over the
links, None where NVML did not answer it}), "GpuRecoveryAction" (enum).
"""

from __future__ import annotations

from typing import Any, TypedDict

from fleetval.formats.gpuhw import GpuReading
from fleetval.formats.smi import gpu_model

# nvmlClocksEventReason* bits (nvml.h), by CLOCK_REASONS names
CLOCK_EVENT_BITS = {
    0x1: "idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake",
    0x100: "display_clock",
}
# nvmlDeviceGpuRecoveryAction_t, as nvidia-smi prints it
RECOVERY_ACTION = {0: "None", 1: "GPU Reset Required", 2: "Node Reboot Required",
                   3: "Drain P2P", 4: "Drain and Reset"}  # fmt: skip
NVLINK_COUNTERS = ("replay", "recovery", "crc")  # nvmlDeviceGetNvLinkErrorCounter, summed per name


class NvmlAnswers(TypedDict, total=False):
    """One GPU's NVML answers, each None where NVML did not support the call (the module's
    docstring names them)."""

    Name: str | bytes | None
    UUID: str | bytes | None
    Serial: str | bytes | None
    PciBusId: str | bytes | None
    VbiosVersion: str | bytes | None
    DriverVersion: str | bytes | None
    EccMode: int | None
    EccCorrectedVolatile: int | None
    EccUncorrectedVolatile: int | None
    EccCorrectedAggregate: int | None
    EccUncorrectedAggregate: int | None
    RetiredPagesSbe: int | None
    RetiredPagesDbe: int | None
    RetiredPagesPending: int | None
    RemappedRows: tuple[int, int, int, int] | None
    RowRemapperHistogram: tuple[int, int, int, int, int] | None
    CurrPcieLinkGeneration: int | None
    MaxPcieLinkGeneration: int | None
    CurrPcieLinkWidth: int | None
    MaxPcieLinkWidth: int | None
    PcieReplayCounter: int | None
    PerformanceState: int | None
    ClocksEventReasons: int | None
    ClockSm: int | None
    MaxClockSm: int | None
    Temperature: int | None
    TemperatureSlowdown: int | None
    PowerUsage: int | None
    EnforcedPowerLimit: int | None
    PowerDefaultLimit: int | None
    NvLinkStates: list[bool] | None
    NvLinkErrors: dict[str, int | None] | None
    GpuRecoveryAction: int | None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def _watts(mw: Any) -> float | None:
    return None if mw is None else mw / 1000.0


def clock_reasons(mask: int | None) -> list[str] | None:
    """The active reasons of an NVML clocks-event bitmask."""
    if mask is None:
        return None
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


def nvlink_counts(states: list[bool] | None) -> tuple[int | None, int | None]:
    """(links up, links in all) from NVML's state per existing link.

    NOTE: NVML answers a state for every link the GPU has, used or not: an SXM GPU alone in a
    VM has 18 links, none active. No active link is no NVLink fabric in use, read as nvidia-smi
    reads it ("all links are inactive": 0 up, no total), not as 18 links down."""
    if states is None:
        return None, None
    up = sum(bool(s) for s in states)
    return up, (len(states) if up else None)


def unread_link_counters(r: GpuReading) -> list[str]:
    """NVLink error counters NVML did not answer on a GPU with active links: not read, never
    counted as 0."""
    if r.source != "nvml" or not r.nvlink_up:
        return []
    return [c for c in NVLINK_COUNTERS if c not in r.nvlink_errors]


def from_nvml(index: int, raw: NvmlAnswers) -> GpuReading:
    """One GPU's NVML answers as a reading."""
    name = _text(raw.get("Name"))
    rows = raw.get("RemappedRows") or (None, None, None, None)
    hist = raw.get("RowRemapperHistogram")
    links_up, links_total = nvlink_counts(raw.get("NvLinkStates"))
    errors = {k: v for k, v in (raw.get("NvLinkErrors") or {}).items() if v is not None}
    pstate = raw.get("PerformanceState")
    recovery = raw.get("GpuRecoveryAction")
    return GpuReading(
        vendor="nvidia",
        source="nvml",
        index=index,
        uuid=_text(raw.get("UUID")),
        serial=_text(raw.get("Serial")),
        pci_bus_id=_text(raw.get("PciBusId")),
        name=name,
        model=gpu_model(name),
        vbios=_text(raw.get("VbiosVersion")),
        driver_version=_text(raw.get("DriverVersion")),
        ecc_enabled=None if raw.get("EccMode") is None else bool(raw["EccMode"]),
        ecc_volatile_corrected=raw.get("EccCorrectedVolatile"),
        ecc_volatile_uncorrected=raw.get("EccUncorrectedVolatile"),
        ecc_aggregate_corrected=raw.get("EccCorrectedAggregate"),
        ecc_aggregate_uncorrected=raw.get("EccUncorrectedAggregate"),
        retired_sbe=raw.get("RetiredPagesSbe"),
        retired_dbe=raw.get("RetiredPagesDbe"),
        retired_pending=None
        if raw.get("RetiredPagesPending") is None
        else bool(raw["RetiredPagesPending"]),
        remap_corrected=rows[0],
        remap_uncorrected=rows[1],
        remap_pending=None if rows[2] is None else bool(rows[2]),
        remap_failed=None if rows[3] is None else bool(rows[3]),
        remap_histogram={}
        if hist is None
        else dict(zip(("max", "high", "partial", "low", "none"), hist, strict=True)),
        pcie_gen=raw.get("CurrPcieLinkGeneration"),
        pcie_gen_max=raw.get("MaxPcieLinkGeneration"),
        pcie_width=raw.get("CurrPcieLinkWidth"),
        pcie_width_max=raw.get("MaxPcieLinkWidth"),
        pcie_replays=raw.get("PcieReplayCounter"),
        perf_state=None if pstate is None or pstate == 32 else f"P{pstate}",  # 32: unknown
        clock_reasons=clock_reasons(raw.get("ClocksEventReasons")),
        sm_clock_mhz=raw.get("ClockSm"),
        sm_clock_max_mhz=raw.get("MaxClockSm"),
        temp_c=raw.get("Temperature"),
        temp_slowdown_c=raw.get("TemperatureSlowdown"),
        power_w=_watts(raw.get("PowerUsage")),
        power_limit_w=_watts(raw.get("EnforcedPowerLimit")),
        power_default_limit_w=_watts(raw.get("PowerDefaultLimit")),
        nvlink_up=links_up,
        nvlink_total=links_total,
        nvlink_errors=errors,
        recovery_action=None if recovery is None else RECOVERY_ACTION.get(recovery, str(recovery)),
    )
