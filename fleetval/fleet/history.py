"""Each node across the last N stored sweeps: repeat offenders, flapping, slow drift; and
each link: when a sweep last measured it, and what it said (what the next sweep plans from).

A sweep is a stored run whose summary holds its verdict (`summary["sweep"]`, written by
`fleetval.run.sweep`); reading them needs the catalog only (no pyarrow, no ray).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetval.fleet.coverage import LinkSeen, Pair
from fleetval.fleet.effects import Obs
from fleetval.store.catalog import Catalog, RunRecord
from fleetval.vocab import NodeState, SweepPhase

DRIFT = 0.10  # the newer sweeps' median this much below the older ones': drifting


@dataclass(frozen=True)
class SweepSeen:
    """One node in one sweep."""

    run_id: str
    state: NodeState
    score: float | None  # pair busbw where paired, else alone


@dataclass(frozen=True)
class NodeHistory:
    node: str
    seen: tuple[SweepSeen, ...]  # oldest first
    repeat_offender: bool  # drained or suspect in two sweeps or more
    flapping: bool  # healthy and slow alternating (unjudged sweeps left out): twice or more
    drift: float | None  # newer half's median score against the older half's (-0.12: 12% down)

    @property
    def drifting(self) -> bool:
        return self.drift is not None and self.drift <= -DRIFT

    @property
    def findings(self) -> list[str]:
        out = ["repeat offender"] if self.repeat_offender else []
        out += ["flapping"] if self.flapping else []
        out += [f"slow drift {self.drift:+.0%}"] if self.drifting else []
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "sweeps": [
                {"run_id": s.run_id, "state": s.state.value, "score_gbps": s.score}
                for s in self.seen
            ],
            "repeat_offender": self.repeat_offender,
            "flapping": self.flapping,
            "drift": self.drift,
            "findings": self.findings,
        }


def sweep_runs(catalog: Catalog, last: int, *, until: str | None = None) -> list[RunRecord]:
    """The newest `last` runs that are sweeps (their summary holds a verdict), oldest first;
    with `until`, none newer than that run (a report of an old sweep shows its past only)."""
    runs = catalog.runs()  # oldest first: run ids sort by time
    if until is not None:
        runs = [r for r in runs if r.run_id <= until]
    return [r for r in runs if "sweep" in r.summary][-last:]


def node_histories(runs: list[RunRecord], node: str | None = None) -> list[NodeHistory]:
    """Per node (or the one named), its state and score in each of `runs`."""
    seen: dict[str, list[SweepSeen]] = {}
    for run in runs:
        for n in run.summary["sweep"].get("nodes", []):
            if node is None or n["node"] == node:
                score = n.get("pair_gbps") or n.get("alone_gbps")
                seen.setdefault(n["node"], []).append(
                    SweepSeen(run.run_id, NodeState(n["state"]), score)
                )
    return [history(name, s) for name, s in sorted(seen.items())]


SEEN_SLOW = (NodeState.DRAIN, NodeState.SUSPECT)  # judged (or estimated) slow; unjudged is neither


def history(node: str, seen: list[SweepSeen]) -> NodeHistory:
    """A repeat offender was seen slow (drained or suspect) in two sweeps or more; flapping
    went between healthy and slow twice or more. A sweep that could not judge the node says
    nothing either way and is left out of both."""
    judged = [s for s in seen if s.state != NodeState.UNJUDGED]
    bad = [s.state in SEEN_SLOW for s in judged]
    changes = sum(a != b for a, b in itertools.pairwise(bad))
    scores = [s.score for s in seen if s.score is not None]
    drift = None
    if len(scores) >= 3:
        half = len(scores) // 2
        before = statistics.median(scores[:half])
        drift = statistics.median(scores[half:]) / before - 1 if before > 0 else None
    return NodeHistory(node, tuple(seen), sum(bad) >= 2, changes >= 2, drift)


def link_history(sweeps: list[tuple[str, dict[str, Any]]]) -> dict[Pair, LinkSeen]:
    """Per link, the newest of `sweeps` ((run id, stored verdict), oldest first) that
    measured it; `when` is the sweep's place in the list."""
    out: dict[Pair, LinkSeen] = {}
    for when, (run_id, verdict) in enumerate(sweeps):
        for c in verdict.get("coverage", ()):
            a, b = c["nodes"]
            out[(a, b)] = LinkSeen(when, run_id, c["verdict"], c.get("gbps"))
    return out


def stored_links(runs: list[RunRecord]) -> dict[Pair, LinkSeen]:
    return link_history([(r.run_id, r.summary["sweep"]) for r in runs])


@dataclass(frozen=True)
class LinkCoverage:
    """The links of the nodes in the sweeps read: which were measured, when, with what."""

    nodes: int
    links: dict[Pair, LinkSeen]

    @property
    def total(self) -> int:
        return self.nodes * (self.nodes - 1) // 2

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "links_total": self.total,
            "links_measured": len(self.links),
            "links": [
                {"nodes": list(p), "run_id": s.run_id, "verdict": s.verdict, "gbps": s.gbps}
                for p, s in sorted(self.links.items())
            ],
        }


def link_coverage(runs: list[RunRecord]) -> LinkCoverage:
    """Per link of the nodes these sweeps judged, the newest of them that measured it."""
    names = {n["node"] for r in runs for n in r.summary["sweep"].get("nodes", [])}
    seen = stored_links(runs)
    return LinkCoverage(len(names), {p: s for p, s in seen.items() if set(p) <= names})


MODEL_SWEEPS = 30  # past sweeps the fabric model reads (0.5 ** (30 / HALF_LIFE) weighs ~0)


def past_jobs(
    verdicts: list[dict[str, Any]], skus: Mapping[str, str] | None = None
) -> tuple[Obs, ...]:
    """The timed and failed jobs of stored sweeps (oldest first) as the model reads them,
    each aged by how many sweeps ago it ran (the newest: 1)."""
    skus = skus or {}
    out = []
    recent = verdicts[-MODEL_SWEEPS:]
    for i, v in enumerate(recent):
        age = len(recent) - i
        for t in v.get("trials", ()):
            nodes = tuple(t["nodes"])
            failed = bool(t.get("failed", t.get("score_gbps") is None and t.get("slow")))
            score = t.get("score_gbps")
            if score is None and not failed:
                continue
            sku = "+".join(sorted({skus.get(n, "") for n in nodes}))
            out.append(Obs(SweepPhase(t["phase"]), nodes, score, failed, t["round"], age, sku))
    return tuple(out)


def stored_jobs(runs: list[RunRecord]) -> tuple[Obs, ...]:
    return past_jobs([r.summary["sweep"] for r in runs])
