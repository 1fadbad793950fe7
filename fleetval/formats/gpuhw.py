"""GPU hardware readings, one model for every source: what a person reads in `nvidia-smi -q`,
`amd-smi metric`, NVML or amdsmi about one GPU's health, and kernel-log events about it.

A field is None when the source did not say (not printed, "N/A", or not supported); a judge
treats None as "no evidence", never as healthy. Readers live beside this module: `nvsmi`
(nvidia-smi text, XML, CSV, nvlink), `amdsmi` (amd-smi text and JSON), `kernlog` (NVRM Xid,
amdgpu RAS), `hwcapture` (which reader a captured file needs).
"""

from __future__ import annotations

import re
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from fleetval.formats.smi import na

# Clock-limit reasons by the names fleetval stores, from the tools' spellings (nvidia-smi
# printed "Clocks Throttle Reasons" before driver 535 and "Clocks Event Reasons" since).
CLOCK_REASONS = {
    "idle": "idle",
    "applications clocks setting": "applications_clocks",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clock",
}


class GpuReading(BaseModel):
    """One GPU's hardware state as one source saw it."""

    model_config = ConfigDict(extra="forbid")

    vendor: str  # "nvidia" or "amd"
    source: str  # "nvidia-smi -q", "nvml", "amd-smi metric", ...
    index: int | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None  # as the tool prints it
    name: str | None = None
    model: str | None = None  # formats.smi.gpu_model
    vbios: str | None = None
    driver_version: str | None = None
    # ECC: volatile since the driver loaded, aggregate over the board's life
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_deferred: int | None = None  # AMD: deferred (poisoned, not yet consumed)
    ecc_blocks: dict[str, dict[str, int | None]] = Field(default_factory=dict)  # AMD per block
    sram_threshold_exceeded: bool | None = None
    # retired pages (pre-Ampere) and row remapping (Ampere and later)
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remap_corrected: int | None = None
    remap_uncorrected: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    remap_histogram: dict[str, int | None] = Field(default_factory=dict)
    # PCIe link
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    # clocks, temperature, power
    perf_state: str | None = None
    clock_reasons: list[str] | None = None  # active ones, CLOCK_REASONS names
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temp_c: float | None = None
    temp_slowdown_c: float | None = None  # absolute threshold
    temp_slowdown_margin_c: float | None = None  # newer drivers: degrees left before slowdown
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    # links between GPUs
    nvlink_up: int | None = None
    nvlink_total: int | None = None
    nvlink_errors: dict[str, int] = Field(default_factory=dict)  # counter name -> total
    xgmi_up: int | None = None
    xgmi_total: int | None = None
    # what the driver says to do ("None", "GPU Reset Required", "Drain and Reset", ...)
    recovery_action: str | None = None

    def key(self) -> str:
        """The identity readings of one GPU from different sources share."""
        if self.pci_bus_id:
            return pci_key(self.pci_bus_id)
        return self.uuid or f"index:{self.index}"


class KernelEvent(BaseModel):
    """One kernel-log line about a GPU: an NVRM Xid or an amdgpu RAS event."""

    model_config = ConfigDict(extra="forbid")

    vendor: str
    kind: str  # "xid", "fallen_off_bus", "poison_consumed", "umc_uncorrectable", ...
    pci_bus_id: str | None
    code: int | None = None  # the Xid
    count: int | None = None  # amdgpu UMC lines: the errors the line counts
    text: str  # the line as logged, for evidence
    recovery_action: str | None = None  # Xid 154: the action the driver changed to

    def key(self) -> str:
        return pci_key(self.pci_bus_id) if self.pci_bus_id else "node"


def pci_key(bus_id: str) -> str:
    """A PCI address however a tool printed it ("00000000:1B:00.0", "0000:1b:00",
    "PCI:0000:1b:00") as domain:bus:device, lower case: "0000:1b:00"."""
    s = bus_id.strip().lower().removeprefix("pci:")
    m = re.search(r"(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$", s)
    if not m:
        return s
    domain = (m.group(1) or "0000")[-4:]
    return f"{domain}:{m.group(2)}:{m.group(3)}"


def merge(readings: list[GpuReading]) -> list[GpuReading]:
    """Readings of the same GPU from several sources as one: a later source fills what an
    earlier one left None (nvidia-smi -q, then `nvidia-smi nvlink -s` for the links)."""
    merged: dict[str, GpuReading] = {}
    for r in readings:
        k = _merge_key(r, merged)
        if k not in merged:
            merged[k] = r
            continue
        have = merged[k]
        fill = {f: v for f, v in r.model_dump().items() if _empty(getattr(have, f)) and v}
        sources = have.source if r.source in have.source else f"{have.source} + {r.source}"
        merged[k] = have.model_copy(update={**fill, "source": sources})
    return list(merged.values())


def _merge_key(r: GpuReading, merged: dict[str, GpuReading]) -> str:
    # NOTE: `nvidia-smi nvlink -s` names GPUs by index and UUID only, `amd-smi metric` by
    # index only: match on UUID, then on the index where one of the two has no address.
    for k, have in merged.items():
        if r.uuid and have.uuid == r.uuid:
            return k
    for k, have in merged.items():
        same = have.vendor == r.vendor and have.index == r.index and r.index is not None
        if same and not (have.pci_bus_id and r.pci_bus_id) and not (have.uuid and r.uuid):
            return k
    return r.key()


def _empty(v: Any) -> bool:
    return v is None or v == {} or v == []


# ---- the "Key : value" tree both nvidia-smi -q and amd-smi print -----------------------------

# A section: each key's value as printed (None for the tools' N/A spellings) or the section the
# key opens. amd-smi's JSON is read into the same shape (numbers and lists stay as they are).
Tree: TypeAlias = "dict[str, str | int | float | list[object] | Tree | None]"


def tree(lines: list[str]) -> Tree:
    """Indented "Key : value" lines as nested dicts: a key without a value opens a section
    holding the more-indented lines below it. Repeated keys keep the first value."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for raw in lines:
        if not raw.strip():
            continue
        line = raw.expandtabs(8)
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key = key.strip()
        if sep and value.strip():
            parent.setdefault(key, na(value))
        else:
            child: Tree = {}
            parent.setdefault(key, child)
            stack.append((indent, child))
    return root


def number(value: Any) -> float | None:
    """The number in "41 C", "126.96 W", "16x", "1980 MHz"; None for N/A or no number."""
    if value is None or isinstance(value, dict):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = re.search(r"-?\d+(?:\.\d+)?", str(value))
    return float(m.group(0)) if m else None


def integer(value: Any) -> int | None:
    n = number(value)
    return int(n) if n is not None else None


def yes(value: Any) -> bool | None:
    """ "Yes"/"Enabled"/"Active" -> True, "No"/"Disabled"/"Not Active" -> False, else None."""
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if v in ("yes", "enabled", "active", "true"):
        return True
    if v in ("no", "disabled", "not active", "false"):
        return False
    return None


def section(d: Tree, *names: str) -> Tree:
    """The first of `names` that is a section of `d` (tools renamed sections over releases)."""
    for n in names:
        v = d.get(n)
        if isinstance(v, dict):
            return v
    return {}
