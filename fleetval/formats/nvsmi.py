"""nvidia-smi hardware readings: `-q` text, `-q -x` XML, `--query-gpu` CSV, `nvlink -s/-e`.

Field names moved between driver generations and every spelling real output has is read:
"Clocks Throttle Reasons" (before 535) and "Clocks Event Reasons"; "GPU Slowdown Temp"
(absolute) and "GPU Slowdown T.Limit Temp" (relative, since 545); "Power Readings" and
"GPU Power Readings"; "GPU Reset Status" (535-570) and "GPU Recovery Action" (since 575);
ECC "Single Bit/Double Bit" totals (old) and "SRAM/DRAM (Un)Correctable" counters (new).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypedDict

from fleetval.formats.gpuhw import (
    CLOCK_REASONS,
    GpuReading,
    Tree,
    integer,
    number,
    section,
    tree,
    yes,
)
from fleetval.formats.hwscan import Reader, Scan, indented_below, is_ellipsis, whole_reader
from fleetval.formats.smi import SmiError, gpu_model, na

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")


# ---- the groups of a reading's fields one section of the output gives -----------------------


class _Ecc(TypedDict):
    ecc_volatile_corrected: int | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_corrected: int | None
    ecc_aggregate_uncorrected: int | None
    sram_threshold_exceeded: bool | None


class _Pages(TypedDict):
    retired_sbe: int | None
    retired_dbe: int | None
    retired_pending: bool | None
    remap_corrected: int | None
    remap_uncorrected: int | None
    remap_pending: bool | None
    remap_failed: bool | None
    remap_histogram: dict[str, int | None]


class _Pcie(TypedDict):
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    pcie_replays: int | None


class _Temperature(TypedDict):
    temp_c: float | None
    temp_slowdown_c: float | None
    temp_slowdown_margin_c: float | None


class _Power(TypedDict):
    power_w: float | None
    power_limit_w: float | None
    power_default_limit_w: float | None


# ---- nvidia-smi -q ---------------------------------------------------------------------------


def read_nvidia_smi_q(text: str) -> list[GpuReading]:
    """Every GPU block of `nvidia-smi -q` (or of `-q -d ECC,PAGE_RETIREMENT,...`); a pasted
    excerpt without the banner is read from its `GPU 00000000:1B:00.0` lines, and one without
    those either (a single section, as `grep -A` prints it) as one GPU of unknown identity."""
    top, blocks = _blocks(text.splitlines())
    if not blocks and "NVSMI LOG" not in text:
        g = tree(text.splitlines())
        if not any(isinstance(v, dict) and v for v in g.values()):
            raise SmiError("nvidia-smi -q: expected the '==NVSMI LOG==' header or GPU sections")
        return [_from_q(None, None, g, None)]
    driver = top.get("Driver Version")
    return [_from_q(i, bus, tree(lines), driver) for i, (bus, lines) in enumerate(blocks)]


def _blocks(lines: list[str]) -> tuple[Tree, list[tuple[str, list[str]]]]:
    head: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in lines:
        if m := _GPU_HEADER.match(line):
            blocks.append((m.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            head.append(line)
    return tree(head), blocks


def _from_q(index: int | None, bus: str | None, g: Tree, driver: str | None) -> GpuReading:
    name = g.get("Product Name")
    return GpuReading(
        vendor="nvidia",
        source="nvidia-smi -q",
        index=index,
        uuid=g.get("GPU UUID"),
        serial=g.get("Serial Number"),
        pci_bus_id=bus,
        name=name,
        model=gpu_model(name),
        vbios=g.get("VBIOS Version"),
        driver_version=driver,
        ecc_enabled=yes(section(g, "ECC Mode").get("Current")),
        **_ecc_q(section(g, "ECC Errors", "Ecc Errors")),
        **_pages_q(section(g, "Retired Pages"), section(g, "Remapped Rows")),
        **_pcie_q(section(g, "PCI")),
        perf_state=g.get("Performance State"),
        clock_reasons=_reasons(section(g, "Clocks Event Reasons", "Clocks Throttle Reasons")),
        sm_clock_mhz=number(section(g, "Clocks").get("SM")),
        sm_clock_max_mhz=number(section(g, "Max Clocks").get("SM")),
        **_temperature_q(section(g, "Temperature")),
        **_power_q(section(g, "GPU Power Readings", "Power Readings")),
        recovery_action=_recovery_q(g),
    )


def _count(d: Tree, corrected: bool) -> int | None:
    """Corrected or uncorrected errors of an ECC counter section: the sum of the SRAM/DRAM
    counters (535+), else the old Single Bit / Double Bit "Total"."""
    old = section(d, "Single Bit" if corrected else "Double Bit")
    if old:
        return integer(old.get("Total"))
    keys = [k for k in d if isinstance(k, str) and ("Uncorrectable" in k) != corrected]
    keys = [k for k in keys if "Correctable" in k or "Uncorrectable" in k]
    values = [integer(d[k]) for k in keys]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ecc_q(ecc: Tree) -> _Ecc:
    vol, agg = section(ecc, "Volatile"), section(ecc, "Aggregate")
    return {
        "ecc_volatile_corrected": _count(vol, True),
        "ecc_volatile_uncorrected": _count(vol, False),
        "ecc_aggregate_corrected": _count(agg, True),
        "ecc_aggregate_uncorrected": _count(agg, False),
        "sram_threshold_exceeded": yes(agg.get("SRAM Threshold Exceeded")),
    }


def _pages_q(pages: Tree, rows: Tree) -> _Pages:
    hist = section(rows, "Bank Remap Availability Histogram")
    return {
        "retired_sbe": integer(pages.get("Single Bit ECC")),
        "retired_dbe": integer(pages.get("Double Bit ECC")),
        "retired_pending": yes(pages.get("Pending Page Blacklist") or pages.get("Pending")),
        "remap_corrected": integer(rows.get("Correctable Error")),
        "remap_uncorrected": integer(rows.get("Uncorrectable Error")),
        "remap_pending": yes(rows.get("Pending")),
        "remap_failed": yes(rows.get("Remapping Failure Occurred")),
        "remap_histogram": {k.lower(): integer(v) for k, v in hist.items()},
    }


def _pcie_q(pci: Tree) -> _Pcie:
    link = section(pci, "GPU Link Info")
    gen, width = section(link, "PCIe Generation"), section(link, "Link Width")
    return {
        "pcie_gen": integer(gen.get("Current")),
        "pcie_gen_max": integer(gen.get("Max")),
        "pcie_width": integer(width.get("Current")),
        "pcie_width_max": integer(width.get("Max")),
        "pcie_replays": integer(pci.get("Replays Since Reset") or pci.get("Replays since reset")),
    }


def _reasons(d: Tree) -> list[str] | None:
    """The active clock-limit reasons, by CLOCK_REASONS name; None when the section is absent."""
    if not d:
        return None
    return [CLOCK_REASONS[k.lower()] for k, v in d.items()
            if k.lower() in CLOCK_REASONS and yes(v)]  # fmt: skip


def _temperature_q(t: Tree) -> _Temperature:
    # NOTE: since driver 545 the thresholds are printed relative to T.Limit: "GPU T.Limit Temp"
    # is how far below T.Limit the GPU is, "GPU Slowdown T.Limit Temp" where slowdown starts.
    tlimit, slow_rel = number(t.get("GPU T.Limit Temp")), number(t.get("GPU Slowdown T.Limit Temp"))
    margin = tlimit - slow_rel if tlimit is not None and slow_rel is not None else None
    return {
        "temp_c": number(t.get("GPU Current Temp")),
        "temp_slowdown_c": number(t.get("GPU Slowdown Temp")),
        "temp_slowdown_margin_c": margin,
    }


def _power_q(p: Tree) -> _Power:
    draw = p.get("Power Draw") or p.get("Average Power Draw") or p.get("Instantaneous Power Draw")
    limit = p.get("Current Power Limit") or p.get("Enforced Power Limit") or p.get("Power Limit")
    return {
        "power_w": number(draw),
        "power_limit_w": number(limit),
        "power_default_limit_w": number(p.get("Default Power Limit")),
    }


def _recovery_q(g: Tree) -> str | None:
    if "GPU Recovery Action" in g:  # NOTE: its "None" is an answer (nothing to do), not N/A
        return g["GPU Recovery Action"] or "None"
    status = section(g, "GPU Reset Status")
    return _recovery(status.get("Reset Required"), status.get("Drain and Reset Recommended"))


def _recovery(reset: Any, drain: Any) -> str | None:
    """The 535-570 pair of flags as the action NVML's GPU recovery action names."""
    if yes(drain):
        return "Drain and Reset"
    if yes(reset):
        return "GPU Reset Required"
    return "None" if yes(reset) is False else None


# ---- nvidia-smi -q -x ------------------------------------------------------------------------


def read_nvidia_smi_xml(text: str) -> list[GpuReading]:
    """Every <gpu> of `nvidia-smi -q -x`. A document cut off after its last complete <gpu>
    element's fields (a pasted excerpt) is read as far as it goes."""
    root = _xml_root(text)
    if root.tag != "nvidia_smi_log":
        raise SmiError(f"nvidia-smi -q -x: expected <nvidia_smi_log>, found <{root.tag}>")
    driver = na(root.findtext("driver_version"))
    return [_from_xml(i, g, driver) for i, g in enumerate(root.findall("gpu"))]


def _xml_root(text: str) -> ET.Element:
    parser = ET.XMLPullParser(events=("start",))
    body = re.sub(r"<!DOCTYPE[^>]*>", "", text)
    root = None
    try:
        parser.feed(body)
        parser.close()
    except ET.ParseError as err:
        if "no element found" not in str(err):  # NOTE: a cut-off end is read as far as it goes
            raise SmiError(f"nvidia-smi -q -x: malformed XML ({err})") from err
    for _, elem in parser.read_events():
        root = root if root is not None else elem
    if root is None:
        raise SmiError("nvidia-smi -q -x: no XML element found")
    return root


def _x(g: ET.Element, path: str) -> str | None:
    return na(g.findtext(path))


def _xml_count(d: ET.Element | None, corrected: bool) -> int | None:
    if d is None:
        return None
    old = d.find("single_bit" if corrected else "double_bit")
    if old is not None:
        return integer(_x(old, "total"))
    tags = [e.tag for e in d if ("uncorrectable" in e.tag) != corrected and "correctable" in e.tag]
    known = [v for v in (integer(_x(d, t)) for t in tags) if v is not None]
    return sum(known) if known else None


def _from_xml(index: int, g: ET.Element, driver: str | None) -> GpuReading:
    name = _x(g, "product_name")
    reasons = _first(g, "clocks_event_reasons", "clocks_throttle_reasons")
    power = _first(g, "gpu_power_readings", "power_readings")
    hist = g.find("remapped_rows/row_remapper_histogram")
    pcie = "pci/pci_gpu_link_info/"
    return GpuReading(
        vendor="nvidia",
        source="nvidia-smi -q -x",
        index=index,
        uuid=_x(g, "uuid"),
        serial=_x(g, "serial"),
        pci_bus_id=g.get("id") or _x(g, "pci/pci_bus_id"),
        name=name,
        model=gpu_model(name),
        vbios=_x(g, "vbios_version"),
        driver_version=driver,
        ecc_enabled=yes(_x(g, "ecc_mode/current_ecc")),
        ecc_volatile_corrected=_xml_count(g.find("ecc_errors/volatile"), True),
        ecc_volatile_uncorrected=_xml_count(g.find("ecc_errors/volatile"), False),
        ecc_aggregate_corrected=_xml_count(g.find("ecc_errors/aggregate"), True),
        ecc_aggregate_uncorrected=_xml_count(g.find("ecc_errors/aggregate"), False),
        sram_threshold_exceeded=yes(_x(g, "ecc_errors/aggregate/sram_threshold_exceeded")),
        retired_sbe=integer(_x(g, "retired_pages/multiple_single_bit_retirement/retired_count")),
        retired_dbe=integer(_x(g, "retired_pages/double_bit_retirement/retired_count")),
        retired_pending=yes(_x(g, "retired_pages/pending_blacklist")),
        remap_corrected=integer(_x(g, "remapped_rows/remapped_row_corr")),
        remap_uncorrected=integer(_x(g, "remapped_rows/remapped_row_unc")),
        remap_pending=yes(_x(g, "remapped_rows/remapped_row_pending")),
        remap_failed=yes(_x(g, "remapped_rows/remapped_row_failure")),
        remap_histogram={} if hist is None else _xml_histogram(hist),
        pcie_gen=integer(_x(g, pcie + "pcie_gen/current_link_gen")),
        pcie_gen_max=integer(_x(g, pcie + "pcie_gen/max_link_gen")),
        pcie_width=integer(_x(g, pcie + "link_widths/current_link_width")),
        pcie_width_max=integer(_x(g, pcie + "link_widths/max_link_width")),
        pcie_replays=integer(_x(g, "pci/replay_counter")),
        perf_state=_x(g, "performance_state"),
        clock_reasons=None if reasons is None else _xml_reasons(reasons),
        sm_clock_mhz=number(_x(g, "clocks/sm_clock")),
        sm_clock_max_mhz=number(_x(g, "max_clocks/sm_clock")),
        **_xml_temperature(g),
        **({} if power is None else _xml_power(power)),
        recovery_action=_xml_recovery(g),
    )


def _first(g: ET.Element, *paths: str) -> ET.Element | None:
    return next((e for p in paths if (e := g.find(p)) is not None), None)


def _xml_histogram(hist: ET.Element) -> dict[str, int | None]:
    return {e.tag.removeprefix("row_remapper_histogram_"): integer(na(e.text)) for e in hist}


def _xml_temperature(g: ET.Element) -> _Temperature:
    tlimit = number(_x(g, "temperature/gpu_temp_tlimit"))
    slow_rel = number(_x(g, "temperature/gpu_temp_slow_tlimit_threshold"))
    return {
        "temp_c": number(_x(g, "temperature/gpu_temp")),
        "temp_slowdown_c": number(_x(g, "temperature/gpu_temp_slow_threshold")),
        "temp_slowdown_margin_c": tlimit - slow_rel
        if tlimit is not None and slow_rel is not None
        else None,
    }


def _xml_power(p: ET.Element) -> _Power:
    return {
        "power_w": number(_x(p, "power_draw") or _x(p, "average_power_draw")),
        "power_limit_w": number(_x(p, "current_power_limit") or _x(p, "enforced_power_limit")),
        "power_default_limit_w": number(_x(p, "default_power_limit")),
    }


def _xml_recovery(g: ET.Element) -> str | None:
    # NOTE: its "None" is an answer (nothing to do), not N/A
    stated = (g.findtext("gpu_recovery_action") or "").strip()
    if stated:
        return stated
    return _recovery(
        _x(g, "gpu_reset_status/reset_required"),
        _x(g, "gpu_reset_status/drain_and_reset_recommended"),
    )


# XML tags of the clock-limit reasons, as CLOCK_REASONS names them
_XML_REASONS = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "applications_clocks",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw_power_brake_slowdown": "hw_power_brake",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal_slowdown",
    "display_clocks_setting": "display_clock",
}


def _xml_reasons(reasons: ET.Element) -> list[str]:
    out = []
    for e in reasons:
        tag = re.sub(r"^clocks_(event|throttle)_reason_", "", e.tag)
        if tag in _XML_REASONS and yes(na(e.text)):
            out.append(_XML_REASONS[tag])
    return out


# ---- nvidia-smi --query-gpu CSV --------------------------------------------------------------

# The fields fleetval asks for on a node; each CSV column is read by its header, so any subset
# (or another order) of them reads too.
QUERY_FIELDS = (
    "index,uuid,pci.bus_id,name,vbios_version,driver_version,ecc.mode.current,"
    "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,"
    "retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    "pstate,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit,"
    "clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,"
    "clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_power_cap,"
    "clocks_event_reasons.sw_thermal_slowdown"
)


def read_nvidia_smi_csv(text: str, fields: list[str] | None = None) -> list[GpuReading]:
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv` (header line first), or of
    `--format=csv,noheader` given the `fields` the command asked for. A note a person put after
    a row (`1, Reset   <= GPU is unusable`) is not a cell."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if fields is None:
        if not lines or "," not in lines[0]:
            raise SmiError("nvidia-smi csv: expected a header line of comma-separated field names")
        fields, lines = _header(lines[0]), lines[1:]
    if not {"index", "uuid", "pci.bus_id"} & set(fields):
        raise SmiError("nvidia-smi csv: the header names none of index, uuid, pci.bus_id")
    out = []
    for n, line in enumerate(lines, start=2):
        cells = _cells(line)
        if len(cells) != len(fields):
            raise SmiError(
                f"nvidia-smi csv: line {n} has {len(cells)} cells for {len(fields)} fields"
            )
        row = dict(zip(fields, cells, strict=True))
        # NOTE: the recovery action's "None" is an answer (nothing to do), not N/A
        out.append(
            _from_csv({k: v if k == "gpu_recovery_action" else na(v) for k, v in row.items()})
        )
    return out


def _header(line: str) -> list[str]:
    return [re.sub(r"\s*\[.*\]$", "", k.strip()) for k in line.split(",")]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.sub(r"\s+(?:<=|<-|#).*$", "", line).split(",")]


# nvidia-smi's short spellings of the GPU recovery action in CSV, as `-q` spells them
_CSV_RECOVERY = {"reset": "GPU Reset", "reboot": "Node Reboot"}


# the reading's counts and link figures: the --query-gpu field each is read from
_CSV_COUNTS = {
    "ecc_volatile_corrected": "ecc.errors.corrected.volatile.total",
    "ecc_volatile_uncorrected": "ecc.errors.uncorrected.volatile.total",
    "ecc_aggregate_corrected": "ecc.errors.corrected.aggregate.total",
    "ecc_aggregate_uncorrected": "ecc.errors.uncorrected.aggregate.total",
    "retired_sbe": "retired_pages.single_bit_ecc.count",
    "retired_dbe": "retired_pages.double_bit.count",
    "pcie_gen": "pcie.link.gen.current",
    "pcie_gen_max": "pcie.link.gen.max",
    "pcie_width": "pcie.link.width.current",
    "pcie_width_max": "pcie.link.width.max",
}


# one CSV row: field name -> cell (None for N/A)
_CsvRow: TypeAlias = dict[str, str | None]


def _from_csv(r: _CsvRow) -> GpuReading:
    reasons = [k.split(".", 1)[1] for k, v in r.items()
               if re.match(r"clocks_(event|throttle)_reasons\.", k) and yes(v)]  # fmt: skip
    has_reasons = any(re.match(r"clocks_(event|throttle)_reasons\.", k) for k in r)
    return GpuReading(
        vendor="nvidia",
        source="nvidia-smi --query-gpu",
        index=integer(r.get("index")),
        uuid=r.get("uuid"),
        pci_bus_id=r.get("pci.bus_id"),
        name=r.get("name"),
        model=gpu_model(r.get("name")),
        vbios=r.get("vbios_version"),
        driver_version=r.get("driver_version"),
        ecc_enabled=yes(r.get("ecc.mode.current")),
        **{field: integer(r.get(column)) for field, column in _CSV_COUNTS.items()},
        retired_pending=yes(r.get("retired_pages.pending")),
        perf_state=r.get("pstate"),
        clock_reasons=[_XML_REASONS.get(x, x) for x in reasons] if has_reasons else None,
        sm_clock_mhz=number(r.get("clocks.sm") or r.get("clocks.current.sm")),
        sm_clock_max_mhz=number(r.get("clocks.max.sm")),
        temp_c=number(r.get("temperature.gpu")),
        power_w=number(r.get("power.draw")),
        power_limit_w=number(r.get("power.limit")),
        recovery_action=_csv_recovery(r.get("gpu_recovery_action")),
    )


def _csv_recovery(value: str | None) -> str | None:
    return _CSV_RECOVERY.get(value.lower(), value) if value else None


# ---- nvidia-smi nvlink -s / -e ---------------------------------------------------------------

_NVLINK_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]*)\)\s*$")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def read_nvidia_smi_nvlink(text: str) -> list[GpuReading]:
    """`nvidia-smi nvlink -s` (per link its speed, or `<inactive>`) and `nvlink -e` (per link
    "Replay Errors: n", "Recovery Errors: n", "CRC Errors: n")."""
    gpus: list[_NvlinkGpu] = []
    for line in text.splitlines():
        if m := _NVLINK_GPU.match(line):
            uuid = m.group(3) if re.match(r"GPU-[0-9a-fA-F]{8}-", m.group(3)) else None
            gpus.append(_NvlinkGpu(int(m.group(1)), m.group(2), uuid))
        elif gpus and (m := _NVLINK_LINK.match(line)):
            gpus[-1].link_line(int(m.group(1)), m.group(2).strip())
        elif gpus and "all links are inactive" in line.lower():
            gpus[-1].all_inactive = True
    if not gpus:
        raise SmiError("nvidia-smi nvlink: expected 'GPU n: <name> (UUID: GPU-...)' lines")
    return [g.reading() for g in gpus]


@dataclass
class _NvlinkGpu:
    """One GPU of `nvidia-smi nvlink -s/-e`, as read so far."""

    index: int
    name: str
    uuid: str | None
    links: dict[int, bool] = field(default_factory=dict)  # link -> active
    errors: dict[str, int] = field(default_factory=dict)  # counter -> total over the links
    all_inactive: bool = False

    def link_line(self, link: int, rest: str) -> None:
        counter, sep, value = rest.rpartition(":")
        if sep and counter.strip().endswith("Errors"):  # `nvlink -e`
            name = counter.strip().lower().replace(" errors", "").replace(" ", "_")
            self.errors[name] = self.errors.get(name, 0) + (integer(value) or 0)
            return
        self.links[link] = "inactive" not in rest.lower()

    def reading(self) -> GpuReading:
        up = 0 if self.all_inactive else (sum(self.links.values()) if self.links else None)
        return GpuReading(
            vendor="nvidia",
            source="nvidia-smi nvlink",
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            model=gpu_model(self.name),
            nvlink_up=up,
            nvlink_total=len(self.links) or None,
            nvlink_errors=self.errors,
        )


# ---- the readers: where each of these outputs lies in a text ---------------------------------

XML = whole_reader("nvidia-smi -q -x", lambda t: "<nvidia_smi_log" in t, read_nvidia_smi_xml)
Q = whole_reader("nvidia-smi -q", lambda t: "NVSMI LOG" in t, read_nvidia_smi_q)

Q_SECTION = "nvidia-smi -q section"  # a banner-less excerpt of -q, whole GPUs or sections
_Q_SECTIONS = ("ECC Errors", "Remapped Rows", "Retired Pages", "PCI", "Clocks Event Reasons",
               "Clocks Throttle Reasons", "Temperature")  # fmt: skip


def _find_q_sections(s: Scan) -> None:
    """`GPU 00000000:1B:00.0` blocks without the banner; else health sections on their own."""
    if s.whole in (XML.kind, Q.kind):
        return
    heads = [i for i, ln in enumerate(s.lines) if _GPU_HEADER.match(ln)]
    if heads:
        last = indented_below(s.lines, heads[-1]) if heads[-1] + 1 < len(s.lines) else heads[-1]
        s.readings += read_nvidia_smi_q("\n".join(s.lines[heads[0] : last + 1]))
        s.add(Q_SECTION, heads[0], last, partial=True)
        return
    for i, ln in enumerate(s.lines):
        if ln.strip() in _Q_SECTIONS and i + 1 < len(s.lines) and " : " in s.lines[i + 1]:
            last = indented_below(s.lines, i)
            s.readings += read_nvidia_smi_q("\n".join(s.lines[i : last + 1]))
            s.add(Q_SECTION, i, last, partial=True)


Q_SECTIONS = Reader(Q_SECTION, _find_q_sections)

_NVLINK_MORE = re.compile(r"^(\s+\S|NVML: |GPU \d+: )")


def _find_nvlink(s: Scan) -> None:
    """`nvidia-smi nvlink -s` / `-e` per GPU; a `...` line before or after says it was cut."""
    if s.whole is not None:
        return
    i = 0
    while i < len(s.lines):
        if not _NVLINK_GPU.match(s.lines[i]):
            i += 1
            continue
        j = i
        while j + 1 < len(s.lines) and _NVLINK_MORE.match(s.lines[j + 1]):
            j += 1
        cut = (i > 0 and is_ellipsis(s.lines[i - 1])) or (
            j + 1 < len(s.lines) and is_ellipsis(s.lines[j + 1])
        )
        s.readings += read_nvidia_smi_nvlink("\n".join(s.lines[i : j + 1]))
        s.add(NVLINK.kind, i, j, partial=cut)
        i = j + 1


NVLINK = Reader("nvidia-smi nvlink", _find_nvlink)


_QUERY_CMD = re.compile(r"--query-gpu[= ]([\w.,]+)")
_NOHEADER = re.compile(r"--format[= ]\S*noheader")


def _find_query_csv(s: Scan) -> None:
    """A `--query-gpu` CSV: a header naming index, uuid or pci.bus_id, then rows as wide; or,
    printed with `noheader`, the rows under the command line that names the fields (each row
    as wide, its index, UUID or bus id looking like one)."""
    if s.whole is not None:
        return
    i = 0
    while i < len(s.lines):
        ln = s.lines[i]
        cmd = _QUERY_CMD.search(ln)
        if cmd and _NOHEADER.search(ln):
            fields = cmd.group(1).split(",")
            j = i
            while j + 1 < len(s.lines) and _is_row(fields, _cells(s.lines[j + 1])):
                j += 1
            if j > i:
                s.readings += read_nvidia_smi_csv("\n".join(s.lines[i + 1 : j + 1]), fields)
                s.add(QUERY_CSV.kind, i, j)
            i = j + 1
            continue
        keys = _header(ln)
        if len(keys) < 2 or not {"index", "uuid", "pci.bus_id"} & set(keys):
            i += 1
            continue
        j = i
        while j + 1 < len(s.lines) and s.lines[j + 1].count(",") == ln.count(","):
            j += 1
        s.readings += read_nvidia_smi_csv("\n".join(s.lines[i : j + 1]))
        s.add(QUERY_CSV.kind, i, j)
        i = j + 1


_IDENTITY = {
    "index": re.compile(r"^\d+$"),
    "uuid": re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$"),
    "pci.bus_id": re.compile(r"^[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$"),
}


def _is_row(fields: list[str], cells: list[str]) -> bool:
    """A CSV row of these fields: as many cells, each identity field's cell looking like one."""
    if len(cells) != len(fields):
        return False
    return all(p.match(c) for f, c in zip(fields, cells, strict=True) if (p := _IDENTITY.get(f)))


QUERY_CSV = Reader("nvidia-smi --query-gpu", _find_query_csv)
