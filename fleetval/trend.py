"""Trends: change points in a metric's nightly history, each named by the run where it stepped.

Every run contributes one value per identity: the median of its samples (per-iteration
busbw or latency, or per-device values), reduced exactly as `compare` reduces a run. The
series per identity is standardised by a robust noise estimate (MAD of successive
differences, so a step does not inflate it) and segmented with PELT (ruptures, L2 cost);
a change point is kept when the step between the segment medians is at least the
threshold, so nightly jitter never shows up as a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import ruptures as rpt

from fleetval.baselines import select_runs
from fleetval.compare import (
    ID_COLS,
    CompareError,
    Direction,
    Identity,
    Per,
    _node_models,
    _prepare,
    _reduce_run,
    _runs_in_order,
    metric_spec,
)
from fleetval.compare_settings import CompareSettings
from fleetval.store import Store


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    """A step in a series: `run_id` is the first run of the new level."""

    index: int
    run_id: str
    before: float  # median of the previous segment
    after: float  # median of the new segment
    change_pct: float
    worse: bool | None  # by the metric's direction; None when it has none


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

    @property
    def worst_exit_code(self) -> int:
        """1 when some step made a metric worse, else 0."""
        return int(any(c.worse for t in self.trends for c in t.change_points))


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
    breaks = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(z).predict(pen=pen)
    return [b for b in breaks if b < n]


def _series_points(
    ident: Identity, runs: list[str], values: np.ndarray, threshold_pct: float
) -> tuple[ChangePoint, ...]:
    direction = metric_spec(ident.metric).direction
    bounds = [0, *change_points(values), len(values)]
    out = []
    for k in range(1, len(bounds) - 1):
        before = float(np.median(values[bounds[k - 1] : bounds[k]]))
        after = float(np.median(values[bounds[k] : bounds[k + 1]]))
        change = (after / before - 1) * 100 if before else math.inf
        if abs(change) < threshold_pct:
            continue
        worse = None if direction is None else (change < 0) == (direction == Direction.HIGHER)
        out.append(
            ChangePoint(
                index=bounds[k], run_id=runs[bounds[k]], before=before, after=after,
                change_pct=change, worse=worse,
            )
        )  # fmt: skip
    return tuple(out)


def history(
    store: Store, run_ids: list[str], *, per: Per = "sku", settings: CompareSettings | None = None
) -> dict[Identity, tuple[list[str], list[float]]]:
    """Per identity: the runs (oldest first) that measured it and each run's median."""
    settings = settings or CompareSettings()
    models = _node_models(store.nodes(run_ids))
    out: dict[Identity, tuple[list[str], list[float]]] = {}
    for _, run_id, raw in _runs_in_order(store, [(0, r) for r in run_ids]):
        chunk = _reduce_run(
            _prepare(raw, models.get(run_id, {}), per, int(settings.latency_cutoff_bytes))
        )
        order = np.lexsort((chunk.samples, chunk.elem_group))
        v, g = chunk.samples[order], chunk.elem_group[order]
        n = np.bincount(g, minlength=len(chunk.keys))
        s = np.cumsum(n) - n
        for i, key in enumerate(chunk.keys.select(ID_COLS).to_pylist()):
            if n[i]:
                med = (v[s[i] + (n[i] - 1) // 2] + v[s[i] + n[i] // 2]) / 2
                runs, vals = out.setdefault(Identity(**key), ([], []))
                runs.append(run_id)
                vals.append(float(med))
    return out


def find_trends(
    store: Store,
    *,
    where: dict[str, str] | None = None,
    run_ids: list[str] | None = None,
    select: dict[str, str] | None = None,
    per: Per = "sku",
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
    settings = CompareSettings()
    if threshold_pct is not None:
        settings = settings.model_copy(update={"threshold_pct": threshold_pct})
    unknown = set(select or {}) - set(ID_COLS)
    if unknown:
        raise CompareError(
            f"unknown selector {', '.join(sorted(unknown))}; use {', '.join(ID_COLS)}"
        )
    trends, series = [], 0
    for ident, (rs, vals) in sorted(
        history(store, runs, per=per, settings=settings).items(), key=lambda kv: kv[0].label()
    ):
        if any(str(getattr(ident, k)) != v for k, v in (select or {}).items()):
            continue
        series += 1
        points = _series_points(ident, rs, np.array(vals), settings.threshold_for(ident.metric))
        if points:
            trends.append(
                Trend(identity=ident, run_ids=tuple(rs), values=tuple(vals), change_points=points)
            )
    return TrendReport(runs=tuple(runs), series=series, trends=tuple(trends))
