"""A simulated fleet for the bench and the unit tests: bad nodes, bad links, noise.

A healthy job scores `base` GB/s times log-normal noise; now and then (`disturbed`) a
job is slowed by a transient (another tenant, a thermal blip) by up to `disturbance`.
A node slow alone (`compute`) slows every job it is in; a node with a bad NIC (`nic`)
slows only its pairs; a bad link slows only the pair of its two nodes.

A link no job crosses cannot be seen by any tool: a perfect matching measures n/2 of the
n(n-1)/2 links per round. So `planted(..., bad_links=k)` puts its k bad links on pairs of
healthy nodes that the first round of pairs measures (`links_pending`); varying the
planner's seed from sweep to sweep covers other links.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from fleetval.fleet.judge import Measurement, Pair, Planned
from fleetval.vocab import SweepPhase


@dataclass
class SimFleet:
    nodes: list[str]
    compute: dict[str, float] = field(default_factory=dict)  # node -> speed factor (< 1)
    nic: dict[str, float] = field(default_factory=dict)
    links: dict[Pair, float] = field(default_factory=dict)
    links_pending: list[float] = field(default_factory=list)  # bad links for the first pairs
    dead: set[str] = field(default_factory=set)  # its jobs fail
    base: float = 100.0
    noise: float = 0.03  # log-normal sigma of every job
    disturbed: float = 0.01  # share of jobs hit by a transient
    disturbance: float = 0.12  # a transient slows a job by up to this share
    seed: int = 0
    rng: random.Random = field(init=False)
    jobs: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def measure(self, jobs: list[Planned]) -> list[Measurement]:
        """One round: every job measured (side by side: each node is in one job)."""
        inside = [n for j in jobs for n in j.nodes]
        if len(inside) != len(set(inside)):
            raise ValueError("a node is in two jobs of one round")
        self.jobs += len(jobs)
        self._plant_links(jobs)
        return [self._one(j) for j in jobs]

    def _plant_links(self, jobs: list[Planned]) -> None:
        bad = set(self.compute) | set(self.nic) | self.dead
        pairs = [j.nodes for j in jobs if j.phase == SweepPhase.PAIR and not bad & set(j.nodes)]
        if not self.links_pending or not pairs:
            return
        for pair, factor in zip(
            self.rng.sample(pairs, min(len(pairs), len(self.links_pending))),
            self.links_pending,
            strict=False,
        ):
            self.links[tuple(sorted(pair))] = factor  # type: ignore[index]
        self.links_pending = []

    def _one(self, job: Planned) -> Measurement:
        if self.dead & set(job.nodes):
            return Measurement(job, None, detail="rank process died")
        factor = math.prod(self.compute.get(n, 1.0) for n in job.nodes)
        if job.phase == SweepPhase.PAIR:
            factor *= math.prod(self.nic.get(n, 1.0) for n in job.nodes)
            factor *= self.links.get(tuple(sorted(job.nodes)), 1.0)  # type: ignore[arg-type]
        factor *= math.exp(self.rng.gauss(0, self.noise))
        if self.rng.random() < self.disturbed:
            factor *= 1 - self.rng.uniform(0, self.disturbance)
        return Measurement(job, self.base * factor)


def planted(
    n: int, bad_nodes: int, bad_links: int, seed: int, *, slow: tuple[float, float] = (0.3, 0.7)
) -> SimFleet:
    """A fleet of `n` nodes with bad nodes (half slow alone, half with a bad NIC) and bad
    links between healthy nodes (see the module docstring); each bad one runs at a random
    share in `slow`."""
    rng = random.Random(seed)
    nodes = [f"node-{i:04d}" for i in range(n)]
    bad = rng.sample(nodes, bad_nodes)
    fleet = SimFleet(nodes, seed=seed)
    for i, name in enumerate(bad):
        (fleet.compute if i % 2 else fleet.nic)[name] = rng.uniform(*slow)
    fleet.links_pending = [rng.uniform(*slow) for _ in range(bad_links)]
    return fleet
