"""What the fabric model reads and what it says: a job as an observation, an effect with its
interval and evidence, and the fit as a whole (`fleetval.fleet.model` fits it). Plain
dataclasses, so reading a stored sweep or listing runs needs no numpy or scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from fleetval.fleet.topology import Topology
from fleetval.vocab import SweepPhase

HALF_LIFE = 5.0  # sweeps: a past sweep's jobs weigh 0.5 ** (age / HALF_LIFE)
Z_HEALTHY = NormalDist().inv_cdf(0.95)  # one-sided 95%: how sure "no slower than" is
# noise units: a job slower than its fit by more than this is not the noise's (past it the
# fabric model's loss counts a residual linearly: a bounded pull per job)
HUBER = 3.0
# A slow estimate still unproven when the sweep ends is left suspect only while it is at
# least as likely a fault as not over everything the sweep tested (its Benjamini-Hochberg
# q-value over all its jobs, `Effect.q_all`); above that it is what the noise gives the
# slowest of so many healthy ones, and the node is judged by the bound its jobs give, as
# every other node is
Q_SUSPECT = 0.5


@dataclass(frozen=True)
class Obs:
    """One job as the model sees it."""

    phase: SweepPhase
    nodes: tuple[str, ...]
    score: float | None  # GB/s; None with failed: the job failed
    failed: bool = False
    round: int = 1
    age: int = 0  # 0: tonight's sweep; k: the k-th sweep before it
    sku: str = ""

    @property
    def weight(self) -> float:
        return 0.5 ** (self.age / HALF_LIFE)


Key = tuple[str, ...]  # node: (n,); nic: (n,); link: (x, y); trunk: (level, ga, gb)


@dataclass(frozen=True)
class Effect:
    """One effect's estimate: how much slower (log scale, <= 0) and how sure."""

    kind: str
    key: Key
    estimate: float
    se: float  # conditional standard error (the other effects at their estimates)
    jobs: int  # jobs it rests on (all sweeps)
    tonight: int  # of those, tonight's
    past: float = 0.0  # a link's reading on the past sweeps' jobs (with its change since)
    z: float = 0.0  # evidence that it is slower than the tolerance (0: not a candidate)
    p: float = 1.0
    q: float = 1.0  # p adjusted for every effect tested (Benjamini-Hochberg)
    aside: int = 0  # its slowest jobs of tonight's that p stands without (transients')
    # q with none of its jobs set aside: a fault as likely as not on all it was seen in is
    # said (suspect, exit 5) when the rounds run out, not judged healthy, even where it is
    # not flagged on the jobs transients could not have made
    q_all: float = 1.0
    flagged: bool = False

    @property
    def ratio(self) -> float:
        return math.exp(self.estimate)

    @property
    def lower(self) -> float:
        """The slowest it may be (one-sided 95%), as a share of the level."""
        return math.exp(min(0.0, self.estimate - Z_HEALTHY * self.se))

    def within(self) -> float:
        """The slowdown it is judged to be within (1 - lower)."""
        return 1 - self.lower

    def text(self) -> str:
        aside = f", q {self.q:.2g} without its {self.aside} slowest (transients')"
        return (
            f"{self.subject()}: {self.ratio:.0%} of the level (95% >= {self.lower:.0%}), "
            f"{self.jobs} jobs ({self.tonight} tonight), z {self.z:.1f}"
        ) + (aside if self.aside else "")

    def subject(self) -> str:
        """The effect in words: what is slow."""
        if self.kind == "node":
            return f"{self.key[0]} slow alone and in pairs (the node itself)"
        if self.kind == "nic":
            return f"{self.key[0]} slow in its pairs only (its network)"
        if self.kind == "link":
            return f"link {self.key[0]} <-> {self.key[1]}"
        return f"trunk {self.key[0]} {self.key[1]} <-> {self.key[2]}"


@dataclass
class Fit:
    """The fitted model: levels, loads, every effect, the noise, and each job's deficit."""

    sigma: float
    threshold: float  # log(1 - tolerance)
    effects: dict[tuple[str, Key], Effect]
    levels: dict[tuple[int, SweepPhase, str], float]  # (age, phase, sku) -> log GB/s
    loads: dict[tuple[int, int], float]  # (age, round) -> log factor
    deficits: list[float]  # per observation: log(score) - level - load (failed: FAILED)
    jobs: int = 0  # tonight's jobs fitted
    tested: int = 0  # effects tested (false-discovery rate over these)
    obs: list[Obs] = field(default_factory=list)
    # per observation: slower than the fit by more than the loss's quadratic zone (a job the
    # effects leave unexplained: measured again where it can be)
    unexplained: list[bool] = field(default_factory=list)

    def effect(self, kind: str, key: Key) -> Effect | None:
        return self.effects.get((kind, key))

    def of_kind(self, kind: str) -> list[Effect]:
        return [e for (k, _), e in self.effects.items() if k == kind]

    def level(self, phase: SweepPhase, sku: str = "") -> float | None:
        v = self.levels.get((0, phase, sku))
        return None if v is None else math.exp(v)


def pair(x: str, y: str) -> tuple[str, str]:
    return (x, y) if x < y else (y, x)


def trunk_keys(x: str, y: str, topology: Topology) -> list[Key]:
    """The pairs of groups a job between x and y crosses, one per level that splits them."""
    out = []
    for level in topology.levels:
        gx, gy = topology.group(x, level), topology.group(y, level)
        if gx is not None and gy is not None and gx != gy:
            out.append((level, min(gx, gy), max(gx, gy)))
    return out
