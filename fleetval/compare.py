"""Compare candidate runs with a named baseline: matching, statistics, verdicts, environment diff.

Front to back, every stage vectorised (pyarrow grouping, numpy segments), one run in memory
at a time so a store of millions of rows compares in seconds:

1. Each run's rows get a metric (size-aware: latency below `latency_cutoff_bytes`, busbw
   above; rows with `metric`/`value` keep theirs) and a group (node, or the node's GPU model).
2. Per run and identity (check, collective, op, dtype, size, world size, metric, group) the
   ranks of one collective measured the same operations, so iteration i of the run is one
   sample: the median over those ranks of their i-th time. Per-GPU metrics (`metric` rows)
   are independent devices: every row is a sample.
3. Per identity the samples of all baseline runs and all candidate runs are pooled; the
   relative change of the median gets a bootstrap CI (drawn from the exact bootstrap
   distribution of the median) and a Mann-Whitney U p-value; `_verdicts` turns them into
   regression / improvement / unchanged / noisy. Correctness is absolute: a wrong element or
   a failed row in the candidate is FAILED whatever the baseline says.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse, stats

from fleetval.baselines import Baselines, resolve
from fleetval.compare_settings import CompareSettings, settings_from_suite_json
from fleetval.results import ENV_COLUMNS
from fleetval.store import RunRecord, Store
from fleetval.vocab import Verdict

Per = Literal["node", "sku"]


class CompareError(ValueError):
    """A comparison that cannot be made: no rows, nothing in common, overlapping sides."""


class Direction(StrEnum):
    """Which way is better for a metric."""

    HIGHER = "higher"  # bandwidth, TFLOP/s, throughput
    LOWER = "lower"  # times and latencies


@dataclass(frozen=True)
class MetricSpec:
    direction: Direction | None  # None: correctness only, or a metric whose direction is unknown
    unit: str


# The ONE table of metric directions. Collective rows are judged as `busbw_gbps` or
# `latency_us` (size-aware); rows that carry `metric`/`value` use their own name.
METRICS: dict[str, MetricSpec] = {
    "busbw_gbps": MetricSpec(Direction.HIGHER, "GB/s"),
    "algbw_gbps": MetricSpec(Direction.HIGHER, "GB/s"),
    "latency_us": MetricSpec(Direction.LOWER, "us"),
    "correct": MetricSpec(None, ""),
    "gemm_tflops": MetricSpec(Direction.HIGHER, "TFLOP/s"),
    "tflops": MetricSpec(Direction.HIGHER, "TFLOP/s"),
    "memory_bw_gbps": MetricSpec(Direction.HIGHER, "GB/s"),
    "h2d_gbps": MetricSpec(Direction.HIGHER, "GB/s"),
    "d2h_gbps": MetricSpec(Direction.HIGHER, "GB/s"),
    "throughput": MetricSpec(Direction.HIGHER, "samples/s"),
    "samples_per_s": MetricSpec(Direction.HIGHER, "samples/s"),
    "scaling_efficiency": MetricSpec(Direction.HIGHER, ""),
    "comm_share": MetricSpec(Direction.LOWER, ""),
    "step_time_ms": MetricSpec(Direction.LOWER, "ms"),
    "time_us": MetricSpec(Direction.LOWER, "us"),
}
_TIME_UNITS = {"ns", "us", "ms", "s"}


def metric_spec(metric: str, unit: str | None = None) -> MetricSpec:
    """The table's entry, else a direction inferred from the unit (rates up, times down)."""
    if metric in METRICS:
        return METRICS[metric]
    u = (unit or "").lower()
    if u.endswith("/s") or u.endswith("flops"):
        return MetricSpec(Direction.HIGHER, unit or "")
    if u in _TIME_UNITS:
        return MetricSpec(Direction.LOWER, unit or "")
    return MetricSpec(None, unit or "")


ID_COLS = ["check", "collective", "op", "dtype", "size_bytes", "world_size", "metric", "group"]
_READ_COLS = [
    "run_id", "check", "collective", "op", "dtype", "size_bytes", "world_size", "rank", "node",
    "device_id", "metric", "value", "unit", "busbw_gbps", "time_us_median", "samples_us",
    "status", "wrong",
]  # fmt: skip
# Versions that can explain a change; hostnames differ between nodes by nature.
ENV_DIFF_COLUMNS = tuple(c for c in ENV_COLUMNS if c != "hostname")


@dataclass(frozen=True, kw_only=True)
class Identity:
    """What a measurement is, independent of the run: rows meet on this."""

    check: str
    collective: str | None
    op: str | None
    dtype: str | None
    size_bytes: int | None
    world_size: int
    metric: str
    group: str  # the node (per="node") or the GPU model (per="sku")

    def label(self) -> str:
        parts = [self.check, self.collective, self.op, self.dtype]
        if self.size_bytes is not None:
            parts.append(human_bytes(self.size_bytes))
        parts += [f"n={self.world_size}", self.group, self.metric]
        return " ".join(p for p in parts if p)


@dataclass(frozen=True, kw_only=True)
class MetricComparison:
    """One identity judged: the verdict and the numbers behind it."""

    identity: Identity
    verdict: Verdict
    direction: Direction | None
    unit: str
    threshold_pct: float
    baseline_median: float | None = None
    candidate_median: float | None = None
    change_pct: float | None = None  # (candidate median / baseline median - 1) * 100
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    p_value: float | None = None  # Mann-Whitney U, two-sided
    n_baseline: int = 0  # samples pooled per side
    n_candidate: int = 0
    wrong: int = 0  # wrong elements in the candidate
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class EnvChange:
    """An environment column whose values differ between the sides."""

    key: str
    baseline: tuple[str, ...]
    candidate: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Outlier:
    """A node (collectives) or GPU (per-device metrics) far worse than its peers in one run."""

    run_id: str
    identity: Identity  # group is the GPU model: peers share it
    unit: str  # node, or node/device for per-GPU metrics
    value: float
    peer_median: float
    deviation_pct: float  # worse-signed: negative is worse
    robust_z: float
    peers: int


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

    def counts(self) -> dict[Verdict, int]:
        out = dict.fromkeys(Verdict, 0)
        for r in self.results:
            out[r.verdict] += 1
        return out

    @property
    def regressions(self) -> tuple[MetricComparison, ...]:
        return tuple(r for r in self.results if r.verdict in (Verdict.REGRESSION, Verdict.FAILED))

    @property
    def worst_exit_code(self) -> int:
        """0: no regression and nothing wrong; 1: a regression or a correctness failure."""
        return 1 if self.regressions else 0


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


# -- reading ---------------------------------------------------------------------------------


# String columns read dictionary-encoded: cheaper to decode, and their indices are group codes.
_DICT_COLS = (
    "run_id",
    "check",
    "collective",
    "op",
    "dtype",
    "node",
    "device_id",
    "metric",
    "unit",
    "status",
)


def _read_run(store: Store, run_id: str) -> pa.Table:
    """One run's result rows: only the columns comparing needs, one chunk per column."""
    table = store.results([run_id], columns=_READ_COLS, dictionary=_DICT_COLS)
    return table.unify_dictionaries().combine_chunks()


def _node_models(nodes: pa.Table) -> dict[str, dict[str, str]]:
    """run -> node -> GPU model ("unknown" where the fingerprint has none)."""
    out: dict[str, dict[str, str]] = {}
    for rec in nodes.select(["run_id", "node", "gpu_model"]).to_pylist():
        out.setdefault(rec["run_id"], {})[rec["node"]] = rec["gpu_model"] or "unknown"
    return out


# Row kinds: how a row is judged. The kind is part of the key, so a group has one kind.
_CORRECT, _LATENCY, _BUSBW, _VALUE = 0, 1, 2, 3
_KIND_METRIC = pa.array(["correct", "latency_us", "busbw_gbps", ""])
_RUN_KEYS = [*ID_COLS[:-2], "metric", "_kind", "group"]


def _np(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric column as numpy (nulls become NaN)."""
    return column.to_numpy(zero_copy_only=False)


def _array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _is(column: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    """Rows of a (dictionary or plain) string column equal to value, as numpy bools."""
    col = _array(column)
    if pa.types.is_dictionary(col.type):
        hits = np.flatnonzero(np.array(col.dictionary.to_pylist(), dtype=object) == value)
        idx = _np(pc.fill_null(col.indices, -1))
        return np.isin(idx, hits)
    return _np(pc.fill_null(pc.equal(col, value), False))


def _prepare(table: pa.Table, models: dict[str, str], per: Per, cutoff: int) -> pa.Table:
    """Drop skipped rows; add `_kind` (size-aware: latency below the cutoff), `sku`, `group`."""
    skip = _is(table["status"], "skip")
    if skip.any():
        table = table.filter(pa.array(~skip))
    has_metric = _np(pc.is_valid(table["metric"]))
    has_time = _np(pc.is_valid(table["time_us_median"]))
    # NOTE: no float copies: busbw is float64 already, and a size column without nulls
    # compares as int64 (with nulls it arrives as float64, NaN for null)
    busbw, size = _np(table["busbw_gbps"]), _np(table["size_bytes"])
    small = np.isnan(busbw) | ~(size >= cutoff)  # no size: judged on latency
    kind = np.where(small, np.int8(_LATENCY), np.int8(_BUSBW))
    kind[~has_time] = _CORRECT
    kind[has_metric] = _VALUE
    node = _array(table["node"])
    if not pa.types.is_dictionary(node.type):
        node = pc.dictionary_encode(node)
    names = [models.get(n, "unknown") for n in node.dictionary.to_pylist()]
    skus = sorted(set(names) | {"unknown"})
    code = pa.array([skus.index(s) for s in names], pa.int32())
    sku_idx = pc.fill_null(pc.take(code, node.indices), skus.index("unknown"))
    sku = pa.DictionaryArray.from_arrays(sku_idx, pa.array(skus, pa.string()))
    table = table.append_column("_kind", pa.array(kind)).append_column("sku", sku)
    return table.append_column("group", node if per == "node" else sku)


# -- grouping helpers ------------------------------------------------------------------------


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """Dense integer codes of a column (null is its own code) and how many there can be."""
    col = _array(column)
    if pa.types.is_integer(col.type) and col.null_count == 0 and len(col):
        v = _np(col).astype(np.int64)
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < 1 << 16:
            return v - lo, hi - lo + 1
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    card = len(col.dictionary) + 1
    return _np(pc.fill_null(col.indices, card - 1)).astype(np.int64), card


def _changes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Rows (from the second) whose value differs from the row before; null equals null.

    May flag equal values (NaN, a dictionary's duplicate entries), never misses a change.
    """
    col = _array(column)
    if pa.types.is_dictionary(col.type):
        col = col.indices  # equal indices: equal codes in `_codes`
    if col.null_count == 0 and (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        v = _np(col)
        return v[1:] != v[:-1]
    a, b = col.slice(1), col.slice(0, len(col) - 1)
    differ = pc.coalesce(pc.not_equal(a, b), pc.xor(pc.is_valid(a), pc.is_valid(b)))
    return _np(differ)


def _run_starts(table: pa.Table, cols: list[str]) -> np.ndarray | None:
    """First row of each run of rows with equal keys; None when runs are not worth it."""
    n = len(table)
    change = np.zeros(n - 1, dtype=bool)
    for c in cols:
        change |= _changes(table[c])
        if np.count_nonzero(change) > n // 4:  # mostly distinct rows: group them directly
            return None
    return np.flatnonzero(np.concatenate([[True], change]))


def _group_rows(table: pa.Table, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row -> group id (groups ordered by key codes, so deterministic) and each group's first row.

    NOTE: a result file stores the ranks of one measurement next to each other, so the
    keys come in runs: grouping one row per run and repeating its id is the same grouping
    (the run's first rows hold every value of every column, so the codes are the same).
    """
    n = len(table)
    starts = _run_starts(table, cols) if n > 1 else None
    if starts is None:
        return _group_codes(table, cols)
    grp, first = _group_codes(table.take(pa.array(starts)), cols)
    return np.repeat(grp, np.diff(starts, append=n)), starts[first]


def _group_codes(table: pa.Table, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """`_group_rows` row by row.

    NOTE: combined integer codes and a bincount-sized table instead of a hash group-by:
    the key columns arrive dictionary-encoded, so this is a few passes over int arrays.
    """
    n = len(table)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    code, span = np.zeros(n, dtype=np.int64), 1
    for c in cols:
        idx, card = _codes(table[c])
        if span * card >= 1 << 62:  # re-densify before the combined code could overflow
            _, code = np.unique(code, return_inverse=True)
            span = int(code.max()) + 1
        code += idx * span
        span *= card
    if span <= max(4 * n, 1 << 20):
        present = np.zeros(span, dtype=bool)
        present[code] = True
        dense = np.cumsum(present) - 1
        grp = dense[code]
    else:
        _, grp = np.unique(code, return_inverse=True)
    first = np.empty(int(grp.max()) + 1, dtype=np.int64)
    first[grp[::-1]] = np.arange(n)[::-1]  # the last write wins: each group's first row
    return grp, first


def _plain(table: pa.Table) -> pa.Table:
    """Dictionary columns decoded to plain strings (for small key tables)."""
    schema = pa.schema(
        [
            pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
            for f in table.schema
        ]
    )
    return table.cast(schema)


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.cumsum(lengths) - lengths


def _segment_median(
    values: np.ndarray, seg: np.ndarray, nseg: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact median per segment id (NaN for empty ones) and the segment sizes."""
    n = np.bincount(seg, minlength=nseg)
    s = _starts(n)
    v = _sorted_by_segment(values, seg, n)
    med = np.full(nseg, np.nan)
    ok = n > 0
    med[ok] = (v[s[ok] + (n[ok] - 1) // 2] + v[s[ok] + n[ok] // 2]) / 2
    return med, n


def _sorted_by_segment(values: np.ndarray, seg: np.ndarray, n: np.ndarray) -> np.ndarray:
    """values ordered by segment id, ascending within each segment (as a lexsort orders them).

    NOTE: when every segment has the same size (a node's GPUs, a fleet's nodes), one stable
    sort by segment and a row-wise sort of the [segments, size] matrix is several times
    cheaper than a two-key lexsort.
    """
    size = n[0] if len(n) else 0
    if not len(values) or not (n == size).all():
        return values[np.lexsort((values, seg))]
    return np.sort(values[np.argsort(seg, kind="stable")].reshape(-1, size), axis=1).ravel()


# -- per-run reduction -----------------------------------------------------------------------


@dataclass
class _Chunk:
    """One run reduced: per identity its samples, wrong elements and failure flag."""

    keys: pa.Table  # ID_COLS + unit, one row per identity present in the run
    elem_group: np.ndarray  # sample -> row of keys
    samples: np.ndarray  # in the metric's own units
    wrong: np.ndarray
    failed: np.ndarray


def _reduce_run(table: pa.Table) -> _Chunk:
    """Per identity of one run: samples in the metric's units, wrong count, failure."""
    grp, first = _group_rows(table, _RUN_KEYS)
    ngroups = len(first)
    lengths = np.bincount(grp, minlength=ngroups)
    keys = _plain(table.select([*_RUN_KEYS, "unit"]).take(pa.array(first)))
    kind = keys["_kind"].to_numpy()
    keys = _name_metrics(keys).select([*ID_COLS, "unit"])
    wrong_rows = _np(table["wrong"])  # int64, or float64 with NaN where null
    if wrong_rows.dtype.kind == "f":
        wrong_rows = np.nan_to_num(wrong_rows)
    bad = _is(table["status"], "fail") | (wrong_rows > 0)
    parts = [_timed_samples(table, grp, lengths, kind), _value_samples(table, grp, kind)]
    return _Chunk(
        keys=keys,
        elem_group=np.concatenate([g for g, _ in parts]),
        samples=np.concatenate([s for _, s in parts]),
        wrong=_group_sum(grp, wrong_rows, ngroups).astype(np.int64),
        failed=_group_sum(grp, bad, ngroups) > 0,
    )


def _group_sum(grp: np.ndarray, weights: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group the sum of weights (float64); skips the pass when every weight is 0."""
    if not weights.any():
        return np.zeros(ngroups)
    return np.bincount(grp, weights=weights, minlength=ngroups)


def _value_samples(
    table: pa.Table, grp: np.ndarray, kind: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-device metrics: every row is one sample (the devices are independent)."""
    rows = np.flatnonzero(kind[grp] == _VALUE)
    value = _np(table["value"])[rows].astype(float)
    ok = np.isfinite(value)
    return grp[rows][ok], value[ok]


def _sample_matrix(table: pa.Table, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[rows of the run, iterations] times and how many iterations each row has.

    A row without stored samples counts as one iteration at its median time.
    """
    lists = _array(table["samples_us"])
    offsets = _np(lists.offsets).astype(np.int64)
    klen = np.diff(offsets)  # a null list has no samples
    values = _np(lists.values)[offsets[0] : offsets[-1]]
    n, kmax = len(lists), max(int(klen.max(initial=0)), 1)
    if len(values) == n * kmax:  # every row has kmax samples: a zero-copy view
        return values.reshape(n, kmax), klen
    mat = np.zeros((n, kmax))
    row = np.repeat(np.arange(n), klen)
    mat[row, np.arange(len(values)) - np.repeat(_starts(klen), klen)] = values
    empty = rows[klen[rows] == 0]
    mat[empty, 0] = _np(table["time_us_median"]).astype(float)[empty]
    klen[empty] = 1
    return mat, klen


def _timed_samples(
    table: pa.Table, grp: np.ndarray, lengths: np.ndarray, kind: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Collective groups: sample i is the mean over the group's ranks of their i-th time.

    NOTE: the ranks of one collective finish together, so their i-th times measure one
    operation; the mean over ranks costs one sparse product where a median over a
    thousand ranks per iteration would cost more than everything else, and the statistics
    over iterations are median-based. busbw of an iteration = C / time with
    C = busbw_gbps * time_us_median, the same for every rank of an identity.
    """
    timed = (kind == _LATENCY) | (kind == _BUSBW)  # per group
    g = np.flatnonzero(timed)
    if not len(g):
        return np.zeros(0, np.int64), np.zeros(0)
    rows = np.arange(len(grp)) if timed.all() else np.flatnonzero(timed[grp])
    mat, klen = _sample_matrix(table, rows)
    ngroups, kmax = len(lengths), mat.shape[1]
    member = _membership(grp, rows, ngroups)
    sums = (member @ mat)[g]
    if (klen[rows] == kmax).all():
        counts = np.broadcast_to(lengths[g][:, None], sums.shape)
    else:  # iteration j counts for a group only when every one of its ranks has it
        counts = (member @ (np.arange(kmax) < klen[:, None]).astype(float))[g]
    product = np.nan_to_num(_np(table["busbw_gbps"]) * _np(table["time_us_median"]), copy=False)
    scale = (member @ product) / np.maximum(lengths, 1)  # summed in row order, as bincount does
    with np.errstate(invalid="ignore", divide="ignore"):
        t = sums / counts
        vals = np.where((kind[g] == _BUSBW)[:, None], scale[g][:, None] / t, t)
    ok = (counts == lengths[g][:, None]) & np.isfinite(vals)
    return np.broadcast_to(g[:, None], vals.shape)[ok], vals[ok]


def _membership(grp: np.ndarray, rows: np.ndarray, ngroups: int) -> sparse.csr_matrix:
    """[groups, rows of the run] 0/1 matrix: which rows each group sums.

    NOTE: built as CSR directly (a stable sort by group, rows ascending within a group, the
    entries converting COO would give): the conversion cost several times the product.
    """
    order = rows[np.argsort(grp[rows], kind="stable")]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(grp[rows], minlength=ngroups))])
    shape = (ngroups, len(grp))
    return sparse.csr_matrix((np.ones(len(order)), order, indptr), shape=shape)


# -- pooling and statistics ------------------------------------------------------------------


@dataclass
class _Pooled:
    keys: pa.Table  # one row per identity (ID_COLS + unit)
    n: np.ndarray  # [identities, 2] samples per side (0 baseline, 1 candidate)
    rows: np.ndarray  # [identities, 2] runs present per side
    sorted_samples: np.ndarray  # per (identity, side) segment, ascending
    starts: np.ndarray  # [identities, 2]
    wrong: np.ndarray  # candidate wrong elements
    failed: np.ndarray  # candidate failure


def _sort_within(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Order by segment, then value: one float argsort instead of a two-key lexsort.

    NOTE: the key is seg + the value scaled into [0, 0.5], exact in segment order; values
    closer than about 1e-10 of the whole range may tie, which no median notices.
    """
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    lo, span = float(values.min()), float(np.ptp(values)) or 1.0
    return np.argsort(seg + (values - lo) * (0.5 / span))


def _pool(chunks: list[tuple[int, _Chunk]]) -> _Pooled:
    """Pool every run's chunk per identity and side; segments sorted ascending."""
    keys = pa.concat_tables([c.keys for _, c in chunks])
    base = _starts(np.array([len(c.keys) for _, c in chunks]))
    side = np.concatenate([np.full(len(c.keys), s) for s, c in chunks])
    elem_row = np.concatenate([c.elem_group + b for (_, c), b in zip(chunks, base, strict=True)])
    flat = np.concatenate([c.samples for _, c in chunks])
    wrong_row = np.concatenate([c.wrong for _, c in chunks])
    failed_row = np.concatenate([c.failed for _, c in chunks])
    ident, first = _group_rows(keys, ID_COLS)
    nid = len(first)
    ident_keys = keys.take(pa.array(first))
    seg = ident * 2 + side
    elem_seg = seg[elem_row]
    n_seg = np.bincount(elem_seg, minlength=2 * nid)
    cand = side == 1
    o = _sort_within(flat, elem_seg)  # every (identity, side) segment ascending
    return _Pooled(
        keys=ident_keys,
        n=n_seg.reshape(nid, 2),
        rows=np.bincount(seg, minlength=2 * nid).reshape(nid, 2),
        sorted_samples=flat[o],
        starts=_starts(n_seg).reshape(nid, 2),
        wrong=np.bincount(ident[cand], weights=wrong_row[cand], minlength=nid).astype(np.int64),
        failed=np.bincount(ident[cand], weights=failed_row[cand], minlength=nid) > 0,
    )


def _medians(p: _Pooled) -> np.ndarray:
    """[identities, 2] medians (NaN where a side has no samples)."""
    n, s, v = p.n, p.starts, p.sorted_samples
    med = np.full(n.shape, np.nan)
    ok = n > 0
    med[ok] = (v[s[ok] + (n[ok] - 1) // 2] + v[s[ok] + n[ok] // 2]) / 2
    return med


def _bootstrap_medians(p: _Pooled, draws: int, rng: np.random.Generator) -> np.ndarray:
    """[identities, 2, draws] medians of bootstrap resamples, from the exact distribution.

    The median of a resample of n values is the m-th order statistic x_(j) with
    P(median <= x_(j)) = P(Binomial(n, j/n) >= m), m = ceil(n/2); sampling that law is
    the ordinary bootstrap of the median without materialising n values per draw.
    NOTE: for even n this is the lower median, which differs from the average of the two
    middle values by at most one gap between neighbouring samples.
    """
    out = np.full((*p.n.shape, draws), np.nan)
    flat_n, flat_s = p.n.ravel(), p.starts.ravel()
    flat_out = out.reshape(-1, draws)
    for n in np.unique(flat_n[flat_n > 0]):
        sel = np.flatnonzero(flat_n == n)
        m = (n + 1) // 2
        cdf = stats.binom.sf(m - 1, n, np.arange(1, n + 1) / n)
        cdf[-1] = 1.0
        j = np.minimum(np.searchsorted(cdf, rng.random((len(sel), draws))), n - 1)
        flat_out[sel] = p.sorted_samples[flat_s[sel][:, None] + j]
    return out


def _rank_tests(p: _Pooled) -> np.ndarray:
    """Mann-Whitney U two-sided p-values per identity (NaN where a side is empty)."""
    pv = np.full(len(p.n), np.nan)
    both = np.flatnonzero((p.n[:, 0] > 0) & (p.n[:, 1] > 0))
    shapes = p.n[both]
    for nb, nc in np.unique(shapes, axis=0):
        sel = both[(shapes[:, 0] == nb) & (shapes[:, 1] == nc)]
        x = p.sorted_samples[p.starts[sel, 0][:, None] + np.arange(nb)]
        y = p.sorted_samples[p.starts[sel, 1][:, None] + np.arange(nc)]
        with np.errstate(invalid="ignore", divide="ignore"):
            res = stats.mannwhitneyu(x, y, axis=1, alternative="two-sided", method="auto")
        pv[sel] = np.nan_to_num(np.atleast_1d(res.pvalue), nan=1.0)
    return pv


@dataclass
class _Stats:
    med: np.ndarray  # [I, 2]
    change: np.ndarray  # [I] percent
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray


_BLOCK = 4096  # identities per statistics block: bounds the bootstrap arrays' memory


def _statistics(p: _Pooled, settings: CompareSettings) -> _Stats:
    """Relative change of the median, its bootstrap CI, and the rank test."""
    rng = np.random.default_rng(0)  # NOTE: fixed seed: the same data always gets the same verdict
    med = _medians(p)
    with np.errstate(invalid="ignore", divide="ignore"):
        change = (med[:, 1] / med[:, 0] - 1) * 100
    tail = (1 - settings.confidence) / 2 * 100
    lo = np.full(len(med), np.nan)
    hi = np.full(len(med), np.nan)
    pv = np.full(len(med), np.nan)
    for start in range(0, len(med), _BLOCK):
        sel = slice(start, start + _BLOCK)
        block = replace(p, n=p.n[sel], starts=p.starts[sel])
        boot = _bootstrap_medians(block, settings.bootstrap, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = (boot[:, 1, :] / boot[:, 0, :] - 1) * 100
        both = np.flatnonzero(np.all(block.n > 0, axis=1) & np.all(med[sel] != 0, axis=1))
        if len(both):
            lo[start + both], hi[start + both] = np.percentile(
                rel[both], [tail, 100 - tail], axis=1
            )
        pv[sel] = _rank_tests(block)
    return _Stats(med=med, change=change, lo=lo, hi=hi, p=pv)


def _verdicts(
    good: np.ndarray, glo: np.ndarray, ghi: np.ndarray, p: np.ndarray, t: np.ndarray, alpha: float
) -> np.ndarray:
    """Verdict per identity from the better-signed change (positive = better) and its CI.

    - REGRESSION: the rank test and the CI both say worse, and a change as large as the
      threshold lies inside the CI (lo <= -t), with the CI no wider than the threshold, or
      the whole CI beyond it. So a true change at the threshold is found, a change well below
      it never is, and a spread-out sample is not called either way.
    - IMPROVEMENT: the mirror image.
    - NOISY: the CI reaches beyond the threshold but the evidence does not support a verdict.
    - UNCHANGED: otherwise (within the threshold, or too small to matter).
    """
    sig = p < alpha
    precise = (ghi - glo) <= t
    worse = sig & (ghi < 0) & (glo <= -t) & (precise | (ghi <= -t))
    better = sig & (glo > 0) & (ghi >= t) & (precise | (glo >= t))
    reach = (glo <= -t) | (ghi >= t)
    out = np.full(len(good), Verdict.UNCHANGED.value, dtype=object)
    out[reach] = Verdict.NOISY.value
    out[worse] = Verdict.REGRESSION.value
    out[better] = Verdict.IMPROVEMENT.value
    return out


def _judge(p: _Pooled, st: _Stats, settings: CompareSettings) -> list[MetricComparison]:
    keys = p.keys.to_pylist()
    specs = [metric_spec(k["metric"], k["unit"]) for k in keys]
    sign = np.array([1.0 if s.direction == Direction.HIGHER else -1.0 for s in specs])
    t = np.array([settings.threshold_for(k["metric"]) for k in keys], dtype=float)
    glo = np.where(sign > 0, st.lo, -st.hi)
    ghi = np.where(sign > 0, st.hi, -st.lo)
    stat_verdict = _verdicts(sign * st.change, glo, ghi, st.p, t, settings.alpha)
    out = []
    for i, k in enumerate(keys):
        ident = Identity(**{c: k[c] for c in ID_COLS})
        spec = specs[i]
        present = p.rows[i] > 0
        verdict, reason = _one_verdict(i, present, stat_verdict[i], spec, p, st, t[i])
        out.append(
            MetricComparison(
                identity=ident,
                verdict=verdict,
                direction=spec.direction,
                unit=spec.unit or (k["unit"] or ""),
                threshold_pct=float(t[i]),
                baseline_median=_num(st.med[i, 0]),
                candidate_median=_num(st.med[i, 1]),
                change_pct=_num(st.change[i]),
                ci_low_pct=_num(st.lo[i]),
                ci_high_pct=_num(st.hi[i]),
                p_value=_num(st.p[i]),
                n_baseline=int(p.n[i, 0]),
                n_candidate=int(p.n[i, 1]),
                wrong=int(p.wrong[i]),
                reason=reason,
            )
        )
    return out


def _num(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def _one_verdict(
    i: int, present: np.ndarray, stat: str, spec: MetricSpec, p: _Pooled, st: _Stats, t: float
) -> tuple[Verdict, str]:
    """Correctness first (absolute), then presence, then the statistics."""
    if p.failed[i]:
        what = f"{p.wrong[i]} wrong elements" if p.wrong[i] else "a failed row"
        return (
            Verdict.FAILED,
            f"correctness: {what} in the candidate (absolute, whatever the baseline)",
        )
    if not present[1]:
        return Verdict.MISSING, "measured in the baseline, not in the candidate"
    if not present[0]:
        return Verdict.NEW, "measured in the candidate, not in the baseline"
    if spec.direction is None and p.keys["metric"][i].as_py() == "correct":
        return Verdict.UNCHANGED, "correct on both sides"
    if p.n[i, 0] == 0 or p.n[i, 1] == 0:
        return Verdict.NOISY, "no usable samples on one side"
    change = (
        f"{st.change[i]:+.2f}% [{st.lo[i]:+.2f}, {st.hi[i]:+.2f}] p={st.p[i]:.2g}, threshold {t:g}%"
    )
    if spec.direction is None:
        verdict = Verdict.UNCHANGED if stat == Verdict.UNCHANGED else Verdict.NOISY
        return verdict, f"{change}; no known direction for this metric"
    return Verdict(stat), change


# -- environment diff and fleet-relative outliers --------------------------------------------


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


def _row_metric_values(table: pa.Table) -> np.ndarray:
    """One number per row in its metric's units (NaN for correctness rows)."""
    kind = _np(table["_kind"])
    out = np.full(len(table), np.nan)
    for k, col in ((_BUSBW, "busbw_gbps"), (_LATENCY, "time_us_median"), (_VALUE, "value")):
        out = np.where(kind == k, _np(table[col]).astype(float), out)
    return out


def _name_metrics(keys: pa.Table) -> pa.Table:
    """Replace `metric` by the judged metric's name (from `_kind`) and drop `_kind`."""
    kind = keys["_kind"]
    metric = pc.if_else(pc.equal(kind, _VALUE), keys["metric"], pc.take(_KIND_METRIC, kind))
    keys = keys.set_column(keys.schema.get_field_index("metric"), "metric", metric)
    return keys.drop_columns(["_kind"])


def _run_outliers(run_id: str, table: pa.Table, settings: CompareSettings) -> list[Outlier]:
    """Units (nodes for collectives, GPUs for per-device metrics) far worse than their peers.

    Per identity (grouped by GPU model), each unit's median is compared with the median of
    all units; robust z = 0.6745 * (x - median) / MAD. A unit is flagged when it is worse by
    more than `outlier_z` robust deviations AND by more than the metric's threshold, so a
    fleet with a tiny spread does not flag its slowest member.
    """
    value = _row_metric_values(table)
    keep = np.isfinite(value)
    if not keep.any():
        return []
    t = table.filter(pa.array(keep)) if not keep.all() else table
    t = t.append_column("_unit", _units(t))
    cols = [*ID_COLS[:-2], "metric", "_kind", "sku", "_unit"]
    seg, first = _group_rows(t, cols)
    unit_med, _ = _segment_median(value[keep], seg, len(first))
    keys = _plain(t.select(cols).take(pa.array(first)))
    pseg, pfirst = _group_rows(keys, cols[:-1])
    peer_med, npeers = _segment_median(unit_med, pseg, len(pfirst))
    mad, _ = _segment_median(np.abs(unit_med - peer_med[pseg]), pseg, len(pfirst))
    keys = _name_metrics(keys)
    return _flag_outliers(run_id, keys, unit_med, peer_med[pseg], mad[pseg], npeers[pseg], settings)


def _units(table: pa.Table) -> pa.ChunkedArray:
    """What an outlier names: the node for collectives, node/device for per-GPU metrics."""
    node = pc.cast(table["node"], pa.string())
    per_gpu = pc.is_null(table["collective"])
    if not pc.any(per_gpu).as_py():  # NOTE: skips formatting a device per row
        return node
    rank = pc.cast(table["rank"], pa.string())
    device = pc.fill_null(pc.cast(table["device_id"], pa.string()), rank)
    return pc.if_else(per_gpu, pc.binary_join_element_wise(node, device, "/"), node)


def _flag_outliers(
    run_id: str,
    keys: pa.Table,
    value: np.ndarray,
    peer: np.ndarray,
    mad: np.ndarray,
    npeers: np.ndarray,
    settings: CompareSettings,
) -> list[Outlier]:
    names, code = _metric_codes(keys["metric"])  # per distinct metric, not per unit
    specs = [metric_spec(m) for m in names]
    sign = np.array([1.0 if s.direction == Direction.HIGHER else -1.0 for s in specs])[code]
    known = np.array([s.direction is not None for s in specs], dtype=bool)[code]
    t = np.array([settings.threshold_for(m) for m in names])[code]
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = sign * (value / peer - 1) * 100
        z = sign * 0.6745 * (value - peer) / np.where(mad > 0, mad, np.nan)
    # MAD 0 (most peers identical): any worse-than-threshold unit stands out
    z = np.where((mad == 0) & (dev < 0), -np.inf, z)
    flag = known & (npeers >= settings.min_peers) & (z < -settings.outlier_z) & (dev < -t)
    out = []
    for i in np.flatnonzero(flag):
        k = keys.slice(i, 1).to_pylist()[0]
        ident = Identity(**{c: k[c] for c in ID_COLS if c != "group"}, group=k["sku"])
        out.append(
            Outlier(
                run_id=run_id, identity=ident, unit=k["_unit"], value=float(value[i]),
                peer_median=float(peer[i]), deviation_pct=float(dev[i]), robust_z=float(z[i]),
                peers=int(npeers[i]),
            )
        )  # fmt: skip
    return out


def _metric_codes(metric: pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """The distinct metric names and each row's index into them (metrics are never null)."""
    enc = _array(pc.dictionary_encode(metric))
    return enc.dictionary.to_pylist(), _np(enc.indices)


def fleet_outliers(
    store: Store, run_id: str, *, settings: CompareSettings | None = None
) -> tuple[Outlier, ...]:
    """Fleet-relative outliers of one run, no baseline needed."""
    record = store.run(run_id)
    settings = settings or settings_from_suite_json(record.suite_json)
    models = _node_models(store.nodes([run_id])).get(run_id, {})
    table = _prepare(_read_run(store, run_id), models, "sku", int(settings.latency_cutoff_bytes))
    return tuple(_run_outliers(run_id, table, settings))


# -- the entry point -------------------------------------------------------------------------


def _settings(
    records: dict[str, RunRecord], candidates: list[str], threshold_pct: float | None
) -> CompareSettings:
    """The candidate suite's `compare:` section; an explicit threshold replaces all of it."""
    settings = CompareSettings()
    for run_id in candidates:
        suite_json = records[run_id].suite_json
        if suite_json:
            settings = settings_from_suite_json(suite_json)
            break
    if threshold_pct is not None:
        if threshold_pct <= 0:
            raise CompareError(f"--threshold must be a positive percentage, got {threshold_pct}")
        settings = settings.model_copy(
            update={"threshold_pct": float(threshold_pct), "metrics": {}}
        )
    return settings


def _runs_in_order(
    store: Store, sides: list[tuple[int, str]], readers: int = 2
) -> Iterator[tuple[int, str, pa.Table]]:
    """Each run's rows, in order; `readers` threads read ahead while the caller reduces.

    NOTE: Parquet decoding releases the GIL, so reading the next runs overlaps the numpy
    work on this one; at most readers + 1 runs are in memory at once.
    """
    with ThreadPoolExecutor(max_workers=readers) as pool:
        pending = [pool.submit(_read_run, store, run_id) for _, run_id in sides[:readers]]
        for i, (side, run_id) in enumerate(sides):
            if i + readers < len(sides):
                pending.append(pool.submit(_read_run, store, sides[i + readers][1]))
            table = pending[i].result()
            pending[i] = None  # type: ignore[call-overload]  # drop the reference: free it
            yield side, run_id, table


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
    notes = []
    base_runs = [r for r in resolved.run_ids if r not in candidates]
    if len(base_runs) < len(resolved.run_ids):
        notes.append("candidate runs matched by the baseline were left out of the baseline side")
    if not base_runs:
        raise CompareError(f"baseline {baseline!r} resolves only to the candidate runs themselves")
    nodes = store.nodes(base_runs + candidates)
    models = _node_models(nodes)
    cutoff = int(settings.latency_cutoff_bytes)
    chunks: list[tuple[int, _Chunk]] = []
    outliers: list[Outlier] = []
    sides = [(0, r) for r in base_runs] + [(1, r) for r in candidates]
    for side, run_id, raw in _runs_in_order(store, sides):
        table = _prepare(raw, models.get(run_id, {}), per, cutoff)
        chunks.append((side, _reduce_run(table)))
        if side == 1:  # peers are the run's other nodes (or GPUs) of the same GPU model
            outliers += _run_outliers(run_id, table, settings)
    _require_rows(chunks, base_runs, candidates)
    pooled = _pool(chunks)
    results = _judge(pooled, _statistics(pooled, settings), settings)
    if not any(r.verdict not in (Verdict.NEW, Verdict.MISSING) for r in results):
        raise CompareError(_nothing_in_common(pooled, per))
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
    )


_VERDICT_ORDER = {v: i for i, v in enumerate(
    [Verdict.FAILED, Verdict.REGRESSION, Verdict.NOISY, Verdict.MISSING, Verdict.NEW,
     Verdict.IMPROVEMENT, Verdict.UNCHANGED]
)}  # fmt: skip


def _sort_key(r: MetricComparison) -> tuple:
    i = r.identity
    return (_VERDICT_ORDER[r.verdict], i.check, i.collective or "", i.op or "", i.dtype or "",
            i.world_size, i.size_bytes or 0, i.group, i.metric)  # fmt: skip


def _require_rows(chunks: list[tuple[int, _Chunk]], base: list[str], cand: list[str]) -> None:
    for side, runs in ((0, base), (1, cand)):
        if not any(len(c.keys) for s, c in chunks if s == side):
            which = "baseline" if side == 0 else "candidate"
            raise CompareError(
                f"the {which} runs ({', '.join(runs)}) have no comparable result rows"
            )


def _nothing_in_common(p: _Pooled, per: Per) -> str:
    """Explain why no identity is on both sides: which dimension differs."""
    lines = ["no measurement is in both the baseline and the candidate; they differ in:"]
    for col in ID_COLS:
        vals = p.keys[col].to_pylist()
        b = sorted({str(v) for v, n in zip(vals, p.rows[:, 0], strict=True) if n})
        c = sorted({str(v) for v, n in zip(vals, p.rows[:, 1], strict=True) if n})
        if b != c:
            lines.append(f"  {col}: baseline {', '.join(b[:8])}; candidate {', '.join(c[:8])}")
    if per == "node":
        lines.append(
            "  (per node: rows meet only on the same node; --per sku matches by GPU model)"
        )
    return "\n".join(lines)


__all__ = [
    "METRICS",
    "CompareError",
    "Comparison",
    "Direction",
    "EnvChange",
    "Identity",
    "MetricComparison",
    "MetricSpec",
    "Outlier",
    "compare_runs",
    "environment_diff",
    "fleet_outliers",
    "metric_spec",
]  # fmt: skip
