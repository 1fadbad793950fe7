"""`lspci -vv` (or -vvv): each GPU's PCIe link capability (LnkCap) against its status (LnkSta),
as a reading the judge compares like nvidia-smi's current and max link. Other devices (bridges,
NICs, disks) are skipped."""

from __future__ import annotations

import re

from fleetval.formats.gpuhw import GpuReading
from fleetval.formats.hwscan import Reader, Scan

_DEVICE = re.compile(
    r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ([^:]+): (.*)$", re.IGNORECASE
)
_GPU_CLASSES = ("VGA compatible controller", "3D controller", "Display controller",
                "Processing accelerators")  # fmt: skip
_LNK = re.compile(r"^\s+(LnkCap|LnkSta):\s")
_LINK = re.compile(r"Speed ([\d.]+)GT/s.*?Width x(\d+)")
_GTS_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def is_device_line(line: str) -> bool:
    m = _DEVICE.match(line)
    return bool(m) and m.group(2) in _GPU_CLASSES and bool(re.search(r"NVIDIA|AMD|ATI", m.group(3)))


def read_lspci(lines: list[str]) -> list[GpuReading]:
    """One reading per GPU device block with its LnkCap and LnkSta (None where not printed)."""
    out: list[GpuReading] = []
    current: dict[str, object] | None = None
    for line in [*lines, ""]:
        if (m := _DEVICE.match(line)) or not line.strip():
            if current is not None:
                out.append(_reading(current))
            current = None
            if m and is_device_line(line):
                current = {"bdf": m.group(1), "name": m.group(3)}
        elif current is not None and (k := _LNK.match(line)) and (link := _LINK.search(line)):
            current[k.group(1)] = (_GTS_GEN.get(float(link.group(1))), int(link.group(2)))
    return out


def _reading(d: dict[str, object]) -> GpuReading:
    cap, sta = d.get("LnkCap") or (None, None), d.get("LnkSta") or (None, None)
    name = str(d["name"])
    return GpuReading(vendor="nvidia" if "NVIDIA" in name else "amd", source="lspci",
                      pci_bus_id=str(d["bdf"]), name=name, pcie_gen=sta[0], pcie_gen_max=cap[0],
                      pcie_width=sta[1], pcie_width_max=cap[1])  # type: ignore[index]  # fmt: skip


def _find(s: Scan) -> None:
    """The GPU devices from the first one to the end of the text; partial where a GPU's
    LnkCap or LnkSta is missing."""
    starts = [i for i, ln in enumerate(s.lines) if is_device_line(ln)]
    if not starts:
        return
    readings = read_lspci(s.lines[starts[0] :])
    s.readings += readings
    cut = any(r.pcie_gen is None or r.pcie_gen_max is None for r in readings)
    s.add(LSPCI.kind, starts[0], len(s.lines) - 1, partial=cut)


LSPCI = Reader("lspci", _find)
