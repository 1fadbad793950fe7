"""The isolate step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, ByteSize, Field, PositiveFloat

from fleetval.checks.spec import StepSpec
from fleetval.vocab import Collective

TIMED = (Collective.ALL_REDUCE, Collective.ALL_GATHER)


def _timed(c: Collective) -> Collective:
    if c not in TIMED:
        raise ValueError(f"isolation times one of {', '.join(TIMED)}, not {c.value}")
    return c


class IsolateParams(StepSpec):
    """Sub-group bisection of the job's ranks with one timed collective."""

    check: Literal["isolate"]
    collective: Annotated[Collective, AfterValidator(_timed)] = Collective.ALL_REDUCE
    size: ByteSize = ByteSize(64 * 1024)
    warmup: int = Field(default=3, ge=0)
    # Groups take turns in bursts, each at least burst_ms long: longer than a throttle's
    # cycle or a CPU quota's period, so a burst cannot fit between two stalls.
    bursts: int = Field(default=5, ge=1)
    burst_ms: PositiveFloat = 100.0
    # A half whose score (1/time) is lower than the other's by this share holds the
    # culprit (0.3: 1.43x the time). Halves measured in alternating bursts and confirmed
    # by two measurements in a row differ by far less on a healthy job, even on a loaded
    # host, while a rank stopped half the time costs its group 1.5x or more.
    threshold: float = Field(default=0.3, gt=0, lt=1)
