"""A training job's stragglers with what the store says about their nodes: the one function
behind `fleetval stragglers` and `POST /v1/stragglers`, so both say the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fleetval.detect.hardware import watch_list
from fleetval.detect.stragglers import NothingReadable, Report, judge_files
from fleetval.fleet.history import node_histories, sweep_runs
from fleetval.store.catalog import Catalog
from fleetval.store.dataset import Store
from fleetval.store.records import JsonObject

__all__ = ["JobStragglers", "NothingReadable", "job_stragglers", "node_context"]

SWEEPS = 5  # the newest sweeps whose verdicts are shown for a named node


@dataclass(frozen=True)
class JobStragglers:
    """The judgement, per named host what the store says, and the files not read."""

    report: Report
    nodes: dict[str, list[str]] = field(default_factory=dict)
    not_read: list[str] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return self.report.to_dict() | {"nodes": self.nodes, "not_read": self.not_read}


def job_stragglers(files: Sequence[tuple[str, bytes]], data: Path | None) -> JobStragglers:
    """A job's files (name, bytes) judged; with a store at `data`, each named host's context.
    Raises NothingReadable, naming what was looked for, when no file holds any of it."""
    report, not_read = judge_files(files)
    hosts = sorted({r.host for r in report.named if r.host})
    return JobStragglers(report, node_context(data, hosts), not_read)


def node_context(data: Path | None, hosts: list[str]) -> dict[str, list[str]]:
    """Per named host, what the store says: its verdicts in the last sweeps, its GPUs'
    findings in the newest reading, and its counters that grew (the watch list)."""
    if data is None or not hosts or not data.exists():
        return {}
    out: dict[str, list[str]] = {h: [] for h in hosts}
    for h in node_histories(sweep_runs(Catalog(data), SWEEPS)):
        if h.node in out:
            states = ", ".join(f"{s.state.value} ({s.run_id})" for s in h.seen)
            out[h.node].append(f"sweeps, oldest first: {states}")
            out[h.node] += h.findings
    rows = [r for r in Store(data).gpus().to_pylist() if r["node"] in out]
    newest = max((r["run_id"] for r in rows), default=None)
    for r in rows:
        if r["run_id"] == newest and r.get("findings"):
            out[r["node"]].append(f"{r['device_id']}: {', '.join(r['findings'])} ({newest})")
    for i in watch_list(rows):
        out[i.node].append(f"watch {i.device_id}: {i.what} {i.evidence}")
    return out
