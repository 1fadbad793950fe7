"""Statuses are named once (fleetval/vocab.py): no status value is spelled as a string
anywhere else in fleetval/, api/ or reports/, so the policy cannot drift by a typo or a
second copy of a list.

Allowed: docstrings (prose), dict-literal keys (a field called "error" is a name, not a
status), and vocab.py itself. Jinja templates are checked too: a quoted status value in a
template is a decision made outside fleetval.status (templates show statuses, never test
them); the gate statuses PASS/FAIL/WAIVED are upper case and are not run statuses.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fleetval.vocab import QueueStatus, RunStatus, Status
from tests.helpers.source import docstring_ids

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("fleetval", "api", "reports")
VALUES = frozenset(v.value for enum in (Status, RunStatus, QueueStatus) for v in enum)


def status_literals(source: str) -> list[tuple[int, str]]:
    """(line, value) of every string constant equal to a status value, outside docstrings
    and dict keys."""
    tree = ast.parse(source)
    allowed = docstring_ids(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            allowed |= {id(k) for k in node.keys if k is not None}
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in VALUES
        and id(node) not in allowed
    ]


def test_the_scan_finds_what_it_must() -> None:
    """The scanner itself: a literal in code is found; docstrings and dict keys are not."""
    source = '"""pass"""\ndef f(x):\n    """fail"""\n    return {"error": x == "warn"}\n'
    assert status_literals(source) == [(4, "warn")]
    assert status_literals('STATUS = ("pass", "unjudged")\n') == [(1, "pass"), (1, "unjudged")]


def python_files() -> list[Path]:
    files = [p for d in SCANNED for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if p != ROOT / "fleetval" / "vocab.py"]


def test_every_status_value_is_covered() -> None:
    assert {"pass", "warn", "fail", "skip", "info", "unjudged", "error", "cancelled",
            "incomplete", "interrupted", "queued", "running"} <= VALUES  # fmt: skip


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_status_literal_outside_vocab(path: Path) -> None:
    found = status_literals(path.read_text())
    assert not found, f"{path.relative_to(ROOT)}: use fleetval.vocab enums, not {found}"


def test_templates_test_no_status_by_its_string() -> None:
    names = "|".join(sorted(VALUES))
    quoted = re.compile(rf"""["']({names})["']""")
    templates = sorted((ROOT / "reports").rglob("*.j2"))
    assert templates
    hits = [(t.name, m.group(0)) for t in templates for m in quoted.finditer(t.read_text())]
    assert not hits, hits
