"""The health step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from fleetval.checks.spec import StepSpec
from fleetval.detect.hardware import HwThresholds

# Where the health step reads GPU hardware: the live library, the node's tools, captured files.
HardwareSource = Literal["auto", "captured", "nvml", "tools", "off"]

# The expectations a suite declares that need evidence from the node (a tool, a log).
Expectation = Literal["expect_gpus_per_node", "min_nccl_version", "expect_network",
                      "expect_net_plugin"]  # fmt: skip


class HealthParams(StepSpec):
    """Expectations for the node and rank set-up; every threshold lives here, none in code."""

    check: Literal["health"]
    expect_gpus_per_node: PositiveInt | None = None
    # A rank whose free memory is this many percent off the median: WARN, then FAIL.
    memory_balance_pct: PositiveFloat = 10.0
    memory_balance_fail_pct: PositiveFloat = 25.0
    min_nccl_version: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)?$")
    expect_network: str | None = None  # "IB", "Socket", "AWS Libfabric" as NCCL names it
    expect_net_plugin: str | None = None  # prefix of the plugin name, e.g. "aws-ofi-rccl"
    required_env: dict[str, str] = Field(default_factory=dict)  # exact values this rank must see
    # AMD's multi-GPU guidance asks for these on the kernel command line (ROCm only).
    rocm_kernel_args: list[str] = Field(default_factory=lambda: ["iommu=pt", "amd_iommu=on"])
    # Declared expectations whose evidence may be missing: SKIP instead of FAIL when, e.g.,
    # no NCCL log was written or no GPU tool answered. Not listed: missing evidence FAILS.
    optional: list[Expectation] = Field(default_factory=list)
    # GPU hardware (ECC, row remapping, PCIe, clock limits, NVLink/XGMI, kernel log): when a
    # counter is a finding, where to read it, and captured tool output standing in for the
    # node's tools (paths or globs; "{node}" is the node's name).
    hardware: HwThresholds = Field(default_factory=HwThresholds)
    hardware_source: HardwareSource = "auto"
    hardware_captures: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.memory_balance_fail_pct < self.memory_balance_pct:
            raise ValueError(
                f"memory_balance_fail_pct ({self.memory_balance_fail_pct}) must be at least "
                f"memory_balance_pct ({self.memory_balance_pct})"
            )
        return self
