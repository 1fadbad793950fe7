"""Kernel-log events about GPUs, from `dmesg`, `journalctl -k` or a log shipper: NVIDIA's
`NVRM: Xid (PCI:dddd:bb:dd): code, ...` and "fallen off the bus" lines, and amdgpu RAS
events (poison consumed or created, bad-page threshold reached), each with its PCI address.
`RmInitAdapter failed!`, amdgpu ATHUB and ACA hardware errors, the error counts amdgpu logs for
its memory controller (UMC: VRAM ECC), a failed reset and an SMU that stops answering. Whatever prefix a line carries (timestamps, host names, `kern :err :`) is
ignored; an NVRM message printed over several lines is joined first."""

from __future__ import annotations

import re

from fleetval.formats.gpuhw import KernelEvent
from fleetval.formats.hwscan import Reader, Scan

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)\b,?\s*(.*)$")
_FALLEN = re.compile(
    r"NVRM: (?:GPU ([0-9A-Fa-f:.]+): GPU has fallen off the bus"
    r"|The NVIDIA GPU ([0-9A-Fa-f:.]+)\b.*fallen off the bus)"
)
_RM_INIT = re.compile(r"NVRM: GPU ([0-9A-Fa-f:.]+): RmInitAdapter failed!")
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-f]+ \(([^)]+)\)")
_AMDGPU = re.compile(r"amdgpu ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d): (.*)$")
# amdgpu RAS messages -> event kind
_AMD_KINDS = (
    (re.compile(r"poison is consumed", re.IGNORECASE), "poison_consumed"),
    (re.compile(r"poison is created", re.IGNORECASE), "poison_created"),
    (re.compile(r"Saved bad pages \d+ reaches threshold value \d+"), "bad_page_threshold"),
    (
        re.compile(r"uncorrectable hardware error\(ERREVENT_ATHUB_INTERRUPT\)"),
        "athub_uncorrectable",
    ),
    (re.compile(r"Accelerator Check Architecture events logged"), "aca_event"),
    (
        re.compile(r"GPU reset\(\d+\) failed|ASIC reset failed|Failed to disable smu features"),
        "reset_failed",
    ),
    (re.compile(r"SMU: I'm not done with your previous command"), "smu_unresponsive"),
)
# amdgpu's count of memory-controller (UMC, VRAM ECC) errors, as the driver spelled it over
# kernel releases: "N uncorrectable hardware errors detected in UMC block", "N uncorrectable
# hardware errors and M deferred hardware errors detected in UMC block", "N correctable
# hardware errors detected in umc block" (the RAS block name), "... detected in total in ..."
_UMC = re.compile(
    r"(\d+) (correctable|uncorrectable) hardware errors (?:and (\d+) deferred hardware errors )?"
    r"detected in (?:total in )?umc block",
    re.IGNORECASE,
)


def read_kernel_log(text: str) -> list[KernelEvent]:
    """Every GPU event in a kernel log, in order; lines about anything else are skipped."""
    events: list[KernelEvent] = []
    for line in _joined(text.splitlines()):
        nvidia = _nvidia(line)
        events += [nvidia] if nvidia is not None else _amd(line)
    return events


def _joined(lines: list[str]) -> list[str]:
    """NVRM messages printed over several lines (the continuation indented, without a
    timestamp, "NVRM: " again) as one line."""
    out: list[str] = []
    for line in lines:
        if out and "NVRM:" in out[-1] and re.match(r"^\s+NVRM: ", line):
            out[-1] = f"{out[-1]} {line.strip().removeprefix('NVRM: ')}"
        else:
            out.append(line)
    return out


def _nvidia(line: str) -> KernelEvent | None:
    text = line.strip()
    if m := _XID.search(line):
        action = _RECOVERY.search(m.group(3))
        return KernelEvent(vendor="nvidia", kind="xid", pci_bus_id=m.group(1),
                           code=int(m.group(2)), text=text,
                           recovery_action=action.group(1) if action else None)  # fmt: skip
    if m := _FALLEN.search(line):
        return KernelEvent(vendor="nvidia", kind="fallen_off_bus", pci_bus_id=m.group(1) or m.group(2),
                           text=text)  # fmt: skip
    if m := _RM_INIT.search(line):
        return KernelEvent(vendor="nvidia", kind="rm_init_failed", pci_bus_id=m.group(1), text=text)
    return None


def _amd(line: str) -> list[KernelEvent]:
    m = _AMDGPU.search(line)
    if not m:
        return []
    if umc := _UMC.search(m.group(2)):
        return _umc(m.group(1), umc, line.strip())
    kind = next((k for pattern, k in _AMD_KINDS if pattern.search(m.group(2))), None)
    if kind is None:
        return []
    return [KernelEvent(vendor="amd", kind=kind, pci_bus_id=m.group(1), text=line.strip())]


def _umc(bus: str, m: re.Match[str], text: str) -> list[KernelEvent]:
    """amdgpu's UMC (VRAM ECC) error counts: one event per kind a line counts (none for 0)."""
    counts = {f"umc_{m.group(2).lower()}": int(m.group(1)), "umc_deferred": int(m.group(3) or 0)}
    return [KernelEvent(vendor="amd", kind=kind, pci_bus_id=bus, count=n, text=text)
            for kind, n in counts.items() if n]  # fmt: skip


def looks_like_kernel_log(text: str) -> bool:
    """Whether a file is a kernel log at all (it may hold no GPU event: a clean log)."""
    return bool(_LOG_LINE.search(text))


# What starts a kernel-log line: dmesg's [seconds] or [date], `dmesg -T`-style levels
# (`kern  :err   :`), or syslog/journalctl's "<date> <host> kernel:".
_LOG_LINE = re.compile(
    r"^\s*(\[\s*\d+\.\d+\]|\[[A-Z][a-z]{2} |kern\s*:|\S+ +\d+ \d\d:\d\d:\d\d \S+ kernel:"
    r"|\d{4}-\d\d-\d\dT\S+ \S+ kernel:)",
    re.MULTILINE,
)


def _find(s: Scan) -> None:
    """GPU events anywhere in the text as given (prefixes and all), the block spanning the
    lines they came from; a kernel log with no GPU event is a block only when nothing else was
    found (a clean log is evidence too)."""
    events = read_kernel_log(s.text)
    s.events += events
    if events:
        texts = {e.text.split(" NVRM: ")[0] for e in events}
        at = [i for i, ln in enumerate(s.text.splitlines()) if ln.strip() and
              any(ln.strip() in t or t in ln for t in texts)]  # fmt: skip
        s.add(KERNEL.kind, at[0] if at else 0, at[-1] if at else len(s.lines) - 1)
    elif not s.blocks and looks_like_kernel_log(s.text):
        s.add(KERNEL.kind, 0, len(s.lines) - 1)


KERNEL = Reader("kernel log", _find)
