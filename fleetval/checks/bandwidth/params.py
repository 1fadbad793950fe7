"""The bandwidth step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ByteSize, ConfigDict, Field, model_validator

from fleetval.checks.spec import StepSpec
from fleetval.vocab import Collective, DType, ReduceOp


def sweep_sizes(lo: int, hi: int, factor: int) -> list[int]:
    """lo, lo*factor, ... up to hi (nccl-tests -b -e -f)."""
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


class SizeRange(BaseModel):
    """Message sizes from `min` to `max`, multiplying by `factor` (nccl-tests -b -e -f)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: ByteSize = ByteSize(8)
    max: ByteSize = ByteSize(4 * 1024 * 1024)
    factor: int = Field(default=2, ge=2)

    @model_validator(mode="after")
    def _non_empty(self) -> Self:
        if self.min < 1:
            raise ValueError(f"min must be at least 1 byte, got {int(self.min)}")
        if self.min > self.max:
            raise ValueError(
                f"empty size range: min {self.min.human_readable()} > max {self.max.human_readable()}"
            )
        return self

    def sizes(self) -> list[int]:
        return sweep_sizes(int(self.min), int(self.max), self.factor)


class BandwidthParams(StepSpec):
    """Sweep sizes for each collective and dtype; every rank records its own per-iteration times."""

    check: Literal["bandwidth"]
    collectives: list[Collective] = Field(
        default_factory=lambda: [Collective.ALL_REDUCE], min_length=1
    )
    ops: list[ReduceOp] = Field(default_factory=lambda: [ReduceOp.SUM], min_length=1)
    dtypes: list[DType] = Field(default_factory=lambda: [DType.FLOAT32], min_length=1)
    sizes: SizeRange = SizeRange()
    warmup: int = Field(default=5, ge=0)
    iters: int = Field(default=20, ge=1)
    verify: bool = True  # after timing, one more call with fresh data, checked exactly
