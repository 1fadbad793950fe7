"""The straggler step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Literal

from pydantic import ByteSize, Field, PositiveFloat

from fleetval.checks.spec import StepSpec
from fleetval.detect.lateness import THRESHOLD


class StragglerParams(StepSpec):
    """Many small all_reduces; every rank's wait per iteration, gathered and scored."""

    check: Literal["straggler"]
    size: ByteSize = ByteSize(1024)  # small: latency-bound, so arrival order dominates
    warmup: int = Field(default=5, ge=0)
    iters: int = Field(default=40, ge=5)
    threshold: PositiveFloat = THRESHOLD  # late by this many times the measured noise
    min_lateness_ms: float = Field(default=0.0, ge=0)  # and, optionally, by at least this
