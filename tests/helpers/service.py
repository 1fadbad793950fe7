"""Servers for tests: `fleetval serve` as a subprocess (`fleetval.testing.serve`, which the
benchmarks start it with too) with the tokens and options the service tests give it, or the
app under uvicorn in a thread; the CLI, and the small suites the service tests share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fleetval.testing.serve import (  # noqa: F401  (what the service tests import from here)
    Serving,
    answers_at_all,
    answers_ok,
    executor_up,
    start_serve,
)

CPU = {"world_sizes": [2], "gpus_per_rank": 0}
BARRIER = {
    "name": "tiny",
    "placement": CPU,
    "steps": [
        {"check": "collectives", "collectives": ["barrier"], "dtypes": ["float32"], "repeats": 1}
    ],
}
HANG = {  # rank 1 stops participating: the step runs until cancelled (or its 60 s deadline)
    "name": "hang",
    "placement": CPU,
    "timeouts": {"step_s": 60},
    "steps": [
        {"check": "collectives", "collectives": ["all_reduce"], "dtypes": ["float32"], "repeats": 1}
    ],
    "faults": [{"kind": "hang", "rank": 1}],
}
FINISHED = ("pass", "fail", "unjudged", "cancelled", "error", "interrupted")


@contextmanager
def serve_app(app: Any, start_s: float = 60) -> Iterator[str]:
    """The app served by a real uvicorn on a loopback port in a thread of this process (so a
    test can reach the app's state); yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_s
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]  # port 0: the OS picked it
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(start_s)


def cli(*args: str, data: Path, **kw: Any) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "fleetval.cli", *args, "--data", str(data)]
        if "--server" not in args
        else [sys.executable, "-m", "fleetval.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=kw.get("timeout", 120),
    )


class _Served:
    """A `fleetval serve` this test started: its URL and process once started."""

    serving: Serving | None

    @property
    def url(self) -> str:
        assert self.serving is not None, "not started"
        return self.serving.url

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.serving.proc if self.serving else None


@dataclass
class Server(_Served):
    data: Path
    address: str
    tokens: dict[str, str] | None = None
    args: tuple[str, ...] = ()  # more `fleetval serve` options
    serving: Serving | None = None

    def start(self) -> Server:
        # NOTE: ready once the executor is up (it connects to Ray after the API answers)
        self.serving = start_serve(
            self.data, "--address", self.address, *self.args, ready=executor_up
        )
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.serving:
            self.serving.stop(sig)

    def client(self, scope: str = "admin") -> httpx.Client:
        assert self.tokens is not None
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[scope]}"}, timeout=30
        )


def make_server(tmp: Path, cluster: Any) -> Server:
    tmp.mkdir(parents=True, exist_ok=True)
    tokens = {}
    for scope in ("read", "submit", "admin"):
        res = cli("token", "create", "--scope", scope, "--name", f"ci-{scope}", data=tmp)
        assert res.returncode == 0, res.stderr
        tokens[scope] = res.stdout.strip()
    return Server(tmp, cluster.address, tokens=tokens)


def wait_in_step(client: httpx.Client, run_id: str, timeout_s: float = 60) -> dict:
    """The run, once its progress names a step under way: its ranks placed, their group
    formed (the engine's step_start comes after the rendezvous)."""
    return _poll(client, run_id, lambda r: bool((r.get("progress") or {}).get("step")), timeout_s)


def wait_for(
    client: httpx.Client, run_id: str, statuses: tuple[str, ...] = FINISHED, timeout_s: float = 120
) -> dict:
    return _poll(client, run_id, lambda r: r["status"] in statuses, timeout_s)


def _poll(
    client: httpx.Client, run_id: str, done: Callable[[dict], bool], timeout_s: float
) -> dict:
    """The run as GET answers it, once `done` holds, polled until the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get(f"/v1/runs/{run_id}").json()
        if done(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} not there after {timeout_s}s: {run}")


@dataclass
class Replica(_Served):
    """`fleetval serve --no-executor --no-scheduler` on a free loopback port: the read side
    of the service, no Ray."""

    data: Path
    args: tuple[str, ...] = ()  # more `serve` options (--limits FILE, --docs)
    serving: Serving | None = None

    def start(self) -> Replica:
        self.serving = start_serve(
            self.data, "--no-executor", "--no-scheduler", "--no-access-log", *self.args
        )
        return self

    def stop(self) -> None:
        if self.serving:
            self.serving.stop(timeout_s=20)
