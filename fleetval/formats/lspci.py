"""`lspci -vv` (or -vvv): each GPU's PCIe link capability (LnkCap) against its status (LnkSta),
as a reading the judge compares like nvidia-smi's current and max link. Other devices (bridges,
NICs, disks) are skipped."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


# a link as lspci prints it: (PCIe generation, lanes)
_Link = tuple[int | None, int]


@dataclass
class _Device:
    """A GPU's device block, as read so far."""

    bdf: str
    name: str
    cap: _Link | None = None  # LnkCap
    sta: _Link | None = None  # LnkSta

    def reading(self) -> GpuReading:
        cap, sta = self.cap or (None, None), self.sta or (None, None)
        return GpuReading(vendor="nvidia" if "NVIDIA" in self.name else "amd", source="lspci",
                          pci_bus_id=self.bdf, name=self.name, pcie_gen=sta[0],
                          pcie_gen_max=cap[0], pcie_width=sta[1], pcie_width_max=cap[1])  # fmt: skip


def read_lspci(lines: list[str]) -> list[GpuReading]:
    """One reading per GPU device block with its LnkCap and LnkSta (None where not printed)."""
    out: list[GpuReading] = []
    current: _Device | None = None
    for line in [*lines, ""]:
        if (m := _DEVICE.match(line)) or not line.strip():
            if current is not None:
                out.append(current.reading())
            current = None
            if m and is_device_line(line):
                current = _Device(m.group(1), m.group(3))
        elif current is not None and (k := _LNK.match(line)) and (link := _LINK.search(line)):
            found = (_GTS_GEN.get(float(link.group(1))), int(link.group(2)))
            if k.group(1) == "LnkCap":
                current.cap = found
            else:
                current.sta = found
    return out


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
