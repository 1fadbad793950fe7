"""The one HTTP client of the commands that talk to a fleetval service (`submit`, `schedule`).

Base URL and bearer token come from `--server`/`--token` or the environment ($FLEETVAL_TOKEN,
or the file $FLEETVAL_TOKEN_FILE names: a command line is visible in `ps` and CI logs, the
environment and a file are not); every request has a deadline. A
service that cannot be reached or answers an error (the service's one error shape is an RFC
9457 problem) raises `ServiceError`, a `ValueError`, so `bad_input_exits` prints the problem's
detail and exits 2. httpx is imported when a client opens, so other commands start without it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleetval.vocab import EventKind

if TYPE_CHECKING:
    import httpx

REQUEST_TIMEOUT_S = 30  # one request (not a followed run: that has the command's --timeout)
STREAM_TIMEOUT_S = 60  # the event stream's read timeout (the service sends keep-alives)
RECONNECTS = 5  # the event stream is resumed (Last-Event-ID) this often before giving up

SuiteArg = Annotated[
    str, typer.Argument(help="A shipped suite name, or a local YAML file (sent inline)")
]
ServerOpt = Annotated[str, typer.Option("--server", envvar="FLEETVAL_SERVER", help="Service URL")]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="FLEETVAL_TOKEN",
        help="Bearer token [default: $FLEETVAL_TOKEN, else the file $FLEETVAL_TOKEN_FILE]; "
        "prefer those: a command line shows in ps and CI logs",
    ),
]


class ServiceError(ValueError):
    """The service was unreachable or refused: the CLI prints it and exits 2."""


def problem_detail(r: httpx.Response) -> str:
    """A problem's detail (the service's one error shape), else the body as it came."""
    try:
        detail = r.json().get("detail", r.text)
    except (ValueError, AttributeError):
        detail = r.text
    return str(detail)


def suite_body(suite: str) -> str | dict[str, Any]:
    """A local YAML file goes inline (validated here first); anything else is a shipped name."""
    path = Path(suite)
    if not path.is_file():
        return suite
    import yaml

    from fleetval.suite import parse_suite

    data = yaml.safe_load(path.read_text())
    parse_suite(data, str(path))  # bad input exits 2 before the server is asked
    return data


def resolve_token(token: str | None) -> str | None:
    """`--token` or $FLEETVAL_TOKEN, else the file $FLEETVAL_TOKEN_FILE names (stripped)."""
    if token:
        return token
    path = os.environ.get("FLEETVAL_TOKEN_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except OSError as err:
        raise ServiceError(f"$FLEETVAL_TOKEN_FILE {path}: {err.strerror}") from None


class ServiceClient:
    """One connection to a service: `call` for a request, `events` for a run's progress."""

    def __init__(self, server: str, token: str | None) -> None:
        import httpx  # NOTE: here, so the other commands start without it

        token = resolve_token(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=server, headers=headers, timeout=REQUEST_TIMEOUT_S)

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.http.close()

    def call(self, method: str, url: str, **kw: Any) -> httpx.Response:
        """One request; unreachable or an error status raises `ServiceError`."""
        import httpx

        try:
            r = self.http.request(method, url, **kw)
        except httpx.HTTPError as err:
            raise ServiceError(f"{self.http.base_url}: {err}") from err
        if r.status_code >= 400:
            raise ServiceError(f"{method} {url}: {r.status_code} {problem_detail(r)}")
        return r

    def events(self, run_id: str, deadline: float) -> Iterator[dict[str, Any]]:
        """The run's events, resuming after a dropped connection, until run_end or the deadline."""
        import httpx

        last, drops = "0", 0
        while time.monotonic() < deadline:
            try:
                with self.http.stream(
                    "GET",
                    f"/v1/runs/{run_id}/events",
                    headers={"Last-Event-ID": last},
                    timeout=STREAM_TIMEOUT_S,
                ) as r:
                    if r.status_code >= 400:
                        raise ServiceError(f"events: {r.status_code} {r.read().decode()}")
                    for line in r.iter_lines():
                        if line.startswith("id: "):
                            last = line[4:]
                        elif line.startswith("data: "):
                            event = json.loads(line[6:])
                            yield event
                            if event["kind"] == EventKind.RUN_END:
                                return
            except httpx.TransportError as err:
                drops += 1
                if drops > RECONNECTS:
                    raise ServiceError(f"lost the event stream: {err}") from err
                time.sleep(1)
        raise TimeoutError("the run did not end within the --timeout")
