"""`fleetval attribute`: which version change (driver, CUDA/ROCm, NCCL/RCCL, ...) cost how much."""

from __future__ import annotations

import sys
from datetime import date
from typing import Annotated

import typer

from fleetval.cli.common import DataOpt, JsonOpt, bad_input_exits, console, open_store
from fleetval.store.catalog import parse_pairs
from fleetval.vocab import OutputFormat

FORMATS = (OutputFormat.TABLE, OutputFormat.JSON, OutputFormat.MARKDOWN)


def parse_since(text: str | None) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError as err:
        raise ValueError(f"--since: {text!r} is not a date (YYYY-MM-DD)") from err


def attribute(
    where: Annotated[
        list[str] | None,
        typer.Option("--where", help="Runs to read: KEY=GLOB (labels, env columns, suite)"),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only runs started on or after DATE (YYYY-MM-DD)")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option("--metric", help="busbw or latency [default: each size on its own metric]"),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json or markdown")] = "table",
    all_rows: Annotated[
        bool, typer.Option("--all", help="Table and Markdown: unchanged measurements too")
    ] = False,
    as_json: JsonOpt = False,
    data: DataOpt = None,
) -> None:
    """Which version change did it: each component's change and its effect per measurement,
    with node and night controlled (same-night comparisons of upgraded and not-yet-upgraded nodes).

    Exit 0 nothing attributed, 1 a regression attributed or a confounded change regressed,
    2 bad input.
    """
    from fleetval.analysis.attribute import attribute_store
    from fleetval.analysis.attribute_format import to_markdown, to_rich

    fmt = OutputFormat.JSON if as_json else fmt
    with bad_input_exits():
        if fmt not in FORMATS:
            raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        result = attribute_store(
            open_store(data),
            where=parse_pairs(where or [], "--where"),
            since=parse_since(since),
            metric=metric,
        )
    if fmt == OutputFormat.JSON:
        sys.stdout.write(result.to_json())
    elif fmt == OutputFormat.MARKDOWN:
        sys.stdout.write(to_markdown(result, all_rows=all_rows))
    else:
        console.print(to_rich(result, all_rows=all_rows))
    raise typer.Exit(result.exit_code)
