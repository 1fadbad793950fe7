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
