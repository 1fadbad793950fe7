"""The executor's supervision, for real: uvicorn on loopback in this process (so the test can
kill the executor thread), real Ray (the session's cluster), a real hung run.

The thread is killed the way Python kills a thread from outside: an exception (SystemExit)
raised into it asynchronously. The database is made unusable the way another process
would: by holding its write lock.
"""

from __future__ import annotations

import ctypes
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from fleetval.api.app import create_app
from fleetval.api.db import Scope
from fleetval.api.settings import Settings
from tests.helpers.ray import assert_no_leaks
from tests.helpers.service import BARRIER, HANG, serve_app, wait_for


@contextmanager
def serving(settings: Settings) -> Iterator[tuple[str, object]]:
    """A real uvicorn server on loopback in a thread; the app, for its executor."""
    app = create_app(settings)
    with serve_app(app) as url:
        yield url, app


def kill_thread(thread: threading.Thread, exc: type[BaseException] = SystemExit) -> None:
    """Raise `exc` in `thread` at its next bytecode: what ends a Python thread from outside."""
    assert thread.ident is not None
    hit = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(exc)
    )
    assert hit == 1, f"thread {thread.name} not found"


def health_until(
    url: str, status: int, timeout_s: float, reason: str = "", token: str = ""
) -> dict:
    """Poll /healthz until it answers `status` with `reason` in its reason (the exception's
    text is there only to a read token)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(f"{url}/healthz", headers=headers, timeout=10)
        if r.status_code == status and reason in r.json()["reason"]:
            return r.json()
        time.sleep(0.02)
    raise AssertionError(f"/healthz never answered {status} ({reason}) in {timeout_s}s: {r.json()}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killing_the_executor_thread_recovers(ray_session, tmp_path):
    settings = Settings(data_dir=tmp_path, address=ray_session.address)
    with serving(settings) as (url, app):
        token = app.state.db.create_token(Scope.SUBMIT, "ci")
        c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        executor = app.state.executor
        thread = executor._thread
        hung = c.post("/v1/runs", json={"suite": HANG}).json()["run_id"]
        deadline = time.monotonic() + 120
        while (c.get(f"/v1/runs/{hung}").json()["progress"] or {}).get("step") != "collectives":
            assert time.monotonic() < deadline, "the hung run never reached its step"
            time.sleep(0.2)

        # 1. Killed mid-run: the run ends `error` with the reason, its actors torn down, and
        # the same thread takes the queue again.
        kill_thread(thread)
        health_until(url, 503, 60, reason="restarting: SystemExit", token=token)  # its back-off
        run = wait_for(c, hung, timeout_s=60)
        assert run["status"] == "error", run
        assert "the executor crashed: SystemExit" in run["message"], run["message"]
        assert_no_leaks(30)

        # 2. While it cannot work (its database locked by another process): 503 with the
        # reason; once the lock is gone, 200 and the queue runs again.
        blocker = sqlite3.connect(app.state.db.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            degraded = health_until(url, 503, 60, reason="database is locked", token=token)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert degraded["status"] == "degraded"
        health_until(url, 200, timeout_s=90)
        after = c.post("/v1/runs", json={"suite": BARRIER}).json()["run_id"]
        assert wait_for(c, after, timeout_s=120)["status"] == "pass"
        assert thread.is_alive() and executor.crashes >= 2
    assert_no_leaks(30)
