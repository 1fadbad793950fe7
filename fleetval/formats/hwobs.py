"""What a tool's output says about a GPU (or a pair of GPUs, or the node) that is not one of a
`GpuReading`'s counters: a `dcgmi diag` test's result, the NVLink fabric registration, the
NVLinks of a GPU pair in `nvidia-smi topo -m`. Judged by `fleetval.detect.hardware`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Observation(BaseModel):
    """One thing a tool printed, healthy or not, with the GPU it names (None: the node)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vendor: str  # "nvidia" or "amd"
    source: str  # "dcgmi diag", "nvidia-smi -q", "nvidia-smi topo -m", ...
    kind: str  # "dcgm_test", "fabric", "nvlink_pair", "nic_affinity"
    ok: bool  # what the tool printed is healthy
    subject: str  # what it is about: the test's name, "Fabric", "GPU0-GPU3"
    value: str  # as printed: "Fail", "State Completed, Status Insufficient Resources", "NV6"
    detail: str = ""  # the tool's message, joined over its wrapped lines
    category: str = ""  # dcgmi diag: Deployment, Integration, Hardware, Stress
    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
