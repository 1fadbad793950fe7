"""Compare candidate runs with a named baseline: the orchestration.

Front to back:

1. The baseline resolves to runs (candidates left out); settings come from the candidate
   suite's `compare:` section (or --threshold).
2. Every run's stored summaries become one value per identity (`reduction.run_values`):
   runs are the unit of replication, iterations only describe a run.
3. Per identity, the log run values of each side give a difference of means, judged by
   its run-to-run variance: its own runs, its history (up to `history_runs` earlier runs
   of the candidates' suite, outside the baseline: `statistics.history_variance`) and its
   family of identities (one check, pooled across its metrics where their spreads agree:
   `statistics`); with one candidate run that is the prediction interval for a new run from
   the baseline's spread. Each result says the df each source gave.
4. Benjamini-Hochberg across identities, then `statistics.verdicts`, THE rule. Correctness
   and presence come first: wrong elements or failed rows in the candidate are FAILED, an
   identity the candidate lacks is MISSING.
5. Fleet outliers of each candidate run (`outliers`): late ranks, slow devices.

The gate (`Comparison.exit_code`) fails on regressions, failures, missing measurements,
outliers, and candidate runs that did not pass in their own right
(`fleetval.status.passes_for_compare`: pass or warn); with `strict`, also on noisy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.analysis import statistics as st
from fleetval.analysis.baselines import Baselines, resolve
from fleetval.analysis.compare_settings import (
    DEFAULT_PER,
    CompareSettings,
    Per,
    settings_from_suite_json,
)
from fleetval.analysis.outliers import Outlier, late_rank_outliers, slow_devices
from fleetval.analysis.runvalues import ID_COLS, MODEL_COLUMNS, Identity, group_name, run_values
from fleetval.arrays import arrow, dict_codes, group_rows, np_col, segment_median
from fleetval.metrics import Direction, MetricDecl, infer, merge
from fleetval.status import passes_for_compare, usable_as_baseline
from fleetval.store.dataset import Store
from fleetval.store.records import Run, RunFilter
from fleetval.store.schema import DICT_COLS, ENV_COLUMNS
from fleetval.text import human_bytes
from fleetval.vocab import Verdict

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
    p_value: float | None = None  # two-sided, from the run values (statistics.tests)
    q_value: float | None = None  # Benjamini-Hochberg across the identities tested
    run_sd_pct: float | None = None  # run-to-run spread used (moderated), percent
    n_baseline: int = 0  # runs per side
    n_candidate: int = 0
    history_runs: int = 0  # earlier runs of this identity that informed its run sd
    # what the run sd rests on beyond the runs compared: "own" (those alone), "history",
    # "family", "history+family"; None when no test was made
    variance_from: str | None = None
    # the test's degrees of freedom and their sources: own runs + history + what the family
    # prior was worth (statistics.Tests), from `family_size` other measurements; few df
    # (a wide interval) is why a large change can still be `noisy`
    df: int | None = None
    own_df: int | None = None
    history_df: int | None = None
    family_df: int | None = None
    family_size: int | None = None
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
    results: Sequence[MetricComparison]  # `Results` from compare_runs: made as they are read
    env_diff: tuple[EnvChange, ...] = ()
    outliers: tuple[Outlier, ...] = ()
    notes: tuple[str, ...] = ()
    history_runs: tuple[str, ...] = ()  # earlier runs read for the run-to-run variances
    failed_candidates: tuple[
        str, ...
    ] = ()  # not passed in their own right (status.passes_for_compare)

    def counts(self) -> dict[Verdict, int]:
        if isinstance(self.results, Results):
            return self.results.counts()
        out = dict.fromkeys(Verdict, 0)
        for r in self.results:
            out[r.verdict] += 1
        return out

    def having(self, *verdicts: Verdict) -> tuple[MetricComparison, ...]:
        """The results with one of these verdicts, in order."""
        if isinstance(self.results, Results):
            return self.results.having(*verdicts)
        return tuple(r for r in self.results if r.verdict in verdicts)

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


# -- inputs ----------------------------------------------------------------------------------


def _settings(
    records: dict[str, Run], candidates: list[str], threshold_pct: float | None
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


def declarations(records: list[Run]) -> dict[str, MetricDecl]:
    """Metric declarations recorded with the runs (newest first wins)."""
    return merge(m for r in reversed(records) for m in r.metrics)


def _decl(decls: dict[str, MetricDecl], metric: str, unit: str | None) -> MetricDecl:
    return decls.get(metric) or infer(metric, unit)


def _models(store: Store, runs: list[str]) -> pa.Table:
    return store.nodes(runs).select(MODEL_COLUMNS)


def _sku_of(models: pa.Table, run_id: str) -> dict[str, str]:
    mine = models.filter(pc.is_in(models["run_id"], value_set=arrow([run_id])))
    return {r["node"]: group_name(r) for r in mine.to_pylist()}


# -- the statistics per identity ---------------------------------------------------------------


# -- the statistics per identity ---------------------------------------------------------------

_VERDICTS = list(Verdict)  # verdict code -> Verdict
_CODE = {v: i for i, v in enumerate(_VERDICTS)}
_VERDICT_ORDER = {v: i for i, v in enumerate(
    [Verdict.FAILED, Verdict.REGRESSION, Verdict.MISSING, Verdict.NOISY, Verdict.NEW,
     Verdict.IMPROVEMENT, Verdict.UNCHANGED]
)}  # fmt: skip
# Why an identity has its verdict (which reason it gets), in the order the rule asks:
# correctness first (absolute), then presence, then the statistics.
_FAILED, _MISSING, _NEW, _CORRECT, _UNDIRECTED, _UNUSABLE, _ONE_RUN, _TESTED = range(8)
_RULED = {_FAILED: Verdict.FAILED, _MISSING: Verdict.MISSING, _NEW: Verdict.NEW,
          _CORRECT: Verdict.UNCHANGED, _UNDIRECTED: Verdict.UNCHANGED,
          _UNUSABLE: Verdict.NOISY}  # fmt: skip
_STRING_IDS = ("check", "collective", "op", "dtype", "metric", "group")


@dataclass
class _Judged:
    """Per identity (arrays of length I, identities in group order): what it is, the
    statistics, and the verdict of THE rule with why."""

    codes: dict[str, np.ndarray]  # string identity column (and unit) -> index into names[col]
    names: dict[str, list]  # the column's values, then None (for nulls)
    size: list[int | None]
    world: list[int]
    spec: np.ndarray  # index into specs
    specs: list[tuple[MetricDecl, str]]  # (declaration, unit shown) per (metric, unit) seen
    threshold: np.ndarray
    runs: np.ndarray  # [I, 2] runs present per side
    run_values: tuple[np.ndarray, np.ndarray]  # usable run values, and their identity x 2 + side
    change: np.ndarray  # percent
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray
    q: np.ndarray
    sd: np.ndarray  # run-to-run sd, percent
    history: np.ndarray  # earlier runs of the identity read for its variance
    source: np.ndarray  # index into _SOURCES
    dfs: dict[str, np.ndarray]  # the test's df and its parts (_DFS), NaN when untested
    wrong: np.ndarray
    verdict: np.ndarray  # index into _VERDICTS
    why: np.ndarray  # _FAILED .. _TESTED

    @cached_property
    def med(self) -> np.ndarray:
        """[I, 2] median run value per side: shown, never judged, so made when first read."""
        med, _ = segment_median(*self.run_values, 2 * len(self.runs))
        return med.reshape(-1, 2)


_SOURCES = [None, "own", "history", "family", "history+family"]
_DFS = ("df", "own_df", "history_df", "family_df", "family_size")


def judge(
    values: pa.Table,
    candidates: list[str],
    settings: CompareSettings,
    decls: dict[str, MetricDecl],
    history: Sequence[str] = (),
) -> Results:
    """Verdicts from run values (`reduction.run_values`' table), in display order: the
    statistics alone, no store; `compare_runs` reads the store and calls this. Rows of the
    `history` runs inform the run-to-run variances only (the rest are the baseline)."""
    in_cand = pc.is_in(values["run_id"], value_set=arrow(candidates, pa.string()))
    side = np_col(in_cand).astype(np.int64)
    ident, first = group_rows(values, ID_COLS)
    past = np.zeros(len(values), bool)
    if history:
        past = np_col(pc.is_in(values["run_id"], value_set=arrow(list(history), pa.string())))
        # identities measured only in the history are not compared: renumber the others
        present = np.bincount(ident[~past], minlength=len(first)) > 0
        ident = np.where(present[ident], np.cumsum(present)[ident] - 1, -1)
        first = first[present]
    nid = len(first)
    codes, names = {}, {}
    for col in (*_STRING_IDS, "unit"):
        col_codes, col_names = dict_codes(values[col])  # null: -1, here None after the names
        codes[col] = np.where(col_codes < 0, len(col_names), col_codes)[first]
        names[col] = [*col_names, None]
    metrics, units = names["metric"], names["unit"]
    # a declaration per (metric, unit): an undeclared metric's direction comes from its unit
    pairs, spec = np.unique(codes["metric"] * len(units) + codes["unit"], return_inverse=True)
    specs = []
    for pair in pairs.tolist():
        metric, unit = metrics[pair // len(units)], units[pair % len(units)]
        decl = _decl(decls, metric, unit)
        specs.append((decl, decl.unit or (unit or "")))
    sign = np.array([d.direction.sign for d, _ in specs], float)[spec]
    directed = np.array([d.direction != Direction.NONE for d, _ in specs], bool)[spec]
    correct = np.array([d.name == "correct" for d, _ in specs], bool)[spec]
    thresholds = [settings.threshold_for(m) if m is not None else 0.0 for m in metrics]
    threshold = np.array(thresholds, dtype=float)[codes["metric"]]

    v = np_col(values["value"]).astype(float, copy=False)
    usable = np.isfinite(v) & (v > 0)
    ok = usable & ~past
    n, mean, ss = st.moments(ident[ok], side[ok], np.log(v[ok]), nid)
    hist = _history(values, ident, usable & past & (ident >= 0), v, nid)
    stats = st.history_variance(hist) if hist.shape[1] else st.NO_HISTORY
    family, regime = _families(codes, names, directed & ~correct)
    tests = st.tests(n, mean, ss, family, settings.confidence, stats, regime)
    p = np.where(directed, tests.p, np.nan)
    q = st.bh_adjust(p)
    change = np.expm1(tests.diff) * 100
    stat = st.verdicts(sign * change, q, threshold, settings.fdr)

    seg = ident * 2 + side
    runs = np.bincount(seg[~past], minlength=2 * nid).reshape(nid, 2)
    cand = side == 1

    def candidate_sum(col: str) -> np.ndarray:
        x = np.nan_to_num(np_col(values[col]).astype(float)[cand])
        return np.bincount(ident[cand], weights=x, minlength=nid)

    wrong = candidate_sum("wrong")
    why = np.select(
        [candidate_sum("failed") > 0, runs[:, 1] == 0, runs[:, 0] == 0, correct, ~directed,
         ~np.isfinite(change), ~np.isfinite(p)],
        [_FAILED, _MISSING, _NEW, _CORRECT, _UNDIRECTED, _UNUSABLE, _ONE_RUN],
        _TESTED,
    )  # fmt: skip
    tested = np.isfinite(tests.p)
    source = np.where(tested, 1 + (tests.history_df > 0) + 2 * (tests.family_df > 0), 0)
    verdict = np.array([_CODE[Verdict(x)] for x in stat.tolist()], np.int64)
    for w, ruled in _RULED.items():
        verdict[why == w] = _CODE[ruled]
    take = arrow(first)
    return Results(_Judged(
        codes=codes, names=names, size=values["size_bytes"].take(take).to_pylist(),
        world=values["world_size"].take(take).to_pylist(), spec=spec, specs=specs,
        threshold=threshold, runs=runs, run_values=(v[ok], seg[ok]), change=change,
        lo=np.expm1(tests.lo) * 100, hi=np.expm1(tests.hi) * 100, p=p, q=q, sd=tests.sd * 100,
        history=np.isfinite(hist).sum(axis=1), source=source,
        dfs={name: getattr(tests, name) for name in _DFS}, wrong=wrong, verdict=verdict, why=why,
    ))  # fmt: skip


def _history(
    values: pa.Table, ident: np.ndarray, rows: np.ndarray, v: np.ndarray, nid: int
) -> np.ndarray:
    """[identities, runs] the log values of each identity's history, oldest first (run ids
    sort by start), NaN after its last; runs with a failed or wrong row of it left out."""
    rows = rows & (np_col(values["failed"]) == 0) & (np_col(values["wrong"]) == 0)
    run, run_names = dict_codes(values["run_id"])
    start_order = np.argsort(np.argsort(np.array(run_names, dtype=str)))[run[rows]]
    who = ident[rows]
    order = np.lexsort((start_order, who))
    who, x = who[order], np.log(v[rows][order])
    count = np.bincount(who, minlength=nid)
    out = np.full((nid, int(count.max(initial=0))), np.nan)
    out[who, np.arange(len(who)) - (np.cumsum(count) - count)[who]] = x
    return out


def _families(
    codes: dict[str, np.ndarray], names: dict[str, list], judged: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Per identity its family (one check: its relative spreads, log run values, may all be
    alike) and its regime within it (one check's metric: latency-bound sizes and busbw-bound
    ones may differ); `statistics.moderated` pools a family only where its regimes agree.
    Metrics not `judged` (correctness, undirected) stay in a family of their own regime."""
    regime = codes["check"] * (len(names["metric"]) + 1) + codes["metric"]
    return np.where(judged, codes["check"], -1 - regime), regime


def _display_order(j: _Judged) -> np.ndarray:
    """Identities by verdict (worst first), then check, collective, op, dtype, world size,
    group, size and metric."""

    def rank(col: str) -> np.ndarray:  # strings ordered as Python orders them; None as ""
        _, r = np.unique(np.array([x or "" for x in j.names[col]], dtype=str), return_inverse=True)
        return r[j.codes[col]]

    by_verdict = np.array([_VERDICT_ORDER[v] for v in _VERDICTS])[j.verdict]
    world = np.array([w if w is not None else -1 for w in j.world], np.int64)
    size = np.array([s or 0 for s in j.size], np.int64)
    keys = (by_verdict, rank("check"), rank("collective"), rank("op"), rank("dtype"), world,
            rank("group"), size, rank("metric"))  # fmt: skip
    return np.lexsort(keys[::-1])


def _none_if_not_finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # NaN and inf are not JSON


def _int_or_none(x: float) -> int | None:
    return int(x) if math.isfinite(x) else None


class Results(Sequence[MetricComparison]):
    """A comparison's per-identity verdicts, in display order (worst verdict first).

    Held as arrays: a `MetricComparison` (with its reason) is made when it is first read,
    so judging 30,000 identities makes Python objects only for those someone looks at.
    `counts` and `having` answer without making the others. Compares equal to any sequence
    of the same MetricComparisons (a tuple of them, as before).
    """

    def __init__(self, judged: _Judged) -> None:
        self._j = judged
        self._order = _display_order(judged)
        self._made: list[MetricComparison | None] = [None] * len(self._order)

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, k: int) -> MetricComparison: ...
    @overload
    def __getitem__(self, k: slice) -> tuple[MetricComparison, ...]: ...
    def __getitem__(self, k: int | slice) -> MetricComparison | tuple[MetricComparison, ...]:
        if isinstance(k, slice):
            return tuple(self._item(i) for i in range(*k.indices(len(self))))
        return self._item(range(len(self))[k])

    def __iter__(self) -> Iterator[MetricComparison]:
        return (self._item(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {v.value}" for v, n in self.counts().items() if n)
        return f"Results({len(self)}: {counts})"

    def verdicts(self) -> list[Verdict]:
        """Each result's verdict, in order, without making the results."""
        return [_VERDICTS[c] for c in self._j.verdict[self._order].tolist()]

    def counts(self) -> dict[Verdict, int]:
        n = np.bincount(self._j.verdict, minlength=len(_VERDICTS)).tolist()
        return {v: n[_CODE[v]] for v in Verdict}

    def having(self, *verdicts: Verdict) -> tuple[MetricComparison, ...]:
        """The results with one of these verdicts, in order (only those are made)."""
        wanted = np.isin(self._j.verdict[self._order], [_CODE[v] for v in verdicts])
        return tuple(self._item(i) for i in np.flatnonzero(wanted).tolist())

    def _item(self, k: int) -> MetricComparison:
        made = self._made[k]
        if made is None:
            made = self._made[k] = self._make(int(self._order[k]))
        return made

    @cached_property
    def _py(self) -> dict[str, list]:
        """The judged arrays as Python lists (indexing those is what making a result costs)."""
        j = self._j
        arrays = {
            "baseline_median": j.med[:, 0], "candidate_median": j.med[:, 1],
            "change_pct": j.change, "ci_low_pct": j.lo, "ci_high_pct": j.hi, "p_value": j.p,
            "q_value": j.q, "run_sd_pct": j.sd, "threshold": j.threshold, "wrong": j.wrong,
            "n_baseline": j.runs[:, 0], "n_candidate": j.runs[:, 1], "verdict": j.verdict,
            "history": j.history, "source": j.source, **j.dfs,
            "why": j.why, "spec": j.spec, **{c: j.codes[c] for c in _STRING_IDS},
        }  # fmt: skip
        return {name: arr.tolist() for name, arr in arrays.items()}

    def _make(self, i: int) -> MetricComparison:
        j, py = self._j, self._py
        names, (decl, unit) = j.names, j.specs[py["spec"][i]]
        num = [_none_if_not_finite(py[name][i]) for name in _SHOWN]
        return MetricComparison(
            identity=Identity(
                check=names["check"][py["check"][i]],
                collective=names["collective"][py["collective"][i]],
                op=names["op"][py["op"][i]],
                dtype=names["dtype"][py["dtype"][i]],
                size_bytes=j.size[i],
                world_size=j.world[i],
                metric=names["metric"][py["metric"][i]],
                group=names["group"][py["group"][i]],
            ),
            verdict=_VERDICTS[py["verdict"][i]],
            direction=decl.direction,
            unit=unit,
            threshold_pct=py["threshold"][i],
            baseline_median=num[0],
            candidate_median=num[1],
            change_pct=num[2],
            ci_low_pct=num[3],
            ci_high_pct=num[4],
            p_value=num[5],
            q_value=num[6],
            run_sd_pct=num[7],
            n_baseline=py["n_baseline"][i],
            n_candidate=py["n_candidate"][i],
            history_runs=py["history"][i],
            variance_from=_SOURCES[py["source"][i]],
            **{name: _int_or_none(py[name][i]) for name in _DFS},
            wrong=int(py["wrong"][i]),
            reason=_reason(py, i),
        )


_SHOWN = ("baseline_median", "candidate_median", "change_pct", "ci_low_pct", "ci_high_pct",
          "p_value", "q_value", "run_sd_pct")  # fmt: skip


def _reason(py: dict[str, list], i: int) -> str:
    why, t, wrong = py["why"][i], py["threshold"][i], py["wrong"][i]
    if why == _FAILED:
        what = f"{int(wrong)} wrong elements" if wrong else "a failed row"
        return f"correctness: {what} in the candidate (absolute, whatever the baseline)"
    if why == _MISSING:
        return "measured in the baseline, not in the candidate"
    if why == _NEW:
        return "measured in the candidate, not in the baseline"
    if why == _CORRECT:
        return "correct on both sides"
    if why == _UNDIRECTED:
        return "no direction declared for this metric: judged by status only"
    if why == _UNUSABLE:
        return "no usable value on one side"
    nb, nc = py["n_baseline"][i], py["n_candidate"][i]
    change = f"{py['change_pct'][i]:+.2f}%"
    if why == _ONE_RUN:
        return (
            f"{change}; one run per side: the run-to-run spread is unknown{_short_history(py, i, ' (', ')')}, "
            f"so no change is supported (threshold {t:g}%); a baseline of 5+ runs gives verdicts"
        )
    kind = "prediction interval for one run" if nc == 1 else "interval"
    lo, hi, sd, q = (py[name][i] for name in ("ci_low_pct", "ci_high_pct", "run_sd_pct", "q_value"))
    used = py["history"][i] and (py["history_df"][i] or 0) > 0
    past = f" and {py['history'][i]} earlier" if used else ""
    return (
        f"{change} {kind} [{lo:+.2f}, {hi:+.2f}], run sd {sd:.2g}% on {_df_parts(py, i)}, "
        f"q={q:.2g} ({nb}+{nc}{past} runs{_short_history(py, i, '; ', '')}), threshold {t:g}%"
    )


def _short_history(py: dict[str, list], i: int, before: str, after: str) -> str:
    """Said where earlier runs measured the identity but too few to use (no history df)."""
    h = py["history"][i]
    if not h or (py["history_df"][i] or 0) > 0:
        return ""
    runs = f"{h} earlier run{'s' * (h != 1)}"
    return f"{before}its {runs}: too few for a history, {st.MIN_HISTORY} are needed{after}"


def _df_parts(py: dict[str, list], i: int) -> str:
    """The test's degrees of freedom and what they rest on: "96 df (4 own, 92 from 23 others)"."""
    parts = [f"{py['own_df'][i]:.0f} own"]
    if py["history_df"][i]:
        parts.append(f"{py['history_df'][i]:.0f} history")
    if py["family_df"][i]:
        parts.append(f"{py['family_df'][i]:.0f} from {py['family_size'][i]:.0f} others")
    return f"{py['df'][i]:.0f} df ({', '.join(parts)})"


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
        t = nodes.filter(pc.is_in(nodes["run_id"], value_set=arrow(runs, pa.string())))
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
    record: Run,
    settings: CompareSettings,
    decls: dict[str, MetricDecl],
    models: pa.Table,
) -> list[Outlier]:
    """Late ranks and slow devices of one run: its ranks' stored lateness, and its rows that
    carry a metric (the per-device measurements); never its per-iteration samples."""
    sku_of = _sku_of(models, record.run_id)
    late = late_rank_outliers(record.run_id, store.lateness(record.run_id), sku_of, settings)
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
    per: Per = DEFAULT_PER,
    threshold_pct: float | None = None,
    history: int | None = None,
) -> Comparison:
    """Judge candidate runs against the named baseline; see the module docstring.
    `history` replaces the suite's `history_runs` (0: no history)."""
    if per not in ("node", "sku"):
        raise CompareError(f"--per must be node or sku, got {per!r}")
    if not candidate_run_ids:
        raise CompareError("no candidate run given")
    candidates = list(dict.fromkeys(candidate_run_ids))
    records = store.find_runs(candidates)  # NOTE: one query, whatever the history's length
    absent = [r for r in candidates if r not in records]
    if absent:
        raise CompareError(
            f"no run {', '.join(absent)} in {store.root}; `fleetval runs` lists them"
        )
    resolved = resolve(store, Baselines(store).get(baseline))
    records |= store.find_runs([r for r in resolved.run_ids if r not in records])
    settings = _settings(records, candidates, threshold_pct)
    if history is not None:
        if history < 0:
            raise CompareError(f"--history must be 0 or more runs, got {history}")
        settings = settings.model_copy(update={"history_runs": history})
    base_runs = [r for r in resolved.run_ids if r not in candidates]
    notes = []
    if len(base_runs) < len(resolved.run_ids):
        notes.append("candidate runs matched by the baseline were left out of the baseline side")
    if not base_runs:
        raise CompareError(f"baseline {baseline!r} resolves only to the candidate runs themselves")
    all_runs = base_runs + candidates
    history = history_runs(store, [records[c] for c in candidates], base_runs, settings)
    nodes = store.nodes(all_runs + history)
    models = nodes.select(MODEL_COLUMNS)
    values = run_values(
        store.summaries(all_runs + history),
        models=models if per == "sku" else None,
        cutoff_bytes=int(settings.latency_cutoff_bytes),
    )
    _require_rows(values, base_runs, candidates)
    decls = declarations([records[r] for r in all_runs])
    results = judge(values, candidates, settings, decls, history)
    counts = results.counts()
    if not sum(n for v, n in counts.items() if v not in (Verdict.NEW, Verdict.MISSING)):
        raise CompareError(_nothing_in_common(results, per))
    outliers = [
        o for c in candidates for o in run_outliers(store, records[c], settings, decls, models)
    ]
    notes += _side_notes(len(base_runs), len(candidates))
    notes += _noisy_note(counts.get(Verdict.NOISY, 0), len(base_runs))
    if len(history) >= st.MIN_HISTORY:
        notes.append(
            f"run-to-run spreads also from {len(history)} earlier runs of the suite "
            f"({history[0]} .. {history[-1]}; --history 0: the runs compared alone)"
        )
    elif history:
        notes.append(
            f"{len(history)} earlier run{'s' * (len(history) != 1)} of the suite: too few for "
            f"a history of run-to-run spreads ({st.MIN_HISTORY} are needed), left unused"
        )
    failed = tuple(c for c in candidates if not passes_for_compare(records[c].status))
    return Comparison(
        baseline=baseline,
        baseline_selection=resolved.baseline.describe(),
        baseline_runs=tuple(base_runs),
        candidate_runs=tuple(candidates),
        per=per,
        settings=settings,
        results=results,
        env_diff=environment_diff(store, base_runs, candidates, nodes=nodes),
        outliers=tuple(outliers),
        notes=tuple(notes),
        history_runs=tuple(history),
        failed_candidates=failed,
    )


def history_runs(
    store: Store, candidates: list[Run], baseline: list[str], settings: CompareSettings
) -> list[str]:
    """Up to `settings.history_runs` runs of the candidates' suite(s) started before them,
    oldest first: completed, without injected faults, and not in the baseline. The baseline
    runs are the test's own data already; counted again their df would count twice and the
    t would no longer be exact. One indexed query of the run index per suite."""
    window = settings.history_runs
    if window == 0:
        return []
    skip = set(baseline) | {c.run_id for c in candidates}
    before = min(c.run_id for c in candidates)
    out: set[str] = set()
    for suite in sorted({c.suite for c in candidates}):
        page = store.run_index().page(
            RunFilter(suite=suite), before=before, limit=window + len(skip)
        )
        usable = [
            r.run_id
            for r in page
            if r.run_id not in skip and usable_as_baseline(r.status) and not r.injected
        ]
        out.update(usable[:window])
    return sorted(out)


def _noisy_note(noisy: int, nb: int) -> list[str]:
    """Noisy changes pass this gate (not --strict) but fail a sign-off: said where there are
    any, so the two outputs of the same data do not seem to disagree."""
    if not noisy:
        return []
    one = (
        "; against one baseline run no change can be shown unchanged, so a sign-off cannot "
        "pass: a baseline of 5+ runs gives verdicts"
        if nb == 1
        else ""
    )
    return [
        f"{noisy} noisy (unproven) change{'s' * (noisy != 1)}: this gate passes them; "
        f"`compare --strict` and a sign-off (`fleetval report`) fail on them{one}"
    ]


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


def _require_rows(values: pa.Table, base: list[str], cand: list[str]) -> None:
    present = set(pc.unique(values["run_id"]).to_pylist())
    for which, runs in (("baseline", base), ("candidate", cand)):
        if not present & set(runs):
            raise CompareError(
                f"the {which} runs ({', '.join(runs)}) have no comparable result rows"
            )


def _nothing_in_common(results: Sequence[MetricComparison], per: Per) -> str:
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
    "Results",
    "compare_runs",
    "declarations",
    "environment_diff",
    "fleet_outliers",
    "history_runs",
    "human_bytes",
    "judge",
]
