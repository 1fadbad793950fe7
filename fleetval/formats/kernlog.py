"""Kernel-log events about GPUs, from `dmesg`, `journalctl -k` or a log shipper: NVIDIA's
`NVRM: Xid (PCI:dddd:bb:dd): code, ...` and "fallen off the bus" lines, and amdgpu RAS
events (poison consumed or created, bad-page threshold reached), each with its PCI address.
Whatever prefix a line carries (timestamps, host names, `kern :err :`) is ignored."""

from __future__ import annotations

import re

from fleetval.formats.gpuhw import KernelEvent

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)\b,?\s*(.*)$")
_FALLEN = re.compile(r"NVRM: GPU ([0-9A-Fa-f:.]+): GPU has fallen off the bus")
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-f]+ \(([^)]+)\)")
_AMDGPU = re.compile(r"amdgpu ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d): (.*)$")
# amdgpu RAS messages -> event kind
_AMD_KINDS = (
    (re.compile(r"poison is consumed", re.IGNORECASE), "poison_consumed"),
    (re.compile(r"poison is created", re.IGNORECASE), "poison_created"),
    (re.compile(r"Saved bad pages \d+ reaches threshold value \d+"), "bad_page_threshold"),
)


def read_kernel_log(text: str) -> list[KernelEvent]:
    """Every GPU event in a kernel log, in order; lines about anything else are skipped."""
    events = []
    for line in text.splitlines():
        event = _nvidia(line) or _amd(line)
        if event is not None:
            events.append(event)
    return events


def _nvidia(line: str) -> KernelEvent | None:
    text = line.strip()
    if m := _XID.search(line):
        action = _RECOVERY.search(m.group(3))
        return KernelEvent(vendor="nvidia", kind="xid", pci_bus_id=m.group(1),
                           code=int(m.group(2)), text=text,
                           recovery_action=action.group(1) if action else None)  # fmt: skip
    if m := _FALLEN.search(line):
        return KernelEvent(vendor="nvidia", kind="fallen_off_bus", pci_bus_id=m.group(1), text=text)
    return None


def _amd(line: str) -> KernelEvent | None:
    m = _AMDGPU.search(line)
    if not m:
        return None
    kind = next((k for pattern, k in _AMD_KINDS if pattern.search(m.group(2))), None)
    if kind is None:
        return None
    return KernelEvent(vendor="amd", kind=kind, pci_bus_id=m.group(1), text=line.strip())


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
