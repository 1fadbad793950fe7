"""The collectives step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Literal

from pydantic import ByteSize, Field, field_validator

from fleetval.checks.spec import StepSpec
from fleetval.vocab import Collective, DType, ReduceOp

ALL_COLLECTIVES = list(Collective)
REDUCE_OPS = list(ReduceOp)
CORRECTNESS_DTYPES = [DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16, DType.INT32, DType.INT64]


class CollectivesParams(StepSpec):
    """Correctness of every collective, op and dtype at one buffer size."""

    check: Literal["collectives"]
    collectives: list[Collective] = Field(
        default_factory=lambda: list(ALL_COLLECTIVES), min_length=1
    )
    ops: list[ReduceOp] = Field(default_factory=lambda: list(REDUCE_OPS), min_length=1)
    dtypes: list[DType] = Field(default_factory=lambda: list(CORRECTNESS_DTYPES), min_length=1)
    size: ByteSize = ByteSize(64 * 1024)
    repeats: int = Field(default=2, ge=1, le=1000)  # each verified: catches a flaky rank

    @field_validator("size")
    @classmethod
    def _positive(cls, v: ByteSize) -> ByteSize:
        if v <= 0:
            raise ValueError("size must be at least 1 byte")
        return v
