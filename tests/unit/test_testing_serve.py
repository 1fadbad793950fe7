"""fleetval.testing.serve: the one way tests and benchmarks start `fleetval serve`."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from fleetval.testing.serve import NotReady, index_ready, serve_argv, spawn, start_serve


def test_a_replica_serves_until_stopped(tmp_path: Path) -> None:
    """Ready once /healthz says the run index is built; stopped by SIGTERM, the port free."""
    with start_serve(
        tmp_path, "--no-executor", "--no-scheduler", "--no-access-log", ready=index_ready
    ) as serving:
        assert serving.health is not None and serving.health.json()["index"] == "ready"
        assert serving.url == f"http://127.0.0.1:{serving.port}"
        assert httpx.get(f"{serving.url}/healthz", timeout=10).status_code == 200
    assert serving.proc.returncode is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{serving.url}/healthz", timeout=5)


def test_a_server_that_ends_is_named_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(NotReady, match=r"ended \(2\)[\s\S]*No such option"):
        start_serve(tmp_path, "--no-such-option", timeout_s=60)


def test_one_never_ready_is_killed_at_its_deadline(tmp_path: Path) -> None:
    serving = spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(NotReady, match="not ready in 1 s"):
        serving.wait_ready(timeout_s=1)
    assert serving.proc.returncode is not None


def test_the_command_line() -> None:
    argv = serve_argv(Path("/d"), "--no-executor")
    assert argv == [sys.executable, "-m", "fleetval.cli", "serve", "--data", "/d", "--no-executor"]
