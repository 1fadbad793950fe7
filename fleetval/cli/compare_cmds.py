"""`fleetval compare`, `fleetval trend` and `fleetval baseline set|list|show|delete`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from rich.table import Table

from fleetval.analysis.baselines import BaselineError, Baselines, resolve
from fleetval.analysis.compare_settings import (
    COMPARE_FORMATS,
    DEFAULT_PER,
    IDENTITY_FIELDS,
    TREND_FORMATS,
    Per,
)
from fleetval.cli.common import (
    DataOpt,
    Exit,
    JsonOpt,
    bad_input_exits,
    choices,
    command_group,
    console,
    open_catalog,
    open_store,
)
from fleetval.store.catalog import parse_pairs
from fleetval.vocab import OutputFormat

if TYPE_CHECKING:
    from fleetval.store.catalog import Catalog

PerChoice = choices("Per", get_args(Per))
PER_DEFAULT = PerChoice(DEFAULT_PER)
CompareFormatChoice = choices("CompareFormat", COMPARE_FORMATS)
TrendFormatChoice = choices("TrendFormat", TREND_FORMATS)

RunsOpt = Annotated[
    list[str] | None,
    typer.Option("--run", help="Candidate run id (repeatable) [default: the newest run]"),
]
PerOpt = Annotated[
    PerChoice, typer.Option("--per", help="Match rows per GPU model (sku) or per node (node)")
]


def _emit(text: str, output: Path | None) -> None:
    """Machine formats go to stdout (or a file) unwrapped: no rich markup, no line folding."""
    if output:
        output.write_text(text)
    else:
        sys.stdout.write(text)


def _candidates(store: Catalog, runs: list[str] | None, latest: bool) -> list[str]:
    if runs and latest:
        raise ValueError("give --run ID... or --latest, not both")
    if not runs:
        return [store.latest_run().run_id]
    for run_id in runs:
        store.run(run_id)  # unknown run -> bad input naming it
    return runs


def compare(
    baseline: Annotated[
        str, typer.Option("--baseline", "-b", help="Baseline name (`fleetval baseline list`)")
    ],
    run: RunsOpt = None,
    latest: Annotated[bool, typer.Option("--latest", help="Compare the newest run")] = False,
    fmt: Annotated[
        CompareFormatChoice, typer.Option("--format", "-f", help="How to write the comparison")
    ] = CompareFormatChoice.TABLE,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold", help="Threshold in percent for every metric [default: suite's, else 5]"
        ),
    ] = None,
    per: PerOpt = PER_DEFAULT,
    history: Annotated[
        int | None,
        typer.Option(
            "--history",
            help="Earlier runs of the suite that inform each run-to-run spread "
            "[default: suite's history_runs, else 30; 0: none]",
        ),
    ] = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Also list unchanged measurements")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to FILE")
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Also fail on noisy measurements")
    ] = False,
    as_json: JsonOpt = False,
    data: DataOpt = None,
) -> None:
    """Regression verdicts of runs against a baseline.

    Exit 0 the gate passes; 1 a regression, a correctness failure, a missing measurement, a
    fleet outlier or a candidate run that did not pass (and with --strict, a noisy one); 2 bad input.
    """
    # NOTE: imported here: compare needs pyarrow and numpy, which `baseline` does not
    from fleetval.analysis.compare import compare_runs
    from fleetval.analysis.compare_format import format_comparison

    fmt = CompareFormatChoice.JSON if as_json else fmt
    with bad_input_exits():
        store = open_store(data)
        result = compare_runs(
            store,
            baseline,
            _candidates(store, run, latest),
            per=per.value,  # type: ignore[arg-type]
            threshold_pct=threshold,  # type: ignore[arg-type]
            history=history,
        )
    rendered = format_comparison(
        result, OutputFormat(fmt), all_rows=all_rows, strict=strict, width=console.size.width
    )
    if isinstance(rendered, str):
        _emit(rendered, output)
    elif output:
        md = format_comparison(result, OutputFormat.MARKDOWN, all_rows=all_rows, strict=strict)
        output.write_text(md)  # type: ignore[arg-type]
        console.print(rendered)
    else:
        console.print(rendered)
    raise typer.Exit(result.exit_code(strict))


def trend(
    where: Annotated[
        list[str] | None,
        typer.Option("--where", help="Runs to follow: KEY=GLOB (labels, env columns)"),
    ] = None,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Explicit runs, oldest first")
    ] = None,
    last: Annotated[int | None, typer.Option("--last", help="Only the newest N runs")] = None,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select",
            help=f"Only these measurements: FIELD=VALUE ({', '.join(IDENTITY_FIELDS)})",
        ),
    ] = None,
    threshold: Annotated[
        float | None, typer.Option("--threshold", help="Smallest step reported, percent")
    ] = None,
    per: PerOpt = PER_DEFAULT,
    fmt: Annotated[
        TrendFormatChoice, typer.Option("--format", "-f", help="How to write the report")
    ] = TrendFormatChoice.TABLE,
    as_json: JsonOpt = False,
    data: DataOpt = None,
) -> None:
    """Change points in the nightly history of each measurement, naming the run where it stepped.

    Exit 0 no step made a metric worse (or every such step recovered), 1 one did, 2 bad input.
    """
    from fleetval.analysis.compare_format import trend_json, trend_table
    from fleetval.analysis.trend import find_trends

    fmt = TrendFormatChoice.JSON if as_json else fmt
    with bad_input_exits():
        report = find_trends(
            open_store(data),
            where=parse_pairs(where or [], "--where"),
            run_ids=run,
            select=parse_pairs(select or [], "--select"),
            per=per.value,  # type: ignore[arg-type]
            threshold_pct=threshold,
            last=last,
        )
    if fmt == TrendFormatChoice.JSON:
        _emit(trend_json(report), None)
    else:
        console.print(trend_table(report))
    raise typer.Exit(report.worst_exit_code)


baseline_app = command_group(
    "Named baselines: a selection of runs (ids, or filters resolved when compared)."
)


@baseline_app.command("set")
def baseline_set(
    name: Annotated[str, typer.Argument(help="Baseline name, e.g. rocm6.1")],
    run: Annotated[list[str] | None, typer.Option("--run", help="Run id (repeatable)")] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="KEY=GLOB on labels or env columns, e.g. rocm_version=6.1.* (repeatable)",
        ),
    ] = None,
    last: Annotated[
        int | None, typer.Option("--last", help="With --where: only the newest N runs")
    ] = None,
    description: Annotated[str, typer.Option("--description", help="Free text")] = "",
    include_faulty: Annotated[
        bool,
        typer.Option("--include-faulty", help="With --where: also runs with injected faults"),
    ] = False,
    data: DataOpt = None,
) -> None:
    """Create or replace a baseline; it must resolve to at least one run now."""
    with bad_input_exits():
        resolved = Baselines(open_catalog(data)).set(
            name, run_ids=run, where=parse_pairs(where or [], "--where") or None, last=last,
            description=description, include_faulty=include_faulty,
        )  # fmt: skip
    console.print(
        f"baseline [bold]{name}[/bold]: {resolved.baseline.describe()} -> {len(resolved.run_ids)} runs "
        f"({', '.join(resolved.run_ids[-5:])}{', ...' if len(resolved.run_ids) > 5 else ''})",
        highlight=False,
    )


@baseline_app.command("list")
def baseline_list(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Every baseline with what it resolves to now."""
    store = open_catalog(data)
    records = store.runs()
    table = Table("name", "selection", "runs now", "created", "description")
    out = []
    for b in Baselines(store).list():
        try:
            run_ids, error = list(resolve(store, b, runs=records).run_ids), ""
        except BaselineError as err:
            run_ids, error = [], str(err)
        out.append({**json.loads(b.to_json()), "resolved": run_ids, "error": error})
        runs = f"[red]{error}[/red]" if error else str(len(run_ids))
        table.add_row(b.name, b.describe(), runs, b.created_at, b.description)
    if as_json:
        typer.echo(json.dumps(out))
    else:
        console.print(table)


@baseline_app.command("show")
def baseline_show(
    name: Annotated[str, typer.Argument()], data: DataOpt = None, as_json: JsonOpt = False
) -> None:
    """A baseline's definition and the runs it resolves to now."""
    with bad_input_exits():
        store = open_catalog(data)
        resolved = Baselines(store).resolve(name)
    b = resolved.baseline
    if as_json:
        typer.echo(json.dumps({**json.loads(b.to_json()), "resolved": list(resolved.run_ids)}))
        return
    console.print(f"[bold]{b.name}[/bold]: {b.describe()}  {b.description}", highlight=False)
    table = Table("run", "suite", "status", "started", "labels")
    by_id = {r.run_id: r for r in store.runs()}
    for run_id in resolved.run_ids:
        r = by_id[run_id]
        labels = " ".join(f"{k}={v}" for k, v in sorted(r.labels.items()))
        table.add_row(r.run_id, r.suite, r.status, f"{r.started_at:%Y-%m-%d %H:%M}", labels)
    console.print(table)


@baseline_app.command("delete")
def baseline_delete(name: Annotated[str, typer.Argument()], data: DataOpt = None) -> None:
    """Delete a baseline (its runs stay)."""
    with bad_input_exits():
        Baselines(open_catalog(data)).delete(name)
    console.print(f"deleted baseline {name}")
    raise typer.Exit(Exit.OK)
