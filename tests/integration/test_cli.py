"""The CLI over the real engine: exit statuses, output formats, and the embedded default."""

from __future__ import annotations

import contextlib
import csv
import importlib.metadata
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetval.cli import app
from fleetval.store.dataset import Store

runner = CliRunner()


def write_suite(tmp_path: Path, text: str) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return str(path)


QUICK = """
name: quick
placement: {world_sizes: [2], gpus_per_rank: 0}
steps:
  - check: collectives
    collectives: [all_reduce, all_gather]
    dtypes: [float32]
    repeats: 1
"""


@pytest.mark.usefixtures("ray_session")
def test_run_then_inspect(tmp_path):
    data = str(tmp_path / "data")
    res = runner.invoke(
        app, ["run", write_suite(tmp_path, QUICK), "--data", data, "--label", "rocm=6.1", "--json"]
    )
    assert res.exit_code == 0, res.output
    record = json.loads(res.output)
    run_id = record["run_id"]
    assert record["status"] == "pass" and record["labels"] == {"rocm": "6.1"}

    res = runner.invoke(app, ["runs", "--data", data])
    assert res.exit_code == 0 and run_id in res.output and "rocm=6.1" in res.output
    res = runner.invoke(app, ["show", run_id, "--data", data])
    # the environment, grouped (fleetval/nodesets.py): one node, its torch named as people read it
    torch_version = importlib.metadata.version("torch")
    assert res.exit_code == 0 and "environment of 1 node" in res.output
    assert f"torch {torch_version}" in res.output and "collectives" in res.output

    res = runner.invoke(app, ["results", run_id, "--data", data, "--format", "json"])
    rows = json.loads(res.output)
    assert res.exit_code == 0 and {r["rank"] for r in rows} == {0, 1}
    res = runner.invoke(app, ["results", "latest", "--data", data, "--format", "csv"])
    parsed = list(csv.DictReader(io.StringIO(res.output)))
    assert len(parsed) == len(rows) and parsed[0]["run_id"] == run_id


@pytest.mark.usefixtures("ray_session")
def test_failed_check_exits_1(tmp_path):
    suite = QUICK + "faults:\n  - {kind: corrupt, rank: 1}\n"
    res = runner.invoke(app, ["run", write_suite(tmp_path, suite), "--data", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "traced to rank 1" in res.output


def test_bad_input_exits_2_and_writes_nothing(tmp_path, ray_session):
    data = tmp_path / "data"
    bad = write_suite(
        tmp_path, "name: x\nsteps:\n  - check: bandwidth\n    sizes: {min: 4MiB, max: 1KiB}\n"
    )
    res = runner.invoke(app, ["run", bad, "--data", str(data)])
    assert res.exit_code == 2
    assert "steps.0.sizes: empty size range" in res.output
    huge = write_suite(
        tmp_path, "name: x\nplacement: {world_sizes: [512]}\nsteps:\n  - check: collectives\n"
    )
    res = runner.invoke(app, ["run", huge, "--data", str(data)])
    assert res.exit_code == 2 and "world size 512 needs 512 bundles" in res.output
    res = runner.invoke(app, ["run", "smoke", "--data", str(data), "--label", "novalue"])
    assert res.exit_code == 2 and "expected KEY=VALUE" in res.output
    assert not data.exists() or not any(data.rglob("*.parquet"))


def test_unknown_run_exits_2(tmp_path):
    for cmd in (["show", "nope"], ["results", "nope"], ["show", "latest"]):
        res = runner.invoke(app, [*cmd, "--data", str(tmp_path)])
        assert res.exit_code == 2, cmd


ENDLESS = """
name: interrupted
placement: {world_sizes: [2], gpus_per_rank: 0}
steps:
  - {name: first, check: collectives, collectives: [barrier]}
  - {name: endless, check: bandwidth, sizes: {min: 4096, max: 4096}, warmup: 0, iters: 1000000}
"""


def start_endless_run(tmp_path: Path, address: str) -> tuple[subprocess.Popen[str], Path]:
    """`fleetval run` of a suite whose second step never ends, once its first step is stored."""
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "fleetval.cli", "run", write_suite(tmp_path, ENDLESS),
           "--data", str(data), "--address", address]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not list(data.glob("results/*/job0-first.parquet")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the first step was not stored: {proc.communicate()}")
        time.sleep(0.2)
    return proc, data


def wait_ended(proc: subprocess.Popen[str], within_s: float) -> tuple[float, str]:
    """Seconds until the process ended (killed, so nothing leaks, if not within_s), its stderr."""
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running {within_s:g}s after Ctrl-C: {err[-2000:]}")
    return time.monotonic() - t0, err


def test_ctrl_c_tears_down_and_keeps_finished_steps(tmp_path, ray_session):
    """SIGINT mid-step: the run ends within seconds, actors killed and group removed
    (ray_session asserts it), the run recorded as cancelled with the first step's rows."""
    proc, data = start_endless_run(tmp_path, ray_session.address)
    proc.send_signal(signal.SIGINT)  # the endless step is running: its file never comes
    seconds, err = wait_ended(proc, 30)
    assert proc.returncode == 130 and "Ctrl-C: cancelling" in err, err[-2000:]
    assert seconds < 15, f"cancel took {seconds:.1f}s"
    (record,) = Store(data).runs()
    assert record.status == "cancelled"
    assert Store(data).results([record.run_id]).num_rows == 2  # the first step's rows are kept
    # A second Ctrl-C, and a cancel cut at its grace: tests/unit/test_interrupt.py.


def test_the_embedded_instance_is_loopback_only_with_ranks_at_normal_priority(tmp_path):
    """`fleetval run` with no --address: Ray's servers, its workers and the ranks' collectives
    listen on 127.0.0.1 only, as `ss -ltnp` would list them for the run's processes; the
    ranks ran at nice 0 (Ray's default for workers is 15), as the node's fingerprint says."""
    from fleetval.testing.rayprocs import descendants, listening

    # NOTE: without the tests' RAY_worker_niceness: the embedded instance must set it itself
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_worker_niceness")}
    cmd = [sys.executable, "-m", "fleetval.cli", "run", write_suite(tmp_path, QUICK),
           "--data", str(tmp_path / "data")]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    seen: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= listening(descendants(proc.pid))  # sampled while Ray and the ranks run
        time.sleep(0.1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    assert len({port for _, port in seen}) >= 3, seen  # GCS, raylet, workers at least
    exposed = sorted(
        f"{ip}:{port}" for ip, port in seen if ip not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")
    )
    assert not exposed, f"listening beyond loopback: {exposed}"
    (node,) = Store(tmp_path / "data").nodes().to_pylist()
    assert json.loads(node["extra"])["niceness"] == 0


def test_a_world_size_the_embedded_instance_cannot_start_is_bad_input(tmp_path):
    """More ranks than the embedded instance can start on this machine (4 a core): refused
    before Ray starts, naming the field, exit 2, nothing stored; not ranks `not placed`."""
    from fleetval.run.cluster import EMBEDDED_RANKS_PER_CORE

    world = EMBEDDED_RANKS_PER_CORE * (os.cpu_count() or 1) + 1
    suite = write_suite(
        tmp_path,
        f"name: x\nplacement: {{world_sizes: [{world}]}}\nsteps:\n  - check: collectives\n",
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "fleetval", "run", suite, "--data", str(tmp_path / "data")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"placement.world_sizes: world size {world} needs {world} bundles" in said
    assert "the embedded local Ray takes at most" in said and "--address" in said
    assert time.monotonic() - t0 < 30  # no Ray started, no placement deadline waited out
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.parquet"))


def test_unreachable_address_is_bad_input_and_fails_fast(tmp_path):
    import time

    t0 = time.monotonic()
    res = runner.invoke(app, ["run", "smoke", "--data", str(tmp_path), "--address", "127.0.0.1:1"])
    assert res.exit_code == 2 and "no Ray cluster reachable" in res.output
    assert time.monotonic() - t0 < 10


def test_serve_on_the_embedded_ray_stops_cleanly_and_takes_ray_along(tmp_path):
    """`fleetval serve` with no --address, stopped by SIGTERM as a service manager stops it:
    no stack trace that reads as a crash, no token-authentication notice, exit 0, and the
    embedded Ray's processes (GCS, raylet, workers) gone with it, not minutes later."""
    from fleetval.testing.rayprocs import descendants
    from tests.helpers.service import start_serve

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # the API answering first; then the embedded Ray's processes, looked for below
    serving = start_serve(tmp_path / "data", log=tmp_path / "serve.log", env=env, timeout_s=180)
    proc = serving.proc
    try:
        deadline, ray_pids = time.monotonic() + 180, []
        while time.monotonic() < deadline and proc.poll() is None:
            names = {p: _comm(p) for p in descendants(proc.pid)}
            ray_pids = [p for p, n in names.items() if n in ("gcs_server", "raylet")]
            if len(ray_pids) == 2:
                break
            time.sleep(0.5)
        assert len(ray_pids) == 2, "the embedded Ray never started"
        everything = descendants(proc.pid)[1:]
        serving.stop(signal.SIGTERM)
        out = serving.log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    # NOTE: uvicorn stops gracefully, then re-raises the signal it handled (-15), as it should
    assert proc.returncode in (0, -signal.SIGTERM), out[-3000:]
    assert "Application shutdown complete" in out
    assert "SIGTERM received" not in out and "Token authentication" not in out, out[-3000:]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in everything):
        time.sleep(0.2)
    assert not [p for p in everything if _alive(p)], "Ray's processes outlived the service"


def _comm(pid: int) -> str:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
        return f.read().strip()
    return ""


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return False
