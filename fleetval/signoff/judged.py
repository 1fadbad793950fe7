"""What each step of a run judged, against what: the figures a user ran the suite for.

`fleetval run` ends with this (and `--json` carries it): per step, how many rows were judged
and how, and the headline figures against their expectation, e.g. all_reduce busbw at the
largest size against the GPU model's floor, or "recorded only: no floor for cpu". Reads the
stored rows; no torch, no Ray.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import TypedDict

from fleetval.checks import CHECKS
from fleetval.checks.spec import FigureContext, gpu_label, worst_rows
from fleetval.signoff.gates import gates_from_suite_json
from fleetval.store.dataset import Store
from fleetval.store.records import Run, StoredRow
from fleetval.vocab import CULPRIT_METRIC, Status

_COLUMNS = [
    "job", "step", "check", "collective", "op", "dtype", "size_bytes", "world_size", "rank",
    "node", "busbw_gbps", "metric", "value", "unit", "status", "message", "details",
]  # fmt: skip
_MAX_FIGURES = 8  # per step; the rest is counted


@dataclass(frozen=True)
class StepJudged:
    """One step: its status, how its rows were judged, and its headline figures."""

    job: int
    step: str
    check: str
    status: Status
    counts: str  # "38 pass, 12 skip (e.g. ...)"
    figures: tuple[str, ...]  # each "what: measured vs expectation: verdict"

    def to_dict(self) -> StepJudgedJSON:
        return StepJudgedJSON(**asdict(self) | {"figures": list(self.figures)})


class StepJudgedJSON(TypedDict):
    """A step as `fleetval run --json` says what it judged."""

    job: int
    step: str
    check: str
    status: str
    counts: str
    figures: list[str]


def judged_steps(store: Store, record: Run) -> list[StepJudged]:
    """Every step of a stored run, with what it judged against what."""
    rows = store.results([record.run_id], columns=_COLUMNS).to_pylist()
    models = {n["node"]: gpu_label(n) for n in store.nodes([record.run_id]).to_pylist()}
    gates = gates_from_suite_json(record.suite_json)
    context = FigureContext(models, gates)
    by_step: dict[tuple[int, str], list[StoredRow]] = defaultdict(list)
    for r in rows:
        if r["metric"] != CULPRIT_METRIC:  # a culprit: the step's own line names it
            r["details"] = json.loads(r["details"] or "{}")
            by_step[(r["job"], r["step"])].append(r)
    out = []
    for s in record.summary.get("steps", []):
        got = by_step.get((s["job"], s["step"]), [])
        plugin = CHECKS.get(s["check"])
        figures = plugin.figures(got, context) if plugin else worst_rows(got)
        more = len(figures) - _MAX_FIGURES
        shown = figures[:_MAX_FIGURES] + ([f"... {more} more"] if more > 0 else [])
        counts = _counts(got, explain_info=not figures)
        out.append(
            StepJudged(s["job"], s["step"], s["check"], Status(s["status"]), counts, tuple(shown))
        )
    return out


def _counts(rows: list[StoredRow], *, explain_info: bool) -> str:
    """Rows by status, with the first reason for skipped (and, where no figure says it,
    recorded-only) rows."""
    if not rows:
        return "no rows"
    n = Counter(r["status"] for r in rows)
    text = ", ".join(f"{n[s]} {s}" for s in Status if n[s])
    reasons = [(Status.INFO, "recorded only")] if explain_info else []
    for s, what in (*reasons, (Status.SKIP, "skipped")):
        first = next((r for r in rows if r["status"] == s and r["message"]), None)
        if first is not None:
            text += f"; {what}, e.g. {first['message']}"
    return text
