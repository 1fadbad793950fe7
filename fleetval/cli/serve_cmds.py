"""`fleetval serve`, `fleetval token create`, `fleetval submit` (what CI calls).

Nothing here imports Ray or torch at import time: `submit` only talks HTTP, and `serve`
loads the service when it starts.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from fleetval.cli.client import ServerOpt, ServiceClient, SuiteArg, TokenOpt, suite_body
from fleetval.cli.common import (
    AddressOpt,
    DataOpt,
    Exit,
    LabelOpt,
    StrictOpt,
    bad_input_exits,
    command_group,
    console,
    err_console,
)
from fleetval.cli.run_cmd import STATUS_STYLE, print_steps
from fleetval.status import combined_exit, exit_status
from fleetval.store.catalog import default_data_dir, parse_pairs
from fleetval.vocab import EventKind

GRACE_S = 10  # a stopping server waits this long for open requests (event streams)

token_app = command_group("API tokens for the service.")


def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port")] = 8080,
    data: DataOpt = None,
    address: AddressOpt = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="uvicorn worker processes (one runs the queue)")
    ] = 1,
    access_log: Annotated[
        bool, typer.Option("--access-log/--no-access-log", help="Log every request (never headers)")
    ] = True,
    limits: Annotated[
        Path | None,
        typer.Option(
            "--limits",
            help="YAML of ceilings on what a suite may ask (max_iterations, max_size_bytes, "
            "max_timeout_s, max_world_size, max_model_params, max_active_per_owner, ...)",
        ),
    ] = None,
    executor: Annotated[
        bool,
        typer.Option(
            "--executor/--no-executor",
            help="Run the queue here (default), or only serve the API (a replica beside one that runs it)",
        ),
    ] = True,
    scheduler: Annotated[
        bool,
        typer.Option(
            "--scheduler/--no-scheduler",
            help="Fire schedules from this process (default; safe beside others on the same data)",
        ),
    ] = True,
    docs: Annotated[
        bool,
        typer.Option(
            "--docs/--no-docs",
            help="Serve /docs and /redoc (their scripts come from a CDN); off by default",
        ),
    ] = False,
) -> None:
    """The REST service: submissions queue durably and run one at a time on Ray."""
    import uvicorn

    from fleetval.api import Settings, create_app
    from fleetval.api.limits import Limits

    data_dir = (data or default_data_dir()).resolve()
    with bad_input_exits():
        ceilings = Limits.load(limits) if limits else Limits()
    settings = Settings(
        data_dir=data_dir,
        address=address,
        limits=ceilings,
        run_executor=executor,
        run_scheduler=scheduler,
        docs=docs,
    )
    # NOTE: open event streams would hold a graceful stop until their runs end.
    server: dict[str, Any] = {
        "host": host,
        "port": port,
        "access_log": access_log,
        "timeout_graceful_shutdown": GRACE_S,
    }
    if workers == 1:
        uvicorn.run(create_app(settings), **server)
        return
    os.environ.update(settings.to_env())  # each worker builds its own `Settings()` from these
    uvicorn.run("fleetval.api.app:app_from_env", factory=True, workers=workers, **server)


def parse_duration(text: str) -> float:
    """Seconds from `90`, `30m`, `12h`, `30d` or `2w`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise ValueError(f"--expires-in {text!r}: expected a positive duration like 3600, 12h, 30d")
    return seconds


@token_app.command("create")
def token_create(
    scope: Annotated[str, typer.Option("--scope", help="read, submit or admin")],
    name: Annotated[
        str, typer.Option("--name", help="Its owner: runs it submits belong to this name")
    ] = "",
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Valid for this long: 3600, 12h, 30d, 2w")
    ] = None,
    data: DataOpt = None,
) -> None:
    """Print a new token once; only its hash is stored."""
    from fleetval.api.db import Scope, ServiceDB

    with bad_input_exits():
        if scope not in set(Scope):
            raise ValueError(f"--scope must be one of {', '.join(Scope)}, not {scope!r}")
        seconds = parse_duration(expires_in) if expires_in else None
        db = ServiceDB(data or default_data_dir())
        token = db.create_token(Scope(scope), name or None, expires_in_s=seconds)
        db.close()
    typer.echo(token)


@token_app.command("list")
def token_list(
    data: DataOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """Tokens by id, owner, scope, expiry and revocation (never the tokens themselves)."""
    from dataclasses import asdict

    from rich.table import Table

    from fleetval.api.db import ServiceDB, now

    db = ServiceDB(data or default_data_dir())
    tokens = db.tokens()
    db.close()
    if as_json:
        typer.echo(json.dumps([{**asdict(t), "state": t.state(now())} for t in tokens]))
        return
    table = Table(title="tokens")
    for col in ("id", "name", "scope", "created", "expires", "state"):
        table.add_column(col)
    for t in tokens:
        state = t.state(now())
        table.add_row(t.id, t.name, t.scope, t.created_at, t.expires_at or "never", state)
    console.print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id, as `fleetval token list` shows")],
    data: DataOpt = None,
) -> None:
    """Revoke a token: from now on it answers 401."""
    from fleetval.api.db import ServiceDB

    with bad_input_exits():
        db = ServiceDB(data or default_data_dir())
        token = db.revoke_token(token_id)
        db.close()
        if token is None:
            raise ValueError(f"no token {token_id!r}; `fleetval token list` shows the ids")
    typer.echo(f"revoked {token.id} ({token.name}, {token.scope})")


# -- submit ----------------------------------------------------------------------------


def _follow(client: ServiceClient, run_id: str, timeout_s: float) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    deadline = time.monotonic() + timeout_s
    if not console.is_terminal:  # CI logs: one plain line per step
        for e in client.events(run_id, deadline):
            if e["kind"] == EventKind.STEP_END:
                o = e["outcome"]
                print(
                    f"[{e['percent']:5.1f}%] {o['status']:4} job {e['job']} {e['step']} ({o['seconds']:.1f}s) {o['message']}",
                    flush=True,
                )
            elif e["kind"] == EventKind.RUN_START:
                print(f"run {run_id} started", flush=True)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(f"{run_id}: queued", total=100)
        for e in client.events(run_id, deadline):
            if e["kind"] == EventKind.STEP_END:
                o = e["outcome"]
                style = STATUS_STYLE.get(o["status"], "")
                bar.console.print(
                    f"  [{style}]{o['status']:4}[/{style}] job {e['job']} {e['step']} ({o['seconds']:.1f}s) {o['message']}"
                )
            if "percent" in e:
                head = f"job {e['job']} {e['step']} {e.get('detail', '')}"
                bar.update(task, completed=e["percent"], description=head[:80])


def _print_summary(run: dict[str, Any]) -> None:
    print_steps(run["run_id"], run["suite"], run["steps"])
    # NOTE: a status with no style, or a message with brackets, is text, not markup
    status = Text(run["status"], style=STATUS_STYLE.get(run["status"], ""))
    message = f" {run['message']}" if run.get("message") else ""
    console.print(Text.assemble(f"run {run['run_id']}: ", status, message))


def submit(
    suite: SuiteArg,
    server: ServerOpt,
    token: TokenOpt = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow progress; exit like `fleetval run`")
    ] = False,
    submission_id: Annotated[
        str | None,
        typer.Option("--submission-id", help="Idempotency key: a retry returns the same run"),
    ] = None,
    label: LabelOpt = [],  # noqa: B006
    compare: Annotated[
        str | None,
        typer.Option("--compare", help="Then compare with this baseline; a regression exits 1"),
    ] = None,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Requeue if the service dies mid-run")
    ] = 0,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the run to end")
    ] = 6 * 3600,
    strict: StrictOpt = False,
) -> None:
    """Submit a suite to a service (what CI calls). Exit 0 pass, 1 fail, 2 bad input."""
    with bad_input_exits(), ServiceClient(server, token) as client:
        body = {
            "suite": suite_body(suite),
            "labels": parse_pairs(label, "--label"),
            "submission_id": submission_id,
            "retries": retries,
        }
        run = client.call("POST", "/v1/runs", json=body).json()
        run_id = run["run_id"]
        err_console.print(f"run {run_id}: {run['status']}", highlight=False)
        if not wait and not compare:
            typer.echo(run_id)
            raise typer.Exit(Exit.OK)
        try:
            _follow(client, run_id, timeout)
        except TimeoutError as err:
            err_console.print(f"[red]error:[/red] run {run_id}: {err}")
            raise typer.Exit(Exit.FAILED) from err
        run = client.call("GET", f"/v1/runs/{run_id}").json()
        _print_summary(run)
        code = Exit(exit_status(run["status"], strict=strict))
        if compare:
            result = client.call(
                "POST", "/v1/compare", json={"baseline": compare, "runs": [run_id]}
            ).json()
            counts = ", ".join(f"{n} {v}" for v, n in result["summary"].items() if n)
            console.print(f"compare with {compare}: {counts}")
            code = Exit(combined_exit(code, result["exit_code"]))
    sys.stdout.flush()
    raise typer.Exit(code)
