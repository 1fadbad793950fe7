"""The service's settings: one declaration (`api/settings.py`), written by `fleetval serve`
for its uvicorn workers and read back by each, the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from fleetval.api.limits import Limits
from fleetval.api.settings import Settings
from tests.helpers.net import free_port


def test_settings_read_back_from_what_they_write(tmp_path: Path, monkeypatch) -> None:
    given = Settings(
        data_dir=tmp_path, address="10.0.0.1:6379", max_body_bytes=4096, run_executor=False,
        run_scheduler=False, limits=Limits(max_jobs=3, max_parquet_rows=10),
    )  # fmt: skip
    for name, value in given.to_env().items():
        monkeypatch.setenv(name, value)
    assert Settings() == given
    monkeypatch.setenv("FLEETVAL_LIMITS", '{"max_jobs": 0}')
    with pytest.raises(ValidationError, match="max_jobs"):
        Settings()


def test_every_worker_of_serve_has_the_limits_it_was_given(tmp_path: Path) -> None:
    """`fleetval serve --workers 2`: each worker refuses what the limits file forbids."""
    (tmp_path / "limits.yaml").write_text("max_jobs: 1\n")
    cli = [sys.executable, "-m", "fleetval.cli"]
    token = subprocess.run(
        [*cli, "token", "create", "--scope", "submit", "--data", str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [*cli, "serve", "--workers", "2", "--port", str(port), "--data", str(tmp_path),
         "--no-executor", "--no-scheduler", "--no-access-log", "--limits", str(tmp_path / "limits.yaml")],
        env={**os.environ, "PYTHONPATH": os.getcwd()}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    suite = {
        "name": "two-jobs",
        "placement": {"world_sizes": [2, 4], "gpus_per_rank": 0},
        "steps": [{"check": "collectives", "collectives": ["barrier"], "repeats": 1}],
    }
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, "serve never answered"
                time.sleep(0.3)
        headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
        answers = [
            httpx.post(f"{url}/v1/runs", json={"suite": suite}, headers=headers, timeout=30)
            for _ in range(8)  # new connections: both workers answer some of them
        ]
        assert {a.status_code for a in answers} == {422}, [a.text for a in answers]
        assert all("max_jobs" in a.text for a in answers)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
