"""Why a GPU is bad and what to do: pure judgements over hardware readings and kernel events.

Every finding names its evidence (the values read), a status (WARN or FAIL) and one action
from `Action`, with the reason for that action. The driver's own word wins where it gives one
(NVML's GPU recovery action, Xid 154). Thresholds are numbers in `HwThresholds`, which a suite
sets; none live in code. Both `fleetval gpu-health` and the `health` check call `judge_node`.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from fleetval.finding import Finding
from fleetval.formats.gpuhw import GpuReading, KernelEvent, pci_key
from fleetval.formats.hwobs import Observation
from fleetval.vocab import Status

if TYPE_CHECKING:
    from fleetval.store.records import JsonObject


class Action(StrEnum):
    """What an operator does about a finding, mildest first."""

    NONE = "none"  # nothing: recorded only
    WATCH = "watch"  # keep in service; compare the counter at the next sweep
    RESET_GPU = "reset GPU"  # drain the GPU's jobs, reset it (nvidia-smi -r / amd-smi reset)
    REBOOT_NODE = "reboot node"  # drain the node, reboot it; RMA if it comes back
    DRAIN_RMA = "drain and RMA"  # take the node out; the GPU needs replacing


ACTION_RANK = {a: i for i, a in enumerate(Action)}


class HwThresholds(BaseModel):
    """When a counter becomes a finding; a suite sets these under the health step's `hardware`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ecc_corrected_watch: PositiveInt = 1000  # volatile corrected ECC errors
    retired_pages_rma: PositiveInt = 60  # NVIDIA's RMA line for dynamic page retirement
    pcie_replays_watch: PositiveInt = 100  # PCIe replays since reset
    temp_margin_watch_c: NonNegativeFloat = 5.0  # degrees left before HW slowdown
    power_limit_below_default_pct: NonNegativeFloat = 5.0  # a lowered power cap, in percent
    expect_nvlinks: PositiveInt | None = None  # links each NVIDIA GPU must have up
    expect_xgmi_links: PositiveInt | None = None  # XGMI peers each AMD GPU must reach
    link_errors_watch: PositiveInt = 100  # NVLink CRC/replay/recovery, XGMI_WAFL corrected
    xid_app_recurrence: PositiveInt = 3  # distinct processes hitting 13/31/43 make it the node's
    # Within a node, a busy GPU whose SM clock or power strays this many percent from the
    # median of the node's other busy GPUs (DCGM 4.5's tolerance checks); None: not checked.
    peer_tolerance_pct: PositiveFloat | None = 10.0
    # Across a fleet: firmware each SKU must run ({"NVIDIA H100 SXM": {"vbios": "96.00.74.00.0D",
    # "driver_version": "535.161.08"}}); without one, the SKU's majority is the reference.
    golden: dict[str, dict[str, str]] = Field(default_factory=dict)


class HwFindingJSON(TypedDict):
    """A hardware finding as a health row's details store it and `gpu-health --json` prints it
    (its status under the name stored rows have always had: `severity`)."""

    code: str
    severity: str
    action: str
    reason: str
    evidence: str


@dataclass(frozen=True)
class HwFinding(Finding):
    """One judged fact about one GPU (or the node, for a kernel event without a GPU): a
    `Finding` (code "row_remap_pending", "xid_79", ...; status WARN or FAIL, INFO for what is
    recorded only; the reason for its action) with what to do and the values read."""

    action: Action
    evidence: str  # the values read, as the tool printed them

    def to_json(self) -> HwFindingJSON:
        return HwFindingJSON(code=self.code, severity=self.status.value, action=self.action.value,
                             reason=self.reason, evidence=self.evidence)  # fmt: skip

    @classmethod
    def from_json(cls, d: HwFindingJSON) -> HwFinding:
        return cls(
            d["code"], Status(d["severity"]), d["reason"], Action(d["action"]), d["evidence"]
        )


@dataclass(frozen=True)
class GpuVerdict:
    """A GPU's findings, and the one action they add up to."""

    key: str  # formats.gpuhw: PCI address, else UUID, else index
    label: str  # how a person names it: "GPU 3 (0000:1b:00, GPU-...)"
    reading: GpuReading | None
    findings: list[HwFinding] = field(default_factory=list)

    @property
    def action(self) -> Action:
        return max((f.action for f in self.findings), key=ACTION_RANK.__getitem__,
                   default=Action.NONE)  # fmt: skip

    @property
    def bad(self) -> list[HwFinding]:
        return [f for f in self.findings if f.bad]

    def to_json(self, node: str) -> GpuVerdictJSON:
        """As `fleetval gpu-health --json` lists it."""
        return GpuVerdictJSON(
            node=node,
            gpu=self.label,
            key=self.key,
            action=self.action.value,
            reading=self.reading.model_dump() if self.reading else None,
            findings=[f.to_json() for f in self.findings],
        )


class GpuVerdictJSON(TypedDict):
    node: str
    gpu: str
    key: str
    action: str
    reading: JsonObject | None  # GpuReading.model_dump()
    findings: list[HwFindingJSON]


# ---- the Xid table ---------------------------------------------------------------------------


class XidRule(NamedTuple):
    meaning: str
    severity: Status
    action: Action
    node_fault: bool  # False: an application's error, the node's only when it recurs


# NVIDIA's Xid catalog of current drivers (docs.nvidia.com/deploy/xid-errors): each code's
# meaning, and its published immediate resolution as the action (RESET_GPU: reset GPU;
# RESTART_BM / RESTART_VM: reboot node; the NVLink workflows: reset GPU; RESTART_APP: the
# application's error, the node's only when it recurs; IGNORE: recorded only).
XID_TABLE: dict[int, XidRule] = {
    8: XidRule("GPU stopped processing (application)", Status.INFO, Action.NONE, False),
    13: XidRule("graphics engine exception (application)", Status.INFO, Action.NONE, False),
    31: XidRule("GPU memory page fault (application)", Status.INFO, Action.NONE, False),
    32: XidRule(
        "invalid or corrupted push buffer stream (application)", Status.INFO, Action.NONE, False
    ),
    38: XidRule("driver firmware error", Status.WARN, Action.WATCH, True),
    43: XidRule("GPU stopped processing (application)", Status.INFO, Action.NONE, False),
    45: XidRule("preemptive cleanup after an earlier error", Status.INFO, Action.NONE, False),
    48: XidRule("double-bit ECC error", Status.FAIL, Action.RESET_GPU, True),
    62: XidRule("internal micro-controller halt", Status.FAIL, Action.RESET_GPU, True),
    63: XidRule("ECC page retirement or row remap recorded", Status.WARN, Action.RESET_GPU, True),
    64: XidRule("ECC page retirement or row remap failed", Status.FAIL, Action.DRAIN_RMA, True),
    68: XidRule("NVDEC0 exception (application)", Status.INFO, Action.NONE, False),
    69: XidRule("graphics engine class error (application)", Status.INFO, Action.NONE, False),
    74: XidRule("NVLink error", Status.FAIL, Action.RESET_GPU, True),
    79: XidRule("GPU has fallen off the bus", Status.FAIL, Action.REBOOT_NODE, True),
    92: XidRule("high single-bit ECC error rate", Status.WARN, Action.WATCH, True),
    94: XidRule("contained ECC error", Status.WARN, Action.RESET_GPU, True),
    95: XidRule("uncontained ECC error", Status.FAIL, Action.RESET_GPU, True),
    109: XidRule("context switch timeout", Status.FAIL, Action.RESET_GPU, True),
    119: XidRule("GSP RPC timeout", Status.FAIL, Action.REBOOT_NODE, True),
    120: XidRule("GSP error", Status.FAIL, Action.REBOOT_NODE, True),
    121: XidRule("C2C link error", Status.WARN, Action.WATCH, True),
    136: XidRule("NVLink link training failed", Status.FAIL, Action.RESET_GPU, True),
    140: XidRule("unrecovered ECC error", Status.FAIL, Action.RESET_GPU, True),
    143: XidRule("GPU initialization error", Status.FAIL, Action.RESET_GPU, True),
    144: XidRule("NVLink SAW error", Status.FAIL, Action.RESET_GPU, True),
    145: XidRule("NVLink RLW error", Status.FAIL, Action.RESET_GPU, True),
    146: XidRule("NVLink TLW error", Status.FAIL, Action.RESET_GPU, True),
    147: XidRule("NVLink TREX error", Status.FAIL, Action.RESET_GPU, True),
    148: XidRule("NVLink NVLPW_CTRL error", Status.FAIL, Action.RESET_GPU, True),
    149: XidRule("NVLink NETIR error (link/C2C fatal event)", Status.FAIL, Action.RESET_GPU, True),
    150: XidRule("NVLink MSE error", Status.FAIL, Action.RESET_GPU, True),
    151: XidRule("key rotation error", Status.FAIL, Action.REBOOT_NODE, True),
    154: XidRule("GPU recovery action changed", Status.FAIL, Action.RESET_GPU, True),
    155: XidRule("NVLink software-defined error", Status.FAIL, Action.RESET_GPU, True),
    156: XidRule("resource retirement event", Status.WARN, Action.RESET_GPU, True),
    157: XidRule("resource retirement failure", Status.WARN, Action.WATCH, True),
}

# NVRM kernel messages other than Xids
NVIDIA_EVENTS: dict[str, tuple[Status, Action, str]] = {
    "rm_init_failed": (Status.FAIL, Action.REBOOT_NODE,
                       "the driver could not initialise the GPU (RmInitAdapter failed): it is "
                       "unusable until a reboot; reseat or RMA if it fails again"),
}  # fmt: skip

# NVML's GPU recovery action (nvmlDeviceGetGpuRecoveryAction) and nvidia-smi's spelling of it
RECOVERY_ACTIONS: dict[str, Action] = {
    "none": Action.NONE,
    "gpu reset required": Action.RESET_GPU,
    "gpu reset": Action.RESET_GPU,
    "node reboot required": Action.REBOOT_NODE,
    "node reboot": Action.REBOOT_NODE,
    "drain p2p": Action.RESET_GPU,
    "drain and reset": Action.RESET_GPU,
}

# amdgpu RAS kernel events
AMD_EVENTS: dict[str, tuple[Status, Action, str]] = {
    "poison_consumed": (Status.FAIL, Action.RESET_GPU,
                        "poisoned data was consumed; the driver reset the GPU, the job is lost"),
    "poison_created": (Status.WARN, Action.WATCH,
                       "an uncorrectable error was contained as poison; not yet consumed"),
    "bad_page_threshold": (Status.FAIL, Action.DRAIN_RMA,
                           "retired VRAM pages reached the driver's RMA threshold"),
    "athub_uncorrectable": (Status.FAIL, Action.RESET_GPU,
                            "an uncorrectable ATHUB hardware error: the driver resets the GPU, "
                            "its jobs are lost"),
    "aca_event": (Status.FAIL, Action.RESET_GPU,
                  "hardware errors logged by the Accelerator Check Architecture (MCA banks): "
                  "the GPU is reset; RMA if they recur"),
    "reset_failed": (Status.FAIL, Action.REBOOT_NODE,
                     "a GPU reset did not complete (SMU/DPM features could not be disabled): "
                     "only a reboot brings the GPU back"),
    "umc_uncorrectable": (Status.FAIL, Action.RESET_GPU,
                          "uncorrectable VRAM errors counted by the memory controller (UMC): "
                          "the driver retires the pages and resets the GPU; RMA if they recur"),
    "umc_deferred": (Status.WARN, Action.WATCH,
                     "deferred VRAM errors (UMC): poisoned data not yet consumed"),
    "umc_correctable": (Status.WARN, Action.WATCH,
                        "corrected VRAM errors (UMC): the memory still works; watch their count"),
    "smu_unresponsive": (Status.WARN, Action.WATCH,
                         "the power-management firmware (SMU) stopped answering the driver: "
                         "clocks and telemetry are stale; a reset follows if it persists"),
}  # fmt: skip


# ---- one GPU's readings ----------------------------------------------------------------------


def judge_reading(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    """Every finding one GPU's readings support; nothing for what the source did not say."""
    return [
        *_recovery(r),
        *_ecc(r, t),
        *_memory(r, t),
        *_pcie(r, t),
        *_clocks(r, t),
        *_links(r, t),
    ]


def _recovery(r: GpuReading) -> list[HwFinding]:
    action = RECOVERY_ACTIONS.get((r.recovery_action or "").strip().lower())
    if action is None or action == Action.NONE:
        return []
    return [HwFinding("driver_recovery_action", Status.FAIL,
                      "the driver states this recovery action",
                      action,
                      f"GPU Recovery Action: {r.recovery_action}")]  # fmt: skip


def _ecc(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    out = []
    if r.ecc_volatile_uncorrected:
        out.append(HwFinding("ecc_uncorrected_volatile", Status.FAIL,
                             "uncorrectable memory errors since the driver loaded: data a job "
                             "read may be wrong; a reset retires or remaps the bad memory",
                             Action.RESET_GPU,
                             f"volatile uncorrected ECC: {r.ecc_volatile_uncorrected}"))  # fmt: skip
    if r.ecc_aggregate_uncorrected:
        out.append(HwFinding("ecc_uncorrected_aggregate", Status.WARN,
                             "uncorrectable errors in the board's lifetime; the retired-page or "
                             "row-remap state says whether they were repaired",
                             Action.WATCH,
                             f"aggregate uncorrected ECC: {r.ecc_aggregate_uncorrected}"))  # fmt: skip
    if r.ecc_volatile_corrected is not None and r.ecc_volatile_corrected >= t.ecc_corrected_watch:
        out.append(HwFinding("ecc_corrected_high", Status.WARN,
                             "many corrected errors often precede uncorrectable ones",
                             Action.WATCH,
                             f"volatile corrected ECC: {r.ecc_volatile_corrected} "
                             f"(watch at {t.ecc_corrected_watch})"))  # fmt: skip
    if r.sram_threshold_exceeded:
        out.append(HwFinding("sram_threshold_exceeded", Status.FAIL,
                             "the SRAM error threshold is NVIDIA's RMA criterion",
                             Action.DRAIN_RMA,
                             "SRAM Threshold Exceeded: Yes"))  # fmt: skip
    out += _amd_blocks(r, t)
    return out


def _amd_blocks(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    out = []
    for block, counts in r.ecc_blocks.items():
        if block == "XGMI_WAFL":
            continue  # judged as a link, in _links
        if counts.get("uncorrectable"):
            out.append(HwFinding(f"ecc_uncorrected_{block.lower()}", Status.FAIL,
                                 f"uncorrectable errors in the {block} block",
                                 Action.RESET_GPU,
                                 f"{block}: uncorrectable {counts['uncorrectable']}"))  # fmt: skip
        if counts.get("deferred"):
            out.append(HwFinding(f"ecc_deferred_{block.lower()}", Status.WARN,
                                 "deferred (poisoned) errors not yet consumed",
                                 Action.WATCH,
                                 f"{block}: deferred {counts['deferred']}"))  # fmt: skip
        corrected = counts.get("correctable") or 0
        if corrected >= t.ecc_corrected_watch:
            out.append(HwFinding(f"ecc_corrected_{block.lower()}", Status.WARN,
                                 "many corrected errors often precede uncorrectable ones",
                                 Action.WATCH,
                                 f"{block}: correctable {corrected}"))  # fmt: skip
    return out


def _memory(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    out = []
    if r.remap_failed:
        out.append(HwFinding("row_remap_failed", Status.FAIL,
                             "a row could not be remapped: the memory has no spare left to "
                             "repair it",
                             Action.DRAIN_RMA, "Remapping Failure Occurred: Yes"))  # fmt: skip
    if r.remap_pending:
        out.append(HwFinding("row_remap_pending", Status.FAIL,
                             "a row remap is recorded but applies only after a GPU reset; until "
                             "then jobs can hit the bad row",
                             Action.RESET_GPU,
                             f"Remapped Rows Pending: Yes (uncorrectable {r.remap_uncorrected}, "
                             f"correctable {r.remap_corrected})"))  # fmt: skip
    low = sum(r.remap_histogram.get(k) or 0 for k in ("low", "none"))
    if low:
        out.append(HwFinding("row_remap_spares_low", Status.WARN,
                             "banks with few or no spare rows left cannot absorb more errors",
                             Action.WATCH,
                             f"bank remap availability: low {r.remap_histogram.get('low')}, "
                             f"none {r.remap_histogram.get('none')}"))  # fmt: skip
    retired = (r.retired_sbe or 0) + (r.retired_dbe or 0)
    if retired >= t.retired_pages_rma:
        out.append(HwFinding("retired_pages_rma", Status.FAIL,
                             f"{retired} retired pages reach the RMA line of {t.retired_pages_rma}",
                             Action.DRAIN_RMA,
                             f"Retired Pages: single bit {r.retired_sbe}, double bit "
                             f"{r.retired_dbe}"))  # fmt: skip
    elif r.retired_dbe:
        out.append(HwFinding("retired_pages_dbe", Status.WARN,
                             "pages retired for double-bit errors",
                             Action.WATCH,
                             f"Retired Pages: double bit {r.retired_dbe}"))  # fmt: skip
    if r.retired_pending:
        out.append(HwFinding("retired_pages_pending", Status.FAIL,
                             "a page retirement applies only after a GPU reset",
                             Action.RESET_GPU,
                             "Pending Page Blacklist: Yes"))  # fmt: skip
    return out


def _idle(r: GpuReading) -> bool:
    """Idle by the GPU's own word: it lowers its PCIe generation and clocks to save power."""
    pstate = int(m.group(1)) if r.perf_state and (m := re.match(r"P(\d+)", r.perf_state)) else 0
    return "idle" in (r.clock_reasons or []) or pstate >= 8


def _pcie(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    out = []
    if r.pcie_width and r.pcie_width_max and r.pcie_width < r.pcie_width_max:
        out.append(HwFinding("pcie_width_downtrained", Status.FAIL,
                             "the link trained narrower than it can: host transfers are slower; "
                             "a reboot retrains it, a reseat if it persists",
                             Action.REBOOT_NODE,
                             f"PCIe width x{r.pcie_width} of x{r.pcie_width_max}"))  # fmt: skip
    if r.pcie_gen and r.pcie_gen_max and r.pcie_gen < r.pcie_gen_max and not _idle(r):
        out.append(HwFinding("pcie_gen_downtrained", Status.WARN,
                             "the link runs below its generation while the GPU is busy",
                             Action.REBOOT_NODE,
                             f"PCIe gen {r.pcie_gen} of {r.pcie_gen_max} ({r.perf_state})"))  # fmt: skip
    if r.pcie_replays is not None and r.pcie_replays >= t.pcie_replays_watch:
        out.append(HwFinding("pcie_replays", Status.WARN,
                             "replayed PCIe packets mean link errors; growth between sweeps "
                             "points to a marginal slot or riser",
                             Action.WATCH,
                             f"PCIe replays since reset: {r.pcie_replays} "
                             f"(watch at {t.pcie_replays_watch})"))  # fmt: skip
    return out


def _clocks(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    out = []
    active = set(r.clock_reasons or [])
    clock = f"SM {r.sm_clock_mhz:g} of {r.sm_clock_max_mhz:g} MHz" if r.sm_clock_mhz and \
        r.sm_clock_max_mhz else f"{r.perf_state or 'clocks'}"  # fmt: skip
    hw = sorted(active & {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake"})
    if hw:
        why = ("an external power-brake signal (PSU or BMC) holds the clocks down"
               if "hw_power_brake" in active else "the hardware itself slows the clocks "
               "(overheating or a power-supply fault)")  # fmt: skip
        out.append(HwFinding("hw_slowdown", Status.FAIL,
                             f"{why}; a reboot clears a stuck signal, else the chassis needs "
                             "service",
                             Action.REBOOT_NODE, f"active: {', '.join(hw)}; {clock}"))  # fmt: skip
    if active & {"sw_thermal_slowdown", "throttled"}:
        out.append(HwFinding("thermal_slowdown", Status.WARN,
                             "the driver slows the clocks to stay under its temperature target",
                             Action.WATCH,
                             f"active: {', '.join(sorted(active))}; {clock}"))  # fmt: skip
    margin = r.temp_slowdown_margin_c
    if margin is None and r.temp_c is not None and r.temp_slowdown_c is not None:
        margin = r.temp_slowdown_c - r.temp_c
    if margin is not None and margin <= t.temp_margin_watch_c:
        out.append(HwFinding("temperature_near_slowdown", Status.WARN,
                             "the GPU is close to the temperature where hardware slowdown starts",
                             Action.WATCH,
                             f"{margin:g} C before slowdown (watch within "
                             f"{t.temp_margin_watch_c:g} C)"))  # fmt: skip
    lim, default = r.power_limit_w, r.power_default_limit_w
    if lim and default and lim < default * (1 - t.power_limit_below_default_pct / 100):
        out.append(HwFinding("power_limit_lowered", Status.WARN,
                             "a power cap below the default slows every job on this GPU",
                             Action.WATCH,
                             f"power limit {lim:g} W, default {default:g} W"))  # fmt: skip
    return out


def _links(r: GpuReading, t: HwThresholds) -> list[HwFinding]:
    out = []
    expected = t.expect_nvlinks or r.nvlink_total
    if r.nvlink_up is not None and expected and r.nvlink_up < expected:
        out.append(HwFinding("nvlink_down", Status.FAIL,
                             "NVLinks down: peer traffic falls back to PCIe or fails; a reset "
                             "retrains them, RMA if they stay down",
                             Action.RESET_GPU,
                             f"NVLinks up: {r.nvlink_up} of {expected}"))  # fmt: skip
    elif r.nvlink_up == 0:  # NOTE: no active link is no NVLink fabric in use (a lone SXM GPU)
        out.append(HwFinding("nvlink_inactive", Status.INFO,
                             "no NVLink is active: no NVLink fabric in use (set expect_nvlinks "
                             "where one must be)",
                             Action.NONE, "all links are inactive"))  # fmt: skip
    for counter, n in sorted(r.nvlink_errors.items()):
        if n >= t.link_errors_watch:
            out.append(HwFinding(f"nvlink_{counter}_errors", Status.WARN,
                                 "NVLink errors: the link retries; growth means a failing link",
                                 Action.WATCH,
                                 f"NVLink {counter} errors: {n}"))  # fmt: skip
    xgmi_expected = t.expect_xgmi_links or r.xgmi_total
    if r.xgmi_up is not None and xgmi_expected and r.xgmi_up < xgmi_expected:
        out.append(HwFinding("xgmi_down", Status.FAIL,
                             "XGMI peers unreachable: peer traffic falls back to PCIe or fails",
                             Action.RESET_GPU,
                             f"XGMI links with counters: {r.xgmi_up} of {xgmi_expected}"))  # fmt: skip
    wafl = r.ecc_blocks.get("XGMI_WAFL", {})
    if wafl.get("uncorrectable"):
        out.append(HwFinding("xgmi_uncorrectable", Status.FAIL,
                             "uncorrectable XGMI link errors",
                             Action.RESET_GPU,
                             f"XGMI_WAFL: uncorrectable {wafl['uncorrectable']}"))  # fmt: skip
    if (wafl.get("correctable") or 0) >= t.link_errors_watch:
        out.append(HwFinding("xgmi_corrected_errors", Status.WARN,
                             "corrected XGMI link errors: growth means a failing link",
                             Action.WATCH,
                             f"XGMI_WAFL: correctable {wafl['correctable']}"))  # fmt: skip
    return out


# ---- kernel events ---------------------------------------------------------------------------


def judge_events(events: list[KernelEvent], t: HwThresholds) -> dict[str, list[HwFinding]]:
    """Findings per GPU key from kernel events: one per Xid code (or amdgpu event kind) on a
    GPU, with its count and last line."""
    by: dict[tuple[str, str], list[KernelEvent]] = defaultdict(list)
    for e in events:
        kind = "xid_79" if e.kind == "fallen_off_bus" else (
            f"xid_{e.code}" if e.kind == "xid" else e.kind)  # fmt: skip
        by[(e.key(), kind)].append(e)
    out: dict[str, list[HwFinding]] = defaultdict(list)
    for (key, kind), evs in by.items():
        out[key].append(_event_finding(kind, evs, t))
    return dict(out)


def _event_finding(kind: str, evs: list[KernelEvent], t: HwThresholds) -> HwFinding:
    last = evs[-1].text
    n = len(evs)
    table = AMD_EVENTS if evs[0].vendor == "amd" else NVIDIA_EVENTS
    if kind in table:
        severity, action, why = table[kind]
        counted = sum(e.count or 0 for e in evs)  # a UMC line counts its errors
        seen = f"{n}x ({counted:,} errors)" if counted else f"{n}x"
        return HwFinding(kind, severity, why, action, f"{seen}, last: {last}")
    if not kind.startswith("xid_"):  # an event a newer reader knows and this table not yet
        return HwFinding(kind, Status.WARN, f"{kind.replace('_', ' ')}: not in fleetval's table",
                         Action.WATCH, f"{n}x, last: {last}")  # fmt: skip
    code = int(kind.removeprefix("xid_"))
    rule = XID_TABLE.get(code)
    if rule is None:
        return HwFinding(kind, Status.WARN, f"Xid {code} is not in fleetval's table", Action.WATCH,
                         f"{n}x, last: {last}")  # fmt: skip
    if code == 154 and (stated := RECOVERY_ACTIONS.get((evs[-1].recovery_action or "").lower())):
        return HwFinding(kind, Status.FAIL if stated != Action.NONE else Status.INFO,
                         f"{rule.meaning}: the driver now asks for '{evs[-1].recovery_action}'",
                         stated,
                         f"{n}x, last: {last}")  # fmt: skip
    if not rule.node_fault:
        procs = {m.group(1) for e in evs if (m := re.search(r"pid=(\d+|'<unknown>')", e.text))}
        if len(procs) >= t.xid_app_recurrence:
            return HwFinding(kind, Status.WARN,
                             f"{rule.meaning}, in {len(procs)} processes: recurring across jobs, "
                             "so suspect the GPU",
                             Action.WATCH, f"{n}x, last: {last}")  # fmt: skip
        return HwFinding(kind, Status.INFO,
                         f"{rule.meaning}: an application error, not the node's",
                         Action.NONE,
                         f"{n}x, last: {last}")  # fmt: skip
    return HwFinding(kind, rule.severity, rule.meaning, rule.action, f"{n}x, last: {last}")


# ---- what tools printed beside the counters ---------------------------------------------------

# dcgmi diag categories -> what a failed test there means (DCGM's user guide: Deployment checks
# software and configuration; Integration the PCIe/NVLink paths; Hardware the memory and the
# field diagnostic; Stress the GPU under load)
DCGM_CATEGORIES: dict[str, tuple[Action, str]] = {
    "Deployment": (Action.WATCH, "a software or configuration check failed: fix what the "
                   "message names (it is not the hardware), then rerun the diagnostic"),
    "Integration": (Action.REBOOT_NODE, "the PCIe/NVLink test failed: links are down or slow; "
                    "a reboot retrains them, a field diagnostic if it fails again"),
    "Hardware": (Action.DRAIN_RMA, "the GPU failed a hardware test (memory or the field "
                 "diagnostic): take it out of service for a field diagnostic and RMA"),
    "Stress": (Action.RESET_GPU, "the GPU failed under load (bandwidth, power or stress): "
               "reset it and rerun; RMA if it fails again"),
}  # fmt: skip


def judge_observation(o: Observation) -> HwFinding | None:
    """The finding one observation supports; None when what the tool printed is healthy."""
    if o.ok:
        return None
    if o.kind == "dcgm_test":
        action, why = DCGM_CATEGORIES.get(o.category, (Action.WATCH, "a DCGM test failed"))
        severity = Status.WARN if o.value.startswith("Warn") or action == Action.WATCH else \
            Status.FAIL  # fmt: skip
        detail = f": {o.detail}" if o.detail else ""
        return HwFinding(f"dcgm_{_slug(o.subject)}", severity, why, action,
                         f"dcgmi diag {o.category} {o.subject}: {o.value}{detail}")  # fmt: skip
    if o.kind == "fabric":
        return HwFinding("nvlink_fabric", Status.FAIL,
                         "the GPU is not healthily registered with the NVLink fabric: multi-node "
                         "NVLink jobs fail or fall back; check the fabric manager / IMEX, then "
                         "reboot",
                         Action.REBOOT_NODE, f"Fabric: {o.value} ({o.detail})")  # fmt: skip
    if o.kind == "xid":  # a tool's Xid column: judged by the catalog the kernel log's Xids are
        code = int(o.value)
        ev = KernelEvent(vendor=o.vendor, kind="xid", pci_bus_id=o.pci_bus_id, code=code,
                         text=f"{o.source}: GPU {o.index} {o.subject} {o.value}")  # fmt: skip
        return _event_finding(f"xid_{code}", [ev], HwThresholds())
    if o.kind == "nvlink_pair":
        return HwFinding("nvlink_pair_fewer", Status.FAIL,
                         "this GPU pair has fewer NVLinks than its peers: links are down; a reset "
                         "retrains them, RMA if they stay down",
                         Action.RESET_GPU,
                         f"topo -m {o.subject}: {o.value} ({o.detail})")  # fmt: skip
    return HwFinding(o.kind, Status.WARN, f"{o.source} reports a problem", Action.WATCH,
                     f"{o.subject}: {o.value}")  # fmt: skip


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _observation_key(o: Observation, readings: Sequence[GpuReading]) -> str:
    """The key of the reading this observation is about (UUID, PCI address, then index)."""
    for r in readings:
        if (o.uuid and r.uuid == o.uuid) or (
            o.pci_bus_id and r.pci_bus_id and pci_key(r.pci_bus_id) == pci_key(o.pci_bus_id)
        ):
            return r.key()
    for r in readings:
        if o.index is not None and r.index == o.index and r.vendor == o.vendor:
            return r.key()
    if o.pci_bus_id:
        return pci_key(o.pci_bus_id)
    return o.uuid or (f"index:{o.index}" if o.index is not None else "node")


# ---- a node ----------------------------------------------------------------------------------


def judge_node(
    readings: list[GpuReading],
    events: list[KernelEvent],
    t: HwThresholds,
    observations: Sequence[Observation] = (),
) -> list[GpuVerdict]:
    """Each GPU's verdict from its readings, its peers on the node, the kernel events at its
    PCI address and what other tools printed about it; events and observations no reading
    names get a verdict of their own (the GPU may have vanished, or the paste named none)."""
    by_event = judge_events(events, t)
    for o in observations:
        if (found := judge_observation(o)) is not None:
            key = _observation_key(o, readings)
            if found not in by_event.setdefault(key, []):
                by_event[key].append(found)
    peers = peer_findings(readings, t)
    verdicts = []
    for r in readings:
        k = r.key()
        found = judge_reading(r, t) + peers.get(k, []) + by_event.pop(k, [])
        verdicts.append(GpuVerdict(k, gpu_label(r), r, found))
    for k, findings in sorted(by_event.items()):
        if findings:
            verdicts.append(GpuVerdict(k, _key_label(k), None, findings))
    return verdicts


def peer_findings(readings: list[GpuReading], t: HwThresholds) -> dict[str, list[HwFinding]]:
    """Busy GPUs of one node whose SM clock or power strays from the median of the others by
    more than `peer_tolerance_pct`. Idle GPUs are left out (they clock down on purpose), and
    fewer than three busy GPUs cannot say which one strays."""
    busy = [r for r in readings if not _idle(r) and r.clock_reasons is not None]
    if t.peer_tolerance_pct is None or len(busy) < 3:
        return {}
    out: dict[str, list[HwFinding]] = defaultdict(list)
    for field_name, what, unit in (("sm_clock_mhz", "SM clock", "MHz"), ("power_w", "power", "W")):
        for r in busy:
            mine = getattr(r, field_name)
            others = [getattr(o, field_name) for o in busy if o is not r]
            others = [v for v in others if v is not None]
            if mine is None or len(others) < 2:
                continue
            median = statistics.median(others)
            off = (mine - median) / median * 100 if median else 0.0
            if abs(off) > t.peer_tolerance_pct:
                out[r.key()].append(HwFinding(
                    f"peer_{field_name.split('_')[0]}", Status.WARN,
                    f"{what} strays from the node's other busy GPUs: a slow or hot GPU drags "
                    "every collective it joins",
                    Action.WATCH,
                    f"{what} {mine:g} {unit}, {off:+.0f}% from the others' median {median:g} "
                    f"{unit} (tolerance {t.peer_tolerance_pct:g}%)"))  # fmt: skip
    return dict(out)


def firmware_drift(
    by_node: Mapping[str, list[GpuReading]], t: HwThresholds
) -> dict[tuple[str, str], list[HwFinding]]:
    """(node, GPU key) -> findings for VBIOS or driver versions that differ from the SKU's
    golden config, else from the SKU's majority across the fleet (no majority: every GPU
    outside the most common version is named, with the counts)."""
    by_model: dict[str, list[tuple[str, GpuReading]]] = defaultdict(list)
    for node, readings in by_node.items():
        for r in readings:
            if r.model:
                by_model[r.model].append((node, r))
    out: dict[tuple[str, str], list[HwFinding]] = defaultdict(list)
    for model, members in by_model.items():
        for attr in ("vbios", "driver_version"):
            counts = Counter(getattr(r, attr) for _, r in members if getattr(r, attr))
            if not counts:
                continue
            golden = t.golden.get(model, {}).get(attr)
            want, n = (golden, counts[golden]) if golden else counts.most_common(1)[0]
            if not golden and len(counts) < 2:
                continue
            total = sum(counts.values())
            basis = (
                "the golden config"
                if golden
                else f"the SKU's majority ({n} of {total} GPUs)"
                if n * 2 > total
                else f"the most common ({n} of {total} GPUs; no majority)"
            )
            for node, r in members:
                have = getattr(r, attr)
                if have and have != want:
                    out[(node, r.key())].append(HwFinding(
                        f"{attr.removesuffix('_version')}_drift", Status.WARN,
                        f"every {model} should run the same {attr.replace('_', ' ')}: "
                        "another one behaves differently (clocks, ECC handling, fixes)",
                        Action.WATCH,
                        f"{attr} {have} on {node}; {basis}: {want}"))  # fmt: skip
    return dict(out)


def judge_fleet(
    nodes: Mapping[str, tuple[Any, ...]], t: HwThresholds
) -> dict[str, list[GpuVerdict]]:
    """Each node judged on its own (readings, kernel events and, where given, observations),
    then its GPUs' firmware against the fleet's."""
    verdicts = {node: judge_node(ev[0], ev[1], t, *ev[2:3]) for node, ev in nodes.items()}
    drift = firmware_drift({node: ev[0] for node, ev in nodes.items()}, t)
    for node, vs in verdicts.items():
        for v in vs:
            v.findings.extend(drift.get((node, v.key), []))
    return verdicts


def _key_label(key: str) -> str:
    if key == "node":
        return "node"
    if key.startswith("index:"):
        return f"GPU {key.removeprefix('index:')}"
    return f"GPU {key}" if key.startswith("GPU-") else f"PCI {key}"


def gpu_label(r: GpuReading) -> str:
    ids = [x for x in (pci_key(r.pci_bus_id) if r.pci_bus_id else None, r.uuid) if x]
    where = f" ({', '.join(ids)})" if ids else ""
    return f"GPU {r.index if r.index is not None else '?'}{where}"


def node_action(verdicts: list[GpuVerdict]) -> tuple[Action, str]:
    """The node's action (the most severe over its GPUs) and the reason, for a drain list."""
    worst = max(verdicts, key=lambda v: ACTION_RANK[v.action], default=None)
    if worst is None or worst.action == Action.NONE:
        return Action.NONE, ""
    top = max(worst.findings, key=lambda f: ACTION_RANK[f.action])
    return worst.action, f"{worst.label}: {top.code}: {top.evidence}"


# ---- over sweeps: the watch list -------------------------------------------------------------

# Counters whose growth between runs comes before a failure (gpus table columns).
WATCH_COUNTERS = ("ecc_volatile_corrected", "ecc_aggregate_corrected",
                  "ecc_aggregate_uncorrected", "remap_corrected", "remap_uncorrected",
                  "retired_sbe", "retired_dbe", "pcie_replays")  # fmt: skip


class WatchItem(NamedTuple):
    """A GPU to watch: a counter that grew over runs, or a finding that came back."""

    node: str
    device_id: str
    what: str  # the counter, or "finding <code>"
    runs: int  # runs that read this GPU
    evidence: str


def watch_list(rows: Sequence[Mapping[str, Any]]) -> list[WatchItem]:
    """GPUs whose counters grew between runs, or whose finding recurred, from `gpus` table
    rows (any order; runs sort by run id, which sorts by start time). Growth is the sum of
    the increases between consecutive runs: a volatile counter that a driver reload reset
    and that grew again still counts."""
    by_gpu: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_gpu[(r["node"], r["device_id"])].append(r)
    out = []
    for (node, dev), runs in sorted(by_gpu.items()):
        runs = sorted(runs, key=lambda r: r["run_id"])
        if len(runs) < 2:
            continue
        for counter in WATCH_COUNTERS:
            values = [(r["run_id"], r.get(counter)) for r in runs if r.get(counter) is not None]
            grew = sum(max(b - a, 0) for (_, a), (_, b) in pairwise(values))
            if grew:
                trail = " -> ".join(f"{v} ({run})" for run, v in values)
                out.append(WatchItem(node, dev, counter, len(runs), f"+{grew}: {trail}"))
        seen = Counter(code for r in runs for code in set(r.get("findings") or []))
        for code, n in sorted(seen.items()):
            if n >= 2:
                out.append(WatchItem(node, dev, f"finding {code}", len(runs),
                                     f"in {n} of {len(runs)} runs"))  # fmt: skip
    return out
