"""Event kinds are named once (fleetval/vocab.py `EventKind`): no string in fleetval/, api/ or
reports/ spells one, whether alone ("run_end") or inside a longer string (an SQL filter, a
message), so the engine, the store of events, the stream and the CLI cannot drift apart.

Allowed: docstrings (prose) and vocab.py itself. Templates and the service's static files
are scanned as text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fleetval.vocab import EventKind
from tests.helpers.source import docstring_ids

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("fleetval", "api", "reports")
KIND = re.compile(rf"\b({'|'.join(k.value for k in EventKind)})\b")


def event_literals(source: str) -> list[tuple[int, str]]:
    """(line, kind) of every event kind inside a string constant that is not a docstring."""
    tree = ast.parse(source)
    prose = docstring_ids(tree)
    return sorted(
        (node.lineno, m.group(1))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        for m in KIND.finditer(node.value)
    )


def test_the_scan_finds_what_it_must() -> None:
    source = (
        '"""run_end"""\n'
        "def f(e):\n"
        '    """step_end"""\n'
        "    return e['kind'] == 'step_end', \"json_extract(data, '$.kind') = 'step_progress'\"\n"
        "# run_start in a comment is prose\n"
        "KEY = 'run_id'\n"
    )
    assert event_literals(source) == [(4, "step_end"), (4, "step_progress")]


def python_files() -> list[Path]:
    files = [p for d in SCANNED for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if p != ROOT / "fleetval" / "vocab.py"]


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_event_kind_literal_outside_vocab(path: Path) -> None:
    found = event_literals(path.read_text())
    assert not found, f"{path.relative_to(ROOT)}: use fleetval.vocab.EventKind, not {found}"


def test_templates_and_static_files_spell_no_event_kind() -> None:
    texts = [
        p
        for d in SCANNED
        for p in sorted((ROOT / d).rglob("*"))
        if p.suffix in {".j2", ".html", ".js", ".css"}
    ]
    hits = [(p.name, m.group(0)) for p in texts for m in KIND.finditer(p.read_text())]
    assert not hits, hits
