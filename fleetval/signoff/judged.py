"""What each step of a run judged, against what: the figures a user ran the suite for.

`fleetval run` ends with this (and `--json` carries it): per step, how many rows were judged
and how, and the headline figures against their expectation, e.g. all_reduce busbw at the
largest size against the GPU model's floor, or "recorded only: no floor for cpu". Reads the
stored rows; no torch, no Ray.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetval.checks.bandwidth import BUSBW_DEFAULTS, BusbwMinimum, busbw_rule_for
from fleetval.checks.spec import gpu_label
from fleetval.signoff.gates import gates_from_suite_json
from fleetval.status import severity
from fleetval.store.dataset import RunRecord, Store
from fleetval.text import human_bytes
from fleetval.vocab import Status

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
    status: str
    counts: str  # "38 pass, 12 skip (e.g. ...)"
    figures: tuple[str, ...]  # each "what: measured vs expectation: verdict"

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "step": self.step, "check": self.check, "status": self.status,
                "counts": self.counts, "figures": list(self.figures)}  # fmt: skip


def judged_steps(store: Store, record: RunRecord) -> list[StepJudged]:
    """Every step of a stored run, with what it judged against what."""
    rows = store.results([record.run_id], columns=_COLUMNS).to_pylist()
    models = {n["node"]: gpu_label(n) for n in store.nodes([record.run_id]).to_pylist()}
    gates = gates_from_suite_json(record.suite_json)
    floors = [*(gates.busbw.minimums if gates and gates.busbw else ()), *BUSBW_DEFAULTS]
    by_step: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["metric"] != "step_outcome":  # a culprit: the step's own line names it
            r["details"] = json.loads(r["details"] or "{}")
            by_step[(r["job"], r["step"])].append(r)
    out = []
    for s in record.summary.get("steps", []):
        got = by_step.get((s["job"], s["step"]), [])
        figures = _FIGURES.get(s["check"], _worst_rows)(got, models, floors)
        more = len(figures) - _MAX_FIGURES
        shown = figures[:_MAX_FIGURES] + ([f"... {more} more"] if more > 0 else [])
        counts = _counts(got, explain_info=not figures)
        out.append(StepJudged(s["job"], s["step"], s["check"], s["status"], counts, tuple(shown)))
    return out


def _counts(rows: list[dict[str, Any]], *, explain_info: bool) -> str:
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


def _worst_rows(rows: list[dict[str, Any]], *_: object) -> list[str]:
    """Checks without a headline figure: the failing and warning rows, worst first."""
    bad = [r for r in rows if severity(r["status"]) >= severity(Status.WARN)]
    bad.sort(key=lambda r: -severity(r["status"]))
    return [f"{r['status']}: rank {r['rank']} {_what(r)}: {r['message']}" for r in bad]


def _what(r: dict[str, Any]) -> str:
    size = human_bytes(r["size_bytes"]) if r.get("size_bytes") is not None else None
    parts = [r.get("metric"), r.get("collective"), r.get("op"), r.get("dtype"), size]
    return " ".join(p for p in parts if p)


def _bandwidth(
    rows: list[dict[str, Any]], models: dict[str, str], floors: list[BusbwMinimum]
) -> list[str]:
    """Per collective, op and dtype: busbw at the largest size (slowest rank) vs its floor."""
    series: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["busbw_gbps"] is not None:
            series[(r["collective"], r["op"], r["dtype"])].append(r)
    out = []
    for (coll, op, dtype), got in sorted(series.items(), key=str):
        top = max(r["size_bytes"] for r in got)
        slowest = min((r for r in got if r["size_bytes"] == top), key=lambda r: r["busbw_gbps"])
        world = slowest["world_size"]
        nodes = sorted({r["node"] for r in got})
        kinds = {models.get(n, "unknown") for n in nodes}
        model = kinds.pop() if len(kinds) == 1 else "mixed"
        head = (f"{coll} {op or ''} {dtype} {human_bytes(top)} n={world}: busbw "
                f"{slowest['busbw_gbps']:.4g} GB/s (slowest: rank {slowest['rank']})")  # fmt: skip
        rule = busbw_rule_for(floors, model, coll, world, len(nodes))
        if rule is None:
            out.append(f"{head}, recorded only: no floor for {model} (declare gates.busbw)")
        elif top < rule.min_size:
            out.append(f"{head}, recorded only: the floor {rule.min_busbw_gbps:g} GB/s for "
                       f"{model} applies from {human_bytes(int(rule.min_size))}")  # fmt: skip
        else:
            ok = slowest["busbw_gbps"] >= rule.min_busbw_gbps
            out.append(f"{head} {'>=' if ok else '<'} floor {rule.min_busbw_gbps:g} GB/s for "
                       f"{model}: {'met' if ok else 'below'}")  # fmt: skip
    return out + _worst_rows(rows)


def _microbench(rows: list[dict[str, Any]], *_: object) -> list[str]:
    """Per metric, dtype and size: the slowest rank against its expectation, if any."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["value"] is not None:
            groups[(r["metric"], r["dtype"] or "", r["size_bytes"] or 0)].append(r)
    out = []
    for (metric, dtype, size), got in sorted(groups.items(), key=str):
        worst = min(got, key=lambda r: r["value"])
        exp = worst["details"].get("expectation")
        device = worst["details"].get("device_name") or "this device"
        n = worst["details"].get("n")
        shape = f"{n}x{n}" if n else human_bytes(size) if size else ""
        what = " ".join(w for w in (metric, dtype, shape) if w)
        head = f"{what}: {worst['value']:.4g} {worst['unit']} (slowest: rank {worst['rank']})"
        if exp is None:
            out.append(f"{head}, recorded only: no expectation for {device!r}")
        else:
            verdict = worst["status"]
            out.append(f"{head} vs pass at {exp['pass_at']:.4g} (peak {exp['peak']:g}): {verdict}")
    return out


def _ddp_scaling(rows: list[dict[str, Any]], *_: object) -> list[str]:
    tput = [r for r in rows if r["metric"] == "throughput" and r["value"] is not None]
    if not tput:
        return _worst_rows(rows)
    total = sum(r["value"] for r in tput)
    world = tput[0]["world_size"]
    return [f"throughput {total:.4g} samples/s at n={world}, recorded only: efficiency is "
            "judged against gates.scaling by `fleetval report`"]  # fmt: skip


_FIGURES: dict[str, Callable[..., list[str]]] = {
    "bandwidth": _bandwidth,
    "microbench": _microbench,
    "ddp_scaling": _ddp_scaling,
}
