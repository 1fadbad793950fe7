"""The DDP steps' parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from fleetval.checks.spec import StepSpec
from fleetval.vocab import DType

FLOAT_DTYPES = (DType.FLOAT32, DType.FLOAT64, DType.BFLOAT16, DType.FLOAT16)


def _floating(dtype: DType) -> DType:
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"DDP trains floating-point parameters: one of {', '.join(FLOAT_DTYPES)}")
    return dtype


FloatDType = Annotated[DType, AfterValidator(_floating)]


class DdpScalingParams(StepSpec):
    """A synthetic MLP trained with a fixed per-rank batch (weak scaling)."""

    check: Literal["ddp_scaling"]
    hidden: PositiveInt = 1024  # width of every layer
    layers: PositiveInt = 4  # Linear layers
    batch_per_rank: PositiveInt = 64
    steps: PositiveInt = 20  # timed steps (and timed compute-only steps, and all_reduce iterations)
    warmup: NonNegativeInt = 3
    dtype: FloatDType = DType.FLOAT32
    lr: PositiveFloat = 1e-3


class DdpHealthParams(StepSpec):
    """A few DDP steps on a small MLP, checked against a single-process reference."""

    check: Literal["ddp_health"]
    hidden: PositiveInt = 64
    layers: PositiveInt = 3
    batch_per_rank: PositiveInt = 8
    steps: PositiveInt = Field(default=5, le=1000)  # k: steps before the parameter hash
    lr: PositiveFloat = 0.1
    dtype: FloatDType = DType.FLOAT32
    sync_batchnorm: bool = False  # BatchNorm after each hidden layer, as SyncBatchNorm (GPU only)
    no_sync_accumulation: PositiveInt = 1  # micro-batches per step; all but the last under no_sync
    grad_rtol: PositiveFloat | None = None  # None: the dtype's default (GRAD_RTOL)

    @model_validator(mode="after")
    def _micro_batches(self) -> Self:
        m, b = self.no_sync_accumulation, self.batch_per_rank
        if b % m:
            raise ValueError(
                f"batch_per_rank ({b}) must split evenly into no_sync_accumulation ({m}) micro-batches"
            )
        if self.sync_batchnorm and b // m < 2:
            raise ValueError(
                f"sync_batchnorm needs at least 2 samples per micro-batch; batch_per_rank {b} / "
                f"no_sync_accumulation {m} gives {b // m}"
            )
        return self
