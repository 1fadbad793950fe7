"""A pytest plugin: each test's start and end (wall clock) per xdist worker, with the worker's
pid, for `attribute.py`. Load it with `PYTHONPATH=bench/testcpu PYTEST_ADDOPTS="-p timeline"`;
it writes `$TLDIR-<worker>.json` (default /tmp/fleetval-tl)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

_rows: list[tuple[str, float, float]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    start = time.time()
    yield
    _rows.append((item.nodeid, start, time.time()))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = f"{os.environ.get('TLDIR', '/tmp/fleetval-tl')}-{worker}.json"
    with open(path, "w") as f:
        json.dump({"pid": os.getpid(), "tests": _rows}, f)
