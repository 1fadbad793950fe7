"""Tests share code only through tests/helpers (and the generators beside it): no test module
imports another test module or a conftest, which pytest's rootdir insertion would otherwise
allow silently and which ties one test file's fixtures and names to another's."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_test_module(name: str) -> bool:
    """`test_x`, `conftest`, or the same reached through a package (`tests.unit.test_x`)."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf == "conftest" or leaf.startswith("test_")


def _imported(source: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.append(base)
            if not node.module:  # `from . import test_x`
                names += [f"{base}{alias.name}" for alias in node.names]
    return names


def test_no_test_module_imports_another_test_module_or_conftest() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}: {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in _imported(path.read_text())
        if _is_test_module(name)
    ]
    assert not offenders, "share helpers through tests/helpers instead:\n" + "\n".join(offenders)


def test_the_scan_catches_each_way_of_importing_a_test_module() -> None:
    caught = [
        "from test_service import BARRIER",
        "import test_signoff",
        "from conftest import ray_cluster",
        "from tests.conftest import ray_cluster",
        "from tests.integration.test_service import wait_for",
        "from . import test_service",
        "from .test_service import Server",
    ]
    for line in caught:
        assert any(_is_test_module(n) for n in _imported(line)), line
    assert not any(_is_test_module(n) for n in _imported("from tests.helpers.net import free_port"))
