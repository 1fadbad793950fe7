"""The Typer app: one line per command, each command a thin function in its own module."""

import typer

from fleetval.cli import inspect_cmds, run_cmd

app = typer.Typer(
    name="fleetval",
    help="Validate GPU fleets: real collectives on Ray, Parquet results, baseline regressions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.command("run")(run_cmd.run)
app.command("runs")(inspect_cmds.runs)
app.command("show")(inspect_cmds.show)
app.command("results")(inspect_cmds.results)
# compare / baseline / trend commands are registered below (fleetval/cli/compare_cmds.py).
