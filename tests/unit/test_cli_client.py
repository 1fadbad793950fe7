"""`fleetval submit` and `fleetval schedule` over real HTTP: uvicorn on loopback, no executor.

What the one client (fleetval/cli/client.py) promises: the token goes in the header, an
answer the service refuses (an RFC 9457 problem) or a service it cannot reach is a clear
message naming the request and an exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetval.api import Settings, create_app
from fleetval.api.db import Scope
from fleetval.cli.app import app as cli_app
from fleetval.testing.net import free_port
from tests.helpers.service import serve_app

START_S = 20  # the in-thread server's deadline to accept connections


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The real app served by uvicorn in a thread: (base URL, token per scope)."""
    app = create_app(Settings(data_dir=tmp_path, run_executor=False))
    tokens = {s.value: app.state.db.create_token(s, f"{s.value}-user") for s in Scope}
    with serve_app(app, start_s=START_S) as url:
        yield url, tokens


def fleetval(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(
        cli_app, list(args), env={"FLEETVAL_TOKEN": None, "FLEETVAL_SERVER": None}
    )
    return r.exit_code, r.stdout, r.stderr


def test_schedule_add_list_delete_round_trip(service):
    url, tokens = service
    auth = ("--server", url, "--token", tokens["submit"])
    code, out, err = fleetval("schedule", "add", "nightly", "smoke", "--cron", "0 2 * * *", *auth)
    assert code == 0, err
    assert "schedule nightly: next fire" in out
    code, out, err = fleetval("schedule", "list", "--json", *auth)
    assert code == 0, err
    [listed] = json.loads(out)
    assert (listed["name"], listed["owner"], listed["suite"]) == ("nightly", "submit-user", "smoke")
    assert fleetval("schedule", "delete", "nightly", *auth)[0] == 0
    assert json.loads(fleetval("schedule", "list", "--json", *auth)[1]) == []


def test_submit_without_wait_prints_the_queued_run_id(service):
    url, tokens = service
    code, out, err = fleetval("submit", "smoke", "--server", url, "--token", tokens["submit"])
    assert code == 0, err
    run_id = out.strip()
    assert f"run {run_id}: queued" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("schedule", "delete", "nope"), "DELETE /v1/schedules/nope: 404 "),
        (("submit", "no-such-suite"), "POST /v1/runs: 422 "),
    ],
)
def test_a_refusal_is_the_problems_detail_and_exit_2(service, args, expected):
    url, tokens = service
    code, out, err = fleetval(*args, "--server", url, "--token", tokens["submit"])
    assert code == 2 and out == ""
    assert expected in err and "Traceback" not in err
    assert "{" not in err  # the problem's detail, not its JSON


def test_a_bad_token_or_none_is_refused_with_exit_2(service):
    url, _ = service
    for token in (("--token", "fv_not-a-token"), ()):
        code, _, err = fleetval("schedule", "list", "--server", url, *token)
        assert code == 2 and "GET /v1/schedules: 401 " in err, err


def test_an_unreachable_service_is_exit_2_naming_it():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, _, err = fleetval("schedule", "list", "--server", url, "--token", "fv_x")
    assert code == 2 and url in err, err


def test_a_run_summary_prints_brackets_and_unstyled_statuses_as_text(capsys) -> None:
    """`submit --wait` ends with the run's status and message: a message with `[/]` in it
    (a Ray authentication error) and a status without a style are printed as they are."""
    from fleetval.cli.serve_cmds import _print_summary

    for status, message in (("error", "driver [/] refused: [red]token[/red]"), ("new", "")):
        _print_summary({"run_id": "r1", "suite": "s", "steps": [], "status": status,
                        "message": message})  # fmt: skip
        assert f"run r1: {status} {message}".rstrip() in capsys.readouterr().out
