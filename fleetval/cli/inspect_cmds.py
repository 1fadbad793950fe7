"""`fleetval runs`, `show RUN`, `results RUN`: read the store, print it.

`runs` lists the catalog (JSON); pyarrow is imported inside the functions that read rows.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from fleetval.cli.common import (
    DataOpt,
    JsonOpt,
    bad_input_exits,
    choices,
    console,
    open_catalog,
    open_store,
)
from fleetval.cli.run_cmd import STATUS_STYLE, print_summary
from fleetval.nodesets import EnvSummary, group_env, head, more
from fleetval.store.catalog import ENV_COLUMNS
from fleetval.vocab import OutputFormat

if TYPE_CHECKING:
    import pyarrow as pa

    from fleetval.store.catalog import Catalog

RunArg = Annotated[str, typer.Argument(help="Run id (see `fleetval runs`), or `latest`")]


Format = choices("ResultsFormat", (OutputFormat.TABLE, OutputFormat.JSON, OutputFormat.CSV))


def runs(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List stored runs, oldest first."""
    with bad_input_exits():
        records = open_catalog(data).runs()
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in records], default=str))
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


def _resolve(store: Catalog, run: str) -> str:
    return store.latest_run().run_id if run == "latest" else store.run(run).run_id


def show(run: RunArg, data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """One run: its environment (nodes grouped by identical environment), its steps and their
    verdicts, fleet outliers; --json: everything, every node."""
    from fleetval.analysis.compare import fleet_outliers  # NOTE: pyarrow: only the command using it
    from fleetval.analysis.compare_format import outlier_text

    with bad_input_exits():
        store = open_store(data)
        record = store.run(_resolve(store, run))
        nodes = store.nodes([record.run_id]).to_pylist()
        outliers = fleet_outliers(store, record.run_id)
    if as_json:
        data_out = {
            "run": record.to_dict(),
            "nodes": nodes,
            "environment": group_env(nodes, ENV_GROUPED).to_dict(),
            "outliers": [asdict(o) for o in outliers],
        }
        typer.echo(json.dumps(data_out, default=str))
        return
    if record.faults:
        console.print(f"[yellow]faults injected:[/yellow] {json.dumps(record.faults)}")
    console.print(env_table(group_env(nodes, ENV_GROUPED)))
    print_summary(record)
    _print_check_tables(store.results([record.run_id], columns=_TABLE_COLS).to_pylist())
    shown, left = head(outliers)
    for o in shown:  # far below its peers in this run: flagged with no baseline needed
        console.print(outlier_text(o))
    if left:
        console.print(f"{more(left, 'outliers')} (fleetval show {record.run_id} --json)")


# the hostname names a node: never shared, never grouped on
ENV_GROUPED = (
    "gpu_model",
    "gpu_count",
    *(c for c in ENV_COLUMNS if c not in ("gpu_model", "hostname")),
)


def env_table(env: EnvSummary) -> Table:
    """Every node's shared environment once, then each group of identical nodes: only what
    differs, and its hosts compressed (node-[1-7,9]); at most SHOWN groups, largest first."""
    table = Table(title=f"environment of {env.title}")
    table.add_column("nodes", justify="right", no_wrap=True)
    table.add_column("environment", overflow="fold")
    table.add_row("all", f"{env.text()}\n[dim]{env.hosts_shown}[/dim]")
    for g in env.shown:
        table.add_row(f"{len(g.nodes):,}", f"{g.text()}\n[dim]{g.hosts_shown}[/dim]")
    groups, nodes = env.left
    if groups:
        table.add_row(f"{nodes:,}", f"{more(groups, 'groups')} (--json lists them)")
    return table


# What a check plug-in's `tables` may read of a run's rows.
_TABLE_COLS = [
    "step",
    "check",
    "world_size",
    "rank",
    "metric",
    "value",
    "status",
    "node",
    "message",
]


def _print_check_tables(rows: list[dict]) -> None:
    """The tables each check of the run presents (its plug-in's `tables`), e.g. DDP scaling."""
    from fleetval.checks import CHECKS

    for name in sorted({r["check"] for r in rows}):
        present = CHECKS[name].tables if name in CHECKS else None
        for t in present(rows) if present else ():
            table = Table(title=t.title)
            for col in t.columns:
                table.add_column(col, justify="right")
            for row in t.rows:
                table.add_row(*row)
            console.print(table)


def _filtered(table: pa.Table, filters: dict[str, object]) -> pa.Table:
    """Rows matching every given filter: the same filter as the service's results route."""
    from fleetval.store.query import filter_rows

    return filter_rows(table, filters)


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
        run_id = _resolve(store, run)
        every = store.results([run_id])
        filters = {"step": step, "check": check, "collective": collective, "rank": rank,
                   "node": node}  # fmt: skip
        table = _filtered(every, filters)
        if not len(table) and len(every):
            raise ValueError(_no_match(run_id, every, filters))
    fmt = Format.JSON if as_json else fmt
    if summary:
        from fleetval.analysis.nccl_summary import nccl_summary

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


def _no_match(run_id: str, every: pa.Table, filters: dict[str, object]) -> str:
    """Why a filter matched no row: what the run holds for each filter given."""
    given = {k: v for k, v in filters.items() if v is not None}
    said = " ".join(f"--{k} {v}" for k, v in given.items())
    held = "; ".join(
        f"{k}s: {', '.join(map(str, sorted({x for x in every[k].to_pylist() if x is not None})))}"
        for k in given
    )
    return f"no row of run {run_id} matches {said} (the run's {held})"


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
