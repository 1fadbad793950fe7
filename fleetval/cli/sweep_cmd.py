"""`fleetval sweep SUITE`: isolate slow nodes; exit 0 healthy, 1 nodes flagged, 2 bad input."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from fleetval.cli.common import AddressOpt, DataOpt, Exit, bad_input_exits, console, open_store


def sweep(
    suite: Annotated[
        str, typer.Argument(help="Suite whose steps measure each node group (e.g. sweep)")
    ],
    address: AddressOpt = None,
    data: DataOpt = None,
    threshold: Annotated[
        float,
        typer.Option(
            help="A group this much worse than its peer is slow (0.2 = 20%)", min=0.01, max=0.99
        ),
    ] = 0.2,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Fleet sweep: node groups bisected until the slow node is isolated."""
    from fleetval.run.sweep import sweep as run_sweep
    from fleetval.suite import load_suite  # NOTE: torch and ray only for commands that run

    with bad_input_exits():
        record, found = run_sweep(
            load_suite(suite), open_store(data), address=address, threshold=threshold
        )
    if as_json:
        trials = [
            {"round": t.round, "group": list(t.group), "score": t.score} for t in found.trials
        ]
        typer.echo(
            json.dumps(
                {
                    "run_id": record.run_id,
                    "flagged": found.flagged,
                    "rounds": found.rounds,
                    "trials": trials,
                    "note": found.note,
                }
            )
        )
    else:
        table = Table(title=f"sweep {record.run_id}: {found.rounds} round(s)")
        table.add_column("round", justify="right")
        table.add_column("node group")
        table.add_column("score (busbw GB/s or 1/time)", justify="right")
        for t in found.trials:
            table.add_row(
                str(t.round), ", ".join(t.group), "failed" if t.score is None else f"{t.score:.4g}"
            )
        console.print(table)
        verdict = (
            f"[red]slow: {', '.join(found.flagged)}[/red]"
            if found.flagged
            else "[green]fleet healthy[/green]"
        )
        console.print(verdict + (f" ({found.note})" if found.note else ""))
    raise typer.Exit(Exit.FAILED if found.flagged else Exit.OK)
