"""A run's rows as nccl-tests prints them: one line per size, over the ranks that ran it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fleetval.arrays import arrow, group_rows, np_col

_ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8}

# The check whose rows are the in-place half of another check's line (an imported nccl-tests
# or rccl-tests table: its in-place columns, stored as their own step named after the check).
IN_PLACE = {"bandwidth_in_place": "bandwidth"}

_KEYS = ["line_step", "collective", "op", "dtype", "size_bytes", "world_size"]


def nccl_summary(table: pa.Table) -> pa.Table:
    """nccl-tests style: per step, collective, op, dtype and size, over the ranks that ran it:
    count (elements), ranks (the world size), time (mean of the ranks' medians, us) with
    min/avg/max, algbw and busbw (means), #wrong (sum); in-place figures beside the
    out-of-place ones (`ip_time_us`, `ip_algbw_gbps`, `ip_busbw_gbps`, `ip_wrong`) where the
    run has them, as nccl-tests prints them side by side.

    NOTE: numpy over arrays.group_rows, not Table.group_by: Arrow's group-by imports
    pandas when it is installed (~0.3 s, most of this command's start).
    """
    timed = table.filter(arrow(~np.isnan(np_col(table["time_us_median"]))))
    timed = timed.append_column("line_step", _line_step(timed))
    in_place = np.isin(np.array(timed["check"].to_pylist(), dtype=object), list(IN_PLACE))
    grp, first = group_rows(timed, _KEYS)
    n = len(first)
    oop = _half(timed, grp, n, ~in_place)
    # each line's identity from its out-of-place rows where it has any, else its in-place ones
    head = timed.take(arrow(np.where(oop["any"], oop["first"], first)))
    item = np.array([_ITEM_BYTES.get(d or "", 1) for d in head["dtype"].to_pylist()])
    cols = {
        "step": head["line_step"], "size": head["size_bytes"],
        "count": arrow(np_col(head["size_bytes"]).astype(np.int64) // item),
        "type": head["dtype"], "redop": head["op"], "collective": head["collective"],
        "ranks": head["world_size"],
        "time_us": oop["time"], "algbw_gbps": oop["algbw"], "busbw_gbps": oop["busbw"],
        "wrong": oop["wrong"],
    }  # fmt: skip
    if in_place.any():
        ip = _half(timed, grp, n, in_place)
        cols |= {"ip_time_us": ip["time"], "ip_algbw_gbps": ip["algbw"],
                 "ip_busbw_gbps": ip["busbw"], "ip_wrong": ip["wrong"]}  # fmt: skip
    cols |= {"time_min_us": oop["min"], "time_avg_us": oop["time"], "time_max_us": oop["max"]}
    return pa.table(cols).sort_by([("step", "ascending"), ("collective", "ascending"),
                                   ("type", "ascending"), ("size", "ascending")])  # fmt: skip


def _line_step(table: pa.Table) -> pa.Array:
    """The step a row's line is named by: an in-place check's rows in a step named after it
    belong to the out-of-place step's line."""
    steps, checks = table["step"].to_pylist(), table["check"].to_pylist()
    return arrow(
        [
            IN_PLACE[c] if c in IN_PLACE and s == c else s
            for s, c in zip(steps, checks, strict=True)
        ],
        pa.string(),
    )


def _half(timed: pa.Table, grp: np.ndarray, n: int, sel: np.ndarray) -> dict:
    """Per line, over the rows in `sel`: mean time, algbw and busbw, min and max time, the
    sum of wrong elements (null where the line has no such rows), and its first such row."""
    g = grp[sel]
    rows = np.bincount(g, minlength=n)
    has = rows > 0

    def mean(col: str) -> pa.Array:
        x = np_col(timed[col])[sel]
        ok = ~np.isnan(x)
        count = np.bincount(g[ok], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return arrow(np.bincount(g[ok], x[ok], minlength=n) / count, nan_is_null=True)

    def extreme(ufunc: np.ufunc, start: float) -> pa.Array:
        out = np.full(n, start)
        ufunc.at(out, g, np_col(timed["time_us_median"])[sel])
        return arrow(np.where(has, out, np.nan), nan_is_null=True)

    wrong = np.bincount(g, np.nan_to_num(np_col(timed["wrong"])[sel]), minlength=n)
    first = np.full(n, len(grp), np.int64)
    np.minimum.at(first, g, np.flatnonzero(sel))
    return {
        "time": mean("time_us_median"), "algbw": mean("algbw_gbps"), "busbw": mean("busbw_gbps"),
        "min": extreme(np.minimum, np.inf), "max": extreme(np.maximum, -np.inf),
        "wrong": arrow(wrong.astype(np.int64), valid=has),
        "any": has, "first": np.where(has, first, 0),
    }  # fmt: skip
