"""GPU hardware evidence in any text an operator has: a whole capture of one tool, or blocks
that several tools printed, pasted among prose and shell prompts, behind timestamps,
`srun --label` or `kubectl logs --prefix` prefixes. `scan` finds every block a known tool
prints, reads each with its reader, and says which blocks were cut off (partial).
`SmiError` when a text holds no block of any of them. The readers are `READERS`, one per
tool output, each declared in its tool's module (see `fleetval.formats.hwscan`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleetval.formats import amdsmi, dcgmi, kernlog, lspci, nvsmi, nvtopo, rocmsmi
from fleetval.formats.gpuhw import GpuReading, KernelEvent, merge
from fleetval.formats.hwobs import Observation
from fleetval.formats.hwscan import Block, Reader, Scan
from fleetval.formats.smi import SmiError

# Every reader, in the order they run. The whole-text readers come first and the first that
# claims a text reads all of it; the Fabric reader counts a block only outside the -q blocks
# before it; the kernel log comes last (a clean log is a block only when nothing else is).
READERS: tuple[Reader, ...] = (
    nvsmi.XML,
    nvsmi.Q,
    amdsmi.XGMI,
    rocmsmi.ROCM_SMI,
    amdsmi.METRIC,
    nvsmi.Q_SECTIONS,
    nvtopo.FABRIC,
    nvsmi.NVLINK,
    nvsmi.QUERY_CSV,
    dcgmi.DIAG,
    dcgmi.NVLINK,
    dcgmi.DMON,
    dcgmi.HEALTH,
    amdsmi.LINK_STATUS,
    nvtopo.TOPO,
    lspci.LSPCI,
    kernlog.KERNEL,
)
KINDS = tuple(dict.fromkeys(r.kind for r in READERS))


@dataclass(frozen=True)
class Capture:
    """What one text says: the blocks found and what their readers read."""

    kind: str  # the first block's kind
    readings: list[GpuReading] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)


# ---- prefixes a line can carry ----------------------------------------------------------------

_PREFIXES = (
    re.compile(r"^\[pod/[^\]]+\] "),  # kubectl logs --prefix
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) "),  # --timestamps
    re.compile(r"^ {0,3}\d{1,4}: "),  # srun --label
    re.compile(r"^> ?"),  # a quoted paste
)


def unprefix(line: str) -> str:
    """The line as the tool printed it, without what a launcher or a log shipper put before."""
    for p in _PREFIXES:
        line = p.sub("", line, count=1)
    return line


# ---- the scan ---------------------------------------------------------------------------------


def scan(text: str) -> Capture:
    """Every block of a known tool in `text`, read. Raises SmiError naming what was looked for
    when there is none."""
    s = Scan(text, [unprefix(ln) for ln in text.splitlines()])
    for reader in READERS:
        reader.find(s)
    if not s.blocks:
        looked = ", ".join(KINDS)
        raise SmiError(f"not a capture fleetval reads (no block of any of: {looked})")
    blocks = sorted(s.blocks, key=lambda b: b.first)
    return Capture(blocks[0].kind, s.readings, s.events, s.observations, blocks)


# ---- files ------------------------------------------------------------------------------------


def kind_of(text: str) -> str | None:
    """The kind of the first block a known tool printed in this text; None when there is none."""
    try:
        return scan(text).kind
    except SmiError:
        return None


def read_capture(text: str) -> Capture:
    """What one text says (see `scan`)."""
    return scan(text)


@dataclass(frozen=True)
class NodeEvidence:
    """Everything a node's files say: readings merged per GPU, kernel events, observations, and
    the blocks found in each file."""

    readings: list[GpuReading]
    events: list[KernelEvent]
    observations: list[Observation]
    blocks: dict[str, list[Block]]


def scan_files(paths: list[Path]) -> NodeEvidence:
    """Every block in these files. Raises SmiError naming a file that cannot be read or holds
    no block of a known tool."""
    readings: list[GpuReading] = []
    events: list[KernelEvent] = []
    observations: list[Observation] = []
    blocks: dict[str, list[Block]] = {}
    for path in paths:
        try:
            capture = scan(path.read_text(errors="replace"))
        except OSError as err:
            raise SmiError(f"{path}: cannot read ({err.strerror})") from err
        except SmiError as err:
            raise SmiError(f"{path}: {err}") from err
        readings += capture.readings
        events += capture.events
        observations += capture.observations
        blocks[str(path)] = capture.blocks
    return NodeEvidence(merge(readings), events, observations, blocks)


def read_capture_files(paths: list[Path]) -> tuple[list[GpuReading], list[KernelEvent]]:
    """The readings (merged per GPU over the files) and kernel events of these files."""
    found = scan_files(paths)
    return found.readings, found.events
