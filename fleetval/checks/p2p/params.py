"""The p2p step's parameters, torch-free: suites validate without importing torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fleetval.checks.bandwidth.params import SizeRange
from fleetval.checks.spec import StepSpec


class P2pParams(StepSpec):
    """Sizes to exchange between each pair of ranks, and which pairs: a ring or all of them."""

    check: Literal["p2p"]
    pattern: Literal["ring", "all"] = "ring"  # ring: each rank with its neighbours; all: every pair
    sizes: SizeRange = SizeRange()
    warmup: int = Field(default=3, ge=0)
    iters: int = Field(default=10, ge=1)
