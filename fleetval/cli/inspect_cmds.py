"""`fleetval runs`, `show RUN`, `results RUN`: read the store, print it."""

from __future__ import annotations

import io
import json
from enum import StrEnum
from typing import Annotated

import pyarrow.csv as pacsv
import typer
from rich.table import Table

from fleetval.checks.ddp import scaling_efficiency
from fleetval.cli.common import DataOpt, bad_input_exits, console, open_store
from fleetval.cli.run_cmd import STATUS_STYLE, print_summary
from fleetval.compare import fleet_outliers
from fleetval.compare_format import outlier_text
from fleetval.results import ENV_COLUMNS

RunArg = Annotated[str, typer.Argument(help="Run id (see `fleetval runs`), or `latest`")]


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def runs(data: DataOpt = None) -> None:
    """List stored runs, oldest first."""
    with bad_input_exits():
        records = open_store(data).runs()
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


def _resolve(store, run: str) -> str:
    return store.latest_run().run_id if run == "latest" else store.run(run).run_id


def show(run: RunArg, data: DataOpt = None) -> None:
    """One run: its environment per node, its steps and their verdicts."""
    with bad_input_exits():
        store = open_store(data)
        record = store.run(_resolve(store, run))
        nodes = store.nodes([record.run_id]).to_pylist()
        rows = store.results([record.run_id]).to_pylist()
        outliers = fleet_outliers(store, record.run_id)
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
    _print_scaling(rows)
    for o in outliers:  # far below its peers in this run: flagged with no baseline needed
        console.print(outlier_text(o))


def _print_scaling(rows: list[dict]) -> None:
    """Weak-scaling efficiency of each ddp_scaling step, when the run has one."""
    for step in sorted({r["step"] for r in rows if r["check"] == "ddp_scaling"}):
        table = Table(title=f"weak scaling: {step}")
        for col in ("world size", "throughput (samples/s)", "efficiency T_n / (n x T_1)"):
            table.add_column(col, justify="right")
        for p in scaling_efficiency(rows, step=step):
            eff = "n/a (no world size 1)" if p.efficiency is None else f"{p.efficiency:.2f}"
            table.add_row(str(p.world_size), f"{p.throughput:,.0f}", eff)
        console.print(table)


def results(
    run: RunArg,
    data: DataOpt = None,
    fmt: Annotated[Format, typer.Option("--format", help="table, json or csv")] = Format.TABLE,
) -> None:
    """The measurement rows of a run."""
    with bad_input_exits():
        store = open_store(data)
        table = store.results([_resolve(store, run)])
    if fmt == Format.CSV:
        # CSV holds no lists: the per-iteration samples stay in --format json and Parquet.
        buf = io.BytesIO()
        pacsv.write_csv(table.drop_columns(["samples_us"]), buf)
        typer.echo(buf.getvalue().decode(), nl=False)
        return
    rows = table.to_pylist()
    if fmt == Format.JSON:
        typer.echo(json.dumps(rows, default=str))
        return
    out = Table(title=f"results {rows[0]['run_id'] if rows else run}")
    cols = (
        "job",
        "step",
        "collective",
        "op",
        "dtype",
        "size_bytes",
        "world_size",
        "rank",
        "node",
        "time_us_median",
        "busbw_gbps",
        "metric",
        "value",
        "wrong",
        "status",
        "message",
    )
    for c in cols:
        out.add_column(c)
    for r in rows:
        out.add_row(*(_cell(r.get(c)) for c in cols))
    console.print(out)


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
