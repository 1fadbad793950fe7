"""A run's rows as nccl-tests prints them: one line per size, over the ranks that ran it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fleetval.arrays import arrow, group_rows, np_col

_ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8}


def nccl_summary(table: pa.Table) -> pa.Table:
    """nccl-tests style: per step, collective, op, dtype and size, over the ranks that ran it:
    count (elements), time (mean of the ranks' medians, us) with min/avg/max, algbw and busbw
    (means), #wrong (sum).

    NOTE: numpy over arrays.group_rows, not Table.group_by: Arrow's group-by imports
    pandas when it is installed (~0.3 s, most of this command's start).
    """
    timed = table.filter(arrow(~np.isnan(np_col(table["time_us_median"]))))
    keys = ["step", "collective", "op", "dtype", "size_bytes", "world_size"]
    grp, first = group_rows(timed, keys)
    n = len(first)

    def mean(col: str) -> pa.Array:
        x = np_col(timed[col])
        ok = ~np.isnan(x)
        count = np.bincount(grp[ok], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return arrow(np.bincount(grp[ok], x[ok], minlength=n) / count, nan_is_null=True)

    def extreme(ufunc: np.ufunc, start: float) -> pa.Array:
        out = np.full(n, start)
        ufunc.at(out, grp, np_col(timed["time_us_median"]))
        return arrow(out)

    time_us = mean("time_us_median")
    head = timed.take(arrow(first))
    item = np.array([_ITEM_BYTES.get(d or "", 1) for d in head["dtype"].to_pylist()])
    wrong = np.bincount(grp, np.nan_to_num(np_col(timed["wrong"])), minlength=n)
    out = pa.table(
        {
            "step": head["step"], "size": head["size_bytes"],
            "count": arrow(np_col(head["size_bytes"]).astype(np.int64) // item),
            "type": head["dtype"], "redop": head["op"], "collective": head["collective"],
            "ranks": arrow(np.bincount(grp, minlength=n).astype(np.int64)),
            "time_us": time_us, "algbw_gbps": mean("algbw_gbps"),
            "busbw_gbps": mean("busbw_gbps"), "wrong": arrow(wrong.astype(np.int64)),
            "time_min_us": extreme(np.minimum, np.inf), "time_avg_us": time_us,
            "time_max_us": extreme(np.maximum, -np.inf),
        }
    )  # fmt: skip
    return out.sort_by([("step", "ascending"), ("collective", "ascending"),
                        ("type", "ascending"), ("size", "ascending")])  # fmt: skip
