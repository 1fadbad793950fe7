"""`fleetval serve` (or another ASGI server command) as a subprocess on a free loopback port:
started with the given options and environment, ready once /healthz answers what the caller
waits for (within a deadline), stopped cleanly. What the tests and the benchmarks that need
a real service process start it with.

    with start_serve(data, "--no-executor", "--no-scheduler") as serving:
        httpx.get(f"{serving.url}/v1/runs", ...)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from fleetval.testing.net import free_port

Ready = Callable[[httpx.Response], bool]

# The checkout (or site-packages) this process imported fleetval from: the child imports the
# same one, whatever its working directory.
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


def answers_ok(r: httpx.Response) -> bool:
    """/healthz answered 200."""
    return r.status_code == 200


def answers_at_all(r: httpx.Response) -> bool:
    """Any answer: for what /healthz says first (while the run index builds)."""
    return True


def executor_up(r: httpx.Response) -> bool:
    """The executor is up (it connects to Ray after the API answers)."""
    return bool(r.json()["executor"])


def index_ready(r: httpx.Response) -> bool:
    """The run index is built: what is measured next is reads, not the build."""
    return r.status_code == 200 and r.json()["index"] == "ready"


class NotReady(RuntimeError):
    """The server ended, or did not answer as awaited before its deadline (it is killed)."""


def wait_ready(
    url: str,
    proc: subprocess.Popen[bytes],
    ready: Ready = answers_ok,
    timeout_s: float = 90,
    log: Path | None = None,
) -> httpx.Response:
    """Poll URL/healthz until an answer satisfies `ready` and return that answer. A server
    that ends or never gets there is killed (nothing outlives the caller) and `NotReady`
    raised, with the end of its log when it has one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            r = httpx.get(f"{url}/healthz", timeout=5)
            if ready(r):
                return r
        except (httpx.HTTPError, ValueError):  # not listening yet; a body not yet JSON
            pass
        time.sleep(0.2)
    ended = proc.poll()
    if ended is None:
        proc.kill()
        proc.wait(timeout=30)
    why = f"ended ({ended})" if ended is not None else f"not ready in {timeout_s:g} s"
    tail = f":\n{log.read_text(errors='replace')[-5000:]}" if log and log.exists() else ""
    raise NotReady(f"{url}: the service {why}{tail}")


@dataclass
class Serving:
    """A server process on a loopback port; `health` is the /healthz answer that made it
    ready (None until `wait_ready`)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path | None = None
    health: httpx.Response | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def wait_ready(self, ready: Ready = answers_ok, timeout_s: float = 90) -> httpx.Response:
        self.health = wait_ready(self.url, self.proc, ready, timeout_s, self.log)
        return self.health

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        """Send `sig` (a service manager's SIGTERM unless told) and wait for the exit; one that
        outlives `timeout_s` is killed. Its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)

    def __enter__(self) -> Serving:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def spawn(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> Serving:
    """`argv --port PORT` started on a free loopback port, not waited for; its output
    appended to `log` (discarded without one). `env` is the child's whole environment (this
    process's, with this fleetval on PYTHONPATH, unless given); `preexec` runs in the child
    before it starts (a service manager's niceness, CPU affinity)."""
    port = free_port()
    if env is None:
        path = os.pathsep.join(p for p in (SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path}
    cmd = [*argv, "--port", str(port)]
    if log is None:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=preexec
        )
    else:
        with log.open("ab") as out:  # the child keeps its own handle open
            proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec
            )
    return Serving(proc, f"http://127.0.0.1:{port}", log)


def serve_argv(data: Path, *args: str) -> list[str]:
    """The command line of `fleetval serve --data DATA ARGS` in this interpreter."""
    return [sys.executable, "-m", "fleetval.cli", "serve", "--data", str(data), *args]


def start_serve(
    data: Path,
    *args: str,
    ready: Ready = answers_ok,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 90,
    preexec: Callable[[], None] | None = None,
) -> Serving:
    """`fleetval serve --data DATA ARGS` on a free loopback port, its output in `log`
    (DATA/server.log unless given), returned once /healthz answers what `ready` accepts. A
    process that ends or never gets ready raises `NotReady` with the end of its log."""
    serving = spawn(
        serve_argv(data, *args), log=log or data / "server.log", env=env, preexec=preexec
    )
    serving.wait_ready(ready, timeout_s)
    return serving
