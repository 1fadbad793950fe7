"""The verdict operators act on: a state per node with its evidence, the bad links, what
the fleet as a whole shows, and a circuit breaker against draining a large share of it.

`run_rounds` is the whole sweep as a pure loop: plan a round, have it measured (Ray in
`fleetval.run.sweep`, a simulated fleet in the bench), judge, plan the next.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from fleetval.fleet.coverage import NO_FABRIC, Fabric
from fleetval.fleet.effects import Q_SUSPECT, Effect
from fleetval.fleet.judge import (
    Assessment,
    HwNote,
    Judged,
    Level,
    LevelJson,
    Measurement,
    Pair,
    Planned,
    Trunk,
    assess,
    bounded,
    line,
    suspect,
)
from fleetval.fleet.planner import first_round, next_round
from fleetval.fleet.settings import SweepSettings
from fleetval.text import human_bytes
from fleetval.vocab import LinkState, NodeState, SweepPhase

MeasureRound = Callable[[list[Planned]], list[Measurement]]


# The stored forms (a sweep run's summary, `FleetVerdict.to_dict`): what reports, the
# sweep history and the sign-off read back
class NodeVerdictJson(TypedDict):
    node: str
    state: str
    confidence: str
    reason: str
    evidence: list[str]
    alone_gbps: float | None
    pair_gbps: float | None
    hardware: str
    hardware_action: str


class LinkVerdictJson(TypedDict):
    nodes: list[str]
    confirmed: bool
    evidence: list[str]


class TrunkVerdictJson(TypedDict):
    groups: list[str]
    level: str
    confirmed: bool
    evidence: list[str]


class LinkMeasuredJson(TypedDict):
    nodes: list[str]
    verdict: str
    gbps: float | None
    jobs: int


class TrialJson(TypedDict):
    round: int
    phase: str
    nodes: list[str]
    why: str
    score_gbps: float | None
    failed: bool
    slow: bool
    judged: str


class FleetVerdictJson(TypedDict):
    flagged: bool
    nodes: list[NodeVerdictJson]
    links: list[LinkVerdictJson]
    trunks: list[TrunkVerdictJson]
    coverage: list[LinkMeasuredJson]
    topology: dict[str, dict[str, str]]
    drain: list[str]
    findings: list[str]
    notes: list[str]
    rounds: int
    jobs: int
    breaker: bool
    drain_limit: int
    references: list[LevelJson]
    levels: dict[str, float]
    trials: list[TrialJson]


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    state: NodeState
    confidence: str  # high: two measurements or a failure agree; medium; low: one, or none
    reason: str
    evidence: tuple[str, ...] = ()
    alone_gbps: float | None = None  # its last alone job
    pair_gbps: float | None = None  # median of its pair jobs
    hardware: str = ""  # what its GPUs said in its last job with a hardware finding
    hardware_action: str = ""  # and the action for it (detect.hardware.Action's value)

    def to_dict(self) -> NodeVerdictJson:
        return NodeVerdictJson(
            node=self.node, state=self.state.value, confidence=self.confidence,
            reason=self.reason, evidence=list(self.evidence), alone_gbps=self.alone_gbps,
            pair_gbps=self.pair_gbps, hardware=self.hardware, hardware_action=self.hardware_action,
        )  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeVerdict:
        return cls(
            d["node"], NodeState(d["state"]), d.get("confidence", ""), d.get("reason", ""),
            tuple(d.get("evidence", ())), d.get("alone_gbps"), d.get("pair_gbps"),
            d.get("hardware", ""), d.get("hardware_action", ""),
        )  # fmt: skip


@dataclass(frozen=True)
class LinkVerdict:
    nodes: Pair
    confirmed: (
        bool  # the model's effect flagged; else estimated slow, not proven (said, not flagged)
    )
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> LinkVerdictJson:
        return LinkVerdictJson(
            nodes=list(self.nodes), confirmed=self.confirmed, evidence=list(self.evidence)
        )

    def subject(self) -> str:
        return f"link {' <-> '.join(self.nodes)}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LinkVerdict:
        a, b = d["nodes"]
        return cls((a, b), bool(d["confirmed"]), tuple(d.get("evidence", ())))


@dataclass(frozen=True)
class TrunkVerdict:
    """Jobs across two groups slow, jobs inside each fast: the fabric between them, no node."""

    groups: Pair
    level: str  # rack, switch, domain
    confirmed: (
        bool  # the model's effect flagged; else estimated slow, not proven (said, not flagged)
    )
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> TrunkVerdictJson:
        return TrunkVerdictJson(
            groups=list(self.groups), level=self.level, confirmed=self.confirmed,
            evidence=list(self.evidence),
        )  # fmt: skip

    def subject(self) -> str:
        return f"trunk {self.level} {' <-> '.join(self.groups)}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrunkVerdict:
        a, b = d["groups"]
        return cls((a, b), d["level"], bool(d["confirmed"]), tuple(d.get("evidence", ())))

    @classmethod
    def of(cls, t: Trunk) -> TrunkVerdict:
        return cls((t.a, t.b), t.level, t.confirmed, t.evidence)


@dataclass(frozen=True)
class LinkMeasured:
    """A link this sweep measured: its last job's verdict (what `sweep-history` covers)."""

    nodes: Pair
    verdict: LinkState
    gbps: float | None
    jobs: int

    def to_dict(self) -> LinkMeasuredJson:
        return LinkMeasuredJson(
            nodes=list(self.nodes), verdict=self.verdict.value, gbps=self.gbps, jobs=self.jobs
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LinkMeasured:
        a, b = d["nodes"]
        return cls((a, b), LinkState(d["verdict"]), d.get("gbps"), d.get("jobs", 1))


def link_verdict(j: Judged) -> LinkState:
    """The job against its round's level and load."""
    if j.m.failed:
        return LinkState.FAILED
    return LinkState.SLOW if j.slow else LinkState.UNCLEAR if j.unclear else LinkState.FAST


@dataclass(frozen=True)
class BaselineLevels:
    """A named baseline's past sweeps: median GB/s per "phase/sku" (see `level_key`)."""

    name: str
    medians: Mapping[str, float]


def level_key(phase: SweepPhase, sku: str) -> str:
    return f"{phase.value}/{sku}"


@dataclass(frozen=True)
class FleetVerdict:
    nodes: tuple[NodeVerdict, ...]
    links: tuple[LinkVerdict, ...] = ()
    findings: tuple[str, ...] = ()  # about the fleet as a whole: each one flags the sweep
    notes: tuple[str, ...] = ()  # said, but not a finding
    rounds: int = 0
    jobs: int = 0
    references: tuple[Level, ...] = ()  # tonight's level per phase and SKU
    breaker: bool = False  # more would be drained than allowed: nothing is
    drain_limit: int = 0
    trials: tuple[Judged, ...] = field(default=(), compare=False)
    trunks: tuple[TrunkVerdict, ...] = ()
    coverage: tuple[LinkMeasured, ...] = ()  # every link this sweep measured
    topology: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node -> groups

    @property
    def flagged(self) -> bool:
        """Nodes drained, links or trunks proven slow, or a finding about the fleet."""
        return bool(self.findings or self.bad_links or self.drain or self.bad_trunks)

    @property
    def unjudged(self) -> list[NodeVerdict]:
        """Nodes neither drained nor judged healthy: suspect, unjudged (or held)."""
        return [n for n in self.nodes if n.state not in (NodeState.HEALTHY, NodeState.DRAIN)]

    @property
    def unproven(self) -> list[LinkVerdict | TrunkVerdict]:
        """Links and trunks estimated slow but not proven: not judged either way."""
        return [x for x in (*self.links, *self.trunks) if not x.confirmed]

    @property
    def exit_code(self) -> int:
        """0 every node judged healthy, 1 something flagged, 5 nothing flagged but some
        nodes, links or trunks not judged (`fleetval.status`'s vocabulary of exits)."""
        return 1 if self.flagged else 5 if self.unjudged or self.unproven else 0

    @property
    def bad_trunks(self) -> list[TrunkVerdict]:
        return [t for t in self.trunks if t.confirmed]

    @property
    def bad_links(self) -> list[LinkVerdict]:
        return [link for link in self.links if link.confirmed]

    @property
    def named(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.state != NodeState.HEALTHY]

    @property
    def drain(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.state == NodeState.DRAIN]

    def levels(self) -> dict[str, float]:
        """The fleet's level per phase and SKU (main rounds): what a later sweep's baseline reads."""
        out: dict[str, float] = {}
        for r in self.references:
            out.setdefault(level_key(r.phase, r.sku), r.median)
        return out

    def to_dict(self) -> FleetVerdictJson:
        return {
            "flagged": self.flagged,
            "nodes": [n.to_dict() for n in self.nodes],
            "links": [link.to_dict() for link in self.links],
            "trunks": [t.to_dict() for t in self.trunks],
            "coverage": [c.to_dict() for c in self.coverage],
            "topology": {n: dict(g) for n, g in self.topology.items()},
            "drain": [n.node for n in self.drain],
            "findings": list(self.findings),
            "notes": list(self.notes),
            "rounds": self.rounds,
            "jobs": self.jobs,
            "breaker": self.breaker,
            "drain_limit": self.drain_limit,
            "references": [r.to_dict() for r in self.references],
            "levels": self.levels(),
            "trials": [_trial(j) for j in self.trials],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FleetVerdict:
        """A stored verdict (`to_dict`, in a sweep run's summary) read back for what reports
        and the sign-off judge: nodes, links, findings, breaker. NOTE: references and trials
        stay in the stored dict; nothing reads them back as objects."""
        return cls(
            nodes=tuple(NodeVerdict.from_dict(n) for n in d.get("nodes", ())),
            links=tuple(LinkVerdict.from_dict(x) for x in d.get("links", ())),
            trunks=tuple(TrunkVerdict.from_dict(t) for t in d.get("trunks", ())),
            coverage=tuple(LinkMeasured.from_dict(c) for c in d.get("coverage", ())),
            topology=d.get("topology", {}),
            findings=tuple(d.get("findings", ())),
            notes=tuple(d.get("notes", ())),
            rounds=d.get("rounds", 0),
            jobs=d.get("jobs", 0),
            breaker=bool(d.get("breaker", False)),
            drain_limit=d.get("drain_limit", 0),
        )


def _trial(j: Judged) -> TrialJson:
    job = j.m.job
    return {
        "round": job.round,
        "phase": job.phase.value,
        "nodes": list(job.nodes),
        "why": job.why,
        "score_gbps": j.m.score,
        "failed": j.m.failed,
        "slow": j.slow,
        "judged": j.why,
    }


def run_rounds(
    nodes: Sequence[str],
    measure: MeasureRound,
    settings: SweepSettings,
    *,
    skus: Mapping[str, str] | None = None,
    baseline: BaselineLevels | None = None,
    fabric: Fabric = NO_FABRIC,
) -> FleetVerdict:
    """The sweep: round 1 every node alone, then rounds the model asks for until nothing is
    left open or `max_rounds` is reached; every round's jobs are measured together, and
    every job so far (with the fleet's recent sweeps) is fitted again after each round."""
    skus = skus or {}
    measured: list[Measurement] = []
    jobs, rnd = first_round(nodes), 1
    started = time.monotonic()
    while True:
        measured += measure(jobs)
        found = assess(nodes, measured, settings, fabric.topology, skus=skus, past=fabric.past)
        spent = time.monotonic() - started
        if rnd >= settings.max_rounds or (settings.budget_s and spent >= settings.budget_s):
            break
        jobs = next_round(nodes, found, rnd + 1, settings, fabric)
        if not jobs:
            break
        rnd += 1
    v = verdict(nodes, found, settings, rounds=rnd, skus=skus, baseline=baseline)
    return dataclasses.replace(v, topology=fabric.topology.to_dict())


def verdict(
    nodes: Sequence[str],
    a: Assessment,
    settings: SweepSettings,
    *,
    rounds: int,
    skus: Mapping[str, str] | None = None,
    baseline: BaselineLevels | None = None,
) -> FleetVerdict:
    """Node states with evidence, links, trunks, fleet findings, and the circuit breaker."""
    judged = a.judged
    levels = a.levels(skus or {})
    scores = _scores(judged)
    verdicts = [_node(n, a, scores.get(n, {}), rounds, settings) for n in nodes]
    findings, notes = _fleet(a, levels, settings, baseline)
    limit = settings.drain_limit(len(nodes))
    drains = sum(v.state == NodeState.DRAIN for v in verdicts)
    breaker = drains > limit
    if breaker:
        findings.append(
            f"circuit breaker: {drains} of {len(nodes)} nodes would be drained, more than the "
            f"limit of {limit} ({settings.max_drain_share:.0%}): the fabric or the reference "
            "is suspect, not each node; nothing is drained"
        )
        verdicts = [_held(v) for v in verdicts]
    # NOTE: after the breaker: it guards against a suspect fabric or reference, and a GPU's
    # own fault report is neither
    hardware = _hardware(judged)
    verdicts = [_with_hardware(v, hardware.get(v.node)) for v in verdicts]
    links = [LinkVerdict(p, True, tuple(e)) for p, e in sorted(a.bad_links.items())]
    # NOTE: what is still unproven is said (and keeps the sweep from exit 0) only while a
    # fault is at least as likely as not, as for a node (`_node`): past that it is what the
    # noise makes the slowest of everything tested (1 clean sweep of 12 at 1,024 nodes and
    # 30% noise ended with such a link)
    pending = {**a.odd_links, **a.pending_links}
    links += [LinkVerdict(p, False, tuple(e)) for p, e in sorted(pending.items())
              if _likely(a.fit.effect("link", p))]  # fmt: skip
    trunks = [TrunkVerdict.of(t) for _, t in sorted(a.trunks.items())
              if t.confirmed or _likely(t.effect)]  # fmt: skip
    coverage = [
        LinkMeasured(p, link_verdict(js[-1]), js[-1].m.score, len(js))
        for p, js in sorted(a.links.items())
    ]
    return FleetVerdict(
        nodes=tuple(verdicts),
        links=tuple(links),
        findings=tuple(findings),
        notes=tuple(notes),
        rounds=rounds,
        jobs=len(judged),
        references=tuple(levels),
        breaker=breaker,
        drain_limit=0 if breaker else limit,
        trials=tuple(judged),
        trunks=tuple(sorted(trunks, key=lambda t: not t.confirmed)),
        coverage=tuple(coverage),
    )


def _likely(e: Effect | None) -> bool:
    """A slow estimate at least as likely a fault as not over everything tested."""
    return e is not None and e.q_all <= Q_SUSPECT


def _held(v: NodeVerdict) -> NodeVerdict:
    if v.state != NodeState.DRAIN:
        return v
    return NodeVerdict(
        v.node, NodeState.SUSPECT, v.confidence, "held by the circuit breaker: " + v.reason,
        v.evidence, v.alone_gbps, v.pair_gbps,
    )  # fmt: skip


def _hardware(judged: Sequence[Judged]) -> dict[str, HwNote]:
    """Per node, what its hardware said in its last job that said anything."""
    out: dict[str, HwNote] = {}
    for j in sorted(judged, key=lambda j: j.m.job.round):
        out.update(j.m.hardware)
    return out


def _with_hardware(v: NodeVerdict, hw: HwNote | None) -> NodeVerdict:
    """The node's verdict with its hardware finding beside the performance evidence; a node
    whose hardware calls for taking it out is drained whatever its busbw said."""
    if hw is None:
        return v
    words = hw.text()
    state, confidence, evidence = v.state, v.confidence, (*v.evidence, words)
    if hw.drain and v.state != NodeState.DRAIN:
        state, confidence = NodeState.DRAIN, "high"
        evidence += (
            f"drained on its hardware finding alone: on performance it was "
            f"{v.state.value} ({v.reason})",
        )
    return dataclasses.replace(
        v, state=state, confidence=confidence, reason=f"{v.reason}; {words}",
        evidence=evidence, hardware=hw.finding, hardware_action=hw.action,
    )  # fmt: skip


def _scores(judged: Sequence[Judged]) -> dict[str, dict[SweepPhase, list[float]]]:
    out: dict[str, dict[SweepPhase, list[float]]] = {}
    for j in judged:
        if j.m.score is not None:
            for n in j.nodes:
                out.setdefault(n, {}).setdefault(j.m.job.phase, []).append(j.m.score)
    return out


def _node(
    n: str,
    a: Assessment,
    scores: dict[SweepPhase, list[float]],
    rounds: int,
    settings: SweepSettings,
) -> NodeVerdict:
    evidence = tuple(a.evidence.get(n, ()))
    alone = scores.get(SweepPhase.ALONE, [None])[-1]
    pairs = scores.get(SweepPhase.PAIR)
    pair = statistics.median(pairs) if pairs else None
    if n in a.bad:
        why = a.bad[n]
        return NodeVerdict(n, NodeState.DRAIN, "high", why[0], tuple(why), alone, pair)
    if n in a.good:
        within = a.within.get(n, 0.0)
        if within <= settings.tolerance:
            reason = f"no slower than the fleet's level by more than {settings.tolerance:.0%} (95%)"
            return NodeVerdict(n, NodeState.HEALTHY, "high", reason, evidence, alone, pair)
        reason = (
            f"no slower than the level by more than {within:.0%} (95%): the noise "
            f"({a.fit.sigma:.0%}) allows no finer than that within {rounds} rounds"
        )
        return NodeVerdict(n, NodeState.HEALTHY, "medium", reason, evidence, alone, pair)
    slow = [e for e in (a.fit.effect("node", (n,)), a.fit.effect("nic", (n,)))
            if e is not None and suspect(e, a.fit)]  # fmt: skip
    within = bounded(a, n, settings)
    if slow and (within is None or min(e.q_all for e in slow) <= Q_SUSPECT):
        reason = f"estimated slow, not proven within {rounds} rounds: {slow[0].text()}"
        return NodeVerdict(n, NodeState.SUSPECT, "low", reason, evidence, alone, pair)
    if slow and within is not None:
        e = min(slow, key=lambda e: e.q_all)
        reason = (
            f"no slower than the level by more than {within:.0%} (95%): estimated at "
            f"{e.ratio:.0%}, as slow as the noise ({a.fit.sigma:.0%}) makes the slowest of "
            f"the {a.fit.tested} things tested (q {e.q_all:.2f}) within {rounds} rounds"
        )
        return NodeVerdict(n, NodeState.HEALTHY, "medium", reason, evidence, alone, pair)
    reason = (
        f"no partner within {rounds} rounds: its network is not judged"
        if n not in a.paired
        else f"too few jobs to judge within {settings.max_tolerance:.0%} at noise "
        f"{a.fit.sigma:.0%} in {rounds} rounds (more iterations or rounds would decide it)"
    )
    return NodeVerdict(n, NodeState.UNJUDGED, "low", reason, evidence, alone, pair)


def _fleet(
    a: Assessment,
    levels: Sequence[Level],
    settings: SweepSettings,
    baseline: BaselineLevels | None,
) -> tuple[list[str], list[str]]:
    """Fleet-level findings: slower than the baseline's sweeps; notes: noise so large that
    nodes are judged only within a wider share, and what the fleet was judged against."""
    findings, notes = [], []
    sigma = a.fit.sigma
    wide = {n: w for n, w in a.within.items() if w > settings.tolerance}
    if wide:
        notes.append(
            f"noise {sigma:.1%} (the model's residuals over {a.fit.jobs} jobs): "
            f"{len(wide)} nodes judged only within {max(wide.values()):.0%}, not "
            f"{settings.tolerance:.0%}"
        )
    for lv in levels:
        where = f"{lv.phase.value} jobs" + (f" ({lv.sku})" if lv.sku else "")
        past = baseline.medians.get(level_key(lv.phase, lv.sku)) if baseline else None
        if baseline and past and lv.median < past * (1 - settings.tolerance):
            findings.append(
                f"{where}: fleet level {lv.median:.4g} GB/s is {1 - lv.median / past:.0%} "
                f"below baseline {baseline.name!r} ({past:.4g} GB/s): the whole fleet is slow"
            )
    floors = _under_floor(a, settings)
    findings += floors
    if not baseline and not any(_has_floor(settings, j) for j in a.judged):
        notes.append(
            "judged against the fleet's own level only (no SKU floor for the sizes "
            "measured, no --baseline): a fleet slow everywhere alike would not show"
        )
    return findings, notes


def _under_floor(a: Assessment, settings: SweepSettings) -> list[str]:
    """Jobs below a published per-SKU floor at a size they measured: the fleet's level
    itself is short of the hardware's (the model judges only against the fleet)."""
    out = []
    for j in a.judged:
        for f in settings.floors:
            floor = f.alone_gbps if j.m.job.phase == SweepPhase.ALONE else f.pair_gbps
            size = j.m.by_size.get(f.size_bytes)
            if floor is not None and size is not None and size < floor:
                out.append(
                    f"{line(j)}: {size:.4g} GB/s < {f.sku} floor {floor:g} GB/s at "
                    f"{human_bytes(f.size_bytes)}"
                )
    return out


def _has_floor(settings: SweepSettings, j: Judged) -> bool:
    return any(f.size_bytes in j.m.by_size for f in settings.floors)
