"""Servers for tests: `fleetval serve` as a subprocess, or the app under uvicorn in a thread;
the CLI, and the small suites the service tests share."""

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

from fleetval.testing.net import free_port

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


def answers_ok(r: httpx.Response) -> bool:
    return r.status_code == 200


def answers_at_all(r: httpx.Response) -> bool:
    """Any answer: for a test of what /healthz says first (while the index builds)."""
    return True


def executor_up(r: httpx.Response) -> bool:
    return bool(r.json()["executor"])


@dataclass
class Serving:
    """A `fleetval serve` process on a loopback port, and the /healthz answer that made it
    ready."""

    proc: subprocess.Popen
    url: str
    log: Path
    health: httpx.Response

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)


def start_serve(
    data: Path,
    *args: str,
    ready: Callable[[httpx.Response], bool] = answers_ok,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 90,
) -> Serving:
    """`fleetval serve --data DATA ARGS` on a free loopback port, its output in `log`
    (DATA/server.log unless given), once /healthz answers what `ready` accepts. A process
    that ends or never gets ready fails the test with its log."""
    port = free_port()
    log = log or data / "server.log"
    cmd = [sys.executable, "-m", "fleetval.cli", "serve", "--port", str(port), "--data", str(data)]
    env = env if env is not None else {**os.environ, "PYTHONPATH": os.getcwd()}
    with log.open("ab") as out:  # NOTE: the child keeps its own handle open
        proc = subprocess.Popen([*cmd, *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    return Serving(proc, url, log, _until_ready(proc, url, log, ready, timeout_s))


def _until_ready(
    proc: subprocess.Popen,
    url: str,
    log: Path,
    ready: Callable[[httpx.Response], bool],
    timeout_s: float,
) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            r = httpx.get(f"{url}/healthz", timeout=2)
            if ready(r):
                return r
        except (httpx.HTTPError, ValueError):  # not listening yet; a body not yet JSON
            pass
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    raise AssertionError(
        f"`fleetval serve` not ready in {timeout_s:g}s:\n{log.read_text()[-5000:]}"
    )


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


@dataclass
class Server:
    data: Path
    address: str
    url: str = ""
    proc: subprocess.Popen | None = None
    tokens: dict[str, str] | None = None
    args: tuple[str, ...] = ()  # more `fleetval serve` options

    def start(self) -> Server:
        # NOTE: ready once the executor is up (it connects to Ray after the API answers)
        serving = start_serve(self.data, "--address", self.address, *self.args, ready=executor_up)
        self.url, self.proc = serving.url, serving.proc
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

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
class Replica:
    """`fleetval serve --no-executor --no-scheduler` on a free loopback port: the read side
    of the service, no Ray."""

    data: Path
    args: tuple[str, ...] = ()  # more `serve` options (--limits FILE, --docs)
    url: str = ""
    proc: subprocess.Popen | None = None

    def start(self) -> Replica:
        serving = start_serve(
            self.data, "--no-executor", "--no-scheduler", "--no-access-log", *self.args
        )
        self.url, self.proc = serving.url, serving.proc
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
