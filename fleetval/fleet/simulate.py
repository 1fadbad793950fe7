"""A simulated fleet for the bench and the unit tests: bad nodes, bad links, noise.

A healthy job scores `base` GB/s times log-normal noise; now and then (`disturbed`) a
job is slowed by a transient (another tenant, a thermal blip) by up to `disturbance`.
A node slow alone (`compute`) slows every job it is in; a node with a bad NIC (`nic`)
slows only its pairs; a bad link slows only the pair of its two nodes.

A slow trunk (`trunks`, a pair of topology groups) slows every pair job with one node in
each group, and nothing else.

A job with several slow parts runs at 1 / (1 + sum(1/f - 1)) of the level: their delays add
in time, as injected per-call delays do on the Ray fleet (not the product of the shares).

A link no job crosses cannot be seen by any tool: a perfect matching measures n/2 of the
n(n-1)/2 links per round. So `planted(..., bad_links=k)` puts its k bad links on pairs of
healthy nodes that the first round of pairs measures (`links_pending`); sweeps that plan
from their history cover the other links in turn (`fleetval.fleet.coverage`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from fleetval.fleet.judge import Measurement, Pair, Planned
from fleetval.fleet.topology import NO_TOPOLOGY, Topology
from fleetval.vocab import SweepPhase


@dataclass
class SimFleet:
    nodes: list[str]
    compute: dict[str, float] = field(default_factory=dict)  # node -> speed factor (< 1)
    nic: dict[str, float] = field(default_factory=dict)
    links: dict[Pair, float] = field(default_factory=dict)
    links_pending: list[float] = field(default_factory=list)  # bad links for the first pairs
    dead: set[str] = field(default_factory=set)  # its jobs fail
    topology: Topology = NO_TOPOLOGY
    trunks: dict[tuple[str, str], float] = field(default_factory=dict)  # sorted group pair
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
        pairs = [
            j.nodes
            for j in jobs
            if j.phase == SweepPhase.PAIR and not bad & set(j.nodes) and self.trunk(j.nodes) == 1
        ]
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
        parts = [self.compute.get(n, 1.0) for n in job.nodes]
        if job.phase == SweepPhase.PAIR:
            parts += [self.nic.get(n, 1.0) for n in job.nodes]
            parts.append(self.links.get(tuple(sorted(job.nodes)), 1.0))  # type: ignore[arg-type]
            parts.append(self.trunk(job.nodes))
        # NOTE: slow parts add in time (a part at share f takes 1/f of a healthy part's
        # time), as per-call delays do on a real fleet: a slow node across a slow trunk
        factor = 1 / (1 + sum(1 / f - 1 for f in parts))
        factor *= math.exp(self.rng.gauss(0, self.noise))
        if self.rng.random() < self.disturbed:
            factor *= 1 - self.rng.uniform(0, self.disturbance)
        return Measurement(job, self.base * factor)

    def trunk(self, nodes: tuple[str, ...]) -> float:
        """The slow trunk a pair job crosses, at any level (1.0: none)."""
        if len(nodes) != 2 or not self.trunks:
            return 1.0
        for level in self.topology.levels:
            ga, gb = (self.topology.group(n, level) or "" for n in nodes)
            if (min(ga, gb), max(ga, gb)) in self.trunks:
                return self.trunks[(min(ga, gb), max(ga, gb))]
        return 1.0


def racked(nodes: list[str], racks: int) -> Topology:
    """`racks` racks of consecutive nodes (rack-00, rack-01, ...)."""
    per = -(-len(nodes) // racks)
    return Topology({n: {"rack": f"rack-{i // per:02d}"} for i, n in enumerate(nodes)})


def planted(
    n: int,
    bad_nodes: int,
    bad_links: int,
    seed: int,
    *,
    slow: tuple[float, float] = (0.3, 0.7),
    racks: int = 0,
    bad_trunks: int = 0,
) -> SimFleet:
    """A fleet of `n` nodes with bad nodes (half slow alone, half with a bad NIC) and bad
    links between healthy nodes (see the module docstring); each bad one runs at a random
    share in `slow`. With `racks`, the nodes sit in that many racks, and `bad_trunks`
    random pairs of racks are joined by a slow trunk."""
    rng = random.Random(seed)
    nodes = [f"node-{i:04d}" for i in range(n)]
    bad = rng.sample(nodes, bad_nodes)
    topology = racked(nodes, racks) if racks else NO_TOPOLOGY
    fleet = SimFleet(nodes, seed=seed, topology=topology)
    for i, name in enumerate(bad):
        (fleet.compute if i % 2 else fleet.nic)[name] = rng.uniform(*slow)
    fleet.links_pending = [rng.uniform(*slow) for _ in range(bad_links)]
    names = sorted({g["rack"] for g in topology.groups.values()})
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    fleet.trunks = {p: rng.uniform(*slow) for p in rng.sample(pairs, min(bad_trunks, len(pairs)))}
    return fleet
