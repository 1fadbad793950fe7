"""`rocm-smi --showproductname` (text, `--csv` or `--json`) as hardware readings: which GPUs a
node has, merged with what other captures say about them."""

from __future__ import annotations

import re

from fleetval.formats import smi
from fleetval.formats.gpuhw import GpuReading
from fleetval.formats.hwscan import whole_reader


def read_rocm_smi(text: str) -> list[GpuReading]:
    """Identity of each GPU: index, UUID, bus id, name, model and the driver version."""
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


def _claims(text: str) -> bool:
    """Its banner, its CSV header as the first line, or its JSON's "cardN" keys."""
    head = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return (
        "ROCm System Management Interface" in text
        or head.startswith("device,")
        or bool(re.search(r'^\s*"card\d+"\s*:', text, re.MULTILINE))
    )


ROCM_SMI = whole_reader("rocm-smi", _claims, read_rocm_smi)
