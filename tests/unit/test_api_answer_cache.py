"""Attribution, reports and compare are kept by the store's version (issue 40 §3): the same
question again is answered from memory; a new run, a step written or a baseline changed
makes the next answer fresh."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fleetval.api import cache
from fleetval.api.app import create_app
from fleetval.api.db import Scope, ServiceDB
from fleetval.api.routes import attribute, compare, report
from fleetval.api.settings import Settings
from fleetval.store.dataset import Store
from fleetval.testing.signoff import ALL_GATES, healthy, planted_regression, write_run

CAND = "/v1/runs/cand/report"
ASKED = {
    "report": ("GET", CAND, None),
    "compare": ("POST", "/v1/compare", {"baseline": "old", "runs": ["cand"]}),
    "attribute": ("POST", "/v1/attribute", {"last": 10}),
}


def _age(root: Path) -> None:
    """Every file and folder of the store written a minute ago: past the racy window, in
    which nothing is kept (a write in the same clock tick would not move the version)."""
    past = time.time() - 60
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.utime(Path(folder) / name, (past, past))
        os.utime(folder, (past, past))


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, dict]]:
    planted_regression(tmp_path)
    _age(tmp_path)
    db = ServiceDB(tmp_path)
    auth = {"Authorization": f"Bearer {db.create_token(Scope.READ, 'reader')}"}
    db.close()
    calls = {name: 0 for name in ASKED}
    for name, module, fn in [
        ("report", report, "_report"),
        ("compare", compare, "_compare"),
        ("attribute", attribute, "_attribute"),
    ]:
        real = getattr(module, fn)

        def counted(*args, _real=real, _name=name):  # type: ignore[no-untyped-def]
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(module, fn, counted)
    app = create_app(Settings(data_dir=tmp_path, run_executor=False, run_scheduler=False))
    with TestClient(app) as c:
        c.headers.update(auth)
        yield c, calls


def _ask(c: TestClient, name: str) -> bytes:
    method, path, body = ASKED[name]
    r = c.request(method, path, json=body, headers={"Accept": "text/markdown"})
    assert r.status_code == 200, (name, r.text)
    return r.content


def test_the_same_question_is_answered_from_the_cache(client):
    c, calls = client
    for name in ASKED:
        first = _ask(c, name)
        assert _ask(c, name) == first
        assert calls[name] == 1, name  # the second from memory
    answers = c.app.state.heavy.answers
    assert answers.hits == len(ASKED)
    # Another question (here: another media type) is not the same answer
    r = c.get(CAND, headers={"Accept": "application/json"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert calls["report"] == 2


def test_a_new_run_makes_the_next_answer_fresh(client, tmp_path):
    c, calls = client
    before = {name: _ask(c, name) for name in ASKED}
    write_run(Store(tmp_path), "cand2", healthy("cand2", np.random.default_rng(9), busbw=300.0),
              gates=ALL_GATES, labels={"stack": "new"}, nccl="2.23.4")  # fmt: skip
    # Within the racy window nothing is kept, so every answer is made afresh
    after = {name: _ask(c, name) for name in ASKED}
    assert all(n == 2 for n in calls.values()), calls
    assert after["attribute"] != before["attribute"]  # the new run is counted
    _age(tmp_path)  # past the window: kept again, for the new version
    for name in ASKED:
        _ask(c, name)
        _ask(c, name)
    assert all(n == 3 for n in calls.values()), calls


def test_a_step_written_into_a_run_moves_the_version(tmp_path):
    store = cache.CachedStore(tmp_path)
    write_run(store, "run1", healthy("run1", np.random.default_rng(1)))
    _age(tmp_path)
    version = store.version()
    assert version is not None and store.version() == version
    rows = healthy("run1", np.random.default_rng(2))
    store.write_results("run1", "part-1", rows)  # into results/run1/: no top folder moves
    assert store.version() is None  # too recent to trust
    _age(tmp_path)
    past = time.time() - 30  # a minute ago, then thirty seconds ago: a later write
    os.utime(tmp_path / "results" / "run1", (past, past))
    assert store.version() not in (None, version)
