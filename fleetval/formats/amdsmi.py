"""amd-smi hardware readings: `amd-smi metric` (text and `--json`: ECC totals and per block,
PCIe, power), the `amd-smi xgmi` link metric table and `amd-smi xgmi --link-status`.

The text form prints "GPU: n" then indented "KEY: value" sections; the JSON form has the same
keys in lower case, values as {"value": v, "unit": u}. Both become one upper-case tree here.
XGMI health is read from the XGMI_WAFL ECC block counters: on MI300-class GPUs sysfs
`xgmi_error` answers EINVAL (ROCm/rocm-systems#11468), the per-block counters do not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeAlias, TypedDict

from fleetval.formats.gpuhw import GpuReading, Tree, integer, number, section, tree
from fleetval.formats.hwscan import Reader, Scan, is_ellipsis, whole_reader
from fleetval.formats.smi import SmiError, gpu_model, na, split_banner

# PCIe transfer rate per lane -> generation
_GTS_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def read_amd_smi_metric(text: str) -> list[GpuReading]:
    """Every GPU of `amd-smi metric [--ecc --ecc-blocks --pcie --power ...]`, text or JSON."""
    _, body = split_banner(text)
    if body:
        return [_from_metric(i, g, "amd-smi metric --json") for i, g in _json_gpus(body)]
    blocks = _text_gpus(text)
    if not blocks:
        raise SmiError("amd-smi metric: expected 'GPU: n' blocks or a JSON document")
    return [_from_metric(i, g, "amd-smi metric") for i, g in blocks]


def _text_gpus(text: str) -> list[tuple[int, Tree]]:
    blocks: list[tuple[int, list[str]]] = []
    for line in text.splitlines():
        if m := re.match(r"^GPU: (\d+)\s*$", line):
            blocks.append((int(m.group(1)), []))
        elif blocks:
            blocks[-1][1].append(line)
    return [(i, tree(lines)) for i, lines in blocks]


def _json_gpus(body: str) -> list[tuple[int, Tree]]:
    try:
        data = json.loads(body)
    except ValueError as err:
        raise SmiError(f"amd-smi metric --json: malformed JSON ({err})") from err
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    if not isinstance(data, list):
        raise SmiError("amd-smi metric --json: expected a list of GPUs or {'gpu_data': [...]}")
    return [(int(g.get("gpu", n)), _upper(g)) for n, g in enumerate(data) if isinstance(g, dict)]


def _upper(d: Any) -> Any:
    """JSON keys as the text form spells them; {"value": v, "unit": u} as "v u"."""
    if isinstance(d, dict):
        if set(d) == {"value", "unit"}:
            return na(f"{d['value']} {d['unit']}")
        return {str(k).upper(): _upper(v) for k, v in d.items()}
    return na(d) if isinstance(d, str) else d


def _from_metric(index: int, g: Tree, source: str) -> GpuReading:
    ecc, pcie, power = section(g, "ECC"), section(g, "PCIE"), section(g, "POWER")
    blocks = {
        name: {k.lower().removesuffix("_count"): integer(v) for k, v in counts.items()}
        for name, counts in section(g, "ECC_BLOCKS").items()
        if isinstance(counts, dict) and counts
    }
    speed = number(pcie.get("SPEED"))
    return GpuReading(
        vendor="amd",
        source=source,
        index=index,
        # NOTE: amd-smi's ECC counters count since the driver loaded (its RAS error counts);
        # the persistent record is the bad-page table, read by `amd-smi bad-pages`.
        ecc_volatile_corrected=integer(ecc.get("TOTAL_CORRECTABLE_COUNT")),
        ecc_volatile_uncorrected=integer(ecc.get("TOTAL_UNCORRECTABLE_COUNT")),
        ecc_deferred=integer(ecc.get("TOTAL_DEFERRED_COUNT")),
        ecc_blocks=blocks,
        pcie_gen=_GTS_GEN.get(speed) if speed is not None else None,
        pcie_width=integer(pcie.get("WIDTH")),
        pcie_replays=integer(pcie.get("REPLAY_COUNT")),
        power_w=number(power.get("SOCKET_POWER")),
        clock_reasons=_throttle(power.get("THROTTLE_STATUS")),
    )


def _throttle(status: Any) -> list[str] | None:
    """amd-smi's one THROTTLE_STATUS word: THROTTLED has no finer reason in this field."""
    if not isinstance(status, str):
        return None
    return ["throttled"] if status.upper() == "THROTTLED" else []


# ---- amd-smi xgmi ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _XgmiGpu:
    """A GPU row of the link metric table, before its Read row."""

    index: int
    bdf: str
    link_type: str  # "XGMI" or "PCIE"


def read_amd_smi_xgmi(text: str) -> list[GpuReading]:
    """The LINK METRIC TABLE of `amd-smi xgmi`: per GPU its bus id, bit rate, link type and,
    per peer, the data read over the link ("N/A" for itself)."""
    if "LINK METRIC TABLE" not in text:
        raise SmiError("amd-smi xgmi: expected a 'LINK METRIC TABLE:'")
    out: list[GpuReading] = []
    current: _XgmiGpu | None = None
    for line in text.splitlines():
        if m := re.match(r"^GPU(\d+)\s+(\S+)\s+.*?\s(XGMI|PCIE)\s*$", line):
            current = _XgmiGpu(int(m.group(1)), m.group(2), m.group(3))
        elif current and line.strip().startswith("Read"):
            cells = re.findall(r"N/A|\d+ [KMG]?B", line)
            peers = [c for c in cells if c != "N/A"]
            # NOTE: a peer whose link carries no counters prints N/A like the GPU itself;
            # so a link counts as up when its counter reads, and all peers are expected.
            up = len(peers) if current.link_type == "XGMI" else 0
            out.append(GpuReading(vendor="amd", source="amd-smi xgmi", index=current.index,
                                  pci_bus_id=current.bdf, xgmi_up=up,
                                  xgmi_total=max(len(cells) - 1, 0)))  # fmt: skip
            current = None
    if not out:
        raise SmiError("amd-smi xgmi: the link metric table has no GPU rows")
    return out


# ---- the amdsmi Python library ---------------------------------------------------------------


# one amdsmi call's answer as the library returns it (None where it refused)
_Answer: TypeAlias = "dict[str, Any] | None"


class AmdsmiAnswers(TypedDict, total=False):
    """One GPU's answers from the amdsmi library (`from_amdsmi` names the calls)."""

    bdf: str | None
    uuid: str | None
    asic: _Answer
    vbios: _Answer
    driver: _Answer
    ecc: _Answer
    ecc_blocks: dict[str, _Answer]
    pcie: _Answer
    power: _Answer


def from_amdsmi(index: int, raw: AmdsmiAnswers) -> GpuReading:
    """One GPU's answers from the amdsmi library as a reading (the conversion, pure; the health
    check's edge asks the library). Keys: "bdf", "uuid", "asic" (amdsmi_get_gpu_asic_info),
    "vbios", "driver", "ecc" (amdsmi_get_gpu_total_ecc_count), "ecc_blocks" ({block name:
    amdsmi_get_gpu_ecc_count}), "pcie" (amdsmi_get_pcie_info), "power"
    (amdsmi_get_power_info); each None where the library refused."""
    asic, pcie = raw.get("asic") or {}, raw.get("pcie") or {}
    static, metric = pcie.get("pcie_static") or {}, pcie.get("pcie_metric") or {}
    ecc, power = raw.get("ecc") or {}, raw.get("power") or {}
    name = na(asic.get("market_name"))
    return GpuReading(
        vendor="amd",
        source="amdsmi",
        index=index,
        uuid=na(raw.get("uuid")),
        serial=na(asic.get("asic_serial")),
        pci_bus_id=na(raw.get("bdf")),
        name=name,
        model=gpu_model(name, na(asic.get("target_graphics_version")), na(asic.get("device_id"))),
        vbios=na((raw.get("vbios") or {}).get("version")),
        driver_version=na((raw.get("driver") or {}).get("driver_version")),
        ecc_volatile_corrected=integer(ecc.get("correctable_count")),
        ecc_volatile_uncorrected=integer(ecc.get("uncorrectable_count")),
        ecc_deferred=integer(ecc.get("deferred_count")),
        ecc_blocks={
            block.upper(): {k.removesuffix("_count"): integer(v) for k, v in counts.items()}
            for block, counts in (raw.get("ecc_blocks") or {}).items()
            if counts
        },
        pcie_gen=_gen(metric.get("pcie_speed")),
        pcie_gen_max=integer(static.get("pcie_interface_version"))
        or _gen(static.get("max_pcie_speed")),
        pcie_width=integer(metric.get("pcie_width")),
        pcie_width_max=integer(static.get("max_pcie_width")),
        pcie_replays=integer(metric.get("pcie_replay_count")),
        power_w=number(power.get("current_socket_power") or power.get("average_socket_power")),
        power_limit_w=number(power.get("power_limit")),
    )


def _gen(speed: Any) -> int | None:
    """A PCIe generation from a lane rate: GT/s as documented, MT/s as some releases return."""
    n = number(na(speed)) if isinstance(speed, str) else number(speed)
    if n is None:
        return None
    return _GTS_GEN.get(n / 1000 if n > 100 else n)


# ---- the readers ------------------------------------------------------------------------------


def _is_metric(text: str) -> bool:
    """`GPU: n` blocks (text), or a JSON document with "gpu" keys after any banner."""
    if re.search(r"^GPU: \d+\s*$", text, re.MULTILINE):
        return True
    _, body = split_banner(text)
    return bool(body) and bool(re.search(r'"gpu"\s*:', body))


XGMI = whole_reader("amd-smi xgmi", lambda t: "LINK METRIC TABLE" in t, read_amd_smi_xgmi)
METRIC = whole_reader("amd-smi metric", _is_metric, read_amd_smi_metric)


# ---- amd-smi xgmi --link-status (AMD SMI 25.3, ROCm 6.4 and later) ---------------------------

_LINK_ROW = re.compile(r"^GPU(\d+)\s+(\S+:\S+)((?:\s+(?:U|D|X|N/A))+)\s*$")


def read_amd_smi_link_status(lines: list[str]) -> list[GpuReading]:
    """Per GPU row its bus id and its XGMI links up (U) of those not disabled (U and D). A
    disabled link (X) is configured off, not broken; a GPU whose links all read N/A (the driver
    does not expose them, e.g. under SR-IOV) has no link reading."""
    out = []
    for line in lines:
        if not (m := _LINK_ROW.match(line)):
            continue
        links = m.group(3).split()
        known = [x for x in links if x != "N/A"]
        out.append(GpuReading(vendor="amd", source="amd-smi xgmi --link-status",
                              index=int(m.group(1)), pci_bus_id=m.group(2),
                              xgmi_up=known.count("U") if known else None,
                              xgmi_total=sum(x != "X" for x in known) or None))  # fmt: skip
    return out


def _find_link_status(s: Scan) -> None:
    """The rows under `XGMI LINK STATUS:`; partial where a `...` line follows them."""
    for i, ln in enumerate(s.lines):
        if ln.strip() != "XGMI LINK STATUS:":
            continue
        j = i
        while j + 1 < len(s.lines) and (
            _LINK_ROW.match(s.lines[j + 1]) or "link_status" in s.lines[j + 1]
        ):
            j += 1
        s.readings += read_amd_smi_link_status(s.lines[i : j + 1])
        cut = j + 1 < len(s.lines) and is_ellipsis(s.lines[j + 1])
        s.add(LINK_STATUS.kind, i, j, partial=cut)


LINK_STATUS = Reader("amd-smi xgmi --link-status", _find_link_status)
