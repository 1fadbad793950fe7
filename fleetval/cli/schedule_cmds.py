"""`fleetval schedule add|list|delete`: named cron schedules kept and fired by the service.

Thin: each command is one call of the service's REST API, through the one client (`cli/client.py`) `fleetval submit` uses.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from fleetval.cli.client import ServerOpt, ServiceClient, SuiteArg, TokenOpt, suite_body
from fleetval.cli.common import JsonOpt, LabelOpt, bad_input_exits, command_group, console
from fleetval.store.catalog import parse_pairs
from fleetval.vocab import Catchup

schedule_app = command_group(
    "Named cron schedules the service fires (each firing is a submission)."
)


@schedule_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The schedule's name")],
    suite: SuiteArg,
    cron: Annotated[
        str,
        typer.Option(
            "--cron",
            help='UTC cron: "0 2 * * *"; a sixth field, written last, is seconds',
        ),
    ],
    server: ServerOpt,
    token: TokenOpt = None,
    label: LabelOpt = [],  # noqa: B006
    catchup: Annotated[
        Catchup, typer.Option("--catchup", help="Firings missed while the service was down")
    ] = Catchup.ONCE,
    retries: Annotated[
        int,
        typer.Option("--retries", min=0, help="Requeue a fired run if the service dies mid-run"),
    ] = 0,
) -> None:
    """Create a schedule owned by the token's owner. Exit 0 created, 2 bad input."""
    with bad_input_exits(), ServiceClient(server, token) as client:
        body = {
            "name": name,
            "cron": cron,
            "suite": suite_body(suite),
            "labels": parse_pairs(label, "--label"),
            "catchup": catchup,
            "retries": retries,
        }
        made = client.call("POST", "/v1/schedules", json=body).json()
    console.print(f"schedule {made['name']}: next fire {made['next_fire']}", highlight=False)


@schedule_app.command("list")
def list_(server: ServerOpt, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Schedules with their cron, owner, next and last fire and counters."""
    from rich.table import Table

    with bad_input_exits(), ServiceClient(server, token) as client:
        schedules = client.call("GET", "/v1/schedules").json()
    if as_json:
        typer.echo(json.dumps(schedules))
        return
    table = Table(title="schedules")
    for col in ("name", "cron", "suite", "owner", "catchup", "next fire", "last fire", "fired"):
        table.add_column(col)
    for s in schedules:
        suite = s["suite"] if isinstance(s["suite"], str) else f"{s['suite']['name']} (inline)"
        table.add_row(
            s["name"], s["cron"], suite, s["owner"], s["catchup"], s["next_fire"],
            s["last_fire"] or "never", str(s["fired"]),
        )  # fmt: skip
    console.print(table)


@schedule_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="The schedule's name")],
    server: ServerOpt,
    token: TokenOpt = None,
) -> None:
    """Delete a schedule (its owner's token or an admin's); the runs it queued stay."""
    with bad_input_exits(), ServiceClient(server, token) as client:
        client.call("DELETE", f"/v1/schedules/{name}")
    console.print(f"deleted schedule {name}", highlight=False)
