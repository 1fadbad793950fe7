"""Each node across the last N stored sweeps: repeat offenders, flapping, slow drift; each
link: when a sweep last measured it, and what it said (what the next sweep plans from); and
each node's ranks that training jobs stored in the same window found late (`fleetval ingest`
of a job's artefacts, `fleetval.signoff.jobrun`).

A sweep is a stored run whose summary holds its verdict (`summary["sweep"]`, written by
`fleetval.run.sweep`); a job's run holds `fleetval stragglers --json` under
`summary["stragglers"]`. Reading both needs the catalog only (no pyarrow, numpy, ray).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from fleetval.fleet.coverage import LinkSeen, Pair
from fleetval.fleet.effects import Obs
from fleetval.fleet.verdict import FleetVerdictJson
from fleetval.store.catalog import Catalog
from fleetval.store.records import Run
from fleetval.vocab import NodeState, SweepPhase

DRIFT = 0.10  # the newer sweeps' median this much below the older ones': drifting


class SweepSeenJson(TypedDict):
    run_id: str
    state: str
    score_gbps: float | None


class NodeHistoryJson(TypedDict):
    node: str
    sweeps: list[SweepSeenJson]
    repeat_offender: bool
    flapping: bool
    drift: float | None
    findings: list[str]


class LinkSeenJson(TypedDict):
    nodes: list[str]
    run_id: str
    verdict: str
    gbps: float | None


class LinkCoverageJson(TypedDict):
    nodes: int
    links_total: int
    links_measured: int
    links: list[LinkSeenJson]


class JobLateJson(TypedDict):
    job: str
    run_id: str
    rank: int
    lateness_ms: float
    start_s: float
    end_s: float
    first_step: int | None
    last_step: int | None


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

    def to_dict(self) -> NodeHistoryJson:
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


def sweep_runs(catalog: Catalog, last: int, *, until: str | None = None) -> list[Run]:
    """The newest `last` runs that are sweeps (their summary holds a verdict), oldest first;
    with `until`, none newer than that run (a report of an old sweep shows its past only)."""
    runs = catalog.runs()  # oldest first: run ids sort by time
    if until is not None:
        runs = [r for r in runs if r.run_id <= until]
    return [r for r in runs if "sweep" in r.summary][-last:]


def node_histories(runs: list[Run], node: str | None = None) -> list[NodeHistory]:
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


def link_history(sweeps: Sequence[tuple[str, FleetVerdictJson]]) -> dict[Pair, LinkSeen]:
    """Per link, the newest of `sweeps` ((run id, stored verdict), oldest first) that
    measured it; `when` is the sweep's place in the list."""
    out: dict[Pair, LinkSeen] = {}
    for when, (run_id, verdict) in enumerate(sweeps):
        for c in verdict.get("coverage", ()):
            a, b = c["nodes"]
            out[(a, b)] = LinkSeen(when, run_id, c["verdict"], c.get("gbps"))
    return out


def stored_links(runs: list[Run]) -> dict[Pair, LinkSeen]:
    return link_history([(r.run_id, r.summary["sweep"]) for r in runs])


@dataclass(frozen=True)
class LinkCoverage:
    """The links of the nodes in the sweeps read: which were measured, when, with what."""

    nodes: int
    links: dict[Pair, LinkSeen]

    @property
    def total(self) -> int:
        return self.nodes * (self.nodes - 1) // 2

    def to_dict(self) -> LinkCoverageJson:
        return {
            "nodes": self.nodes,
            "links_total": self.total,
            "links_measured": len(self.links),
            "links": [
                {"nodes": list(p), "run_id": s.run_id, "verdict": s.verdict, "gbps": s.gbps}
                for p, s in sorted(self.links.items())
            ],
        }


def link_coverage(runs: list[Run]) -> LinkCoverage:
    """Per link of the nodes these sweeps judged, the newest of them that measured it."""
    names = {n["node"] for r in runs for n in r.summary["sweep"].get("nodes", [])}
    seen = stored_links(runs)
    return LinkCoverage(len(names), {p: s for p, s in seen.items() if set(p) <= names})


MODEL_SWEEPS = 30  # past sweeps the fabric model reads (0.5 ** (30 / HALF_LIFE) weighs ~0)


def past_jobs(
    verdicts: Sequence[FleetVerdictJson], skus: Mapping[str, str] | None = None
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


def stored_jobs(runs: list[Run]) -> tuple[Obs, ...]:
    return past_jobs([r.summary["sweep"] for r in runs])


# -- training jobs that found a node's rank late, beside the sweeps --------------------------


@dataclass(frozen=True)
class JobLate:
    """One rank of one stored training job found late on a node, in one window."""

    job: str  # the run's `job` label
    run_id: str
    rank: int
    lateness_ms: float  # median lateness in the window
    start_s: float  # the window, wall clock (seconds since the epoch)
    end_s: float
    first_step: int | None  # where the step logs gave steps
    last_step: int | None

    def to_dict(self) -> JobLateJson:
        return JobLateJson(
            job=self.job, run_id=self.run_id, rank=self.rank, lateness_ms=self.lateness_ms,
            start_s=self.start_s, end_s=self.end_s, first_step=self.first_step,
            last_step=self.last_step,
        )  # fmt: skip

    def text(self) -> str:
        """The window in a line: steps where the logs gave them, and its wall-clock span."""
        steps = f"steps {self.first_step}-{self.last_step}, " if self.first_step is not None else ""
        return f"{self.lateness_ms:.3g} ms, {steps}{_utc(self.start_s)} to {_utc(self.end_s)}"


def _utc(t: float) -> str:
    """Seconds since the epoch as UTC to the millisecond (as `fleetval show` says a job's);
    a smaller number is a time of day from logs without dates, said as it is."""
    if t < 1e9:
        return f"{t:.1f}s"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def job_runs(catalog: Catalog, sweeps: list[Run], until: str | None) -> list[Run]:
    """Stored training jobs in the window of `sweeps`: from the oldest sweep shown to `until`
    (default: now). NOTE: open at the newest end, as a job ingested after last night's sweep
    is the news an operator wants beside it; none before the window (that past is not shown)."""
    if not sweeps:
        return []
    first = sweeps[0].run_id
    return [
        r
        for r in catalog.runs()
        if "stragglers" in r.summary and "job" in r.labels
        and r.run_id >= first and (until is None or r.run_id <= until)
    ]  # fmt: skip


def late_in_jobs(jobs: list[Run], nodes: set[str]) -> dict[str, list[JobLate]]:
    """Per node of `nodes`, the windows in which a job found a rank on it late (oldest first)."""
    out: dict[str, list[JobLate]] = {}
    for run in jobs:
        hosts = _culprit_nodes(run)
        for w in run.summary["stragglers"].get("windows", ()):
            for r in w.get("ranks", ()):
                node = r.get("host") or hosts.get(r["rank"])
                if node in nodes:
                    out.setdefault(node, []).append(_job_late(run, w, r))
    return dict(sorted(out.items()))


def _culprit_nodes(run: Run) -> dict[int, str]:
    """Rank to node as the run's `late` culprits name it: a rank whose window gives no host
    took it from its dump's folder or the logs when the run was stored."""
    steps = run.summary.get("steps", ())
    return {c["rank"]: c["node"] for s in steps for c in s.get("culprits", ()) if c.get("node")}


def _job_late(run: Run, w: Mapping[str, Any], r: Mapping[str, Any]) -> JobLate:
    """One late rank `r` of a lateness window `w`, as the run's summary stores them."""
    return JobLate(
        job=run.labels["job"], run_id=run.run_id, rank=r["rank"],
        lateness_ms=r["lateness_s"] * 1e3, start_s=w["start_s"], end_s=w["end_s"],
        first_step=w.get("first_step"), last_step=w.get("last_step"),
    )  # fmt: skip


def strongest_hint(h: NodeHistory, late: list[JobLate]) -> str | None:
    """A node a sweep judged slow (drained or suspect) and a job found late: two sources that
    never share a measurement agree, the operator's strongest hint. None where not both."""
    slow = [s for s in h.seen if s.state in SEEN_SLOW]
    if not slow or not late:
        return None
    said = ", ".join(f"{s.state.value} in sweep {s.run_id}" for s in slow)
    # NOTE: one mention per job run and rank: a rank late in three windows is one job's say
    jobs = ", ".join(dict.fromkeys(f"job {j.job} (run {j.run_id}, rank {j.rank})" for j in late))
    return f"strongest hint {h.node}: {said}; late in {jobs}: a sweep and a job both name it"
