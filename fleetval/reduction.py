"""Reduction: a run's result rows -> one summary per identity and node (runs are the unit).

Iterations inside a run share that run's placement, clocks and load, so they describe the
run; inference about a release is drawn from run-level values. This module makes those
values, once, when a step's rows are written (`summarize`), and later reads them back as
one value per (run, identity, group) (`run_values`).

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

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.results import LATENESS_SCHEMA, SUMMARIES_SCHEMA

KIND_TIMED, KIND_VALUE, KIND_CORRECT = "timed", "value", "correct"
SUMMARY_KEYS = ["check", "collective", "op", "dtype", "size_bytes", "world_size", "metric", "node"]
# String columns read dictionary-encoded: cheaper to decode, and their indices are group codes.
DICT_COLS = ("run_id", "check", "collective", "op", "dtype", "node", "device_id", "metric",
             "unit", "status")  # fmt: skip


# -- array helpers (public: outliers and trend use them) -------------------------------------
#
# NOTE: numpy <-> Arrow through the buffers, not Array.to_numpy / pa.array / pa.scalar: each
# of those imports pandas (~0.25 s) the first time, a third of a whole compare. So values go
# through these helpers, and Python scalars in compute calls through `arrow([x])[0]`.

_NUMPY_OF = {
    pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
    pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
    pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64,
}  # fmt: skip
_ARROW_OF = {np.dtype(v): k for k, v in _NUMPY_OF.items()}


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    if buffer is None:
        return np.ones(n, bool)
    bits = np.frombuffer(buffer, np.uint8)
    return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].astype(bool)


def np_col(column: pa.ChunkedArray | pa.Array, *, null: float = np.nan) -> np.ndarray:
    """A numeric or boolean column as numpy; nulls become `null` (NaN: integers become floats).

    Read from the Arrow buffers (a view where it can be); other types through to_numpy.
    """
    col = one_chunk(column)
    dtype = _NUMPY_OF.get(col.type)
    n, off = len(col), col.offset
    if dtype is None and not pa.types.is_boolean(col.type):
        return col.to_numpy(zero_copy_only=False)
    if n == 0:
        return np.zeros(0, dtype or bool)
    buffers = col.buffers()
    if dtype is None:
        values = _bits(buffers[1], off, n)
    else:
        values = np.frombuffer(buffers[1], dtype, count=off + n)[off:]
    if not col.null_count:
        return values
    valid = _bits(buffers[0], off, n)
    if np.isnan(null) or dtype is None:  # NaN needs floats; so do boolean nulls
        values = values.astype(float)
    return np.where(valid, values, null)


def arrow(
    values: np.ndarray | list,
    type: pa.DataType | None = None,
    *,
    nan_is_null: bool = False,
    valid: np.ndarray | None = None,
) -> pa.Array:
    """A numpy array (or a list of numbers, booleans or strings) as Arrow; null where `valid`
    is False, and with `nan_is_null` where NaN (as pa.array(..., from_pandas=True))."""
    strings = isinstance(values, list) and any(isinstance(v, str) for v in values)
    if strings or type == pa.string():
        return _strings(list(values))
    x = np.asarray(values)
    n = len(x)
    if x.dtype == bool or type == pa.bool_():
        packed = np.packbits(x.astype(bool), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(packed)])
    if type is None:
        type = _ARROW_OF[np.dtype(x.dtype)] if x.dtype != object else pa.float64()
    x = np.ascontiguousarray(x, dtype=_NUMPY_OF[type])
    if nan_is_null and x.dtype.kind == "f":
        valid = ~np.isnan(x) if valid is None else valid & ~np.isnan(x)
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(x)])


def _strings(values: list[str | None]) -> pa.Array:
    data = [v.encode() if v is not None else b"" for v in values]
    offsets = np.zeros(len(data) + 1, np.int32)
    offsets[1:] = np.cumsum([len(b) for b in data])
    valid = np.array([v is not None for v in values])
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(data), buffers)


def one_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def equals(column: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    """Rows of a (dictionary or plain) string column equal to value, as numpy bools."""
    col = one_chunk(column)
    if pa.types.is_dictionary(col.type):
        hits = np.flatnonzero(np.array(col.dictionary.to_pylist(), dtype=object) == value)
        return np.isin(np_col(col.indices, null=-1), hits)
    return np_col(pc.is_in(col, value_set=arrow([value])))  # a null is not equal


def plain(table: pa.Table) -> pa.Table:
    """Dictionary columns decoded to plain values (for small key tables)."""
    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """Dense integer codes of a column (null is its own code) and how many there can be."""
    col = one_chunk(column)
    if pa.types.is_integer(col.type) and col.null_count == 0 and len(col):
        v = np_col(col).astype(np.int64)
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < 1 << 16:
            return v - lo, hi - lo + 1
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    card = len(col.dictionary) + 1
    return np_col(col.indices, null=card - 1).astype(np.int64), card


def group_rows(table: pa.Table, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row -> group id (groups ordered by key codes, so deterministic) and each group's first row.

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
            code, first = _dense(code, span)
            span = len(first)
        code += idx * span
        span *= card
    return _dense(code, span)


def _dense(code: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(code, return_index=True, return_inverse=True)'s inverse and index (codes
    in [0, span)), cheaper: a counting pass over the span when it is small, else an
    unstable sort; each group's first row by a minimum."""
    n = len(code)
    if span <= 4 * n:
        present = np.zeros(span, bool)
        present[code] = True
        rank = np.cumsum(present, dtype=np.int32 if span < 1 << 31 else np.int64) - 1
        grp = rank[code].astype(np.int64)
        groups = int(rank[-1]) + 1
    else:
        order = np.argsort(code)
        ranked = code[order]
        new = np.empty(n, bool)
        new[0] = True
        np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
        grp = np.empty(n, np.int64)
        grp[order] = np.cumsum(new) - 1
        groups = int(grp[order[-1]]) + 1
    first = np.full(groups, n, np.int64)
    np.minimum.at(first, grp, np.arange(n))
    return grp, first


def _by_segment_then_value(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """np.lexsort((values, seg)) at a third of the cost: the values sorted, then a stable
    radix sort (numpy's for 16-bit keys) on the segment ids, 16 bits at a time."""
    order = np.argsort(values)
    key = seg[order]
    top, shift = int(key.max(initial=0)), 0
    while True:
        step = np.argsort(((key >> shift) & 0xFFFF).astype(np.uint16), kind="stable")
        order, key = order[step], key[step]
        shift += 16
        if top >> shift == 0:
            return order


def segment_median(values: np.ndarray, seg: np.ndarray, nseg: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact median per segment id (NaN for empty ones) and the segment sizes."""
    n = np.bincount(seg, minlength=nseg)
    s = np.cumsum(n) - n
    v = values[_by_segment_then_value(values, seg)]
    med = np.full(nseg, np.nan)
    ok = n > 0
    med[ok] = (v[s[ok] + (n[ok] - 1) // 2] + v[s[ok] + n[ok] // 2]) / 2
    return med, n


# -- one run's rows -> summaries -------------------------------------------------------------


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
    table = table.filter(pc.invert(pc.fill_null(pc.equal(table["status"], "skip"), False)))
    if not len(table):
        return SUMMARIES_SCHEMA.empty_table()
    kind = _kinds(table)
    table = table.append_column("_kind", pa.array(kind, pa.string()))
    grp, first = group_rows(table, [*SUMMARY_KEYS, "_kind", "run_id"])
    ng = len(first)
    gkind = kind[first]
    wrong = np.nan_to_num(np_col(table["wrong"]).astype(float))
    failed = equals(table["status"], "fail") | (wrong > 0)
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


# -- one run's rows -> each rank's lateness ---------------------------------------------------

LATENESS_READ_COLS = ["run_id", "check", "collective", "op", "dtype", "size_bytes", "world_size",
                      "rank", "node", "metric", "time_us_median", "samples_us", "status"]  # fmt: skip
_RANK_KEYS = ["check", "collective", "world_size", "rank", "run_id"]


def rank_lateness(table: pa.Table) -> pa.Table:
    """One run's result rows (a step, or the whole run) -> each rank's lateness (LATENESS_SCHEMA).

    In a blocking collective every rank leaves together, so at iteration i the others wait
    (max over ranks of t_i - own t_i) for a rank: as a share of max t_i, the share of the
    collective spent waiting for it. Per row the median over iterations, then per (check,
    collective, world size, rank) the median over sizes and dtypes. `outliers.late_ranks`
    judges these against the rank's peers; written with each results part, so that check
    never reads the samples.
    """
    timed = np_col(pc.and_(pc.is_valid(table["time_us_median"]), pc.is_null(table["metric"])))
    t = table.filter(arrow(timed & ~equals(table["status"], "skip")))
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


# -- summaries -> one value per (run, identity, group) ---------------------------------------

ID_COLS = ["check", "collective", "op", "dtype", "size_bytes", "world_size", "metric", "group"]


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


@dataclass(frozen=True, kw_only=True)
class Identity:
    """What a measurement is, independent of the run: runs meet on this."""

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

    def family(self) -> str:
        """The rows of a grouped table: what differs within it is the size and the metric."""
        parts = [
            self.check,
            self.collective,
            self.op,
            self.dtype,
            f"n={self.world_size}",
            self.group,
        ]
        return " ".join(p for p in parts if p)


def dict_codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """A column's dictionary codes (null: -1) and its dictionary values."""
    col = one_chunk(column)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    names = col.dictionary.to_pylist()
    if col.null_count == len(col):  # NOTE: e.g. `metric` of timed rows: skip the fill
        return np.full(len(col), -1, np.int64), names
    return np_col(col.indices, null=-1).astype(np.int64), names


def _groups(summaries: pa.Table, models: pa.Table | None) -> tuple[np.ndarray, list[str]]:
    """Per row the group's code and the group names: the node itself (models None), else
    its GPU model in that run ("unknown" if none); looked up per (run, node) pair."""
    node, nodes = dict_codes(summaries["node"])
    if models is None:
        return node, [n or "" for n in nodes]
    run, runs = dict_codes(summaries["run_id"])
    names = sorted({m or "unknown" for m in models["gpu_model"].to_pylist()} | {"unknown"})
    lookup = np.full((len(runs) + 1) * (len(nodes) + 1), names.index("unknown"), np.int64)
    run_at, node_at = {r: i for i, r in enumerate(runs)}, {n: i for i, n in enumerate(nodes)}
    for rec in models.to_pylist():
        r, n = run_at.get(rec["run_id"]), node_at.get(rec["node"])
        if r is not None and n is not None:
            lookup[r * (len(nodes) + 1) + n] = names.index(rec["gpu_model"] or "unknown")
    return lookup[run * (len(nodes) + 1) + node], names


def _metrics(summaries: pa.Table, cutoff_bytes: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Per row the judged metric's code, the metric names, and whether it is busbw.

    Timed rows are size-aware: busbw_gbps at or above the cutoff (when busbw is known),
    latency_us below; correctness rows `correct`; value rows keep their own metric."""
    kind, kinds = dict_codes(summaries["kind"])
    own, owns = dict_codes(summaries["metric"])
    code_of = {k: i for i, k in enumerate(kinds)}
    timed = kind == code_of.get(KIND_TIMED, -2)
    size = np_col(summaries["size_bytes"], null=-1)
    scale = np_col(summaries["busbw_scale"]).astype(float, copy=False)
    busbw = timed & np.isfinite(scale) & (size >= cutoff_bytes)
    names = ["busbw_gbps", "latency_us", "correct", *[m or "" for m in owns]]
    code = np.where(own >= 0, own + 3, 2)
    code = np.where(kind == code_of.get(KIND_CORRECT, -2), 2, code)
    code = np.where(timed, np.where(busbw, 0, 1), code)
    return code, names, busbw


def run_values(summaries: pa.Table, *, models: pa.Table | None, cutoff_bytes: int) -> pa.Table:
    """Per (run, identity): the run's value in its metric's units, with the group.

    `models` (run_id, node, gpu_model) groups nodes by GPU model; None groups per node.
    Timed identities are judged size-aware: latency_us below `cutoff_bytes` (or without
    busbw), busbw_gbps above. A group's value is the rank-weighted mean of its nodes' values.
    String columns come dictionary-encoded, each dictionary as pc.dictionary_encode makes it
    from the plain values (each value once, in order of first appearance).

    NOTE: a group-by on the dictionary codes with numpy: the summaries' strings arrive
    dictionary-encoded, and a hash group-by on them cost several times as much.
    """
    metric, metric_names, busbw = _metrics(summaries, cutoff_bytes)
    group, group_names = _groups(summaries, models)
    key_cols = ["run_id", *ID_COLS[:-2]]
    keyed = summaries.select(key_cols)
    keyed = keyed.append_column("_m", arrow(metric)).append_column("_g", arrow(group))
    seg, first = group_rows(keyed, [*key_cols, "_m", "_g"])
    ng = len(first)
    center = np_col(summaries["center"]).astype(float, copy=False)
    scale = np_col(summaries["busbw_scale"]).astype(float, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(busbw, scale / center, center)
    w = np_col(summaries["ranks"]).astype(float)
    ok = np.isfinite(value)
    wsum = np.bincount(seg, weights=np.where(ok, w, 0.0), minlength=ng)
    spread = np.nan_to_num(np_col(summaries["spread"]).astype(float, copy=False))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(seg, weights=np.where(ok, value * w, 0.0), minlength=ng) / wsum
        spread_mean = np.bincount(seg, weights=np.where(ok, spread * w, 0.0), minlength=ng) / wsum
    iters = np.full(ng, np.iinfo(np.int64).max)
    np.minimum.at(iters, seg, np_col(summaries["iters"]).astype(np.int64))
    out = summaries.select([*key_cols, "unit"]).take(arrow(first))

    def strings(col: str) -> pa.Array:
        return _first_seen(*dict_codes(out[col]))

    def summed(col: str) -> pa.Array:
        total = np.bincount(seg, weights=np_col(summaries[col]).astype(float), minlength=ng)
        return arrow(total.astype(np.int64))

    return pa.table(
        {
            "run_id": strings("run_id"),
            **{c: strings(c) for c in ["check", "collective", "op", "dtype"]},
            "size_bytes": out["size_bytes"],
            "world_size": out["world_size"],
            "metric": _first_seen(metric[first], metric_names),
            "group": _first_seen(group[first], group_names),
            "unit": strings("unit"),
            "value": arrow(np.where(wsum > 0, mean, np.nan), nan_is_null=True),
            "spread": arrow(np.where(wsum > 0, spread_mean, np.nan), nan_is_null=True),
            "ranks": summed("ranks"),
            "iters": arrow(iters),
            "wrong": summed("wrong"),
            "failed": summed("failed"),
        }
    )


def _first_seen(codes: np.ndarray, names: list) -> pa.DictionaryArray:
    """Codes into names (-1: null) as a dictionary array, its dictionary as
    pc.dictionary_encode would make it from the plain values: each value once (equal names
    share a code), in order of first appearance."""
    n, unique = len(codes), {}
    name_id = [unique.setdefault(x, len(unique)) for x in names]
    ids = codes if len(unique) == len(names) else np.array([*name_id, -1], np.int64)[codes]
    valid = ids >= 0
    everywhere = bool(valid.all())
    first = np.full(len(unique), n, np.int64)
    if everywhere:
        np.minimum.at(first, ids, np.arange(n))
    else:
        np.minimum.at(first, ids[valid], np.flatnonzero(valid))
    used = np.flatnonzero(first < n)
    order = used[np.argsort(first[used])]
    if not np.array_equal(order, np.arange(len(unique))):  # else: already so
        remap = np.zeros(len(unique) + 1, np.int64)  # the last for -1
        remap[order] = np.arange(len(order))
        ids = remap[ids]
    indices = arrow(ids, pa.int32(), valid=None if everywhere else valid)
    values = list(unique)
    return pa.DictionaryArray.from_arrays(indices, arrow([values[o] for o in order], pa.string()))
