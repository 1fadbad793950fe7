"""`dcgmi` output: `dcgmi diag` tables in the three layouts DCGM printed (2.x: "Blacklist" and
"Pass - All"; 3.x: a Metadata section and "Denylist"; 4.x: lower-case test names with a
"GPUn: Pass" row per GPU), `dcgmi nvlink -s` / `--link-status` (U, D, X, _ per link), the Xid
column of `dcgmi dmon -e 230` and the `dcgmi health -c` report (its table and its `-j` JSON).

Cells wrap at a fixed width, mid-word: a message is joined from its raw cell slices before
its spaces are collapsed, so "disab" + "led" reads "disabled".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from fleetval.formats.gpuhw import GpuReading
from fleetval.formats.hwobs import Observation
from fleetval.formats.hwscan import Reader, Scan

_ROW = re.compile(r"^\s*\| (.{25}) \| (.{1,45})")  # the cells are 25 and 45 wide
_SECTION = re.compile(r"^\s*[|+]-----\s+(\w+)\s+-+\+")
_PER_GPU = re.compile(r"^GPU(\d+):\s*(Pass|Fail|Warn|Skip)\w*", re.IGNORECASE)
_MESSAGE_ROWS = {"Error", "Warning", "Info"}  # the rows under a test that carry its message


def is_diag_header(line: str) -> bool:
    return bool(re.match(r"^\s*\|\s*Diagnostic\s+\|\s*Result\s+\|", line))


@dataclass
class _Test:
    """One test row of a `dcgmi diag` table, with the rows under it read so far."""

    name: str
    category: str  # Deployment, Integration, Hardware, Stress
    result: str  # as printed: "Pass", "Fail - All", "Warn", "Skip"
    gpus: dict[int, str] = field(default_factory=dict)  # 4.x: GPUn -> Pass/Fail/Warn/Skip
    message: str = ""  # the Error/Warning/Info rows' cells, joined raw

    def observations(self) -> list[Observation]:
        message = " ".join(self.message.split())
        status = self.result.split(" - ")[0].strip().title() or "Fail"
        per_gpu = self.gpus
        if not per_gpu and status in ("Fail", "Warn"):
            named = [int(n) for n in re.findall(r"GPU:? ?(\d+)", f"{self.result} {message}")]
            per_gpu = {n: status for n in dict.fromkeys(named)}
        if not per_gpu:
            return [self._observation(status not in ("Fail", "Warn"), self.result, None, message)]
        return [self._observation(s not in ("Fail", "Warn"), s, i, _about(message, i))
                for i, s in per_gpu.items()]  # fmt: skip

    def _observation(self, ok: bool, value: str, index: int | None, detail: str) -> Observation:
        return Observation(vendor="nvidia", source="dcgmi diag", kind="dcgm_test", ok=ok,
                           subject=self.name, value=value, detail=detail,
                           category=self.category, index=index)  # fmt: skip


def read_dcgmi_diag(lines: list[str]) -> tuple[dict[str, str], list[Observation]]:
    """The Metadata rows and one observation per test and GPU it names (the node when it names
    none), from the table's lines (starting at its `| Diagnostic | Result |` header)."""
    meta: dict[str, str] = {}
    tests: list[_Test] = []
    category = ""
    for line in lines:
        if m := _SECTION.match(line):
            category = m.group(1)
            continue
        m = _ROW.match(line)
        if not m or line.strip().startswith("+") or is_diag_header(line):
            continue
        name, cell = m.group(1).strip(), m.group(2)
        if category == "Metadata":
            meta[name] = cell.strip()
        elif name and name.capitalize() not in _MESSAGE_ROWS:
            tests.append(_Test(name, category, cell.strip()))
        elif tests and (g := _PER_GPU.match(cell.strip())):
            tests[-1].gpus[int(g.group(1))] = g.group(2).title()
        elif tests:
            tests[-1].message += cell
    return meta, [o for t in tests for o in t.observations()]


def _about(message: str, gpu: int) -> str:
    """The parts of a message that name this GPU (DCGM joins one part per GPU with ", ")."""
    parts = re.split(r"(?<=\.),\s+", message)
    mine = [p for p in parts if re.search(rf"GPU ?{gpu}\b", p)]
    return ", ".join(mine or parts)


# ---- dcgmi nvlink -s ------------------------------------------------------------------------

_GPU_ID = re.compile(r"^\s*gpuId (\d+):\s*$")
_STATES = re.compile(r"^\s*([UDX_](?: [UDX_])*)\s*$")


def read_dcgmi_nvlink_status(lines: list[str]) -> list[GpuReading]:
    """Per GPU the links up (U) of those that exist (U, D down, X disabled; _ not supported)."""
    out = []
    gpu: int | None = None
    for line in lines:
        if m := _GPU_ID.match(line):
            gpu = int(m.group(1))
        elif gpu is not None and (m := _STATES.match(line)):
            links = m.group(1).split()
            total = sum(s != "_" for s in links)
            out.append(GpuReading(vendor="nvidia", source="dcgmi nvlink", index=gpu,
                                  nvlink_up=links.count("U"), nvlink_total=total or None))  # fmt: skip
            gpu = None
    return out


# ---- the readers: where each of these outputs lies in a text ---------------------------------

_DIAG_SECTION = re.compile(r"^\s*[|+]-----\s+(Metadata|Deployment|Integration|Hardware|Stress)\b")


def _find_diag(s: Scan) -> None:
    """Each `dcgmi diag` table, from its header (or, pasted without it, its first section) to
    its last `|` or `+` row; partial unless both the header and the closing rule are there."""
    i = 0
    while i < len(s.lines):
        ln = s.lines[i]
        if not (is_diag_header(ln) or _DIAG_SECTION.match(ln)):
            i += 1
            continue
        start = i - 1 if is_diag_header(ln) and i > 0 else i
        j = i
        while j + 1 < len(s.lines) and s.lines[j + 1].lstrip()[:1] in ("|", "+"):
            j += 1
        ended = re.match(r"^\s*\+-+\+-+\+\s*$", s.lines[j]) is not None
        _, obs = read_dcgmi_diag(s.lines[start : j + 1])
        s.observations += obs
        s.add(DIAG.kind, start, j, partial=not (ended and is_diag_header(ln)))
        i = j + 1


DIAG = Reader("dcgmi diag", _find_diag)


def _find_nvlink(s: Scan) -> None:
    """Each `dcgmi nvlink -s` box, to its `Key:` line (partial without one)."""
    for i, ln in enumerate(s.lines):
        if "NvLink Link Status" not in ln:
            continue
        j = next((k for k in range(i, len(s.lines)) if s.lines[k].startswith("Key:")), None)
        last = j if j is not None else len(s.lines) - 1
        s.readings += read_dcgmi_nvlink_status(s.lines[i : last + 1])
        s.add(NVLINK.kind, max(i - 1, 0), last, partial=j is None)


NVLINK = Reader("dcgmi nvlink", _find_nvlink)


# ---- dcgmi dmon -e 230, dcgmi health -c -j --------------------------------------------------

_DMON_HEAD = re.compile(r"^#Entity\s+(.*\S)\s*$")
_DMON_ROW = re.compile(r"^GPU (\d+)\s+(.*\S)\s*$")


def read_dmon_xids(lines: list[str]) -> list[Observation]:
    """Per GPU row, the value of the XIDER column (field 230: the last Xid the GPU raised, 0 for
    none), from a `#Entity` header and the rows below it; nothing when no column is XIDER."""
    tags = m.group(1).split() if (m := _DMON_HEAD.match(lines[0])) else []
    if "XIDER" not in tags:
        return []
    col = tags.index("XIDER")
    out = []
    for line in lines[1:]:
        if (m := _DMON_ROW.match(line)) and len(cells := m.group(2).split()) > col:
            value = cells[col]
            out.append(Observation(vendor="nvidia", source="dcgmi dmon", kind="xid",
                                   ok=not value.isdigit() or int(value) == 0, subject="XIDER",
                                   value=value, index=int(m.group(1))))  # fmt: skip
    return out


def _find_dmon(s: Scan) -> None:
    """Each `#Entity` header (dmon repeats it) with its `ID` line and GPU rows."""
    for i, ln in enumerate(s.lines):
        if not _DMON_HEAD.match(ln):
            continue
        j = i
        while j + 1 < len(s.lines) and (
            s.lines[j + 1].startswith("ID") or _DMON_ROW.match(s.lines[j + 1])
        ):
            j += 1
        if obs := read_dmon_xids(s.lines[i : j + 1]):
            s.observations += obs
            s.add(DMON.kind, i, j)


DMON = Reader("dcgmi dmon", _find_dmon)


def read_health_json(doc: dict[str, object]) -> list[Observation]:
    """The report's Overall Health (the node's). Only the healthy form has been seen in public
    captures, so incidents listed under it are not read one by one."""
    body = doc.get("body")
    overall = body.get("Overall Health") if isinstance(body, dict) else None
    value = overall.get("value") if isinstance(overall, dict) else None
    if not isinstance(value, str):
        return []
    return [Observation(vendor="nvidia", source="dcgmi health", kind="dcgm_health",
                        ok=value == "Healthy", subject="Overall Health", value=value)]  # fmt: skip


def _json_at(lines: list[str], i: int) -> tuple[object, int]:
    """The JSON document starting at lines[i] and the line it ends on (None if there is none)."""
    text = "\n".join(lines[i:])
    try:
        doc, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None, i
    return doc, i + text[:end].count("\n")


# The `dcgmi health -c` table: a name cell 25 wide, a value cell 56 wide; the names form a tree
# ("GPU", "-> 0", "   -> Errors", "      -> Power system") and a wrapped message continues in
# rows whose name cell is empty.
_HEALTH_TITLE = re.compile(r"^\s*\|\s*Health Monitor Report\s*\|\s*$")
_HEALTH_ROW = re.compile(r"^\s*\| (.{25}) \| (.*?)\s*\|\s*$")


@dataclass
class _Incident:
    """One system a `dcgmi health` table names under an entity, as read so far."""

    gpu: int | None
    entity: str  # "GPU", or another entity group DCGM watches
    group: str  # "Errors"
    system: str  # "Power system", "Memory system", ...
    value: str  # "Warning", "Failure"
    message: list[str] = field(default_factory=list)

    def observation(self) -> Observation:
        subject = self.system if self.gpu is not None else f"{self.entity} {self.system}"
        return Observation(vendor="nvidia", source="dcgmi health", kind="dcgm_health",
                           ok=self.value == "Healthy", subject=subject, value=self.value,
                           detail=" ".join(self.message), category=self.group,
                           index=self.gpu)  # fmt: skip


def read_health_table(lines: list[str]) -> list[Observation]:
    """Each incident under a GPU (its system, Warning or Failure, and the message), from the
    table's lines; the Overall Health (the node's) when it lists none."""
    overall: str | None = None
    gpu: int | None = None
    entity = group = ""
    incidents: list[_Incident] = []
    for line in lines:
        if not (m := _HEALTH_ROW.match(line)):
            continue
        name, value = m.group(1).strip(), m.group(2).strip()
        depth = len(m.group(1)) - len(m.group(1).lstrip())
        node = name.removeprefix("->").strip()
        if name == "Overall Health":
            overall = value
        elif name and not name.startswith("->"):
            entity, gpu = name, None
        elif name.startswith("->") and depth == 0:
            gpu = int(node) if entity == "GPU" and node.isdigit() else None
        elif name.startswith("->") and depth == 3:
            group = node
        elif name.startswith("->"):
            incidents.append(_Incident(gpu, entity, group, node, value))
        elif not name and value and incidents:
            incidents[-1].message.append(value)
    if incidents:
        return [i.observation() for i in incidents]
    if overall is None:
        return []
    return [Observation(vendor="nvidia", source="dcgmi health", kind="dcgm_health",
                        ok=overall == "Healthy", subject="Overall Health", value=overall)]  # fmt: skip


def _find_health(s: Scan) -> None:
    """Each `dcgmi health -c` report: a JSON document whose header is "Health Monitor Report"
    (`-j`), or the table under a "Health Monitor Report" title, to its closing rule (partial
    without one)."""
    i = 0
    while i < len(s.lines):
        if _HEALTH_TITLE.match(s.lines[i]):
            i = _health_table(s, i)
            continue
        doc, last = _json_at(s.lines, i) if s.lines[i].strip() == "{" else (None, i)
        header = doc.get("header") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and isinstance(header, list) and "Health Monitor Report" in header:
            s.observations += read_health_json(doc)
            s.add(HEALTH.kind, i, last)
        i = last + 1


def _health_table(s: Scan, title: int) -> int:
    """Reads the table titled at lines[title]; returns the line after it."""
    first = title - 1 if title > 0 and s.lines[title - 1].lstrip().startswith("+") else title
    j = title
    while j + 1 < len(s.lines) and s.lines[j + 1].lstrip()[:1] in ("|", "+"):
        j += 1
    closed = j > title + 1 and re.match(r"^\s*\+-+\+-+\+\s*$", s.lines[j]) is not None
    s.observations += read_health_table(s.lines[title : j + 1])
    s.add(HEALTH.kind, first, j, partial=not closed)
    return j + 1


HEALTH = Reader("dcgmi health", _find_health)
