"""The verdict operators act on: a state per node with its evidence, the bad links, what
the fleet as a whole shows, and a circuit breaker against draining a large share of it.

`run_rounds` is the whole sweep as a pure loop: plan a round, have it measured (Ray in
`fleetval.run.sweep`, a simulated fleet in the bench), judge, plan the next.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fleetval.fleet.coverage import NO_FABRIC, Fabric
from fleetval.fleet.judge import (
    Assessment,
    HwNote,
    Judged,
    Measurement,
    Pair,
    Planned,
    Reference,
    RefKey,
    Trunk,
    assess,
    judge,
    references,
)
from fleetval.fleet.planner import first_round, next_round
from fleetval.fleet.settings import SweepSettings
from fleetval.vocab import NodeState, SweepPhase

MeasureRound = Callable[[list[Planned]], list[Measurement]]


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

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value, "evidence": list(self.evidence)}

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
    confirmed: bool  # slow twice: a bad link; once and rounds ran out: suspect (said, not flagged)
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "confirmed": self.confirmed,
            "evidence": list(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LinkVerdict:
        a, b = d["nodes"]
        return cls((a, b), bool(d["confirmed"]), tuple(d.get("evidence", ())))


@dataclass(frozen=True)
class TrunkVerdict:
    """Jobs across two groups slow, jobs inside each fast: the fabric between them, no node."""

    groups: Pair
    level: str  # rack, switch, domain
    confirmed: bool  # inside jobs of both groups fast too; else suspect (said, not flagged)
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": list(self.groups),
            "level": self.level,
            "confirmed": self.confirmed,
            "evidence": list(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrunkVerdict:
        a, b = d["groups"]
        return cls((a, b), d["level"], bool(d["confirmed"]), tuple(d.get("evidence", ())))

    @classmethod
    def of(cls, t: Trunk) -> TrunkVerdict:
        return cls((t.a, t.b), t.level, t.confirmed, tuple(t.evidence))


@dataclass(frozen=True)
class LinkMeasured:
    """A link this sweep measured: its last job's verdict (what `sweep-history` covers)."""

    nodes: Pair
    verdict: str  # fast, slow, unclear, failed
    gbps: float | None
    jobs: int

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "verdict": self.verdict, "gbps": self.gbps,
                "jobs": self.jobs}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LinkMeasured:
        a, b = d["nodes"]
        return cls((a, b), d["verdict"], d.get("gbps"), d.get("jobs", 1))


def link_verdict(j: Judged) -> str:
    if j.m.failed:
        return "failed"
    return "slow" if j.slow else "unclear" if j.unclear else "fast"


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
    references: tuple[Reference, ...] = ()  # each phase's main round first, then per round
    breaker: bool = False  # more would be drained than allowed: nothing is
    drain_limit: int = 0
    trials: tuple[Judged, ...] = field(default=(), compare=False)
    trunks: tuple[TrunkVerdict, ...] = ()
    coverage: tuple[LinkMeasured, ...] = ()  # every link this sweep measured
    topology: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node -> groups

    @property
    def flagged(self) -> bool:
        """Nodes named, links or trunks confirmed slow, or a finding about the fleet."""
        return bool(self.findings or self.bad_links or self.named or self.bad_trunks)

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

    def to_dict(self) -> dict[str, Any]:
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


def _trial(j: Judged) -> dict[str, Any]:
    job = j.m.job
    return {
        "round": job.round,
        "phase": job.phase.value,
        "nodes": list(job.nodes),
        "why": job.why,
        "score_gbps": j.m.score,
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
    """The sweep: round 1 every node alone, then planned rounds until nothing is left to
    measure or `max_rounds` is reached; every round's jobs are measured together."""
    skus = skus or {}
    measured: list[Measurement] = []
    jobs, rnd = first_round(nodes), 1
    while True:
        measured += measure(jobs)
        refs = references(measured, skus, settings)
        judged = [judge(m, refs, skus, settings.floors) for m in measured]
        found = assess(nodes, judged, fabric.topology)
        if rnd >= settings.max_rounds:
            break
        jobs = next_round(nodes, found, rnd + 1, settings, fabric)
        if not jobs:
            break
        rnd += 1
    v = verdict(nodes, found, judged, refs, settings, rounds=rnd, baseline=baseline)
    return dataclasses.replace(v, topology=fabric.topology.to_dict())


def verdict(
    nodes: Sequence[str],
    a: Assessment,
    judged: Sequence[Judged],
    refs: Mapping[RefKey, Reference],
    settings: SweepSettings,
    *,
    rounds: int,
    baseline: BaselineLevels | None = None,
) -> FleetVerdict:
    """Node states with evidence, links, fleet findings, and the circuit breaker."""
    scores = _scores(judged)
    verdicts = [_node(n, a, scores.get(n, {}), rounds) for n in nodes]
    findings, notes = _fleet(refs, settings, baseline, judged)
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
    links += [LinkVerdict(p, False, tuple(e)) for p, e in sorted(a.pending_links.items())]
    trunks = [TrunkVerdict.of(t) for _, t in sorted(a.trunks.items())]
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
        references=tuple(
            dict.fromkeys(refs[k] for k in sorted(refs, key=lambda k: (k[2] != 0, k)))
        ),
        breaker=breaker,
        drain_limit=0 if breaker else limit,
        trials=tuple(judged),
        trunks=tuple(sorted(trunks, key=lambda t: not t.confirmed)),
        coverage=tuple(coverage),
    )


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


def _node(n: str, a: Assessment, scores: dict[SweepPhase, list[float]], rounds: int) -> NodeVerdict:
    evidence = tuple(a.evidence.get(n, ()))
    alone = scores.get(SweepPhase.ALONE, [None])[-1]
    pairs = scores.get(SweepPhase.PAIR)
    pair = statistics.median(pairs) if pairs else None
    if n in a.bad:
        why = a.bad[n]
        confidence = "high" if len(why) >= 2 or "job failed" in why[0] else "medium"
        return NodeVerdict(n, NodeState.DRAIN, confidence, why[0], evidence, alone, pair)
    if n in a.unclear:
        reason = (
            f"differed from the fleet only within the noise measured beside it, "
            f"in {rounds} rounds: not judged (look, do not drain)"
        )
        return NodeVerdict(n, NodeState.UNJUDGED, "low", reason, evidence, alone, pair)
    if n in a.pending_alone:
        reason = f"slow alone once, not measured again within {rounds} rounds"
        return NodeVerdict(n, NodeState.SUSPECT, "low", reason, evidence, alone, pair)
    if n in a.pending_pair:
        slow = a.slow_count.get(n, 0)
        reason = (
            f"slow in a pair, not re-paired with a proven-good node within {rounds} rounds"
            if slow
            else f"no partner within {rounds} rounds: its network is not judged"
        )
        return NodeVerdict(n, NodeState.SUSPECT, "low", reason, evidence, alone, pair)
    confidence = "high" if n in a.good else "medium"
    return NodeVerdict(
        n, NodeState.HEALTHY, confidence, "met every reference", evidence, alone, pair
    )


def _fleet(
    refs: Mapping[RefKey, Reference],
    settings: SweepSettings,
    baseline: BaselineLevels | None,
    judged: Sequence[Judged],
) -> tuple[list[str], list[str]]:
    """Fleet-level findings: slower than the baseline's sweeps; notes: noise so large that
    only large differences are judged (the nodes seen within it are `unjudged`, not
    guessed). "Everything equally slow" is caught here (baseline) or by the floors."""
    findings, notes = [], []
    for (phase, sku, rnd), ref in sorted(refs.items()):
        if rnd != 0:
            continue
        where = f"{phase.value} jobs" + (f" ({sku})" if sku else "")
        noisy = ref.tolerance >= settings.max_tolerance
        if noisy and ref.count >= settings.noise_jobs:
            notes.append(
                f"{where}: noise {ref.noise:.0%} measured over {ref.count} jobs: too large to "
                f"judge differences under {ref.tolerance:.0%} (a node seen only within it is "
                "unjudged, not guessed)"
            )
        elif noisy:
            notes.append(
                f"{where}: noise {ref.noise:.0%} over only {ref.count} jobs; judged with the "
                f"largest tolerance ({settings.max_tolerance:.0%})"
            )
        past = baseline.medians.get(level_key(phase, sku)) if baseline else None
        if baseline and past and ref.median < past * (1 - ref.tolerance):
            findings.append(
                f"{where}: fleet median {ref.median:.4g} GB/s is {1 - ref.median / past:.0%} "
                f"below baseline {baseline.name!r} ({past:.4g} GB/s): the whole fleet is slow"
            )
    floored = any("floor" in j.why for j in judged)
    if not baseline and not floored and not any(_has_floor(settings, j) for j in judged):
        notes.append(
            "judged against the fleet's own distribution only (no SKU floor for the sizes "
            "measured, no --baseline): a fleet slow everywhere alike would not show"
        )
    return findings, notes


def _has_floor(settings: SweepSettings, j: Judged) -> bool:
    return any(f.size_bytes in j.m.by_size for f in settings.floors)
