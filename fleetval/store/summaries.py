"""Reduction: a run's result rows -> one summary per identity and node (runs are the unit).

Iterations inside a run share that run's placement, clocks and load, so they describe the
run; inference about a release is drawn from run-level values. This module makes those
values, once, when a step's rows are written (`summarize`); `analysis.runvalues` reads them
back as one value per (run, identity, group).

How a run's rows reduce, per (check, collective, op, dtype, size, world size, metric, node):

- timed (a collective's per-iteration times): the node's ranks measured the same
  operations, so iteration i is one sample, the mean over those ranks of their i-th time;
  `center` is the median over iterations; `busbw_scale` = busbw x time (busbw = scale / t).
- value (per-rank `metric`/`value` rows): `center` is the median over the node's rows.
- correct (rows with neither): only wrong elements and failures count.

`spread` is the within-run spread (1.4826 MAD / center): it describes the run, it is not
evidence about the release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.arrays import arrow, equals, group_rows, np_col, one_chunk, plain, segment_median
from fleetval.store.schema import LATENESS_SCHEMA, SUMMARIES_SCHEMA
from fleetval.vocab import Status

KIND_TIMED, KIND_VALUE, KIND_CORRECT = "timed", "value", "correct"


SUMMARY_KEYS = ["check", "collective", "op", "dtype", "size_bytes", "world_size", "metric", "node"]


def _kinds(table: pa.Table) -> np.ndarray:
    has_metric = np_col(pc.is_valid(table["metric"]))
    has_time = np_col(pc.is_valid(table["time_us_median"]))
    kind = np.full(len(table), KIND_CORRECT, dtype=object)
    kind[has_time] = KIND_TIMED
    kind[has_metric] = KIND_VALUE
    return kind


def sample_matrix(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """[rows, iterations] per-iteration times (NaN-padded) and how many each row has.

    A row without stored samples counts as one iteration at its median time.
    """
    lists = one_chunk(table["samples_us"])
    offsets = np_col(lists.offsets).astype(np.int64)
    klen = np.diff(offsets)
    values = np_col(lists.values)[offsets[0] : offsets[-1]]
    n, kmax = len(lists), max(int(klen.max(initial=0)), 1)
    if len(values) == n * kmax:  # every row has kmax samples: a view
        return values.reshape(n, kmax).astype(float), klen
    mat = np.full((n, kmax), np.nan)
    row = np.repeat(np.arange(n), klen)
    mat[row, np.arange(len(values)) - np.repeat(np.cumsum(klen) - klen, klen)] = values
    empty = klen == 0
    mat[empty, 0] = np_col(table["time_us_median"]).astype(float)[empty]
    return mat, np.maximum(klen, 1)


def _membership(grp: np.ndarray, ngroups: int) -> Any:
    """[groups, rows] 0/1 matrix: which rows each group sums."""
    from scipy import sparse  # NOTE: only writers and fallbacks summarise: keep reads light

    order = np.argsort(grp, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(grp, minlength=ngroups))])
    return sparse.csr_matrix((np.ones(len(grp)), order, indptr), shape=(ngroups, len(grp)))


def _timed_centers(table: pa.Table, grp: np.ndarray, ngroups: int) -> tuple[np.ndarray, ...]:
    """Per group: median over iterations of the ranks' mean i-th time, spread, iterations."""
    mat, _ = sample_matrix(table)
    member = _membership(grp, ngroups)
    lengths = np.bincount(grp, minlength=ngroups)
    present = np.isfinite(mat)
    sums = member @ np.where(present, mat, 0.0)
    counts = member @ present.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_iter = np.where(counts == lengths[:, None], sums / counts, np.nan)
        center = np.nanmedian(np.where(np.isfinite(per_iter), per_iter, np.nan), axis=1)
        mad = np.nanmedian(np.abs(per_iter - center[:, None]), axis=1)
    iters = np.isfinite(per_iter).sum(axis=1)
    return center, 1.4826 * mad / center, iters


def summarize(table: pa.Table) -> pa.Table:
    """One run's result rows (any subset: a step, the whole run) -> SUMMARIES_SCHEMA rows."""
    table = table.filter(
        pc.invert(pc.fill_null(pc.equal(table["status"], Status.SKIP.value), False))
    )
    if not len(table):
        return SUMMARIES_SCHEMA.empty_table()
    kind = _kinds(table)
    table = table.append_column("_kind", pa.array(kind, pa.string()))
    grp, first = group_rows(table, [*SUMMARY_KEYS, "_kind", "run_id"])
    ng = len(first)
    gkind = kind[first]
    wrong = np.nan_to_num(np_col(table["wrong"]).astype(float))
    failed = equals(table["status"], Status.FAIL.value) | (wrong > 0)
    center = np.full(ng, np.nan)
    spread = np.full(ng, np.nan)
    iters = np.zeros(ng, np.int64)
    timed_rows = np.flatnonzero(gkind[grp] == KIND_TIMED)
    if len(timed_rows):
        t = table.take(pa.array(timed_rows))
        g_ids = np.unique(grp[timed_rows])
        local = np.searchsorted(g_ids, grp[timed_rows])
        c, s, k = _timed_centers(t, local, len(g_ids))
        center[g_ids], spread[g_ids], iters[g_ids] = c, s, k
    value_rows = np.flatnonzero(gkind[grp] == KIND_VALUE)
    if len(value_rows):
        v = np_col(table["value"]).astype(float)[value_rows]
        ok = np.isfinite(v)
        g = grp[value_rows][ok]
        med, n = segment_median(v[ok], g, ng)
        mad, _ = segment_median(np.abs(v[ok] - med[g]), g, ng)
        has = np.unique(g)
        center[has] = med[has]
        with np.errstate(invalid="ignore", divide="ignore"):
            spread[has] = 1.4826 * mad[has] / np.abs(med[has])
        iters[has] = n[has]
    product = np.nan_to_num(
        np_col(table["busbw_gbps"]).astype(float) * np_col(table["time_us_median"]).astype(float)
    )
    lengths = np.bincount(grp, minlength=ng)
    scale = np.bincount(grp, weights=product, minlength=ng) / np.maximum(lengths, 1)
    keys = plain(table.select(["run_id", *SUMMARY_KEYS, "unit", "_kind"]).take(pa.array(first)))
    cols = {name: keys[name] for name in ["run_id", *SUMMARY_KEYS, "unit"]}
    cols.update(
        kind=keys["_kind"],
        ranks=pa.array(lengths, pa.int32()),
        iters=pa.array(iters, pa.int32()),
        center=pa.array(center, pa.float64(), from_pandas=True),
        spread=pa.array(spread, pa.float64(), from_pandas=True),
        busbw_scale=pa.array(np.where(scale > 0, scale, np.nan), pa.float64(), from_pandas=True),
        wrong=pa.array(np.bincount(grp, weights=wrong, minlength=ng).astype(np.int64)),
        failed=pa.array(np.bincount(grp, weights=failed, minlength=ng).astype(np.int32)),
    )
    return pa.table({f.name: cols[f.name] for f in SUMMARIES_SCHEMA}).cast(SUMMARIES_SCHEMA)


LATENESS_READ_COLS = ["run_id", "check", "collective", "op", "dtype", "size_bytes", "world_size",
                      "rank", "node", "metric", "time_us_median", "samples_us", "status"]  # fmt: skip


_RANK_KEYS = ["check", "collective", "world_size", "rank", "run_id"]


def rank_lateness(table: pa.Table) -> pa.Table:
    """One run's result rows (a step, or the whole run) -> each rank's lateness (LATENESS_SCHEMA).

    In a blocking collective every rank leaves together, so at iteration i the others wait
    (max over ranks of t_i - own t_i) for a rank: as a share of max t_i, the share of the
    collective spent waiting for it. Per row the median over iterations, then per (check,
    collective, world size, rank) the median over sizes and dtypes. `outliers.late_rank_outliers`
    judges these against the rank's peers; written with each results part, so that check
    never reads the samples.
    """
    timed = np_col(pc.and_(pc.is_valid(table["time_us_median"]), pc.is_null(table["metric"])))
    t = table.filter(arrow(timed & ~equals(table["status"], Status.SKIP.value)))
    if not len(t):  # NOTE: not LATENESS_SCHEMA.empty_table(), which imports pandas
        return pa.Table.from_batches([], schema=LATENESS_SCHEMA)
    keys = ["check", "collective", "op", "dtype", "size_bytes", "world_size", "run_id"]
    g, _ = group_rows(t, keys)
    mat, _ = sample_matrix(t)
    order = np.argsort(g, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(g[order]) != 0])
    gmax = np.fmax.reduceat(mat[order], bounds, axis=0)  # group ids are 0..n-1 in order
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = (gmax[g] - mat) / gmax[g]
        median = np.median if not np.isnan(rel).any() else np.nanmedian  # NOTE: 5x cheaper
        share = median(rel, axis=1) * 100
    ok = np.isfinite(share)
    t, share = t.filter(arrow(ok)), share[ok]
    seg, sfirst = group_rows(t, _RANK_KEYS)
    per_rank, rows = segment_median(share, seg, len(sfirst))
    ranks = plain(t.select(["run_id", *_RANK_KEYS[:-1], "node"]).take(arrow(sfirst)))
    cols = {name: ranks[name] for name in ranks.column_names}
    cols.update(lateness_pct=arrow(per_rank, pa.float64()), rows=arrow(rows, pa.int32()))
    return pa.table({f.name: cols[f.name] for f in LATENESS_SCHEMA}).cast(LATENESS_SCHEMA)
