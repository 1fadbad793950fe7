"""NVIDIA topology and fabric text: the `nvidia-smi topo -m` matrix (NVLinks per GPU pair, the
NIC nearest each GPU) and the `Fabric` section of `nvidia-smi -q` (NVLink fabric registration:
State, Status, CliqueId, ClusterUUID, Health Summary), as pasted, with or without the rest."""

from __future__ import annotations

import re
from collections import Counter

from fleetval.formats.gpuhw import tree
from fleetval.formats.hwobs import Observation
from fleetval.formats.hwscan import Reader, Scan, indented_below

_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+)$")
_NV = re.compile(r"^NV(\d+)$")
_NEAR = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nearest first


def is_topo_header(line: str) -> bool:
    return bool(re.match(r"^\s+GPU0\s+GPU1?\b", line)) or bool(
        re.match(r"^\s+GPU0\s+CPU Affinity", line)
    )


def read_topo_matrix(lines: list[str]) -> tuple[list[Observation], bool]:
    """Observations per GPU pair joined by NVLink (`nvlink_pair`: ok unless the pair has fewer
    links than most pairs) and per GPU its nearest NIC (`nic_affinity`); and whether every GPU
    column had its row (False: the paste ends mid-way)."""
    header = [t for t in re.split(r"\s+", lines[0].strip()) if _DEVICE.match(t)]
    gpus = [d for d in header if d.startswith("GPU")]
    rows: dict[str, list[str]] = {}
    for line in lines[1:]:
        cells = line.split()
        if cells and cells[0] in gpus and len(cells) > len(header):
            rows[cells[0]] = cells[1 : 1 + len(header)]
    links = {
        tuple(sorted((a, b))): int(m.group(1))
        for a, cells in rows.items()
        for b, cell in zip(header, cells, strict=True)
        if b.startswith("GPU") and b != a and (m := _NV.match(cell))
    }
    usual = Counter(links.values()).most_common(1)[0][0] if links else None
    obs = [
        Observation(
            vendor="nvidia",
            source="nvidia-smi topo -m",
            kind="nvlink_pair",
            ok=n >= (usual or 0),
            subject=f"{a}-{b}",
            value=f"NV{n}",
            detail=f"most GPU pairs have NV{usual}",
            index=int(a[3:]),
        )
        for (a, b), n in sorted(links.items())
    ]
    for gpu, cells in rows.items():
        nics = [(d, c) for d, c in zip(header, cells, strict=True) if not d.startswith("GPU")]
        near = sorted((c for _, c in nics if c in _NEAR), key=_NEAR.index)
        if near:
            best = [d for d, c in nics if c == near[0]]
            obs.append(Observation(vendor="nvidia", source="nvidia-smi topo -m",
                                   kind="nic_affinity", ok=True, subject=gpu,
                                   value=f"{near[0]} {', '.join(best)}", index=int(gpu[3:])))  # fmt: skip
    return obs, len(rows) == len(gpus)


# ---- the Fabric section of nvidia-smi -q ------------------------------------------------------


def read_fabric(lines: list[str], pci_bus_id: str | None = None) -> Observation | None:
    """The `Fabric` section starting at lines[0]: healthy when State is Completed, Status is
    Success and the Health Summary (where printed) is not Unhealthy; N/A (no NVLink fabric on
    this GPU) is no observation at all."""
    f = tree(lines).get("Fabric")
    if not isinstance(f, dict):
        return None
    state, status = f.get("State"), f.get("Status")
    if state is None and status is None:
        return None
    health = f.get("Health")
    summary = health.get("Summary") if isinstance(health, dict) else None
    ok = state == "Completed" and status == "Success" and summary != "Unhealthy"
    value = f"State {state}, Status {status}" + (f", Health Summary {summary}" if summary else "")
    detail = f"CliqueId {f.get('CliqueId')}, ClusterUUID {f.get('ClusterUUID')}"
    return Observation(vendor="nvidia", source="nvidia-smi -q", kind="fabric", ok=ok,
                       subject="Fabric", value=value, detail=detail, pci_bus_id=pci_bus_id)  # fmt: skip


# ---- the readers: where each of these outputs lies in a text ---------------------------------


def _find_topo(s: Scan) -> None:
    """Each `topo -m` matrix: its header, then the GPU and NIC rows that follow it."""
    for i, ln in enumerate(s.lines):
        if not is_topo_header(ln):
            continue
        j = i
        while j + 1 < len(s.lines) and re.match(r"^(GPU|NIC|mlx)\S*\s", s.lines[j + 1]):
            j += 1
        obs, whole = read_topo_matrix(s.lines[i : j + 1])
        s.observations += obs
        s.add(TOPO.kind, i, j, partial=not whole)


TOPO = Reader("nvidia-smi topo -m", _find_topo)


def _find_fabric(s: Scan) -> None:
    """Each `Fabric` section, with the bus id of the `GPU ...` header above it where pasted."""
    bus = None
    for i, ln in enumerate(s.lines):
        if m := re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", ln):
            bus = m.group(1)
        if ln.strip() == "Fabric" and i + 1 < len(s.lines) and " : " in s.lines[i + 1]:
            last = indented_below(s.lines, i)
            lines = [x[len(ln) - len(ln.lstrip()) :] for x in s.lines[i : last + 1]]
            if (o := read_fabric(lines, bus)) is not None:
                s.observations.append(o)
                if not s.covered(i):
                    s.add(FABRIC.kind, i, last, partial=True)


# A Fabric block is an excerpt of -q: it is counted as one, beside the sections it may lie in.
FABRIC = Reader("nvidia-smi -q section", _find_fabric)
