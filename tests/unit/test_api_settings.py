"""The service's settings: one declaration (`api/settings.py`), written by `fleetval serve`
for its uvicorn workers and read back by each, the same way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from fleetval.api.limits import Limits
from fleetval.api.settings import Settings
from tests.helpers.service import start_serve


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
    limits = str(tmp_path / "limits.yaml")
    serving = start_serve(
        tmp_path, "--workers", "2", "--no-executor", "--no-scheduler", "--no-access-log",
        "--limits", limits,
    )  # fmt: skip
    url = serving.url
    suite = {
        "name": "two-jobs",
        "placement": {"world_sizes": [2, 4], "gpus_per_rank": 0},
        "steps": [{"check": "collectives", "collectives": ["barrier"], "repeats": 1}],
    }
    try:
        headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
        answers = [
            httpx.post(f"{url}/v1/runs", json={"suite": suite}, headers=headers, timeout=30)
            for _ in range(8)  # new connections: both workers answer some of them
        ]
        assert {a.status_code for a in answers} == {422}, [a.text for a in answers]
        assert all("max_jobs" in a.text for a in answers)
    finally:
        serving.stop()
