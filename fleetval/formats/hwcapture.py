"""GPU hardware evidence in any text an operator has: a whole capture of one tool, or blocks
that several tools printed, pasted among prose and shell prompts, behind timestamps,
`srun --label` or `kubectl logs --prefix` prefixes. `scan` finds every block a known tool
prints, reads each with its reader, and says which blocks were cut off (partial).
`SmiError` when a text holds no block of any of them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleetval.formats import amdsmi, dcgmi, kernlog, lspci, nvsmi, nvtopo, smi
from fleetval.formats.gpuhw import GpuReading, KernelEvent, merge
from fleetval.formats.hwobs import Observation
from fleetval.formats.smi import SmiError, split_banner

# Whole-document formats (one tool's output is the file), then blocks found anywhere.
WHOLE = ("nvidia-smi -q -x", "nvidia-smi -q", "amd-smi xgmi", "amd-smi metric", "rocm-smi")
BLOCKS = ("nvidia-smi -q section", "nvidia-smi nvlink", "nvidia-smi --query-gpu",
          "nvidia-smi topo -m", "dcgmi diag", "dcgmi nvlink", "lspci", "kernel log")  # fmt: skip
KINDS = WHOLE + BLOCKS


@dataclass(frozen=True)
class Block:
    """Where one tool's output lies in a text (1-based lines) and whether it was cut off."""

    kind: str
    first: int
    last: int
    partial: bool = False


@dataclass(frozen=True)
class Capture:
    """What one text says: the blocks found and what their readers read."""

    kind: str  # the first block's kind
    readings: list[GpuReading] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)


@dataclass
class _Scan:
    lines: list[str]
    blocks: list[Block] = field(default_factory=list)
    readings: list[GpuReading] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)

    def add(self, kind: str, first: int, last: int, partial: bool = False) -> None:
        self.blocks.append(Block(kind, first + 1, last + 1, partial))


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
    s = _Scan([unprefix(ln) for ln in text.splitlines()])
    body = "\n".join(s.lines)
    whole = _whole_kind(body)
    if whole:
        s.readings += _WHOLE_READERS[whole](body)
        s.add(whole, 0, len(s.lines) - 1)
    if whole not in ("nvidia-smi -q", "nvidia-smi -q -x"):
        _q_sections(s)
    _fabric(s)
    if whole is None:
        _nvlink(s)
        _query_csv(s)
    _dcgmi_diag(s)
    _dcgmi_nvlink(s)
    _topo(s)
    _lspci(s)
    events = kernlog.read_kernel_log(text)
    if events:
        texts = {e.text.split(" NVRM: ")[0] for e in events}
        at = [i for i, ln in enumerate(text.splitlines()) if ln.strip() and
              any(ln.strip() in t or t in ln for t in texts)]  # fmt: skip
        s.add("kernel log", at[0] if at else 0, at[-1] if at else len(s.lines) - 1)
    elif not s.blocks and kernlog.looks_like_kernel_log(text):
        s.add("kernel log", 0, len(s.lines) - 1)
    if not s.blocks:
        looked = ", ".join(KINDS)
        raise SmiError(f"not a capture fleetval reads (no block of any of: {looked})")
    blocks = sorted(s.blocks, key=lambda b: b.first)
    return Capture(blocks[0].kind, s.readings, events, s.observations, blocks)


def _whole_kind(text: str) -> str | None:
    if "<nvidia_smi_log" in text:
        return "nvidia-smi -q -x"
    if "NVSMI LOG" in text:
        return "nvidia-smi -q"
    if "LINK METRIC TABLE" in text:
        return "amd-smi xgmi"
    head = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if (
        "ROCm System Management Interface" in text
        or head.startswith("device,")
        or re.search(r'^\s*"card\d+"\s*:', text, re.MULTILINE)
    ):
        return "rocm-smi"
    if re.search(r"^GPU: \d+\s*$", text, re.MULTILINE) or _amd_json(text):
        return "amd-smi metric"
    return None


def _amd_json(text: str) -> bool:
    _, body = split_banner(text)
    return bool(body) and bool(re.search(r'"gpu"\s*:', body))


def read_rocm_smi(text: str) -> list[GpuReading]:
    """Identity of each GPU from `rocm-smi --showproductname` (text, --csv or --json): which
    GPUs a node has, merged with what other captures say about them."""
    if text.lstrip().startswith("{"):
        info = smi.parse_rocm_smi(text)
    elif text.lstrip().startswith("device,"):
        info = smi.parse_rocm_smi_csv(text)
    else:
        info = smi.parse_rocm_smi_text(text)
    return [
        GpuReading(
            vendor="amd",
            source="rocm-smi",
            index=i,
            uuid=g["uuid"],
            pci_bus_id=g["pci_bus_id"],
            name=g["name"],
            model=g["model"],
            driver_version=info["driver_version"],
        )
        for i, g in enumerate(info["gpus"])
    ]


_WHOLE_READERS = {
    "nvidia-smi -q -x": nvsmi.read_nvidia_smi_xml,
    "nvidia-smi -q": nvsmi.read_nvidia_smi_q,
    "amd-smi xgmi": amdsmi.read_amd_smi_xgmi,
    "amd-smi metric": amdsmi.read_amd_smi_metric,
    "rocm-smi": read_rocm_smi,
}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _indented_below(lines: list[str], i: int) -> int:
    """The last line of the section that starts at lines[i] (lines indented deeper)."""
    indent = len(lines[i]) - len(lines[i].lstrip())
    j = i
    while j + 1 < len(lines) and lines[j + 1].strip() and _indent(lines[j + 1]) > indent:
        j += 1
    return j


# ---- nvidia-smi -q excerpts ------------------------------------------------------------------

_GPU_HEADER = re.compile(r"^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$")
_Q_SECTIONS = ("ECC Errors", "Remapped Rows", "Retired Pages", "PCI", "Clocks Event Reasons",
               "Clocks Throttle Reasons", "Temperature")  # fmt: skip


def _q_sections(s: _Scan) -> None:
    """`GPU 00000000:1B:00.0` blocks without the banner; else health sections on their own."""
    heads = [i for i, ln in enumerate(s.lines) if _GPU_HEADER.match(ln)]
    if heads:
        last = _indented_below(s.lines, heads[-1]) if heads[-1] + 1 < len(s.lines) else heads[-1]
        lines = s.lines[heads[0] : last + 1]
        s.readings += nvsmi.read_nvidia_smi_q("\n".join(lines))
        s.add("nvidia-smi -q section", heads[0], last, partial=True)
        return
    for i, ln in enumerate(s.lines):
        if ln.strip() in _Q_SECTIONS and i + 1 < len(s.lines) and " : " in s.lines[i + 1]:
            last = _indented_below(s.lines, i)
            s.readings += nvsmi.read_nvidia_smi_q("\n".join(s.lines[i : last + 1]))
            s.add("nvidia-smi -q section", i, last, partial=True)


def _fabric(s: _Scan) -> None:
    bus = None
    for i, ln in enumerate(s.lines):
        if m := re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", ln):
            bus = m.group(1)
        if ln.strip() == "Fabric" and i + 1 < len(s.lines) and " : " in s.lines[i + 1]:
            last = _indented_below(s.lines, i)
            lines = [x[len(ln) - len(ln.lstrip()) :] for x in s.lines[i : last + 1]]
            if (o := nvtopo.read_fabric(lines, bus)) is not None:
                s.observations.append(o)
                if not any(b.first <= i + 1 <= b.last for b in s.blocks):
                    s.add("nvidia-smi -q section", i, last, partial=True)


# ---- nvidia-smi nvlink, --query-gpu ----------------------------------------------------------

_NVLINK_GPU = re.compile(r"^GPU \d+: .+ \(UUID: [^)]*\)\s*$")
_NVLINK_MORE = re.compile(r"^(\s+\S|NVML: |GPU \d+: )")
_ELLIPSIS = re.compile(r"^\s*\.{3,}\s*$")


def _nvlink(s: _Scan) -> None:
    i = 0
    while i < len(s.lines):
        if not _NVLINK_GPU.match(s.lines[i]):
            i += 1
            continue
        j = i
        while j + 1 < len(s.lines) and _NVLINK_MORE.match(s.lines[j + 1]):
            j += 1
        cut = (i > 0 and bool(_ELLIPSIS.match(s.lines[i - 1]))) or (
            j + 1 < len(s.lines) and bool(_ELLIPSIS.match(s.lines[j + 1]))
        )
        s.readings += nvsmi.read_nvidia_smi_nvlink("\n".join(s.lines[i : j + 1]))
        s.add("nvidia-smi nvlink", i, j, partial=cut)
        i = j + 1


def _query_csv(s: _Scan) -> None:
    for i, ln in enumerate(s.lines):
        keys = [re.sub(r"\s*\[.*\]$", "", k.strip()) for k in ln.split(",")]
        if len(keys) < 2 or not {"index", "uuid", "pci.bus_id"} & set(keys):
            continue
        j = i
        while j + 1 < len(s.lines) and s.lines[j + 1].count(",") == ln.count(","):
            j += 1
        s.readings += nvsmi.read_nvidia_smi_csv("\n".join(s.lines[i : j + 1]))
        s.add("nvidia-smi --query-gpu", i, j)


# ---- dcgmi -----------------------------------------------------------------------------------

_DIAG_SECTION = re.compile(r"^\s*[|+]-----\s+(Metadata|Deployment|Integration|Hardware|Stress)\b")


def _dcgmi_diag(s: _Scan) -> None:
    i = 0
    while i < len(s.lines):
        ln = s.lines[i]
        if not (dcgmi.is_diag_header(ln) or _DIAG_SECTION.match(ln)):
            i += 1
            continue
        start = i - 1 if dcgmi.is_diag_header(ln) and i > 0 else i
        j = i
        while j + 1 < len(s.lines) and s.lines[j + 1].lstrip()[:1] in ("|", "+"):
            j += 1
        ended = re.match(r"^\s*\+-+\+-+\+\s*$", s.lines[j]) is not None
        _, obs = dcgmi.read_dcgmi_diag(s.lines[start : j + 1])
        s.observations += obs
        s.add("dcgmi diag", start, j, partial=not (ended and dcgmi.is_diag_header(ln)))
        i = j + 1


def _dcgmi_nvlink(s: _Scan) -> None:
    for i, ln in enumerate(s.lines):
        if "NvLink Link Status" not in ln:
            continue
        j = next((k for k in range(i, len(s.lines)) if s.lines[k].startswith("Key:")), None)
        last = j if j is not None else len(s.lines) - 1
        s.readings += dcgmi.read_dcgmi_nvlink_status(s.lines[i : last + 1])
        s.add("dcgmi nvlink", max(i - 1, 0), last, partial=j is None)


# ---- topo -m, lspci ---------------------------------------------------------------------------


def _topo(s: _Scan) -> None:
    for i, ln in enumerate(s.lines):
        if not nvtopo.is_topo_header(ln):
            continue
        j = i
        while j + 1 < len(s.lines) and re.match(r"^(GPU|NIC|mlx)\S*\s", s.lines[j + 1]):
            j += 1
        obs, whole = nvtopo.read_topo_matrix(s.lines[i : j + 1])
        s.observations += obs
        s.add("nvidia-smi topo -m", i, j, partial=not whole)


def _lspci(s: _Scan) -> None:
    starts = [i for i, ln in enumerate(s.lines) if lspci.is_device_line(ln)]
    if not starts:
        return
    readings = lspci.read_lspci(s.lines[starts[0] :])
    s.readings += readings
    cut = any(r.pcie_gen is None or r.pcie_gen_max is None for r in readings)
    s.add("lspci", starts[0], len(s.lines) - 1, partial=cut)


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
