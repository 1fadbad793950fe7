"""The layout holds: stages import only earlier stages, and the read side imports no torch or ray.

docs/architecture.md draws the same picture in words; this test is what keeps it true.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fleetval"

# What each part of fleetval/ may NOT import (module-level and function-level imports alike;
# imports under `if TYPE_CHECKING:` are annotations only and are not counted).
LATER = ("fleetval.cli", "fleetval.api", "fleetval.reports")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "fleetval.vocab": ("fleetval.",),
    "fleetval.text": ("fleetval.",),
    "fleetval.nodesets": ("fleetval.",),
    "fleetval.arrays": ("fleetval.",),
    "fleetval.metrics": ("fleetval.",),
    "fleetval.formats": ("fleetval.run", "fleetval.store", "fleetval.analysis", "fleetval.signoff",
                         "fleetval.checks", *LATER),
    "fleetval.detect": ("fleetval.run", "fleetval.analysis", "fleetval.signoff", "fleetval.checks",
                        *LATER),
    "fleetval.store": ("fleetval.run", "fleetval.analysis", "fleetval.signoff", "fleetval.checks",
                       *LATER),
    "fleetval.checks": ("fleetval.run", "fleetval.analysis", "fleetval.signoff", *LATER),
    "fleetval.analysis": ("fleetval.run", "fleetval.signoff", *LATER),
    "fleetval.signoff": ("fleetval.run", *LATER),
    "fleetval.fleet": ("fleetval.run", "fleetval.analysis", "fleetval.signoff", "fleetval.checks",
                       *LATER),
    "fleetval.run": ("fleetval.signoff", *LATER),
}  # fmt: skip


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


def test_stages_import_only_earlier_stages() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = _module(path)
        rules = [
            bad
            for prefix, bad in FORBIDDEN.items()
            if mod == prefix or mod.startswith(prefix + ".")
        ]
        for imported in _imports(path):
            for bad in (b for rule in rules for b in rule):
                own = imported == mod or imported.startswith(mod + ".")
                if imported.startswith(bad) and not own and not imported.startswith(_pkg(mod)):
                    problems.append(f"{mod} imports {imported}")
    assert not problems, "\n".join(sorted(set(problems)))


def _pkg(mod: str) -> str:
    """The stage package a module belongs to (its own package may import itself)."""
    parts = mod.split(".")
    return ".".join(parts[:2]) + "." if len(parts) > 2 else mod + "."


@pytest.mark.parametrize(
    "modules",
    [
        "fleetval.analysis.compare, fleetval.analysis.trend, fleetval.analysis.compare_format",
        "fleetval.signoff.evaluate, fleetval.reports.render, fleetval.checks",
        "fleetval.cli.app, fleetval.cli.inspect_cmds, fleetval.store.dataset",
        "fleetval.fleet.verdict, fleetval.fleet.drain, fleetval.fleet.history, fleetval.fleet.simulate",
    ],
)
def test_the_read_side_imports_neither_torch_nor_ray(modules: str) -> None:
    code = f"import sys, {modules}; print(sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# Validating a suite, `fleetval submit` and the API process (which is a Ray driver: its
# executor runs suites) import no torch: a check's parameters live in its torch-free
# `params.py`; only a rank running a step imports its `rank.py`.
VALIDATE = """
import sys, tempfile
from pathlib import Path
from fastapi.testclient import TestClient
from fleetval.suite import load_suite, shipped_suites
from fleetval.cli.serve_cmds import _suite_body

for name, path in shipped_suites().items():
    load_suite(name)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "suite.yaml"
        local.write_text(path.read_text())
        _suite_body(str(local))  # what `fleetval submit` validates before it sends
submit_side = sorted(m for m in ("torch", "ray") if m in sys.modules)
from fleetval.api import Settings, create_app
from fleetval.api.db import Scope

with tempfile.TemporaryDirectory() as tmp:
    app = create_app(Settings(data_dir=Path(tmp), run_executor=False, run_scheduler=False))
    auth = {"Authorization": f"Bearer {app.state.db.create_token(Scope.SUBMIT, 'u')}"}
    with TestClient(app) as client:
        for name, path in shipped_suites().items():
            r = client.post("/v1/runs", json={"suite": name}, headers=auth)
            assert r.status_code in (200, 201), (name, r.status_code, r.text)
print(len(shipped_suites()), submit_side, "torch" in sys.modules)
"""


def test_validating_submitting_and_serving_import_no_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", VALIDATE],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    count, *rest = out.stdout.split()
    assert int(count) >= 5 and " ".join(rest) == "[] False", out.stdout
