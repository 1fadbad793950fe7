"""deploy/docker: both Dockerfiles pass hadolint, take their versions as build arguments whose
defaults fit pyproject.toml's ranges and the overlays' tags, and run `fleetval --help` as entry
point and health check; the Slurm script passes shellcheck, and its fleetval command and drain
list work."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer
import yaml
from packaging.requirements import Requirement

from fleetval.cli import app
from tests.helpers.tools import tool_missing

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
PLATFORMS = {"cuda": ("nvidia/cuda:", "/whl/cu"), "rocm": ("rocm/", "/whl/rocm")}
ARGS = {"BASE_IMAGE", "TORCH_VERSION", "TORCH_INDEX_URL", "RAY_VERSION", "FLEETVAL_VERSION"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        tool_missing(f"{name} is not installed (the test extras bring it: pip install -e .[test])")
    return path


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def _args(path: Path) -> dict[str, str]:
    return dict(a.split("=", 1) for op, a in _instructions(path) if op == "ARG")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_hadolint_passes(platform: str) -> None:
    hadolint = _tool("hadolint")
    done = subprocess.run(
        [hadolint, str(DOCKER / f"Dockerfile.{platform}")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_finds_what_it_should(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install fleetval\n")
    done = subprocess.run([_tool("hadolint"), str(bad)], capture_output=True, text=True)
    assert done.returncode != 0 and "DL3007" in done.stdout and "DL3003" in done.stdout


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_versions_are_build_arguments_within_the_projects_ranges(platform: str) -> None:
    path = DOCKER / f"Dockerfile.{platform}"
    args = _args(path)
    assert set(args) == ARGS
    base, index = PLATFORMS[platform]
    assert args["BASE_IMAGE"].startswith(base) and index in args["TORCH_INDEX_URL"]
    project = _pyproject()["project"]
    pins = {Requirement(r).name: Requirement(r).specifier for r in project["dependencies"]}
    assert args["RAY_VERSION"] in pins["ray"], (args["RAY_VERSION"], pins["ray"])
    assert args["TORCH_VERSION"] in pins["torch"], (args["TORCH_VERSION"], pins["torch"])
    assert args["FLEETVAL_VERSION"] == project["version"]
    # The documented tag, as the overlay uses it, is made of the same versions.
    overlay = yaml.safe_load(
        (ROOT / "deploy" / "kubernetes" / "overlays" / platform / "kustomization.yaml").read_text()
    )
    tag = overlay["images"][0]["newTag"]
    version = re.search(r"[\d.]+(?=-runtime|$)", args["BASE_IMAGE"].split(":")[1])
    assert version is not None
    short = ".".join(version.group().split(".")[:2])
    assert tag == (
        f"{args['FLEETVAL_VERSION']}-{platform}{short}"
        f"-torch{args['TORCH_VERSION']}-ray{args['RAY_VERSION']}"
    )
    assert f":{tag} ." in path.read_text()  # the build line in the file's header
    # Every RayCluster says the Ray version the image carries.
    rayc = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "base" / "raycluster.yaml").read_text())
    assert rayc["spec"]["rayVersion"] == args["RAY_VERSION"]


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_entry_point_and_health_check_are_fleetval_help(platform: str) -> None:
    ops = _instructions(DOCKER / f"Dockerfile.{platform}")
    last = {op: arg for op, arg in ops}
    assert json.loads(last["ENTRYPOINT"]) == ["fleetval"]
    assert json.loads(last["CMD"]) == ["--help"]
    assert last["HEALTHCHECK"].split(" CMD ", 1)[1] == '["fleetval", "--help"]'
    for op, arg in ops:  # everything copied in is in the repository
        if op == "COPY":
            for src in arg.split()[:-1]:
                assert (ROOT / src).exists(), src
    # The health check's command works: the installed CLI answers --help.
    done = subprocess.run([_tool("fleetval"), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "run" in done.stdout


def test_slurm_script_passes_shellcheck() -> None:
    script = ROOT / "deploy" / "slurm" / "fleetval.sbatch"
    done = subprocess.run([_tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def _drain_snippet() -> str:
    """The Python the sbatch script runs on fleetval's JSON to print drain commands."""
    text = (ROOT / "deploy" / "slurm" / "fleetval.sbatch").read_text()
    after = text.split("# What to drain:", 1)[1].split("<<'EOF'", 1)[1].split("\n", 1)[1]
    return after.split("\nEOF\n", 1)[0]


def test_slurm_script_drains_what_a_sweep_flags(tmp_path: Path) -> None:
    """A sweep's own drain list (`--drain-format slurm`) is printed as it is; a run's culprits
    are proven on Slurm in test_slurm.py."""
    line = 'scontrol update nodename=gpu-3 state=drain reason="fleetval: r9: slow in pairs"'
    record = tmp_path / "sweep.json"
    record.write_text(
        "(raylet) a worker died\n" + json.dumps({"run_id": "r9", "drain_lines": [line]})
    )
    done = subprocess.run(
        [sys.executable, "-c", _drain_snippet(), str(record)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert line in done.stdout.splitlines()
    record.write_text("Traceback: no JSON")
    done = subprocess.run(
        [sys.executable, "-c", _drain_snippet(), str(record)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "no JSON result" in done.stderr


@pytest.mark.parametrize("mode, suite", [("run", "smoke"), ("sweep", "sweep")])
def test_slurm_script_command_parses_with_the_cli(mode: str, suite: str) -> None:
    text = (ROOT / "deploy" / "slurm" / "fleetval.sbatch").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith('fleetval "$mode" "$suite"'))
    modes = re.search(r"then as_json=\((.*?)\); else as_json=\((.*?)\); fi", text)
    assert modes, "the script sets as_json per mode"
    as_json = modes[1] if mode == "sweep" else modes[2]
    flags = (
        line.split('"$suite"', 1)[1]
        .split('"$@"', 1)[0]
        .replace('"$head_ip:$port"', "10.0.0.1:20001")
        .replace('"${as_json[@]}"', as_json)
    )
    group = typer.main.get_command(app)
    group.commands[mode].make_context(mode, [suite, *shlex.split(flags)])  # type: ignore[attr-defined]
