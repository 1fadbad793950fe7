"""Stored summaries -> one value per (run, identity, group): what compare and trend judge."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from fleetval.analysis.compare_settings import IDENTITY_FIELDS
from fleetval.arrays import (
    _first_seen,
    arrow,
    dict_codes,
    group_rows,
    np_col,
)
from fleetval.store.summaries import KIND_CORRECT, KIND_TIMED
from fleetval.text import human_bytes
from fleetval.vocab import CULPRIT_METRIC

ID_COLS = list(IDENTITY_FIELDS)


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


# What run_values' `models` holds: a node's GPU model (and count) in each run.
MODEL_COLUMNS = ["run_id", "node", "gpu_model", "gpu_count"]


def group_name(node: dict) -> str:
    """A node's group in a run: its GPU model; "cpu" for a node without GPUs (as `fleetval
    run` and the health check call it); "unknown" for GPUs of no recorded model."""
    if node.get("gpu_model"):
        return node["gpu_model"]
    return "cpu" if "gpu_count" in node and not node["gpu_count"] else "unknown"


def _groups(summaries: pa.Table, models: pa.Table | None) -> tuple[np.ndarray, list[str]]:
    """Per row the group's code and the group names: the node itself (models None), else
    its group_name in that run ("unknown" where the run has no record of it); looked up per
    (run, node) pair."""
    node, nodes = dict_codes(summaries["node"])
    if models is None:
        return node, [n or "" for n in nodes]
    run, runs = dict_codes(summaries["run_id"])
    names = sorted({group_name(m) for m in models.to_pylist()} | {"unknown"})
    lookup = np.full((len(runs) + 1) * (len(nodes) + 1), names.index("unknown"), np.int64)
    run_at, node_at = {r: i for i, r in enumerate(runs)}, {n: i for i, n in enumerate(nodes)}
    for rec in models.to_pylist():
        r, n = run_at.get(rec["run_id"]), node_at.get(rec["node"])
        if r is not None and n is not None:
            lookup[r * (len(nodes) + 1) + n] = names.index(group_name(rec))
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


def _measurements(summaries: pa.Table) -> pa.Table:
    """Without culprits' rows (`CULPRIT_METRIC`). NOTE: through codes and `take`: a
    pyarrow filter or compute kernel with a Python scalar would import pandas."""
    own, owns = dict_codes(summaries["metric"])
    if CULPRIT_METRIC not in owns:
        return summaries
    return summaries.take(arrow(np.flatnonzero(own != owns.index(CULPRIT_METRIC))))


def run_values(summaries: pa.Table, *, models: pa.Table | None, cutoff_bytes: int) -> pa.Table:
    """Per (run, identity): the run's value in its metric's units, with the group.

    `models` (MODEL_COLUMNS) groups nodes by GPU model; None groups per node.
    Timed identities are judged size-aware: latency_us below `cutoff_bytes` (or without
    busbw), busbw_gbps above. A group's value is the rank-weighted mean of its nodes' values.
    String columns come dictionary-encoded, each dictionary as pc.dictionary_encode makes it
    from the plain values (each value once, in order of first appearance).

    NOTE: a group-by on the dictionary codes with numpy: the summaries' strings arrive
    dictionary-encoded, and a hash group-by on them cost several times as much.
    """
    # A culprit's row says who was late or broke a step: not a measurement, and its
    # absence from a candidate is no missing measurement (the run's status carries it).
    summaries = _measurements(summaries)
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
