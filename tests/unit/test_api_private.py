"""What the service lets out without a token, and who may read what it writes (issue 40,
items 5 and 6). Probed on a real `fleetval serve` on loopback whose executor names a Ray
address nobody listens on, over a data directory the command line made."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fleetval.api.db import DB_NAME, ServiceDB
from fleetval.api.supervised import Supervised
from fleetval.store.dataset import Store
from fleetval.testing.net import free_port
from fleetval.testing.signoff import healthy, write_run
from tests.helpers.service import Server, cli

RUN = "20261101-000000-priv01"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """A serve (executor on) over a data directory made by `fleetval token create`, holding
    one run, whose Ray address refuses connections; the umask the usual 022."""
    old = os.umask(0o022)
    try:
        data = tmp_path_factory.mktemp("private") / "data"  # missing: the CLI creates it
        tokens = {}
        for scope in ("read", "submit"):
            res = cli("token", "create", "--scope", scope, "--name", f"ci-{scope}", data=data)
            assert res.returncode == 0, res.stderr
            tokens[scope] = res.stdout.strip()
        store = Store(data)
        write_run(store, RUN, healthy(RUN, np.random.default_rng(5)))
        store.write_schema_note()
        server = Server(data, f"ray://127.0.0.1:{free_port()}", tokens=tokens).start()
    finally:
        os.umask(old)
    try:
        yield server, data
    finally:
        server.stop()


def degraded_health(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """/healthz once the executor has tried Ray and failed (503)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        r = httpx.get(f"{url}/healthz", headers=headers, timeout=10)
        if r.status_code == 503:
            return r
        time.sleep(0.2)
    raise AssertionError(f"/healthz never degraded: {r.status_code} {r.text}")


# -- 5. /healthz (no token) gives a generic reason ----------------------------------------


def test_healthz_without_a_token_says_ray_is_unreachable_not_where(served):
    server, data = served
    address = server.address.removeprefix("ray://")
    r = degraded_health(server.url)
    body = r.json()
    assert body["status"] == "degraded" and body["executor"] is True
    assert body["reason"] == "Ray not reachable"
    assert body["ray_error"] == "Ray not reachable"
    assert address not in r.text and "refused" not in r.text and str(data) not in r.text
    # A token that is not a read token's (unknown, or none of ours) is the same as none: a
    # probe with a stale header gets its answer, never a 401.
    r = degraded_health(server.url, {"Authorization": "Bearer not-a-token"})
    assert r.json() == body


def test_healthz_with_a_read_token_and_the_log_say_why(served):
    server, data = served
    address = server.address.removeprefix("ray://")
    r = degraded_health(server.url, {"Authorization": f"Bearer {server.tokens['read']}"})
    body = r.json()
    assert body["reason"].startswith("Ray not reachable: ") and address in body["reason"]
    assert address in body["ray_error"] and "refused" in body["ray_error"]
    assert address in (data / "server.log").read_text()


def test_a_crash_reason_without_detail_names_no_exception_text():
    class Crashing(Supervised):
        what = "scheduler"

        def _loop(self) -> None:
            raise OSError(13, "Permission denied", "/srv/fleetval/secret.sqlite")

    thread = Crashing()
    thread._start_thread(thread._supervise)
    try:
        deadline = time.monotonic() + 10
        while not thread.failing and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "/srv/fleetval/secret.sqlite" in thread.degraded()
        assert thread.degraded(detail=False) == (
            f"the scheduler crashed ({thread.crashes}x) and is restarting"
        )
    finally:
        thread.stop(timeout_s=5)


# -- 6. the data directory 0700, its files 0600 ---------------------------------------------


def modes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root.parent)): oct(stat.S_IMODE(p.lstat().st_mode))
        for p in [root, *root.rglob("*")]
    }


def test_every_file_the_service_and_store_create_is_the_owners_alone(served):
    server, data = served
    # Reads that make the run index (the catalog's sqlite) and its WAL; the executor's lock
    # and the service database's WAL and SHM are there while it runs.
    read = server.client("read")
    assert read.get("/v1/runs").status_code == 200
    assert read.get(f"/v1/runs/{RUN}").status_code == 200
    found = modes(data)
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", "executor.lock",
                 "SCHEMA_VERSION", "index/runs.sqlite", f"index/runs/{RUN}.json",
                 f"results/{RUN}/part-0.parquet", f"runs/{RUN}.parquet"):  # fmt: skip
        assert f"data/{name}" in found, sorted(found)
    loose = {
        path: mode
        for path, mode in found.items()
        if path != "data/server.log"  # the test's own file (the serve's stdout)
        and mode != ("0o700" if (data.parent / path).is_dir() else "0o600")
    }
    assert not loose, loose


def test_a_service_database_made_by_an_older_release_is_closed_to_others(tmp_path):
    path = tmp_path / DB_NAME
    sqlite3.connect(path).close()
    os.chmod(path, 0o644)
    db = ServiceDB(tmp_path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for wal in (tmp_path / f"{DB_NAME}-wal", tmp_path / f"{DB_NAME}-shm"):
            assert stat.S_IMODE(wal.stat().st_mode) == 0o600, wal
    finally:
        db.close()
