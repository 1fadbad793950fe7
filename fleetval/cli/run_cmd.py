"""`fleetval run SUITE`: run a suite with a live progress bar, then what each step judged
against what; exit 0 pass (or warn), 1 fail, 2 bad input, 5 nothing judged (fleetval.status)."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from fleetval.cli.common import (
    AddressOpt,
    DataOpt,
    LabelOpt,
    StrictOpt,
    bad_input_exits,
    console,
    open_store,
)
from fleetval.nodesets import head, more
from fleetval.status import exit_status
from fleetval.store.catalog import parse_pairs
from fleetval.vocab import EventKind, Status

if TYPE_CHECKING:
    from fleetval.run.execute import Event
    from fleetval.signoff.judged import StepJudged
    from fleetval.store.dataset import Store
    from fleetval.store.records import Run

STATUS_STYLE: dict[str, str] = {
    Status.PASS: "green",
    Status.FAIL: "red",
    Status.WARN: "yellow",
    Status.SKIP: "dim",
    Status.INFO: "cyan",
    Status.UNJUDGED: "magenta",
}


def run(
    suite: Annotated[
        str, typer.Argument(help="A shipped suite name (smoke, collectives, ...) or a YAML path")
    ],
    address: AddressOpt = None,
    data: DataOpt = None,
    label: LabelOpt = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="Print the run record as JSON")] = False,
    strict: StrictOpt = False,
) -> None:
    """Run a validation suite and store its results (exit 0 pass or warn, 1 fail, 2 bad input,
    5 nothing judged)."""
    # NOTE: imported here: torch and ray cost seconds, and the store-reading commands
    # (runs, show, compare, ...) must start without them
    from fleetval.run.execute import run_suite
    from fleetval.run.interrupt import EXIT_INTERRUPTED, ctrl_c_cancels
    from fleetval.suite import load_suite

    with bad_input_exits():
        spec = load_suite(suite)
        labels = parse_pairs(label, "--label")
        store = open_store(data)
        # NOTE: Ctrl-C sets `cancel` (the run tears down and records `cancelled`); a second
        # one exits at once (fleetval.run.interrupt).
        with ctrl_c_cancels(spec.timeouts.cancel_grace_s) as cancel:
            if as_json:
                # Ray's driver prints worker deaths and the like to stdout; --json keeps stdout
                # to the one JSON document, so anything else goes to stderr while it runs.
                with contextlib.redirect_stdout(sys.stderr):
                    record = run_suite(spec, store, address=address, labels=labels, cancel=cancel)
            else:
                record = _run_with_progress(spec, store, address, labels, cancel)
    judged = _judged(store, record)
    if as_json:
        out = record.to_dict() | {"judged": [j.to_dict() for j in judged]}
        typer.echo(json.dumps(out, indent=2, default=str))
    else:
        print_summary(record)
        print_judged(judged)
    interrupted = cancel.is_set()
    raise typer.Exit(EXIT_INTERRUPTED if interrupted else exit_status(record.status, strict=strict))


def _judged(store: Store, record: Run) -> list[StepJudged]:
    from fleetval.signoff.judged import judged_steps

    return judged_steps(store, record)


def print_judged(judged: list[StepJudged]) -> None:
    """What each step judged against what: the figures the user ran the suite for."""
    console.print("[bold]judged[/bold] (per step: rows by status, then the figures against "
                  "their expectation)")  # fmt: skip
    for j in judged:
        style = STATUS_STYLE.get(j.status, "")
        console.print(f"  job {j.job} {j.step} ({j.check}): [{style}]{j.status}[/{style}]: "
                      f"{j.counts}", highlight=False)  # fmt: skip
        for line in j.figures:
            console.print(f"    {line}", highlight=False)


def _run_with_progress(spec, store, address, labels, cancel) -> Run:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from fleetval.run.execute import run_suite

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(f"{spec.name}: starting Ray", total=None)

        def on_event(e: Event) -> None:
            head = f"{spec.name} job {e.job} {e.step}"
            if e.kind == EventKind.STEP_END and e.outcome is not None:
                style = STATUS_STYLE.get(e.outcome.status, "")
                bar.console.print(
                    f"  [{style}]{e.outcome.status:4}[/{style}] {head} ({e.outcome.seconds:.1f}s) {e.outcome.message}"
                )
                bar.update(task, total=e.total, completed=e.index, description=head)
            else:
                bar.update(
                    task, total=e.total, completed=e.index, description=f"{head} {e.detail}"[:90]
                )

        return run_suite(
            spec, store, address=address, labels=labels, on_event=on_event, cancel=cancel
        )


def print_summary(record: Run) -> None:
    print_steps(record.run_id, record.suite, record.summary.get("steps", []))
    style = STATUS_STYLE.get(record.status, "bold")  # NOTE: cancelled, error: no colour of theirs
    console.print(f"run [bold]{record.run_id}[/bold]: [{style}]{record.status}[/{style}]")


def print_steps(run_id: str, suite: str, steps: list[dict[str, Any]]) -> None:
    """The steps of a run (as stored in its summary, or as the service returns them)."""
    table = Table(title=f"run {run_id} ({suite})")
    for col in ("job", "world", "step", "check", "status", "seconds", "message"):
        table.add_column(col)
    for s in steps:
        style = STATUS_STYLE.get(s["status"], "")
        table.add_row(
            str(s["job"]),
            str(s["world_size"]),
            s["step"],
            s["check"],
            f"[{style}]{s['status']}[/{style}]",
            f"{s['seconds']:.1f}",
            s["message"],
        )
    console.print(table)
    for s in steps:
        culprits, left = head(s.get("culprits") or [])  # at fleet size: the first few
        for c in culprits:  # who broke or slowed the step, down to the device
            device = f" device {c['device_id']}" if c.get("device_id") else ""
            console.print(
                f"  culprit: job {s['job']} {s['step']}: rank {c['rank']} on {c['node']}{device}"
                f" ({c['reason']}): {c['detail']}"
            )
        if left:
            console.print(f"  {more(left, 'culprits')} in job {s['job']} {s['step']} (--json)")
