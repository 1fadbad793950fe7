"""The Typer app: one line per command, each command a thin function in its own module."""

import typer

from fleetval.cli import (
    attribute_cmd,
    checks_cmd,
    compare_cmds,
    gpu_health_cmd,
    ingest_cmds,
    inspect_cmds,
    report_cmd,
    run_cmd,
    schedule_cmds,
    serve_cmds,
    stragglers_cmd,
    sweep_cmd,
)

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
app.command("sweep")(sweep_cmd.sweep)
app.command("sweep-history")(sweep_cmd.sweep_history)
app.command("checks")(checks_cmd.checks)
app.command("compare")(compare_cmds.compare)
app.command("trend")(compare_cmds.trend)
app.command("attribute")(attribute_cmd.attribute)
app.command("report")(report_cmd.report)
app.command("ingest")(ingest_cmds.ingest)
app.command("nccl-log")(ingest_cmds.nccl_log)
app.command("gpu-health")(gpu_health_cmd.gpu_health)
app.command("gpu-watch")(gpu_health_cmd.gpu_watch)
app.command("stragglers")(stragglers_cmd.stragglers)
app.add_typer(compare_cmds.baseline_app, name="baseline")
app.command("serve")(serve_cmds.serve)
app.command("submit")(serve_cmds.submit)
app.add_typer(serve_cmds.token_app, name="token")
app.add_typer(schedule_cmds.schedule_app, name="schedule")
