"""GPU tools' identity output as fleets capture it: amd-smi static --json (with whatever banner
a non-root run prints first), rocm-smi (--json, --csv, text); GPU model names. nvidia-smi and
the hardware-health fields of every tool are read by `nvsmi`, `amdsmi` and `hwcapture`.

Every parser is a pure function over the tool's text; "N/A"-like values become None. GPU rows
are `SmiGpu`s: `name` (as the tool says it), `model` (normalised: `gpu_model`), `pci_bus_id`,
`uuid`, `gfx`; a parser's answer is an `SmiInventory` (the GPUs and the driver version). `gpu_model` is what expectation lookups (busbw floors per SKU) match on.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

NA = {"", "N/A", "[N/A]", "[Not Supported]", "None", "n/a"}


class SmiError(ValueError):
    """Tool output that cannot be read (the message says what was expected)."""


def na(value: Any) -> Any:
    """None for the tools' "not available" spellings; strings stripped; other values as they are."""
    if isinstance(value, str):
        v = value.strip()
        return None if v in NA else v
    return value


def _clean(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _clean(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_clean(v) for v in data]
    return na(data)


# ---- GPU model names ------------------------------------------------------------------------

# AMD PCI device ids whose marketing name the tools do not always print (rocm-smi shows
# "Card series: 0x738c" on some releases, "AMD INSTINCT MI200 (MCM)" on others).
AMD_DEVICE_IDS = {
    "0x738c": "MI100", "0x7408": "MI250X", "0x740c": "MI250X", "0x740f": "MI210",
    "0x74a0": "MI300A", "0x74a1": "MI300X", "0x75a0": "MI350X",
}  # fmt: skip
_MI = re.compile(r"\bMI ?(\d{2,3})([AX]?)\b", re.IGNORECASE)


def gfx_target(gfx: str | None) -> str | None:
    """rocm-smi's decimal "gfx9010" (major 9, minor 0, stepping 10) as LLVM names it: "gfx90a"."""
    if not gfx:
        return None
    # NOTE: only gfx9 steppings 10-15 need it; "gfx1036" is already LLVM's name (10.3.6)
    m = re.fullmatch(r"gfx(9)(\d)(1[0-5])", gfx.strip())
    return f"gfx{m.group(1)}{m.group(2)}{int(m.group(3)):x}" if m else gfx.strip()


def gpu_model(name: str | None, gfx: str | None = None, device_id: str | None = None) -> str | None:
    """A GPU's SKU as expectations name it: "NVIDIA H100 SXM" apart from "NVIDIA H100 PCIe",
    "AMD Instinct MI250X" from "AMD INSTINCT MI200 (MCM) OAM ..." with gfx90a; else the name."""
    if not name and not device_id:
        return None
    text = (name or "").strip()
    if re.search(r"NVIDIA|Tesla|GeForce|Quadro|\b[AHB]\d{2,3}\b", text):
        return _nvidia(text)
    return _amd(text, gfx_target(gfx), (device_id or "").lower()) or text or None


def _nvidia(name: str) -> str:
    for sku in ("H100", "H200", "H800", "A100", "A800"):
        if re.search(rf"\b{sku}\b", name):
            if re.search(r"PCIe", name, re.IGNORECASE):
                return f"NVIDIA {sku} PCIe"
            if re.search(r"\bNVL\b", name):
                return f"NVIDIA {sku} NVL"
            return f"NVIDIA {sku} SXM"  # HBM SKUs without a form factor are SXM
    return name


def _amd(name: str, gfx: str | None, device_id: str) -> str | None:
    m = _MI.search(name)
    if m and m.group(1) == "200" and ("MCM" in name.upper() or gfx == "gfx90a"):
        return "AMD Instinct MI250X"  # the multi-chip MI200 is the MI250X (gfx90a)
    if m:
        return f"AMD Instinct MI{m.group(1)}{m.group(2).upper()}"
    sku = AMD_DEVICE_IDS.get(device_id) or AMD_DEVICE_IDS.get(name.lower())
    return f"AMD Instinct {sku}" if sku else None


class SmiGpu(TypedDict):
    """One GPU as an identity tool names it."""

    name: str | None  # as the tool says it
    model: str | None  # normalised: `gpu_model`
    pci_bus_id: str | None
    uuid: str | None
    gfx: str | None


class SmiInventory(TypedDict):
    """A node's GPUs and driver as one identity tool lists them."""

    gpus: list[SmiGpu]
    driver_version: str | None
    banner: NotRequired[list[str]]  # amd-smi: the lines it printed before its JSON


def _gpu(name: Any, bus: Any, uuid: Any, gfx: Any, device_id: Any = None) -> SmiGpu:
    name, gfx = na(name), gfx_target(na(gfx))
    return {
        "name": name,
        "model": gpu_model(name, gfx, na(device_id)),
        "pci_bus_id": na(bus),
        "uuid": na(uuid),
        "gfx": gfx,
    }


# ---- amd-smi ---------------------------------------------------------------------------------


def split_banner(text: str) -> tuple[list[str], str]:
    """(lines printed before the JSON document, the document): amd-smi run as non-root warns
    about missing groups, and Python may print SyntaxWarnings, before the JSON."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip()[:1] in ("{", "[")), None)
    if start is None:
        return [ln for ln in lines if ln.strip()], ""
    return [ln for ln in lines[:start] if ln.strip()], "\n".join(lines[start:])


def _load_json(text: str, tool: str) -> tuple[list[str], Any]:
    banner, body = split_banner(text)
    if not body:
        raise SmiError(f"{tool}: expected a JSON document; found none after {len(banner)} lines")
    try:
        return banner, _clean(json.loads(body))
    except ValueError as err:
        raise SmiError(f"{tool}: the JSON document is cut off or malformed ({err})") from err


def parse_amd_smi_static(text: str) -> SmiInventory:
    """GPUs and driver from `amd-smi static [--asic --bus --driver] --json`.

    Older amd-smi prints a list of per-GPU objects, newer ones wrap it in {"gpu_data": [...]}.
    Raises SmiError when there is no readable JSON document.
    """
    banner, data = _load_json(text, "amd-smi")
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    gpus, driver = [], None
    for gpu in data if isinstance(data, list) else []:
        asic = gpu.get("asic") or {}
        bus, drv = gpu.get("bus") or {}, gpu.get("driver") or {}
        gpus.append(
            _gpu(
                asic.get("market_name"),
                bus.get("bdf"),
                asic.get("asic_serial"),
                asic.get("target_graphics_version"),
                asic.get("device_id"),
            )
        )
        driver = driver or drv.get("version")
    return {"gpus": gpus, "driver_version": driver, "banner": banner}


# ---- rocm-smi --------------------------------------------------------------------------------


def _rocm_card(fields: Mapping[str, object]) -> SmiGpu:
    card = {k.strip().lower().rstrip(":"): v for k, v in fields.items()}
    series, model = na(card.get("card series")), na(card.get("card model"))
    # NOTE: some releases put the marketing name in "Card series", others a PCI id there and
    # the name in "Card model"; take whichever names an SKU.
    name = series if series and not re.fullmatch(r"0x[0-9a-fA-F]+", series) else model or series
    ids = [v for v in (series, model, card.get("device id")) if v and str(v).startswith("0x")]
    gpu = _gpu(name, card.get("pci bus"), card.get("unique id"), card.get("gfx version"))
    gpu["model"] = gpu_model(name, gpu["gfx"], next(iter(ids), None))
    return gpu


def parse_rocm_smi(text: str) -> SmiInventory:
    """GPUs and driver from `rocm-smi --showproductname --showbus ... --json`:
    {"card0": {...}, "system": {"Driver version": ...}}."""
    try:
        _, data = _load_json(text, "rocm-smi")
    except SmiError:
        return {"gpus": [], "driver_version": None}
    gpus, driver = [], None
    for name, raw in data.items() if isinstance(data, dict) else []:
        if not isinstance(raw, dict):
            continue
        if name.startswith("card"):
            gpus.append(_rocm_card(raw))
        driver = driver or {k.lower(): v for k, v in raw.items()}.get("driver version")
    return {"gpus": gpus, "driver_version": driver}


def parse_rocm_smi_csv(text: str) -> SmiInventory:
    """`rocm-smi --showproductname --csv` (rows per `cardN`) and `--showdriverversion --csv`
    (a `cardsystem` row)."""
    rows = list(csv.DictReader(io.StringIO(text.strip())))
    if not rows or "device" not in rows[0]:
        raise SmiError("rocm-smi csv: expected a header starting with 'device'")
    gpus = [_rocm_card(r) for r in rows if (r.get("device") or "").startswith("card") and
            r["device"] != "cardsystem"]  # fmt: skip
    driver = next((na(r.get("Driver version")) for r in rows if r.get("Driver version")), None)
    return {"gpus": gpus, "driver_version": driver}


def parse_rocm_smi_text(text: str) -> SmiInventory:
    """Plain `rocm-smi --showproductname`: "GPU[0]  : Card series:  AMD Instinct MI300X OAM"."""
    cards: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^GPU\[(\d+)\]\s*:\s*([^:]+?):\s*(.*)$", line)
        if m:
            cards.setdefault(m.group(1), {})[m.group(2).strip()] = m.group(3).strip()
    driver = re.search(r"Driver version:\s*(\S+)", text)
    return {
        "gpus": [_rocm_card(c) for _, c in sorted(cards.items(), key=lambda kv: int(kv[0]))],
        "driver_version": driver.group(1) if driver else None,
    }
