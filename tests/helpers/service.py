"""The `fleetval serve` subprocess, its CLI and the small suites the service tests share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.net import free_port

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
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        log = (self.data / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetval.cli",
                "serve",
                "--port",
                str(port),
                "--data",
                str(self.data),
                "--address",
                self.address,
                *self.args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).json()["executor"]:
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            assert self.proc.poll() is None, (self.data / "server.log").read_text()
            time.sleep(0.3)
        raise AssertionError(
            "server did not become ready: " + (self.data / "server.log").read_text()
        )

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
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        cmd = [sys.executable, "-m", "fleetval.cli", "serve", "--port", str(port), "--data",
               str(self.data), "--no-executor", "--no-scheduler", "--no-access-log"]  # fmt: skip
        with (self.data / "server.log").open("ab") as log:
            self.proc = subprocess.Popen([*cmd, *self.args], env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, (self.data / "server.log").read_text()
            time.sleep(0.2)
        raise AssertionError("serve did not start: " + (self.data / "server.log").read_text())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
