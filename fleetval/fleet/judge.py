"""What the jobs so far say about every node, link and trunk: the model's reading, in the
terms the planner and the verdict use.

Every measured job of the sweep (and of the fleet's recent sweeps) goes into one fit
(`fleetval.fleet.model`). From it:
- a node is bad when its own effect (slow in every job) or its network's (slow in its
  pairs) is flagged; suspect while one of them is estimated slower than the tolerance but
  not yet proven (measured again: alone for its own effect, with a proven-good partner for
  its network); good when both are judged no slower than the tolerance (or, where the noise
  allows no finer, `max_tolerance`); otherwise waiting for evidence (paired again);
- a link is bad when its effect is flagged, pending while estimated slow but not proven;
- a trunk (two topology groups) is bad when its effect is flagged, pending while
  estimated slow. The jobs a trunk explains are never counted against its nodes or links:
  the fit gives them to the one effect that explains them all.
Each job is also labelled against the level and load of its round (fast, slow, unclear,
failed): what the coverage and the planner's choice of controls read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from fleetval.fleet.effects import HUBER, Z_HEALTHY, Effect, Fit, Obs, pair, trunk_keys
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.topology import NO_TOPOLOGY, Topology
from fleetval.vocab import SweepPhase

Pair = tuple[str, str]


@dataclass(frozen=True)
class Planned:
    """One job of a round: a node alone, or two nodes together."""

    round: int
    phase: SweepPhase
    nodes: tuple[str, ...]
    why: str = ""  # "alone again", "re-pair with proven-good node-7", "confirm link" ...


@dataclass(frozen=True)
class HwNote:
    """What a node's GPU hardware said in a job (the health check's rows): the action and why."""

    action: str  # fleetval.detect.hardware.Action's value: watch, reset GPU, reboot node, ...
    finding: str  # "Xid 79 (GPU has fallen off the bus) on GPU 3 (0000:1b:00)"
    drain: bool  # the action takes the node out of service

    def text(self) -> str:
        return f"hardware: {self.finding} -> {self.action}"


@dataclass(frozen=True)
class Measurement:
    """A measured job: its score (GB/s; None: failed, or nothing to score) and busbw per size."""

    job: Planned
    score: float | None
    by_size: Mapping[int, float] = field(default_factory=dict)
    detail: str = ""  # why the job failed
    hardware: Mapping[str, HwNote] = field(default_factory=dict)  # node -> what its GPUs said

    @property
    def failed(self) -> bool:
        return self.score is None and bool(self.detail)


@dataclass(frozen=True)
class Judged:
    """A measurement against its round's level and load: its deficit, and a label."""

    m: Measurement
    slow: bool
    why: str
    ratio: float | None = None  # score / (level x load)
    unclear: bool = False  # below the tolerance, within the noise

    @property
    def fast(self) -> bool:
        return not self.slow and not self.unclear

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.m.job.nodes


@dataclass(frozen=True)
class Level:
    """The fleet's level for one phase and SKU tonight, with the noise of the whole fit."""

    phase: SweepPhase
    sku: str
    median: float  # GB/s
    noise: float  # relative sigma of the residuals
    tolerance: float
    count: int

    def to_dict(self) -> LevelJson:
        return LevelJson(phase=self.phase.value, sku=self.sku, median_gbps=self.median,
                         noise=self.noise, tolerance=self.tolerance, jobs=self.count)  # fmt: skip


class LevelJson(TypedDict):
    phase: str
    sku: str
    median_gbps: float
    noise: float
    tolerance: float
    jobs: int


@dataclass(frozen=True)
class Trunk:
    """Two groups at one level whose crossings the fit finds slower than the tolerance."""

    level: str
    a: str
    b: str
    effect: Effect
    evidence: tuple[str, ...] = ()

    @property
    def confirmed(self) -> bool:
        return self.effect.flagged

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.level, self.a, self.b)


@dataclass
class Assessment:
    """What the model says so far about every node, link and trunk."""

    fit: Fit
    bad: dict[str, list[str]] = field(default_factory=dict)  # node -> evidence
    good: set[str] = field(default_factory=set)
    pending_alone: set[str] = field(default_factory=set)
    pending_pair: set[str] = field(default_factory=set)
    unclear: set[str] = field(default_factory=set)  # waiting on evidence, nothing seen slow
    bad_links: dict[Pair, list[str]] = field(default_factory=dict)
    pending_links: dict[Pair, list[str]] = field(default_factory=dict)
    # links slow in past sweeps, none of tonight's jobs on them yet: measured again where free
    recheck_links: set[Pair] = field(default_factory=set)
    # pairs of good nodes with a job the fit leaves unexplained: measured again where free
    odd_links: dict[Pair, list[str]] = field(default_factory=dict)
    trunks: dict[tuple[str, str, str], Trunk] = field(default_factory=dict)
    # pairs of groups not estimated slow whose crossings tonight bound them no better than
    # `max_tolerance`: crossed again beside jobs inside
    open_trunks: set[tuple[str, ...]] = field(default_factory=set)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # node -> every job it was in
    paired: dict[str, set[str]] = field(default_factory=dict)  # partners measured with
    links: dict[Pair, list[Judged]] = field(default_factory=dict)  # every pair job, by link
    judged: list[Judged] = field(default_factory=list)
    within: dict[str, float] = field(default_factory=dict)  # good node -> slowdown judged within
    deficits: dict[str, dict[SweepPhase, list[float]]] = field(default_factory=dict)  # tonight's

    def levels(self, skus: Mapping[str, str]) -> list[Level]:
        out = []
        for (age, phase, sku), _ in sorted(self.fit.levels.items(), key=lambda kv: kv[0][1].value):
            if age == 0:
                count = sum(1 for j in self.judged if j.m.job.phase == phase
                            and sku_key(j.nodes, skus) == sku)  # fmt: skip
                median = self.fit.level(phase, sku) or 0.0
                tol = 1 - math.exp(self.fit.threshold)
                out.append(Level(phase, sku, median, self.fit.sigma, tol, count))
        return out


def sku_key(nodes: Sequence[str], skus: Mapping[str, str]) -> str:
    return "+".join(sorted({skus.get(n, "") for n in nodes}))


def observations(
    measurements: Sequence[Measurement], skus: Mapping[str, str], age: int = 0
) -> list[Obs]:
    """The jobs the model can read: timed or failed (a job with nothing to time is not)."""
    return [
        Obs(
            m.job.phase,
            m.job.nodes,
            m.score,
            m.failed,
            m.job.round,
            age,
            sku_key(m.job.nodes, skus),
        )
        for m in measurements
        if m.score is not None or m.failed
    ]


def assess(
    nodes: Sequence[str],
    measurements: Sequence[Measurement],
    settings: SweepSettings,
    topology: Topology = NO_TOPOLOGY,
    *,
    skus: Mapping[str, str] | None = None,
    past: Sequence[Obs] = (),
) -> Assessment:
    """Fit every job (tonight's and `past`) and read nodes, links and trunks off it."""
    from fleetval.fleet.model import fit  # NOTE: numpy and scipy only where a sweep is judged

    skus = skus or {}
    tonight = observations(measurements, skus)
    f = fit([*tonight, *past], settings, topology)
    a = Assessment(f)
    a.judged = _labels(measurements, f, skus)
    for j in a.judged:
        for n in j.nodes:
            a.evidence.setdefault(n, []).append(line(j))
        if j.m.job.phase == SweepPhase.PAIR:
            x, y = j.nodes
            a.links.setdefault(pair(x, y), []).append(j)
            a.paired.setdefault(x, set()).add(y)
            a.paired.setdefault(y, set()).add(x)
    alone = {o.nodes[0] for o in tonight if o.phase == SweepPhase.ALONE}
    for o, d in zip(f.obs, f.deficits, strict=True):
        if o.age == 0 and not o.failed:
            for n in o.nodes:
                a.deficits.setdefault(n, {}).setdefault(o.phase, []).append(d)
    for n in nodes:
        _node(a, n, settings, measured_alone=n in alone)
    for e in f.of_kind("link"):
        x, y = e.key
        jobs = [line(j) for j in a.links.get((x, y), [])]
        if e.flagged and x not in a.bad and y not in a.bad:
            a.bad_links[(x, y)] = [e.text(), *jobs]
        elif suspect(e, f) and x in a.good and y in a.good:
            # NOTE: while an end is itself in doubt, its re-pair with a proven-good node
            # is what tells the two apart; measuring the link again would not
            a.pending_links[(x, y)] = [e.text(), *jobs]
        elif not e.tonight and e.past < f.threshold and x in a.good and y in a.good:
            # NOTE: with no job of tonight's, the fit may put a past slowness on the link's
            # change since then as well as on the link: the one costs what the other does.
            # Measured again, or the coverage comes back to it only sweeps later (a 5x link
            # measured in one sweep of seven, and never named)
            a.recheck_links.add((x, y))
    # NOTE: a job of two good nodes the fit leaves unexplained (its link fast in past sweeps,
    # slow tonight once: the change is not worth its price on one job) is measured again,
    # once: a second job says whether the link or the first job was at fault. Only the one
    # slow job of each node: a node slow in several (throttled from outside, fast in one
    # job) is re-paired as a suspect, or its slow jobs were each taken for a slow link
    for o, odd in zip(f.obs, f.unexplained, strict=True):
        if (
            odd
            and o.age == 0
            and len(o.nodes) == 2
            and set(o.nodes) <= a.good
            and all(_far_slower(a, n, f) <= 1 for n in o.nodes)
        ):
            p = pair(*o.nodes)
            jobs = [line(j) for j in a.links.get(p, [])]
            if p not in a.bad_links and p not in a.pending_links and len(jobs) < 2:
                a.odd_links[p] = ["slower than the fit explains: measured again", *jobs]
    for e in f.of_kind("trunk"):
        if e.flagged or suspect(e, f):
            level, ga, gb = e.key
            crossing = [line(j) for p, js in a.links.items() if _crosses(p, e.key, topology)
                        for j in js]  # fmt: skip
            a.trunks[(level, ga, gb)] = Trunk(level, ga, gb, e, (e.text(), *crossing))
    _open_trunks(a, settings, topology)
    return a


def _open_trunks(a: Assessment, settings: SweepSettings, topology: Topology) -> None:
    """The pairs of groups whose crossings tonight leave them unbounded: no effect of a job
    is slower than the job, so a trunk is no slower than the mean of its fastest crossings
    (less the noise over the root of how many, as a node's bound); where that is worse than
    `max_tolerance`, what is open is measured. NOTE: a round of three slow crossings and one
    fast job inside was read as a slow round (its load), the trunk at 0, and it was never
    crossed again: the sweep ended with every node judged."""
    f = a.fit
    crossed: dict[tuple[str, ...], list[float]] = {}
    for o, d in zip(f.obs, f.deficits, strict=True):
        if o.age == 0 and not o.failed and len(o.nodes) == 2:
            for key in trunk_keys(*o.nodes, topology):
                crossed.setdefault(key, []).append(d)
    for key, ds in crossed.items():
        within = 1 - math.exp(min(0.0, _bound(ds, f.sigma)))
        if key not in a.trunks and within > settings.max_tolerance:
            a.open_trunks.add(key)


def _far_slower(a: Assessment, n: str, f: Fit) -> int:
    """Tonight's pair jobs of node n slower than the tolerance by more than `HUBER` noise
    units (what the noise does not make of a job)."""
    cut = f.threshold - HUBER * f.sigma
    return sum(d < cut for d in a.deficits.get(n, {}).get(SweepPhase.PAIR, []))


def suspect(e: Effect, f: Fit) -> bool:
    """Estimated slower than the tolerance, with at least one-sided 95% evidence of it: what
    is measured again. Below that evidence a slow estimate is the noise's (a node is then
    judged by the bound its fastest jobs give, `_within`), or another effect's to take
    (a slow pair of two new nodes: its link and both networks explain it alike, z 0)."""
    return e.estimate < f.threshold and e.z >= Z_HEALTHY


def _crosses(p: Pair, key: tuple[str, ...], topology: Topology) -> bool:
    level, ga, gb = key
    return {topology.group(p[0], level), topology.group(p[1], level)} == {ga, gb}


def _node(a: Assessment, n: str, settings: SweepSettings, *, measured_alone: bool) -> None:
    """Bad, suspect (alone or in pairs), good, or waiting: from its two effects. A node
    slow in every job is measured alone again where its alone jobs time anything (one rank
    per node times nothing alone: it is re-paired instead)."""
    f = a.fit
    own, net = f.effect("node", (n,)), f.effect("nic", (n,))
    flagged = [e for e in (own, net) if e is not None and e.flagged]
    if flagged:  # NOTE: on two of tonight's jobs or more (`model`): once is measured again
        # NOTE: the two are one test: only the one estimated slow is what it said
        slow = sorted((e for e in flagged if e.estimate < f.threshold), key=lambda e: e.estimate)
        a.bad[n] = [e.text() for e in slow] + a.evidence.get(n, [])
        return
    if own is not None and suspect(own, f):
        (a.pending_alone if measured_alone else a.pending_pair).add(n)
        return
    if net is not None and suspect(net, f):
        a.pending_pair.add(n)
        return
    within = bounded(a, n, settings)
    if within is not None:
        a.good.add(n)
        a.within[n] = within
        return
    a.pending_pair.add(n)
    a.unclear.add(n)


def bounded(a: Assessment, n: str, settings: SweepSettings) -> float | None:
    """The slowdown node n is judged within (95%), where its jobs bound it within what the
    noise allows at most (`max_tolerance`) and its fastest pair job is within the tolerance
    up to one job's noise (a node whose every pair was slow waits for a re-pair, however
    small the noise); None where they do not."""
    f = a.fit
    within = _within(a, n)
    best = max(a.deficits.get(n, {}).get(SweepPhase.PAIR, [-math.inf]))
    fast = best >= f.threshold - Z_HEALTHY * f.sigma
    net = f.effect("nic", (n,))
    return within if net is not None and fast and within <= settings.max_tolerance else None


def _within(a: Assessment, n: str) -> float:
    """The slowdown node n is judged within (95%). Every effect is at most 0, so no effect of
    a job is slower than the job itself: the node's own effect is at least the mean of any of
    its jobs, its network's the mean of any of its pair jobs. The bound is the best over its
    k fastest jobs of their mean less 1.645 noise units over sqrt(k)."""
    jobs = a.deficits.get(n, {})
    pair = jobs.get(SweepPhase.PAIR, [])
    own = _bound([*pair, *jobs.get(SweepPhase.ALONE, [])], a.fit.sigma)
    return 1 - math.exp(min(0.0, own, _bound(pair, a.fit.sigma)))


def _bound(deficits: list[float], sigma: float) -> float:
    best, total = -math.inf, 0.0
    for k, d in enumerate(sorted(deficits, reverse=True), 1):
        total += d
        best = max(best, total / k - Z_HEALTHY * sigma / math.sqrt(k))
    return best


def _labels(measurements: Sequence[Measurement], f: Fit, skus: Mapping[str, str]) -> list[Judged]:
    """Each of tonight's jobs against its round's level and load (fitted over every job)."""
    out = []
    deficits = iter(f.deficits)
    for m in measurements:
        if m.failed:
            next(deficits)
            out.append(Judged(m, True, f"job failed: {m.detail}"))
            continue
        if m.score is None:  # e.g. one rank alone: its collectives cross no link
            out.append(Judged(m, False, "nothing timed to judge (its own checks passed)"))
            continue
        d = next(deficits)
        level = (f.level(m.job.phase, sku_key(m.job.nodes, skus)) or 0.0) * math.exp(
            f.loads.get((0, m.job.round), 0.0)
        )
        below = d < f.threshold
        slow = below and f.threshold - d > 2 * f.sigma
        unclear = below and not slow
        word = "slow" if slow else "within the noise of the tolerance" if unclear else "fast"
        why = (
            f"{m.score:.4g} GB/s, {math.exp(d):.0%} of round {m.job.round}'s level "
            f"{level:.4g} (noise {f.sigma:.1%}): {word}"
        )
        out.append(Judged(m, slow, why, math.exp(d), unclear))
    return out


def line(j: Judged) -> str:
    return f"round {j.m.job.round} {j.m.job.phase.value} [{', '.join(j.nodes)}]: {j.why}"


def remeasures(job: Planned) -> bool:
    """A job that measures a suspect again (the planner keeps controls beside these)."""
    return job.why.startswith(("alone again", "confirm link", "re-pair"))
