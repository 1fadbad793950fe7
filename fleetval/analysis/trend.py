"""Trends: change points in a metric's nightly history, each named by the run where it stepped.

Every run contributes one value per identity: its run value from the stored summaries
(`reduction.run_values`, exactly what compare judges). The series per identity is
standardised by a robust noise estimate (MAD of successive differences, so a step does not
inflate it) and segmented with PELT (ruptures, L2 cost); a change point is kept when the
step between the segment medians is at least the threshold (the newest run's suite
`compare:` section, or --threshold), so nightly jitter never shows up as a step.

A worse step that a later step brings back within the threshold of the level before it
is reported as recovered and does not fail; each step names the environment versions that
changed between the run before it and the run at it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.analysis.baselines import select_runs
from fleetval.analysis.compare import CompareError, EnvChange, Per, declarations, environment_diff
from fleetval.analysis.compare_settings import (
    DEFAULT_PER,
    CompareSettings,
    settings_from_suite_json,
)
from fleetval.analysis.runvalues import ID_COLS, MODEL_COLUMNS, Identity, run_values
from fleetval.metrics import Direction, infer
from fleetval.store.dataset import Store


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    """A step in a series: `run_id` is the first run of the new level."""

    index: int
    run_id: str
    before: float  # median of the previous segment
    after: float  # median of the new segment
    change_pct: float
    worse: bool | None  # by the metric's direction; None when it has none
    recovered_at: str | None = None  # a later run where the level came back (worse steps only)
    env_changes: tuple[EnvChange, ...] = ()  # versions that changed between the runs around it


@dataclass(frozen=True, kw_only=True)
class Trend:
    """One identity's history and its change points."""

    identity: Identity
    run_ids: tuple[str, ...]
    values: tuple[float, ...]
    change_points: tuple[ChangePoint, ...]


@dataclass(frozen=True, kw_only=True)
class TrendReport:
    runs: tuple[str, ...]
    series: int  # identities with a history long enough to segment
    trends: tuple[Trend, ...]  # those with at least one change point
    threshold_pct: float = 5.0

    @property
    def worst_exit_code(self) -> int:
        """1 when some step made a metric worse and it has not recovered, else 0."""
        return int(
            any(c.worse and c.recovered_at is None for t in self.trends for c in t.change_points)
        )


def change_points(
    values: np.ndarray, *, min_size: int = 3, penalty: float | None = None
) -> list[int]:
    """Indices where a new level starts (PELT on the robustly standardised series)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * min_size:
        return []
    diffs = np.abs(np.diff(x) - np.median(np.diff(x)))
    sigma = 1.4826 * float(np.median(diffs)) / math.sqrt(2)
    if not sigma > 0:
        sigma = float(np.std(x)) or 1.0
    z = ((x - np.median(x)) / sigma).reshape(-1, 1)
    # NOTE: a BIC-like penalty on unit-variance data: 3 log n keeps pure noise unsegmented
    pen = penalty if penalty is not None else 3.0 * math.log(n)
    import ruptures as rpt  # NOTE: imports scipy.stats (~0.3 s): only when there is a series

    # NOTE: PELT on the L2 cost, in ruptures' C kernel (a linear kernel's cost is the L2 one):
    # the same breaks as Pelt(model="l2", jump=1) (tests/unit/test_trend.py checks), whose
    # Python cost calls np.var per candidate segment: 300 random series took 24 s, here 0.03 s
    breaks = rpt.KernelCPD(kernel="linear", min_size=min_size).fit(z).predict(pen=pen)
    return [b for b in breaks if b < n]


def _series_points(
    runs: list[str], values: np.ndarray, threshold_pct: float, direction: Direction
) -> tuple[ChangePoint, ...]:
    bounds = [0, *change_points(values), len(values)]
    points: list[ChangePoint] = []
    for k in range(1, len(bounds) - 1):
        before = float(np.median(values[bounds[k - 1] : bounds[k]]))
        after = float(np.median(values[bounds[k] : bounds[k + 1]]))
        change = (after / before - 1) * 100 if before else math.inf
        if abs(change) < threshold_pct:
            continue
        worse = (
            None if direction == Direction.NONE else (change < 0) == (direction == Direction.HIGHER)
        )
        points.append(
            ChangePoint(
                index=bounds[k], run_id=runs[bounds[k]], before=before, after=after,
                change_pct=change, worse=worse,
                recovered_at=_recovery(runs, values, bounds, k, before, threshold_pct) if worse else None,
            )
        )  # fmt: skip
    return tuple(points)


def _recovery(
    runs: list[str], values: np.ndarray, bounds: list[int], k: int, before: float, t: float
) -> str | None:
    """The first later segment whose median is back within t% of the level before step k."""
    for j in range(k + 1, len(bounds) - 1):
        level = float(np.median(values[bounds[j] : bounds[j + 1]]))
        if before and abs(level / before - 1) * 100 < t:
            return runs[bounds[j]]
    return None


def history(
    store: Store,
    run_ids: list[str],
    *,
    per: Per = DEFAULT_PER,
    settings: CompareSettings | None = None,
) -> dict[Identity, tuple[list[str], list[float]]]:
    """Per identity: the runs (oldest first) that measured it and each run's value."""
    settings = settings or CompareSettings()
    models = store.nodes(run_ids).select(MODEL_COLUMNS)
    values = run_values(
        store.summaries(run_ids),
        models=models if per == "sku" else None,
        cutoff_bytes=int(settings.latency_cutoff_bytes),
    )
    values = values.filter(pc.is_finite(values["value"]))
    order = {r: i for i, r in enumerate(run_ids)}
    out: dict[Identity, tuple[list[str], list[float]]] = {}
    recs = sorted(values.to_pylist(), key=lambda r: order[r["run_id"]])
    for rec in recs:
        runs, vals = out.setdefault(Identity(**{c: rec[c] for c in ID_COLS}), ([], []))
        runs.append(rec["run_id"])
        vals.append(float(rec["value"]))
    return out


def _trend_settings(store: Store, runs: list[str], threshold_pct: float | None) -> CompareSettings:
    """The newest run's suite `compare:` section; --threshold replaces its thresholds."""
    newest = store.run(runs[-1])
    settings = settings_from_suite_json(newest.suite_json)
    if threshold_pct is not None:
        settings = settings.model_copy(update={"threshold_pct": threshold_pct, "metrics": {}})
    return settings


def find_trends(
    store: Store,
    *,
    where: dict[str, str] | None = None,
    run_ids: list[str] | None = None,
    select: dict[str, str] | None = None,
    per: Per = DEFAULT_PER,
    threshold_pct: float | None = None,
    last: int | None = None,
) -> TrendReport:
    """Change points of every identity over the runs chosen by `where` (or `run_ids`).

    `select` narrows the identities: field=value on Identity (check, collective, op, dtype,
    size_bytes, world_size, metric, group); values compare as strings.
    """
    runs = list(run_ids) if run_ids else select_runs(store, where or {})
    if last:
        runs = runs[-last:]
    if not runs:
        raise CompareError("no run matches; `fleetval runs` lists them")
    unknown = set(select or {}) - set(ID_COLS)
    if unknown:
        raise CompareError(
            f"unknown selector {', '.join(sorted(unknown))}; use {', '.join(ID_COLS)}"
        )
    settings = _trend_settings(store, runs, threshold_pct)
    decls = declarations([store.run(r) for r in runs])
    nodes = store.nodes(runs)
    trends, series = [], 0
    for ident, (rs, vals) in sorted(
        history(store, runs, per=per, settings=settings).items(), key=lambda kv: kv[0].label()
    ):
        if any(str(getattr(ident, k)) != v for k, v in (select or {}).items()):
            continue
        series += 1
        direction = (decls.get(ident.metric) or infer(ident.metric, None)).direction
        points = _series_points(rs, np.array(vals), settings.threshold_for(ident.metric), direction)
        points = tuple(_with_env(p, rs, store, nodes) for p in points)
        if points:
            trends.append(
                Trend(identity=ident, run_ids=tuple(rs), values=tuple(vals), change_points=points)
            )
    return TrendReport(
        runs=tuple(runs), series=series, trends=tuple(trends), threshold_pct=settings.threshold_pct
    )


def _with_env(p: ChangePoint, runs: list[str], store: Store, nodes: pa.Table) -> ChangePoint:
    before, at = runs[p.index - 1], runs[p.index]
    return replace(p, env_changes=environment_diff(store, [before], [at], nodes=nodes))
