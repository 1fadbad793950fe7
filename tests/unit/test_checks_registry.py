"""Every registered check is a complete unit: a params model keyed by its name, a run, a docstring."""

from __future__ import annotations

from typer.testing import CliRunner

from fleetval.checks import CHECKS
from fleetval.checks.spec import StepSpec
from fleetval.cli import app
from fleetval.suite import parse_suite


def test_each_check_is_registered_under_its_own_literal():
    for name, check in CHECKS.items():
        assert issubclass(check.params, StepSpec)
        assert check.params.model_fields["check"].annotation.__args__ == (name,)
        assert check.doc and check.doc.endswith(".")
        parse_suite({"name": "t", "steps": [{"check": name}]})  # defaults alone are valid


def test_checks_command_lists_every_check_with_its_keys():
    res = CliRunner().invoke(app, ["checks"])
    assert res.exit_code == 0
    for name, check in CHECKS.items():
        assert name in res.output and check.doc[:40] in res.output
    assert 'sizes: {"min": 8, "max": 4194304, "factor": 2}' in res.output


def test_checks_json_holds_every_check_with_its_keys():
    import json

    res = CliRunner().invoke(app, ["checks", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [c["check"] for c in doc["checks"]] == list(CHECKS)
    bandwidth = next(c for c in doc["checks"] if c["check"] == "bandwidth")
    assert bandwidth["parameters"]["sizes"] == '{"min": 8, "max": 4194304, "factor": 2}'
    assert "timeout_s" in doc["every_step"]


# The commands whose output is read, by people or tools: each takes --json (JSON on stdout),
# the same as --format json where it has --format. NOTE: `sweep` (--format json) is left to
# its own module's rework.
READ_COMMANDS = ("attribute", "baseline list", "baseline show", "checks", "compare",
                 "gpu-health", "gpu-watch", "ingest", "nccl-log", "results", "run", "runs",
                 "schedule list", "show", "stragglers", "sweep", "sweep-history", "token list",
                 "trend")  # fmt: skip


def test_every_command_people_or_tools_read_takes_json():
    import typer.main

    root = typer.main.get_command(app)
    missing = []
    for name in READ_COMMANDS:
        cmd = root
        for part in name.split():
            cmd = cmd.commands[part]  # type: ignore[attr-defined]
        if "--json" not in {o for p in cmd.params for o in getattr(p, "opts", ())}:
            missing.append(name)
    assert not missing, f"no --json: {missing}"
