"""Compare candidate runs with a named baseline: the orchestration.

Front to back:

1. The baseline resolves to runs (candidates left out); settings come from the candidate
   suite's `compare:` section (or --threshold).
2. Every run's stored summaries become one value per identity (`reduction.run_values`):
   runs are the unit of replication, iterations only describe a run.
3. Per identity, the log run values of each side give a difference of means and a
   moderated pooled run-to-run variance (`statistics`); with one candidate run that is the
   prediction interval for a new run from the baseline's own spread.
4. Benjamini-Hochberg across identities, then `statistics.verdicts`, THE rule. Correctness
   and presence come first: wrong elements or failed rows in the candidate are FAILED, an
   identity the candidate lacks is MISSING.
5. Fleet outliers of each candidate run (`outliers`): late ranks, slow devices.

The gate (`Comparison.exit_code`) fails on regressions, failures, missing measurements,
outliers, and candidate runs whose own status is not `pass`; with `strict`, also on noisy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval import statistics as st
from fleetval.baselines import Baselines, resolve
from fleetval.compare_settings import CompareSettings, settings_from_suite_json
from fleetval.metrics import Direction, MetricDecl, infer, merge
from fleetval.outliers import Outlier, late_ranks, slow_devices
from fleetval.reduction import (
    DICT_COLS,
    ID_COLS,
    Identity,
    group_rows,
    human_bytes,
    run_values,
    segment_median,
)
from fleetval.results import ENV_COLUMNS
from fleetval.store import RunRecord, Store
from fleetval.vocab import Verdict

Per = Literal["node", "sku"]
# Versions that can explain a change; hostnames differ between nodes by nature.
ENV_DIFF_COLUMNS = tuple(c for c in ENV_COLUMNS if c != "hostname")


class CompareError(ValueError):
    """A comparison that cannot be made: no rows, nothing in common, overlapping sides."""


@dataclass(frozen=True, kw_only=True)
class MetricComparison:
    """One identity judged: the verdict and the numbers behind it."""

    identity: Identity
    verdict: Verdict
    direction: Direction
    unit: str
    threshold_pct: float
    baseline_median: float | None = None  # median of the baseline's run values
    candidate_median: float | None = None
    change_pct: float | None = None  # geometric-mean ratio of run values, candidate/baseline - 1
    ci_low_pct: float | None = None  # interval at settings.confidence (a prediction interval
    ci_high_pct: float | None = None  # when the candidate is one run)
    p_value: float | None = None  # two-sided, from the moderated t on run values
    q_value: float | None = None  # Benjamini-Hochberg across the identities tested
    run_sd_pct: float | None = None  # run-to-run spread used (moderated), percent
    n_baseline: int = 0  # runs per side
    n_candidate: int = 0
    wrong: int = 0  # wrong elements in the candidate
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class EnvChange:
    """An environment column whose values differ between the sides."""

    key: str
    baseline: tuple[str, ...]
    candidate: tuple[str, ...]


_GATE = (Verdict.REGRESSION, Verdict.FAILED, Verdict.MISSING)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Candidate runs against a baseline: per-identity verdicts, environment diff, outliers."""

    baseline: str
    baseline_selection: str  # how the baseline is defined (runs, or filters)
    baseline_runs: tuple[str, ...]  # what it resolved to for this comparison
    candidate_runs: tuple[str, ...]
    per: Per
    settings: CompareSettings
    results: tuple[MetricComparison, ...]
    env_diff: tuple[EnvChange, ...] = ()
    outliers: tuple[Outlier, ...] = ()
    notes: tuple[str, ...] = ()
    failed_candidates: tuple[str, ...] = ()  # candidate runs that neither passed nor warned

    def counts(self) -> dict[Verdict, int]:
        out = dict.fromkeys(Verdict, 0)
        for r in self.results:
            out[r.verdict] += 1
        return out

    @property
    def regressions(self) -> tuple[MetricComparison, ...]:
        return tuple(r for r in self.results if r.verdict in (Verdict.REGRESSION, Verdict.FAILED))

    def gate_reasons(self, strict: bool = False) -> list[str]:
        """Why the gate fails (empty: it passes)."""
        bad = (*_GATE, Verdict.NOISY) if strict else _GATE
        counts = self.counts()
        out = [f"{counts[v]} {v.value}" for v in bad if counts[v]]
        if self.outliers:
            out.append(f"{len(self.outliers)} fleet outlier(s)")
        if self.failed_candidates:
            out.append(f"candidate run(s) not passed: {', '.join(self.failed_candidates)}")
        return out

    def exit_code(self, strict: bool = False) -> int:
        """0: the gate passes; 1: it fails (see `gate_reasons`)."""
        return 1 if self.gate_reasons(strict) else 0

    @property
    def worst_exit_code(self) -> int:
        return self.exit_code(strict=False)


# -- inputs ----------------------------------------------------------------------------------


def _settings(
    records: dict[str, RunRecord], candidates: list[str], threshold_pct: float | None
) -> CompareSettings:
    """The candidate suite's `compare:` section; an explicit threshold replaces all of it."""
    settings = CompareSettings()
    for run_id in candidates:
        if records[run_id].suite_json:
            settings = settings_from_suite_json(records[run_id].suite_json)
            break
    if threshold_pct is not None:
        if threshold_pct <= 0:
            raise CompareError(f"--threshold must be a positive percentage, got {threshold_pct}")
        settings = settings.model_copy(
            update={"threshold_pct": float(threshold_pct), "metrics": {}}
        )
    return settings


def declarations(records: list[RunRecord]) -> dict[str, MetricDecl]:
    """Metric declarations recorded with the runs (newest first wins)."""
    return merge(m for r in reversed(records) for m in r.metrics)


def _decl(decls: dict[str, MetricDecl], metric: str, unit: str | None) -> MetricDecl:
    return decls.get(metric) or infer(metric, unit)


def _models(store: Store, runs: list[str]) -> pa.Table:
    return store.nodes(runs).select(["run_id", "node", "gpu_model"])


def _sku_of(models: pa.Table, run_id: str) -> dict[str, str]:
    mine = models.filter(pc.equal(models["run_id"], run_id))
    return {r["node"]: r["gpu_model"] or "unknown" for r in mine.to_pylist()}


# -- the statistics per identity ---------------------------------------------------------------


@dataclass
class _Judged:
    keys: list[dict]
    runs: np.ndarray  # [I, 2] runs present per side
    med: np.ndarray  # [I, 2]
    change: np.ndarray  # percent
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray
    q: np.ndarray
    sd: np.ndarray  # run-to-run sd, percent
    wrong: np.ndarray
    failed: np.ndarray


def _judge_values(
    values: pa.Table, candidates: list[str], settings: CompareSettings, decls: dict[str, MetricDecl]
) -> _Judged:
    side = (
        pc.is_in(values["run_id"], value_set=pa.array(candidates, pa.string()))
        .to_numpy(zero_copy_only=False)
        .astype(np.int64)
    )
    ident, first = group_rows(values, ID_COLS)
    nid = len(first)
    keys = values.select([*ID_COLS, "unit"]).take(pa.array(first)).to_pylist()
    v = values["value"].to_numpy(zero_copy_only=False).astype(float)
    ok = np.isfinite(v) & (v > 0)
    n, mean, ss = st.moments(ident[ok], side[ok], np.log(v[ok]), nid)
    df = np.maximum(n[:, 0] - 1, 0) + np.maximum(n[:, 1] - 1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = np.where(df > 0, ss.sum(axis=1) / df, np.nan)
    fam_names = [f"{k['check']}\x1f{k['metric']}" for k in keys]
    _, family = np.unique(fam_names, return_inverse=True)
    s2_post, df_post = st.moderated_variance(s2, df, family)
    diff, p, lo, hi = st.t_tests(n, mean, s2_post, df_post, settings.confidence)
    directed = np.array(
        [_decl(decls, k["metric"], k["unit"]).direction != Direction.NONE for k in keys], bool
    )
    p = np.where(directed, p, np.nan)
    med, _ = segment_median(v[ok], (ident * 2 + side)[ok], 2 * nid)
    seg = ident * 2 + side
    fail = values["failed"].to_numpy(zero_copy_only=False).astype(float)
    wrong = values["wrong"].to_numpy(zero_copy_only=False).astype(float)
    cand = side == 1
    return _Judged(
        keys=keys,
        runs=np.bincount(seg, minlength=2 * nid).reshape(nid, 2),
        med=med.reshape(nid, 2),
        change=np.expm1(diff) * 100,
        lo=np.expm1(lo) * 100,
        hi=np.expm1(hi) * 100,
        p=p,
        q=st.bh_adjust(p),
        sd=np.sqrt(s2_post) * 100,
        wrong=np.bincount(ident[cand], weights=np.nan_to_num(wrong[cand]), minlength=nid),
        failed=np.bincount(ident[cand], weights=np.nan_to_num(fail[cand]), minlength=nid) > 0,
    )


def judge(
    values: pa.Table,
    candidates: list[str],
    settings: CompareSettings,
    decls: dict[str, MetricDecl],
) -> list[MetricComparison]:
    """Verdicts from run values (`reduction.run_values`' table): the statistics alone, no
    store; `compare_runs` reads the store and calls this."""
    return _results(_judge_values(values, candidates, settings, decls), settings, decls)


def _results(
    j: _Judged, settings: CompareSettings, decls: dict[str, MetricDecl]
) -> list[MetricComparison]:
    specs = [_decl(decls, k["metric"], k["unit"]) for k in j.keys]
    sign = np.array([1.0 if s.direction == Direction.HIGHER else -1.0 for s in specs])
    t = np.array([settings.threshold_for(k["metric"]) for k in j.keys], dtype=float)
    stat = st.verdicts(sign * j.change, j.q, t, settings.fdr)
    cols = {name: _nums(arr) for name, arr in (
        ("bm", j.med[:, 0]), ("cm", j.med[:, 1]), ("ch", j.change), ("lo", j.lo), ("hi", j.hi),
        ("p", j.p), ("q", j.q), ("sd", j.sd))}  # fmt: skip
    out = []
    for i, k in enumerate(j.keys):
        verdict, reason = _one_verdict(i, j, specs[i], Verdict(stat[i]), t[i])
        out.append(
            MetricComparison(
                identity=Identity(**{c: k[c] for c in ID_COLS}),
                verdict=verdict,
                direction=specs[i].direction,
                unit=specs[i].unit or (k["unit"] or ""),
                threshold_pct=float(t[i]),
                baseline_median=cols["bm"][i],
                candidate_median=cols["cm"][i],
                change_pct=cols["ch"][i],
                ci_low_pct=cols["lo"][i],
                ci_high_pct=cols["hi"][i],
                p_value=cols["p"][i],
                q_value=cols["q"][i],
                run_sd_pct=cols["sd"][i],
                n_baseline=int(j.runs[i, 0]),
                n_candidate=int(j.runs[i, 1]),
                wrong=int(j.wrong[i]),
                reason=reason,
            )
        )
    return out


def _nums(x: np.ndarray) -> list[float | None]:
    """Floats as Python numbers, None where not finite (NaN and inf are not JSON)."""
    return [v if math.isfinite(v) else None for v in np.asarray(x, dtype=float).tolist()]


def _one_verdict(
    i: int, j: _Judged, spec: MetricDecl, stat: Verdict, t: float
) -> tuple[Verdict, str]:
    """Correctness first (absolute), then presence, then the statistics."""
    if j.failed[i]:
        what = f"{int(j.wrong[i])} wrong elements" if j.wrong[i] else "a failed row"
        return (
            Verdict.FAILED,
            f"correctness: {what} in the candidate (absolute, whatever the baseline)",
        )
    if not j.runs[i, 1]:
        return Verdict.MISSING, "measured in the baseline, not in the candidate"
    if not j.runs[i, 0]:
        return Verdict.NEW, "measured in the candidate, not in the baseline"
    if spec.name == "correct":
        return Verdict.UNCHANGED, "correct on both sides"
    if spec.direction == Direction.NONE:
        return Verdict.UNCHANGED, "no direction declared for this metric: judged by status only"
    if not np.isfinite(j.change[i]):
        return Verdict.NOISY, "no usable value on one side"
    nb, nc = int(j.runs[i, 0]), int(j.runs[i, 1])
    change = f"{j.change[i]:+.2f}%"
    if not np.isfinite(j.p[i]):
        return stat, (
            f"{change}; one run per side: the run-to-run spread is unknown, so no change is "
            f"supported (threshold {t:g}%); a baseline of 5+ runs gives verdicts"
        )
    kind = "prediction interval for one run" if nc == 1 else "interval"
    return stat, (
        f"{change} {kind} [{j.lo[i]:+.2f}, {j.hi[i]:+.2f}], run sd {j.sd[i]:.2g}%, "
        f"q={j.q[i]:.2g} ({nb}+{nc} runs), threshold {t:g}%"
    )


# -- environment diff and outliers -----------------------------------------------------------


def environment_diff(
    store: Store,
    baseline_runs: list[str],
    candidate_runs: list[str],
    *,
    nodes: pa.Table | None = None,
) -> tuple[EnvChange, ...]:
    """Environment columns whose distinct values differ between the two sides."""
    nodes = store.nodes(baseline_runs + candidate_runs) if nodes is None else nodes

    def values(runs: list[str]) -> dict[str, tuple[str, ...]]:
        t = nodes.filter(pc.is_in(nodes["run_id"], value_set=pa.array(runs, pa.string())))
        return {c: tuple(sorted({str(v) for v in t[c].to_pylist() if v})) for c in ENV_DIFF_COLUMNS}

    b, c = values(baseline_runs), values(candidate_runs)
    return tuple(
        EnvChange(key=k, baseline=b[k], candidate=c[k]) for k in ENV_DIFF_COLUMNS if b[k] != c[k]
    )


# what `slow_devices` reads of a run's rows: the per-device measurements, not the samples
_DEVICE_COLS = ["check", "metric", "unit", "value", "dtype", "size_bytes", "world_size", "rank",
                "node", "device_id"]  # fmt: skip


def run_outliers(
    store: Store,
    record: RunRecord,
    settings: CompareSettings,
    decls: dict[str, MetricDecl],
    models: pa.Table,
) -> list[Outlier]:
    """Late ranks and slow devices of one run: its ranks' stored lateness, and its rows that
    carry a metric (the per-device measurements); never its per-iteration samples."""
    sku_of = _sku_of(models, record.run_id)
    late = late_ranks(record.run_id, store.lateness(record.run_id), sku_of, settings)
    rows = store.results(
        [record.run_id],
        columns=_DEVICE_COLS,
        dictionary=tuple(c for c in DICT_COLS if c in _DEVICE_COLS),
        having="metric",
    )
    rows = rows.unify_dictionaries().combine_chunks()
    return late + slow_devices(record.run_id, rows, sku_of, decls, settings)


def fleet_outliers(
    store: Store, run_id: str, *, settings: CompareSettings | None = None
) -> tuple[Outlier, ...]:
    """Fleet-relative outliers of one run, no baseline needed."""
    record = store.run(run_id)
    settings = settings or settings_from_suite_json(record.suite_json)
    models = _models(store, [run_id])
    return tuple(run_outliers(store, record, settings, declarations([record]), models))


# -- the entry point -------------------------------------------------------------------------


def compare_runs(
    store: Store,
    baseline: str,
    candidate_run_ids: list[str],
    *,
    per: Per = "sku",
    threshold_pct: float | None = None,
) -> Comparison:
    """Judge candidate runs against the named baseline; see the module docstring."""
    if per not in ("node", "sku"):
        raise CompareError(f"--per must be node or sku, got {per!r}")
    if not candidate_run_ids:
        raise CompareError("no candidate run given")
    candidates = list(dict.fromkeys(candidate_run_ids))
    records = {r.run_id: r for r in store.runs()}  # NOTE: read once; every read scans the files
    absent = [r for r in candidates if r not in records]
    if absent:
        raise CompareError(
            f"no run {', '.join(absent)} in {store.root}; `fleetval runs` lists them"
        )
    resolved = resolve(store, Baselines(store).get(baseline), runs=list(records.values()))
    settings = _settings(records, candidates, threshold_pct)
    base_runs = [r for r in resolved.run_ids if r not in candidates]
    notes = []
    if len(base_runs) < len(resolved.run_ids):
        notes.append("candidate runs matched by the baseline were left out of the baseline side")
    if not base_runs:
        raise CompareError(f"baseline {baseline!r} resolves only to the candidate runs themselves")
    all_runs = base_runs + candidates
    nodes = store.nodes(all_runs)
    models = nodes.select(["run_id", "node", "gpu_model"])
    values = run_values(
        store.summaries(all_runs),
        models=models if per == "sku" else None,
        cutoff_bytes=int(settings.latency_cutoff_bytes),
    )
    _require_rows(values, base_runs, candidates)
    decls = declarations([records[r] for r in all_runs])
    results = judge(values, candidates, settings, decls)
    if not any(r.verdict not in (Verdict.NEW, Verdict.MISSING) for r in results):
        raise CompareError(_nothing_in_common(results, per))
    outliers = [
        o for c in candidates for o in run_outliers(store, records[c], settings, decls, models)
    ]
    notes += _side_notes(len(base_runs), len(candidates))
    # NOTE: `warn` (late ranks) passes here: the outliers judge lateness against the fleet
    failed = tuple(c for c in candidates if records[c].status not in ("pass", "warn"))
    return Comparison(
        baseline=baseline,
        baseline_selection=resolved.baseline.describe(),
        baseline_runs=tuple(base_runs),
        candidate_runs=tuple(candidates),
        per=per,
        settings=settings,
        results=tuple(sorted(results, key=_sort_key)),
        env_diff=environment_diff(store, base_runs, candidates, nodes=nodes),
        outliers=tuple(outliers),
        notes=tuple(notes),
        failed_candidates=failed,
    )


def _side_notes(nb: int, nc: int) -> list[str]:
    if nb == 1 and nc == 1:
        return [
            "one run per side: run-to-run spread unknown, so changes are at most noisy; "
            "a baseline of 5+ runs gives regression verdicts"
        ]
    if nc == 1:
        return [
            f"one candidate run: judged by a prediction interval from the {nb} baseline runs' spread"
        ]
    return []


_VERDICT_ORDER = {v: i for i, v in enumerate(
    [Verdict.FAILED, Verdict.REGRESSION, Verdict.MISSING, Verdict.NOISY, Verdict.NEW,
     Verdict.IMPROVEMENT, Verdict.UNCHANGED]
)}  # fmt: skip


def _sort_key(r: MetricComparison) -> tuple:
    i = r.identity
    return (_VERDICT_ORDER[r.verdict], i.check, i.collective or "", i.op or "", i.dtype or "",
            i.world_size, i.group, i.size_bytes or 0, i.metric)  # fmt: skip


def _require_rows(values: pa.Table, base: list[str], cand: list[str]) -> None:
    present = set(pc.unique(values["run_id"]).to_pylist())
    for which, runs in (("baseline", base), ("candidate", cand)):
        if not present & set(runs):
            raise CompareError(
                f"the {which} runs ({', '.join(runs)}) have no comparable result rows"
            )


def _nothing_in_common(results: list[MetricComparison], per: Per) -> str:
    """Explain why no identity is on both sides: which dimension differs."""
    lines = ["no measurement is in both the baseline and the candidate; they differ in:"]
    for col in ID_COLS:
        b = sorted({str(getattr(r.identity, col)) for r in results if r.verdict == Verdict.MISSING})
        c = sorted({str(getattr(r.identity, col)) for r in results if r.verdict == Verdict.NEW})
        if b != c:
            lines.append(f"  {col}: baseline {', '.join(b[:8])}; candidate {', '.join(c[:8])}")
    if per == "node":
        lines.append(
            "  (per node: rows meet only on the same node; --per sku matches by GPU model)"
        )
    return "\n".join(lines)


__all__ = [
    "CompareError",
    "Comparison",
    "Direction",
    "EnvChange",
    "Identity",
    "MetricComparison",
    "Outlier",
    "compare_runs",
    "declarations",
    "environment_diff",
    "fleet_outliers",
    "human_bytes",
    "judge",
]
