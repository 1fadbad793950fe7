"""`fleetval report RUN [--baseline NAME] [--waive GATE:WHO:REASON]... [--sweeps N] -o FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetval.cli.common import DataOpt, Exit, bad_input_exits, console, open_store


def report(
    run: Annotated[str, typer.Argument(help="Run id (`fleetval runs`), or `latest`")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="FILE.html (self-contained), .md or .json")
    ],
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", "-b", help="Baseline for the regression gate [default: the suite's]"
        ),
    ] = None,
    waive: Annotated[
        list[str] | None,
        typer.Option("--waive", help="Accept a failing gate: GATE:WHO:REASON (repeatable)"),
    ] = None,
    sweeps: Annotated[
        int, typer.Option(help="A sweep's report: each node over this many sweeps", min=1)
    ] = 10,
    data: DataOpt = None,
) -> None:
    """Release sign-off report of a run against its suite's gates. Exit 0 passed, 1 failed, 2 bad input."""
    # NOTE: imported here so `fleetval --help` and other commands never load plotting.
    from fleetval.reports import build_signoff, format_for_path, parse_waiver, render

    with bad_input_exits():
        fmt = format_for_path(output)
        if not output.parent.exists():
            raise ValueError(f"-o {output}: folder {output.parent} does not exist")
        waivers = [parse_waiver(w) for w in waive or []]
        store = open_store(data)
        run_id = store.latest_run().run_id if run == "latest" else run
        signoff = build_signoff(store, run_id, baseline=baseline, waivers=waivers, sweeps=sweeps)
        output.write_text(render(signoff, fmt))
    colour = "green" if signoff.exit_code == 0 else "red"
    failed = [g.gate.value for g in signoff.gates if g.status.value == "FAIL"]
    console.print(
        f"[{colour}]{signoff.verdict.value}[/{colour}] sign-off of run {run_id}"
        + (f": failed {', '.join(failed)}" if failed else "")
        + f" -> {output}",
        highlight=False,
    )
    raise typer.Exit(Exit.OK if signoff.exit_code == 0 else Exit.FAILED)
