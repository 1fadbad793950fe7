"""The `sweep:` section of a suite: references, tolerances, the circuit breaker, rounds."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from fleetval.fleet.topology import Topology


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Floor(_Model):
    """A per-SKU floor: the busbw (GB/s) a job must reach at `size_bytes`.

    `sku` matches a node's GPU model as a case-insensitive substring ("H100", "MI300X").
    A floor is applied only to jobs that measured exactly that size.
    """

    sku: str = Field(min_length=1)
    size_bytes: PositiveInt
    alone_gbps: float | None = Field(default=None, gt=0)  # every GPU of one node
    pair_gbps: float | None = Field(default=None, gt=0)  # two nodes

    @model_validator(mode="after")
    def _some(self) -> Self:
        if self.alone_gbps is None and self.pair_gbps is None:
            raise ValueError("a floor needs alone_gbps or pair_gbps")
        return self


GIB = 1 << 30
# Published all_reduce busbw floors (Azure's health checks, 16 GiB messages, one 8-GPU node).
KNOWN_FLOORS: tuple[Floor, ...] = (
    Floor(sku="H100", size_bytes=16 * GIB, alone_gbps=460.0),
    Floor(sku="MI300X", size_bytes=16 * GIB, alone_gbps=314.0),
)


class SweepSettings(_Model):
    """How a fleet sweep judges and how far it may go."""

    # A node, link or trunk is slow when the model's estimate of it is below the fleet's
    # level by more than this share, beyond its uncertainty (`fleetval.fleet.model`).
    tolerance: float = Field(default=0.15, gt=0, lt=1)
    # Where the noise is too large to judge a node within `tolerance`, it is judged within a
    # wider share that is said, up to this; past it the node is unjudged.
    max_tolerance: float = Field(default=0.6, gt=0, lt=1)
    # The false-discovery rate over every node, link and trunk effect the model tests.
    fdr: float = Field(default=0.01, gt=0, lt=0.5)
    # Never recommend draining more than this share of the fleet (at least one node).
    max_drain_share: float = Field(default=0.10, gt=0, le=1)
    # A racked fleet takes more: every pair of racks is crossed (64 racks of 16 nodes: 7).
    max_rounds: int = Field(default=8, ge=2, le=16)
    # Where the noise leaves nodes undecided the sweep measures more (re-pairs, jobs alone
    # again) until each is decided, `max_rounds`, or this many seconds (None: no limit);
    # only then is a node `unjudged`, with what would decide it.
    budget_s: float | None = Field(default=None, gt=0)
    floors: list[Floor] = Field(default_factory=lambda: list(KNOWN_FLOORS))
    seed: int = 0  # which matching a fleet with no sweep history starts from
    # Where each node sits (node -> {rack|switch|domain: group}), beside or over the Ray
    # node labels `fleetval/rack` etc.; a file with the same map (YAML or JSON).
    topology: dict[str, dict[str, str]] = Field(default_factory=dict)
    topology_file: str | None = None
    # Step names run in each phase (None: every step of the suite).
    alone_steps: list[str] | None = None
    pair_steps: list[str] | None = None

    @model_validator(mode="after")
    def _mapped(self) -> Self:
        Topology.from_map(self.topology, "topology")  # a bad map: its field path, at load
        return self

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.tolerance > self.max_tolerance:
            raise ValueError(
                f"tolerance ({self.tolerance:g}) must not exceed max_tolerance ({self.max_tolerance:g})"
            )
        return self

    def drain_limit(self, fleet: int) -> int:
        """How many nodes a sweep may recommend draining: the share, but at least one."""
        return max(1, int(self.max_drain_share * fleet + 1e-9))
