"""A captured file of GPU hardware evidence, whichever tool wrote it: which reader it needs,
and what it says (GPU readings, kernel events). `SmiError` when it is none of them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleetval.formats import amdsmi, kernlog, nvsmi, smi
from fleetval.formats.gpuhw import GpuReading, KernelEvent, merge
from fleetval.formats.smi import SmiError, split_banner

KINDS = ("nvidia-smi -q -x", "nvidia-smi -q", "nvidia-smi --query-gpu", "nvidia-smi nvlink",
         "amd-smi xgmi", "amd-smi metric", "rocm-smi", "kernel log")  # fmt: skip


@dataclass(frozen=True)
class Capture:
    """What one captured file says."""

    kind: str  # one of KINDS
    readings: list[GpuReading] = field(default_factory=list)
    events: list[KernelEvent] = field(default_factory=list)


def kind_of(text: str) -> str | None:
    """Which tool wrote this text, from what only that tool prints; None when none did."""
    head = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if "<nvidia_smi_log" in text:
        return "nvidia-smi -q -x"
    if "NVSMI LOG" in text:
        return "nvidia-smi -q"
    if "LINK METRIC TABLE" in text:
        return "amd-smi xgmi"
    if re.match(r"^GPU \d+: .+\(UUID: GPU-", head):
        return "nvidia-smi nvlink"
    if "," in head and re.search(r"\b(pci\.bus_id|uuid|index)\b", head):
        return "nvidia-smi --query-gpu"
    if (
        "ROCm System Management Interface" in text
        or head.startswith("device,")
        or re.search(r'^\s*"card\d+"\s*:', text, re.MULTILINE)
    ):
        return "rocm-smi"
    if re.search(r"^GPU: \d+\s*$", text, re.MULTILINE) or _amd_json(text):
        return "amd-smi metric"
    if kernlog.looks_like_kernel_log(text):
        return "kernel log"
    return None


def _amd_json(text: str) -> bool:
    _, body = split_banner(text)
    return bool(body) and bool(re.search(r'"gpu"\s*:', body))


def read_capture(text: str) -> Capture:
    """The readings or events of one captured file. Raises SmiError naming the tools it can
    read when the file is none of them, or when the tool's output is malformed."""
    kind = kind_of(text)
    if kind is None:
        raise SmiError(f"not a capture fleetval reads (expected one of: {', '.join(KINDS)})")
    if kind == "kernel log":
        return Capture(kind, events=kernlog.read_kernel_log(text))
    readers = {
        "nvidia-smi -q -x": nvsmi.read_nvidia_smi_xml,
        "nvidia-smi -q": nvsmi.read_nvidia_smi_q,
        "nvidia-smi --query-gpu": nvsmi.read_nvidia_smi_csv,
        "nvidia-smi nvlink": nvsmi.read_nvidia_smi_nvlink,
        "amd-smi xgmi": amdsmi.read_amd_smi_xgmi,
        "amd-smi metric": amdsmi.read_amd_smi_metric,
        "rocm-smi": read_rocm_smi,
    }
    return Capture(kind, readings=readers[kind](text))


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


def read_capture_files(paths: list[Path]) -> tuple[list[GpuReading], list[KernelEvent]]:
    """Every reading (merged per GPU over the files) and kernel event of these files.
    Raises SmiError naming the file that cannot be read or is none of KINDS."""
    readings: list[GpuReading] = []
    events: list[KernelEvent] = []
    for path in paths:
        try:
            capture = read_capture(path.read_text(errors="replace"))
        except OSError as err:
            raise SmiError(f"{path}: cannot read ({err.strerror})") from err
        except SmiError as err:
            raise SmiError(f"{path}: {err}") from err
        readings += capture.readings
        events += capture.events
    return merge(readings), events
