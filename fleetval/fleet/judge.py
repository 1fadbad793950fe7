"""Judge each measured job, then what the jobs say about each node and link.

A job's score is GB/s (higher is better). It is slow when it failed, when it is below its
SKU's floor, or when it is below the fleet's own median by more than the noise allows:
`noise_sigmas` times the spread (MAD) of the same phase in the same round (log scale, so
a large difference is still judged when the noise is large), and never less than the
configured tolerance. A job below the tolerance but within the noise is `unclear`: neither
slow nor fast. Nothing is drained or confirmed on an unclear job. A slow job within one
noise unit below the threshold (`Reference.margin`) is `marginal`: slow, so not fast and
measured again, but no evidence to drain a node or confirm a link on (`Judged.firm`). The
median is the level of the job's own round, from the controls measured beside it
(`references`); a job in a round with no control is unclear too.

What a node is follows from the jobs it was in (`assess`):
- its own (alone) job failed, or was slow (firm) twice: bad;
- slow or unclear alone, never fast alone: pending (measure alone again);
- in a fast pair: good (its NIC and that link carry full speed); only good nodes are
  references for re-pairing, so a node that failed its own phase never is one;
- no fast pair, slow (firm) with two different partners, one of them good: bad;
- otherwise, if in no fast pair: pending (re-pair with a good node).
A slow pair of two good nodes names the link; two firm slow measurements of it make it bad
(across two groups: where another crossing of them was fast, or none was measured).
Jobs across two topology groups that are slow while jobs inside each group are fast name
a trunk (`Trunk`): those jobs are evidence against no node and no link.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetval.fleet.settings import Floor, SweepSettings
from fleetval.fleet.topology import NO_TOPOLOGY, Topology
from fleetval.text import human_bytes
from fleetval.vocab import SweepPhase

Pair = tuple[str, str]
MAD_TO_SIGMA = 1.4826  # a normal distribution's sigma from its median absolute deviation


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
class Reference:
    """The fleet's own level for one phase and SKU, with the noise measured beside it."""

    phase: SweepPhase
    sku: str
    median: float
    noise: float  # relative sigma (MAD-based) of the round's jobs
    tolerance: float  # what "slow" means here: max(least, 1 - exp(-noise_sigmas * noise))
    count: int
    round: int
    least: float = 0.0  # settings.tolerance: below this, unclear where not slow
    main: Reference | None = None  # a small round: the main level its controls scaled
    margin: float = 0.0  # one noise unit (log scale) below the threshold: `firm`

    @property
    def factor(self) -> float | None:
        """This round's level over the main round's (None: judged on its own)."""
        return self.median / self.main.median if self.main and self.main.median > 0 else None

    @property
    def threshold(self) -> float:
        return self.median * (1 - self.tolerance)

    @property
    def clear(self) -> float:
        """At or above this, a job is fast; between `threshold` and here, unclear."""
        return self.median * (1 - self.least)

    @property
    def firm(self) -> float:
        """Below this, a slow job is evidence to drain or confirm on; between here and
        `threshold`, marginal: measured again (`Judged.firm`)."""
        return self.threshold * math.exp(-self.margin)

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase.value,
            "sku": self.sku,
            "median_gbps": self.median,
            "noise": self.noise,
            "tolerance": self.tolerance,
            "jobs": self.count,
            "round": self.round,
            "scaled_from_round": self.main.round if self.main else None,
            "margin": self.margin,
        }


@dataclass(frozen=True)
class Judged:
    """A measurement with its verdict and the reason in words."""

    m: Measurement
    slow: bool
    why: str
    ratio: float | None = None  # score / fleet median
    unclear: bool = False  # below the tolerance, within the round's noise: not judged
    marginal: bool = False  # slow, within one noise unit below the threshold

    @property
    def fast(self) -> bool:
        return not self.slow and not self.unclear

    @property
    def firm(self) -> bool:
        """Slow by more than the noise past the threshold (or failed, or under a floor):
        what drains a node or confirms a link. A marginal job only has it measured again."""
        return self.slow and not self.marginal

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.m.job.nodes


def sku_key(nodes: Iterable[str], skus: Mapping[str, str]) -> str:
    return "+".join(sorted({skus.get(n, "") for n in nodes}))


RefKey = tuple[SweepPhase, str, int]  # phase, SKU, round (0: the phase's main round)
ROUND_REFERENCE_JOBS = 4  # a round with this many jobs of a kind is judged against itself
REMEASURE = ("alone again", "confirm link", "re-pair")  # `Planned.why` of a suspect's job


def remeasures(job: Planned) -> bool:
    """A job that measures a suspect again: never part of the level it is judged against."""
    return job.why.startswith(REMEASURE)


def references(
    measurements: Sequence[Measurement], skus: Mapping[str, str], settings: SweepSettings
) -> dict[RefKey, Reference]:
    """Per phase and SKU: the level and noise of every round from its controls (its jobs
    that measure no suspect), and (round 0) of the round with the most controls, the main
    level. A round with none has no level: its jobs are not judged (`judge`).

    NOTE: a round's jobs run at the same time, under the same load; judging them against
    each other, not a level from minutes before, keeps a change of load from reading as a
    slow node. Jobs that measure a suspect again are left out of the level (a round of
    suspects would judge them against themselves); controls measured beside them (idle
    proven-good pairs, jobs inside a group, nodes alone) make the round's level. A round
    with fewer than `ROUND_REFERENCE_JOBS` controls (late re-pairs on a small fleet) is the
    main level scaled by them (`_scaled`).
    """
    groups: dict[tuple[SweepPhase, str, int], list[float]] = {}
    for m in measurements:
        if m.score is not None and not remeasures(m.job):
            key = (m.job.phase, sku_key(m.job.nodes, skus), m.job.round)
            groups.setdefault(key, []).append(m.score)
    measured = [
        _reference(*key, scores, settings, None).noise
        for key, scores in groups.items()
        if len(scores) >= settings.noise_jobs
    ]
    noise = max(measured) if measured else None
    out: dict[RefKey, Reference] = {}
    for (phase, sku, rnd), scores in sorted(groups.items(), key=lambda kv: kv[0][2]):
        ref = out[(phase, sku, rnd)] = _reference(phase, sku, rnd, scores, settings, noise)
        if (phase, sku, 0) not in out or ref.count > out[(phase, sku, 0)].count:
            out[(phase, sku, 0)] = ref
    for (phase, sku, rnd), scores in groups.items():
        main = out[(phase, sku, 0)]
        if rnd != main.round and len(scores) < ROUND_REFERENCE_JOBS:
            out[(phase, sku, rnd)] = _scaled(main, rnd, scores, settings, noise)
    return out


def _scaled(
    main: Reference, rnd: int, scores: list[float], settings: SweepSettings, noise: float | None
) -> Reference:
    """A round with one to three controls: the main level times their faster half's median
    ratio to it, so a machine slowed (or sped up) as a whole between rounds moves the level
    with it, and one slow control of two or three does not (a fault is one-sided). Judged
    with the sweep's noise, as any round too small to measure its own (`_reference`)."""
    return dataclasses.replace(
        _reference(main.phase, main.sku, rnd, scores, settings, noise), main=main
    )


def _reference(
    phase: SweepPhase,
    sku: str,
    rnd: int,
    scores: list[float],
    settings: SweepSettings,
    sweep_noise: float | None,
) -> Reference:
    """The healthy level from the faster half of the jobs: slowness is one-sided (a fault
    never speeds a job up), so up to half the jobs may be slow without moving it.

    NOTE: level and noise are the faster half's median and MAD; the MAD of a normal's upper
    half is about half the whole's, hence the factor of 2 (calibrated in the unit tests).
    The tolerance is `noise_sigmas` sigmas on a log scale (1 - e^-ks), so it never reaches
    100%: a job at a tenth of the level is slow even where the noise is 40%. A round too
    small to measure its noise (fewer than `noise_jobs` jobs) takes the largest noise the
    sweep measured where it could (`sweep_noise`); with none, exactly `max_tolerance`.
    Its own spread is not used then: from the faster half of three to seven jobs it is a
    guess (four jobs of one clean round read 40% and 96% on the same fleet), and a guess
    that widens the tolerance to 98% hides a twentyfold slow link.

    The margin (`Reference.firm`) is one unit of the noise judged with, on the same log
    scale, so the line a node is drained on sits one sigma past the line it is suspected
    on. A healthy job just under the threshold by noise and a transient together is then
    measured again, not drain evidence: with 3.6% noise and the 15% tolerance, a re-pair
    at 86.41 against a threshold of 86.47 (a -1.5 sigma draw and a 9.6% transient) drained
    one end of a slow link and hid the link (1,024 nodes in 64 racks, seed 16).
    NOTE: at most the noise the configured tolerance stands for (`tolerance` as
    `noise_sigmas` sigmas: 4% at 15%). Where the noise is larger the threshold already
    moved out with it, and a whole sigma more (e^-0.6 at 60% noise) left a node at a
    twentieth of the level marginal, measured again every round and never drained; nor
    is a small round's guessed spread (`max_tolerance`) a margin.
    """
    top = sorted(scores)[len(scores) // 2 :]
    med = statistics.median(top)
    mad = statistics.median(abs(s - med) for s in top)
    noise = 2 * MAD_TO_SIGMA * mad / med if med > 0 else 0.0
    small = len(scores) < settings.noise_jobs
    if small and sweep_noise is None:
        tol = settings.max_tolerance
    else:
        noise = sweep_noise if small and sweep_noise is not None else noise
        tol = max(settings.tolerance, 1 - math.exp(-settings.noise_sigmas * noise))
    margin = min(noise, -math.log(1 - settings.tolerance) / settings.noise_sigmas)
    return Reference(
        phase, sku, med, noise, tol, len(scores), rnd, settings.tolerance, margin=margin
    )


def judge(
    m: Measurement,
    refs: Mapping[RefKey, Reference],
    skus: Mapping[str, str],
    floors: Sequence[Floor],
) -> Judged:
    """Slow or not, and why: failure, a SKU floor, then the fleet's own level."""
    if m.failed:
        return Judged(m, True, f"job failed: {m.detail}")
    if m.score is None:  # e.g. one rank alone: its collectives cross no link
        return Judged(m, False, "nothing timed to judge (its own checks passed)")
    for f in floors:
        floor = f.alone_gbps if m.job.phase == SweepPhase.ALONE else f.pair_gbps
        size = m.by_size.get(f.size_bytes)
        sku_ok = all(f.sku.lower() in skus.get(n, "").lower() for n in m.job.nodes)
        if floor is not None and size is not None and sku_ok and size < floor:
            return Judged(
                m, True, f"{size:.4g} GB/s < {f.sku} floor {floor:g} at {human_bytes(f.size_bytes)}"
            )
    key = (m.job.phase, sku_key(m.job.nodes, skus))
    ref = refs.get((*key, m.job.round))
    if ref is None:  # NOTE: a level from another round was measured under another load
        main = refs.get((*key, 0))
        other = (
            f"; round {main.round}'s level {main.median:.4g} is from another load" if main else ""
        )
        why = f"{m.score:.4g} GB/s: no control measured beside it in round {m.job.round}{other}"
        return Judged(m, False, f"{why}: not judged", None, unclear=True)
    ratio = m.score / ref.median if ref.median > 0 else None
    slow = m.score < ref.threshold
    unclear = not slow and m.score < ref.clear
    marginal = slow and m.score >= ref.firm
    sign = "<" if slow else ">="
    within = f", within the noise: unclear below {ref.clear:.4g}" if unclear else ""
    if marginal:
        within = f", within one noise unit of it (>= {ref.firm:.4g}): measured again"
    return Judged(
        m,
        slow,
        f"{m.score:.4g} GB/s {sign} {ref.threshold:.4g} ({_level(ref)} - {ref.tolerance:.0%}, "
        f"noise {ref.noise:.1%} over {ref.count} jobs{within})",
        ratio,
        unclear,
        marginal,
    )


def _level(ref: Reference) -> str:
    level = f"round {ref.round} level {ref.median:.4g}"
    if ref.main is None or ref.factor is None:
        return level
    return f"{level}: round {ref.main.round}'s {ref.main.median:.4g} x {ref.factor:.2f} by its controls"


@dataclass(frozen=True)
class Trunk:
    """Jobs across groups `a` and `b` (at `level`) slow in two node-disjoint pairs or more,
    their nodes clean elsewhere; confirmed once a job inside each group is fast as well."""

    level: str
    a: str
    b: str
    slow: tuple[Judged, ...]
    fast: tuple[Judged, ...]  # across the same two groups
    inside_a: tuple[Judged, ...]  # fast jobs inside a
    inside_b: tuple[Judged, ...]
    across: tuple[Judged, ...] = ()  # every slow crossing, its nodes proven or not

    @property
    def confirmed(self) -> bool:
        return bool(self.inside_a and self.inside_b)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.level, self.a, self.b)

    @property
    def evidence(self) -> list[str]:
        return [_line(j) for j in (*self.slow, *self.fast, *self.inside_a, *self.inside_b)]


@dataclass
class Assessment:
    """What the judged jobs so far say about every node, link and trunk."""

    bad: dict[str, list[str]] = field(default_factory=dict)  # node -> evidence
    good: set[str] = field(default_factory=set)
    pending_alone: set[str] = field(default_factory=set)
    pending_pair: set[str] = field(default_factory=set)
    unclear: set[str] = field(default_factory=set)  # pending on unclear jobs only
    bad_links: dict[Pair, list[str]] = field(default_factory=dict)
    pending_links: dict[Pair, list[str]] = field(default_factory=dict)
    trunks: dict[tuple[str, str, str], Trunk] = field(default_factory=dict)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # node -> every job it was in
    slow_count: dict[str, int] = field(default_factory=dict)
    paired: dict[str, set[str]] = field(default_factory=dict)  # partners measured with
    links: dict[Pair, list[Judged]] = field(default_factory=dict)  # every pair job, by link


def _line(j: Judged) -> str:
    return f"round {j.m.job.round} {j.m.job.phase.value} [{', '.join(j.nodes)}]: {j.why}"


def assess(
    nodes: Sequence[str], judged: Sequence[Judged], topology: Topology = NO_TOPOLOGY
) -> Assessment:
    """Node, link and trunk states from every judged job (see the module docstring)."""
    a = Assessment()
    alone: dict[str, list[Judged]] = {n: [] for n in nodes}
    for j in judged:
        for n in j.nodes:
            a.evidence.setdefault(n, []).append(_line(j))
            a.slow_count[n] = a.slow_count.get(n, 0) + j.slow
        if j.m.job.phase == SweepPhase.ALONE:
            alone[j.nodes[0]].append(j)
        else:
            x, y = j.nodes
            a.links.setdefault(_pair(x, y), []).append(j)
            a.paired.setdefault(x, set()).add(y)
            a.paired.setdefault(y, set()).add(x)
    alone_ok = _alone(a, nodes, alone)
    a.trunks = trunks(a.links, topology, alone_ok)
    # NOTE: every slow crossing of a slow trunk is the trunk's, also of nodes not yet proven
    # (a node slow only across it is not bad; a bad NIC is slow inside its group too).
    on_trunk = {id(j) for t in a.trunks.values() for j in t.across}
    pairs: dict[str, list[tuple[str, Judged]]] = {n: [] for n in nodes}
    for (x, y), js in a.links.items():
        for j in js:
            if id(j) not in on_trunk:
                pairs[x].append((y, j))
                pairs[y].append((x, j))
    a.good = {n for n in alone_ok if any(j.fast for _, j in pairs[n])}
    for n in sorted(alone_ok - a.good):
        # NOTE: firm only: a partner slow within the noise margin is a reason to re-pair
        # with another proven-good node, not the second of two partners that drain it.
        firm = [(p, j) for p, j in pairs[n] if j.firm]
        if len({p for p, _ in firm}) >= 2 and any(p in a.good for p, _ in firm):
            a.bad[n] = [_line(j) for _, j in firm]
        else:
            a.pending_pair.add(n)
            if not firm and any(j.unclear or j.marginal for _, j in pairs[n]):
                a.unclear.add(n)
    _links(a, on_trunk, topology)
    return a


def _alone(a: Assessment, nodes: Sequence[str], alone: dict[str, list[Judged]]) -> set[str]:
    """Bad (failed, or firm slow twice), pending (never fast alone) or fine on its own."""
    ok = set()
    for n in nodes:
        firm = [j for j in alone[n] if j.firm]
        if any(j.m.failed for j in firm) or len(firm) >= 2:
            a.bad[n] = [_line(j) for j in firm]
        elif alone[n] and not any(j.fast for j in alone[n]):
            a.pending_alone.add(n)
            if not firm:
                a.unclear.add(n)
        else:
            ok.add(n)
    return ok


def _pair(x: str, y: str) -> Pair:
    return (x, y) if x < y else (y, x)


def trunks(
    links: Mapping[Pair, list[Judged]], topology: Topology, clean: set[str]
) -> dict[tuple[str, str, str], Trunk]:
    """Per level, coarsest first: pairs of groups whose crossing jobs are slow in two
    node-disjoint pairs or more, of nodes fine alone and fast in some pair (so neither end
    is a bad node), at least two thirds of the decided crossings slow. Jobs on a trunk
    named at a coarser level are not looked at again at a finer one."""
    ok = clean & {n for pair, js in links.items() if any(j.fast for j in js) for n in pair}
    out: dict[tuple[str, str, str], Trunk] = {}
    taken: set[int] = set()
    for level in topology.levels:
        cross: dict[tuple[str, str], list[Judged]] = {}
        inside: dict[str, list[Judged]] = {}
        for (x, y), js in links.items():
            gx, gy = topology.group(x, level), topology.group(y, level)
            if gx is None or gy is None:
                continue
            for j in js:
                if gx == gy and j.fast:
                    inside.setdefault(gx, []).append(j)
                elif gx != gy and id(j) not in taken:
                    cross.setdefault((min(gx, gy), max(gx, gy)), []).append(j)
        for (ga, gb), js in sorted(cross.items()):
            slow = [j for j in js if j.slow and set(j.nodes) <= ok]
            fast = [j for j in js if j.fast]
            if not _disjoint_two(slow) or len(slow) < 2 * len(fast):
                continue
            t = Trunk(level, ga, gb, tuple(slow), tuple(fast), tuple(inside.get(ga, ())),
                      tuple(inside.get(gb, ())), tuple(j for j in js if j.slow))  # fmt: skip
            out[t.key] = t
            taken |= {id(j) for j in js}
    return out


def _trunk_open(a: Assessment, pair: Pair, on_trunk: set[int], topology: Topology) -> bool:
    """Whether the groups `pair` crosses were crossed by other good nodes, and never fast:
    the slow link may then be their slow trunk, which a second crossing that read within
    the noise did not name (`trunks`); a crossing measured fast tells it is the link.

    NOTE: 15% noise, seed 6 of the fabric bench: a trunk at 43% first crossed in round 13,
    its check's second crossing unclear (56% of the level), was named as a link.
    """
    split = topology.split(*pair)
    if split is None:
        return False
    level, ga, gb = split
    others = [
        j
        for p, js in a.links.items()
        if not set(p) & set(pair) and set(p) <= a.good
        and {topology.group(p[0], level), topology.group(p[1], level)} == {ga, gb}
        for j in js
        if id(j) not in on_trunk
    ]  # fmt: skip
    return bool(others) and not any(j.fast for j in others)


def _disjoint_two(js: Sequence[Judged]) -> bool:
    return any(not set(x.nodes) & set(y.nodes) for i, x in enumerate(js) for y in js[i + 1 :])


def _links(a: Assessment, on_trunk: set[int], topology: Topology) -> None:
    """Slow pairs of two good nodes: the link between them, bad once seen firm slow twice
    (unclear and marginal measurements are measured again, never confirm); jobs on a
    trunk are the trunk's. A link across two groups whose other crossings by good nodes
    were none of them fast is measured again too (`_trunk_open`)."""
    for pair, js in sorted(a.links.items()):
        js = [j for j in js if id(j) not in on_trunk]
        if not all(n in a.good for n in pair) or all(j.fast for j in js):
            continue
        firm = [j for j in js if j.firm]
        # Fast elsewhere, slow together. Once slow (or unclear) and never fast: again.
        if len(firm) >= 2 and not _trunk_open(a, pair, on_trunk, topology):
            a.bad_links[pair] = [_line(j) for j in js]
        elif len(firm) >= 2 or not any(j.fast for j in js):
            a.pending_links[pair] = [_line(j) for j in js]
