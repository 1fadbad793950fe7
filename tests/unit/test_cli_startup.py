"""Store-reading commands start without torch or ray, pandas or scipy; listing ones without pyarrow either.

Each command runs in a fresh `python -X importtime -m fleetval.cli` process on a small
generated store, and the modules it imported are read from the importtime log. How fast
they start is measured by bench/bench_startup.py, not here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fleetval
from fleetval.analysis.baselines import Baselines
from fleetval.testing.bandwidth import FleetModel, GenStore

NEVER = {"torch", "ray"}  # no store-reading command needs them
# Listing needs only the JSON catalog: no Arrow, no array maths, no YAML.
LISTING = NEVER | {"pyarrow", "numpy", "pandas", "scipy", "yaml"}
# Reading rows needs Arrow and numpy, not pandas (pyarrow imports it on some conversions and
# group-bys when installed) nor scipy (~0.25 s; only Student's t in a small family needs it).
READING = NEVER | {"pandas", "scipy"}

COMMANDS = {
    "--help": LISTING,
    "runs": LISTING,
    "runs --json": LISTING,
    "baseline list": LISTING,
    "baseline show base": LISTING,
    "baseline show nightly": LISTING,  # a filter on the nodes' environment
    "show latest": READING,
    "results latest --rank 0": READING,
    "results latest --summary": READING,
    "compare -b base --latest": READING,
    "trend": READING,
    "sweep-history": READING,  # stored jobs beside the sweeps: read from the catalog
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    model = FleetModel(nodes=2, ranks_per_node=2, iters=5, sizes=(1024, 1 << 20))
    gen = GenStore(root, model, seed=0)
    gen.baseline(3, name="base")
    gen.run()
    Baselines(gen.store).set("nightly", where={"rocm_version": "6.1.*"})
    return root


def imported(args: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `fleetval ARGS` as a fresh process; its result and the packages it imported."""
    checkout = Path(fleetval.__file__).resolve().parents[1]  # the code under test
    path = os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fleetval.cli", *args],
        cwd=checkout,  # NOTE: `python -m` puts the working directory first on the path
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done, {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in lines}


@pytest.mark.parametrize("command", COMMANDS)
def test_store_reading_commands_import_only_what_they_need(data: Path, command: str) -> None:
    args = command.split()
    done, modules = imported(args if args == ["--help"] else [*args, "--data", str(data)])
    assert done.returncode in (0, 1), done.stderr[-2000:]  # compare and trend: 1 = a finding
    assert done.stdout.strip()
    assert "fleetval" in modules  # the log was read
    banned = modules & COMMANDS[command]
    assert not banned, f"`fleetval {command}` imported {sorted(banned)}"


def test_listing_an_empty_store_imports_no_pyarrow(tmp_path: Path) -> None:
    done, modules = imported(["runs", "--data", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert not modules & LISTING, f"imported {sorted(modules & LISTING)}"
