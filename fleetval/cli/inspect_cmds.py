"""`fleetval runs`, `show RUN`, `results RUN`: read the store, print it.

`runs` lists the catalog (JSON); pyarrow is imported inside the functions that read rows.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from fleetval.cli.common import (
    DataOpt,
    JsonOpt,
    bad_input_exits,
    console,
    open_catalog,
    open_store,
)
from fleetval.cli.run_cmd import STATUS_STYLE, print_summary
from fleetval.store.catalog import ENV_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

    from fleetval.store.catalog import Catalog, RunRecord

RunArg = Annotated[str, typer.Argument(help="Run id (see `fleetval runs`), or `latest`")]


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def runs(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List stored runs, oldest first."""
    with bad_input_exits():
        records = open_catalog(data).runs()
    if as_json:
        typer.echo(json.dumps([_run_json(r) for r in records], default=str))
        return
    table = Table(title="runs")
    table.add_column("run", no_wrap=True)
    for col in ("suite", "status", "started", "labels", "faults"):
        table.add_column(col)
    for r in records:
        style = STATUS_STYLE.get(r.status, "")
        labels = ",".join(f"{k}={v}" for k, v in r.labels.items())
        faults = ",".join(f["kind"] for f in r.faults)
        table.add_row(
            r.run_id,
            r.suite,
            f"[{style}]{r.status}[/{style}]",
            f"{r.started_at:%Y-%m-%d %H:%M:%S}",
            labels,
            faults,
        )
    console.print(table)


def _run_json(r: RunRecord) -> dict:
    """A run record for tools: everything but the stored suite text."""
    out = {k: v for k, v in r.__dict__.items() if k != "suite_json"}
    out["metrics"] = [m.to_dict() for m in r.metrics]
    return out


def _resolve(store: Catalog, run: str) -> str:
    return store.latest_run().run_id if run == "latest" else store.run(run).run_id


def show(run: RunArg, data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """One run: its environment per node, its steps and their verdicts, fleet outliers."""
    from fleetval.analysis.compare import fleet_outliers  # NOTE: pyarrow: only the command using it
    from fleetval.analysis.compare_format import outlier_text

    with bad_input_exits():
        store = open_store(data)
        record = store.run(_resolve(store, run))
        nodes = store.nodes([record.run_id]).to_pylist()
        outliers = fleet_outliers(store, record.run_id)
    if as_json:
        data_out = {
            "run": _run_json(record),
            "nodes": nodes,
            "outliers": [asdict(o) for o in outliers],
        }
        typer.echo(json.dumps(data_out, default=str))
        return
    if record.faults:
        console.print(f"[yellow]faults injected:[/yellow] {json.dumps(record.faults)}")
    env = Table(title="environment")
    env.add_column("field")
    for n in nodes:
        env.add_column(n["node"])
    for field in ("gpu_count", *ENV_COLUMNS):
        env.add_row(field, *(_cell(n.get(field)) for n in nodes))
    console.print(env)
    print_summary(record)
    if any(s["check"] == "ddp_scaling" for s in record.summary.get("steps", [])):
        _print_scaling(store.results([record.run_id], columns=_SCALING_COLS).to_pylist())
    for o in outliers:  # far below its peers in this run: flagged with no baseline needed
        console.print(outlier_text(o))


_SCALING_COLS = ["step", "check", "world_size", "rank", "metric", "value", "status"]


def _print_scaling(rows: list[dict]) -> None:
    """Weak-scaling efficiency of each ddp_scaling step, when the run has one."""
    # NOTE: the ddp module imports torch; only runs with a ddp_scaling step pay for it
    from fleetval.checks.ddp import scaling_efficiency

    for step in sorted({r["step"] for r in rows if r["check"] == "ddp_scaling"}):
        table = Table(title=f"weak scaling: {step}")
        for col in ("world size", "throughput (samples/s)", "efficiency T_n / (n x T_1)"):
            table.add_column(col, justify="right")
        for p in scaling_efficiency(rows, step=step):
            eff = "n/a (no world size 1)" if p.efficiency is None else f"{p.efficiency:.2f}"
            table.add_row(str(p.world_size), f"{p.throughput:,.0f}", eff)
        console.print(table)


_ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8}


def _filtered(table: pa.Table, filters: dict[str, object]) -> pa.Table:
    """Rows matching every given filter: the same filter as the service's results route."""
    from fleetval.store.query import filter_rows

    return filter_rows(table, filters)


def nccl_summary(table: pa.Table) -> pa.Table:
    """nccl-tests style: per step, collective, op, dtype and size, over the ranks that ran it:
    count (elements), time (mean of the ranks' medians, us) with min/avg/max, algbw and busbw
    (means), #wrong (sum).

    NOTE: numpy over reduction.group_rows, not Table.group_by: Arrow's group-by imports
    pandas when it is installed (~0.3 s, most of this command's start).
    """
    import numpy as np
    import pyarrow as pa

    from fleetval.arrays import arrow, group_rows, np_col

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


def results(
    run: RunArg,
    data: DataOpt = None,
    fmt: Annotated[Format, typer.Option("--format", help="table, json or csv")] = Format.TABLE,
    as_json: JsonOpt = False,
    step: Annotated[str | None, typer.Option("--step", help="Only this step")] = None,
    check: Annotated[str | None, typer.Option("--check", help="Only this check")] = None,
    collective: Annotated[
        str | None, typer.Option("--collective", help="Only this collective")
    ] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="Only this rank")] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only this node")] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="nccl-tests style: one line per size, over ranks")
    ] = False,
) -> None:
    """The measurement rows of a run, filtered; --summary: one nccl-tests line per size."""
    with bad_input_exits():
        store = open_store(data)
        table = store.results([_resolve(store, run)])
    filters = {"step": step, "check": check, "collective": collective, "rank": rank, "node": node}
    table = _filtered(table, filters)
    fmt = Format.JSON if as_json else fmt
    if summary:
        table = nccl_summary(table)
    elif fmt == Format.CSV:
        table = table.drop_columns(["samples_us"])  # CSV holds no lists: JSON and Parquet keep them
    if fmt == Format.CSV:
        typer.echo(_csv(table), nl=False)
        return
    rows = table.to_pylist()
    if fmt == Format.JSON:
        typer.echo(json.dumps(rows, default=str))
        return
    cols = tuple(table.column_names) if summary else _RESULT_COLS
    out = Table(title=f"results {run}" + (" (nccl-tests summary)" if summary else ""))
    for c in cols:
        out.add_column(
            c, justify="right" if c not in ("step", "collective", "type", "redop") else "left"
        )
    for r in rows:
        out.add_row(*(_cell(r.get(c)) for c in cols))
    console.print(out)


def _csv(table: pa.Table) -> str:
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    return buf.getvalue().decode()


_RESULT_COLS = (
    "job", "step", "collective", "op", "dtype", "size_bytes", "world_size", "rank", "node",
    "time_us_median", "busbw_gbps", "metric", "value", "wrong", "status", "message",
)  # fmt: skip


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
