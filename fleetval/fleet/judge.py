"""Judge each measured job, then what the jobs say about each node and link.

A job's score is GB/s (higher is better). It is slow when it failed, when it is below its
SKU's floor, or when it is below the fleet's own median by more than the tolerance: the
larger of the configured share and `noise_sigmas` times the spread (MAD) of the same
phase in the same sweep, so the noise is measured where the verdict is made.

What a node is follows from the jobs it was in (`assess`):
- its own (alone) job failed, or was slow twice: bad;
- slow alone once and not yet measured again: pending (measure alone again);
- in a fast pair: good (its NIC and that link carry full speed); only good nodes are
  references for re-pairing, so a node that failed its own phase never is one;
- no fast pair, slow with two different partners, one of them good: bad;
- otherwise, if in no fast pair: pending (re-pair with a good node).
A slow pair of two good nodes names the link; two slow measurements of it make it bad.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetval.fleet.settings import Floor, SweepSettings
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
class Measurement:
    """A measured job: its score (GB/s; None: failed, or nothing to score) and busbw per size."""

    job: Planned
    score: float | None
    by_size: Mapping[int, float] = field(default_factory=dict)
    detail: str = ""  # why the job failed

    @property
    def failed(self) -> bool:
        return self.score is None and bool(self.detail)


@dataclass(frozen=True)
class Reference:
    """The fleet's own level for one phase and SKU, with the noise measured beside it."""

    phase: SweepPhase
    sku: str
    median: float
    noise: float  # relative sigma (MAD-based) of the phase's main round
    tolerance: float  # what "slow" means here: max(settings.tolerance, noise_sigmas * noise)
    count: int
    round: int

    @property
    def threshold(self) -> float:
        return self.median * (1 - self.tolerance)

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase.value,
            "sku": self.sku,
            "median_gbps": self.median,
            "noise": self.noise,
            "tolerance": self.tolerance,
            "jobs": self.count,
            "round": self.round,
        }


@dataclass(frozen=True)
class Judged:
    """A measurement with its verdict and the reason in words."""

    m: Measurement
    slow: bool
    why: str
    ratio: float | None = None  # score / fleet median

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.m.job.nodes


def sku_key(nodes: Iterable[str], skus: Mapping[str, str]) -> str:
    return "+".join(sorted({skus.get(n, "") for n in nodes}))


RefKey = tuple[SweepPhase, str, int]  # phase, SKU, round (0: the phase's main round)
ROUND_REFERENCE_JOBS = 4  # a round with this many jobs of a kind is judged against itself


def references(
    measurements: Sequence[Measurement], skus: Mapping[str, str], settings: SweepSettings
) -> dict[RefKey, Reference]:
    """Per phase and SKU: the level and noise of each round with enough such jobs, and
    (round 0) of the round that measured the most, for rounds too small to judge alone.

    NOTE: a round's jobs run at the same time, under the same load; judging them against
    each other, not a level from minutes before, keeps a change of load from reading as a
    slow node. Idle proven-good nodes run control pairs so re-pair rounds have peers.
    """
    groups: dict[tuple[SweepPhase, str, int], list[float]] = {}
    for m in measurements:
        if m.score is not None:
            key = (m.job.phase, sku_key(m.job.nodes, skus), m.job.round)
            groups.setdefault(key, []).append(m.score)
    out: dict[RefKey, Reference] = {}
    for (phase, sku, rnd), scores in sorted(groups.items(), key=lambda kv: kv[0][2]):
        ref = _reference(phase, sku, rnd, scores, settings)
        if len(scores) >= ROUND_REFERENCE_JOBS:
            out[(phase, sku, rnd)] = ref
        if len(scores) > out.get((phase, sku, 0), ref).count or (phase, sku, 0) not in out:
            out[(phase, sku, 0)] = ref
    return out


def _reference(
    phase: SweepPhase, sku: str, rnd: int, scores: list[float], settings: SweepSettings
) -> Reference:
    """The healthy level from the faster half of the jobs: slowness is one-sided (a fault
    never speeds a job up), so up to half the jobs may be slow without moving it.

    NOTE: level and noise are the faster half's median and MAD; the MAD of a normal's upper
    half is about half the whole's, hence the factor of 2 (calibrated in the unit tests).
    """
    top = sorted(scores)[len(scores) // 2 :]
    med = statistics.median(top)
    mad = statistics.median(abs(s - med) for s in top)
    noise = 2 * MAD_TO_SIGMA * mad / med if med > 0 else 0.0
    tol = min(settings.max_tolerance, max(settings.tolerance, settings.noise_sigmas * noise))
    if len(scores) < settings.noise_jobs:  # too few jobs to measure the noise: the widest
        tol = settings.max_tolerance
    return Reference(phase, sku, med, noise, tol, len(scores), rnd)


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
    ref = refs.get((*key, m.job.round)) or refs.get((*key, 0))
    if ref is None:
        return Judged(m, False, f"{m.score:.4g} GB/s (no reference)")
    ratio = m.score / ref.median if ref.median > 0 else None
    slow = m.score < ref.threshold
    sign = "<" if slow else ">="
    return Judged(
        m,
        slow,
        f"{m.score:.4g} GB/s {sign} {ref.threshold:.4g} (round {ref.round} level "
        f"{ref.median:.4g} - {ref.tolerance:.0%}, noise {ref.noise:.1%} over {ref.count} jobs)",
        ratio,
    )


@dataclass
class Assessment:
    """What the judged jobs so far say about every node and link."""

    bad: dict[str, list[str]] = field(default_factory=dict)  # node -> evidence
    good: set[str] = field(default_factory=set)
    pending_alone: set[str] = field(default_factory=set)
    pending_pair: set[str] = field(default_factory=set)
    bad_links: dict[Pair, list[str]] = field(default_factory=dict)
    pending_links: dict[Pair, list[str]] = field(default_factory=dict)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # node -> every job it was in
    slow_count: dict[str, int] = field(default_factory=dict)
    paired: dict[str, set[str]] = field(default_factory=dict)  # partners measured with


def _line(j: Judged) -> str:
    return f"round {j.m.job.round} {j.m.job.phase.value} [{', '.join(j.nodes)}]: {j.why}"


def assess(nodes: Sequence[str], judged: Sequence[Judged]) -> Assessment:
    """Node and link states from every judged job (see the module docstring)."""
    a = Assessment()
    alone: dict[str, list[Judged]] = {n: [] for n in nodes}
    pairs: dict[str, list[tuple[str, Judged]]] = {n: [] for n in nodes}
    for j in judged:
        for n in j.nodes:
            a.evidence.setdefault(n, []).append(_line(j))
            a.slow_count[n] = a.slow_count.get(n, 0) + j.slow
        if j.m.job.phase == SweepPhase.ALONE:
            alone[j.nodes[0]].append(j)
        else:
            x, y = j.nodes
            pairs[x].append((y, j))
            pairs[y].append((x, j))
            a.paired.setdefault(x, set()).add(y)
            a.paired.setdefault(y, set()).add(x)
    alone_ok = set()
    for n in nodes:
        slow = [j for j in alone[n] if j.slow]
        if any(j.m.failed for j in slow) or len(slow) >= 2:
            a.bad[n] = [_line(j) for j in slow]
        elif slow and len(slow) == len(alone[n]):
            a.pending_alone.add(n)
        else:
            alone_ok.add(n)
    a.good = {n for n in alone_ok if any(not j.slow for _, j in pairs[n])}
    for n in sorted(alone_ok - a.good):
        slow = [(p, j) for p, j in pairs[n] if j.slow]
        if len({p for p, _ in slow}) >= 2 and any(p in a.good for p, _ in slow):
            a.bad[n] = [_line(j) for _, j in slow]
        else:
            a.pending_pair.add(n)
    _links(a, judged)
    return a


def _links(a: Assessment, judged: Sequence[Judged]) -> None:
    """Slow pairs of two good nodes: the link between them, bad once seen slow twice."""
    seen: dict[Pair, list[Judged]] = {}
    for j in judged:
        if j.m.job.phase == SweepPhase.PAIR:
            seen.setdefault(tuple(sorted(j.nodes)), []).append(j)  # type: ignore[arg-type]
    for pair, js in sorted(seen.items()):
        if not all(n in a.good for n in pair) or not any(j.slow for j in js):
            continue
        slow = [j for j in js if j.slow]
        # Fast elsewhere, slow together. Once slow and never fast: measure it again.
        if len(slow) >= 2:
            a.bad_links[pair] = [_line(j) for j in js]
        elif len(slow) == len(js):
            a.pending_links[pair] = [_line(j) for j in js]
