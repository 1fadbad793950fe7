"""The microbench step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Self

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from fleetval.checks.model_pattern import ModelPattern
from fleetval.checks.spec import StepSpec
from fleetval.vocab import DType

GEMM_DTYPES = (DType.BFLOAT16, DType.FLOAT16, DType.FLOAT32)


@dataclass(frozen=True)
class GpuSpec:
    """Public spec-sheet peaks of one GPU model, per device as torch sees it."""

    model: str
    tflops: dict[str, float]  # dense (no sparsity) peak by dtype value
    hbm_gbps: float | None  # device memory bandwidth, GB/s (read + write together)
    host_gbps: float | None  # host link, GB/s per direction
    source: str


class ModelExpectation(BaseModel):
    """A suite's own peaks for a device model the built-in table lacks (or overrides)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_model: ModelPattern = Field(min_length=1)  # regex searched in the device name; "cpu": CPU
    tflops: dict[DType, PositiveFloat] = Field(default_factory=dict)  # dense peak per dtype
    hbm_gbps: PositiveFloat | None = None  # device memory bandwidth, GB/s
    host_gbps: PositiveFloat | None = None  # host link, GB/s per direction
    source: str = "the suite"  # where the figures come from

    def spec(self) -> GpuSpec:
        tflops = {d.value: v for d, v in self.tflops.items()}
        return GpuSpec(self.gpu_model, tflops, self.hbm_gbps, self.host_gbps, self.source)


class MicrobenchParams(StepSpec):
    """Sizes, dtypes and thresholds of the per-GPU micro-benchmarks."""

    check: Literal["microbench"]
    gemm_sizes: list[PositiveInt] = Field(default_factory=lambda: [4096, 8192], min_length=1)
    dtypes: list[DType] = Field(default_factory=lambda: list(GEMM_DTYPES), min_length=1)
    copy_bytes: ByteSize = ByteSize(1024**3)  # device-to-device copy buffer
    host_bytes: ByteSize = ByteSize(256 * 1024**2)  # pinned host <-> device buffer
    # CPU ranks have no expectations and little time: small sizes only.
    cpu_gemm_sizes: list[PositiveInt] = Field(default_factory=lambda: [256], min_length=1)
    cpu_copy_bytes: ByteSize = ByteSize(16 * 1024**2)
    warmup: NonNegativeInt = 3
    iters: PositiveInt = 10
    # NOTE: 0.6 of the dense peak: large square cuBLAS/hipBLASLt GEMMs reach ~70-80% of it on
    # a healthy GPU at production clocks, while a power-capped, throttled or misconfigured
    # one drops well below; 0.6 leaves headroom for clock and library variation without
    # hiding a real problem. Copies are simpler and run closer to the peak.
    pass_fraction: float = Field(default=0.6, gt=0, le=1)  # GEMM vs dense peak: PASS at or above
    bandwidth_pass_fraction: float = Field(default=0.7, gt=0, le=1)  # copies vs HBM / host link
    # Below fail_fraction x the pass threshold is FAIL (e.g. a PCIe link trained at half
    # width), between the two WARN.
    fail_fraction: float = Field(default=0.5, gt=0, le=1)
    # Peaks for models the built-in table lacks (MI355X, B200, ...), tried before it; a
    # measurement with no expectation is recorded (INFO), never passed.
    expectations: list[ModelExpectation] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_dtypes(self) -> Self:
        bad = [d.value for d in self.dtypes if d not in GEMM_DTYPES]
        if bad:
            raise ValueError(f"dtypes: GEMM runs {', '.join(GEMM_DTYPES)}; not {', '.join(bad)}")
        return self
