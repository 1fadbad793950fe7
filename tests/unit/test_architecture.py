"""The layout holds: each part of fleetval imports only what docs/architecture.md allows it,
no modules import each other in a cycle (imports under `if TYPE_CHECKING:` counted), and
the read side, suite validation, `submit` and the API process import no torch.

The allow-list below is the table in docs/architecture.md, parsed back and compared, so the
document shows exactly the rules this test enforces.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"fleetval": ROOT / "fleetval", "fleetval.api": ROOT / "api",
           "fleetval.reports": ROOT / "reports"}  # fmt: skip
DOC = ROOT / "docs" / "architecture.md"

# What each part may import of fleetval besides itself: a part is a module or package under
# `fleetval.` ("fleet.settings" allows that one module of a part); "core" is the first
# group; imports under `if TYPE_CHECKING:` count too (an annotation is a dependency).
CORE = ("vocab", "text", "arrays", "metrics", "nodesets", "culprit", "policy", "jsontypes",
        "status", "finding")
ANYTHING = ("*",)
ALLOWED: dict[str, tuple[str, ...]] = {
    "vocab": (), "text": (), "arrays": (), "metrics": (), "nodesets": (), "culprit": (),
    "policy": (), "jsontypes": (),
    "status": ("vocab", "culprit"),
    "finding": ("vocab", "jsontypes", "status"),
    "formats": ("core",),
    "store": ("core",),
    "detect": ("core", "formats", "store"),
    "checks": ("core", "formats", "detect", "store"),
    "fleet": ("core", "store"),
    "analysis": ("core", "store"),
    "signoff": ("core", "store", "detect", "analysis", "checks", "fleet"),
    "suite": ("core", "checks", "fleet.settings", "signoff.gates", "analysis.compare_settings"),
    "run": ("core", "formats", "detect", "store", "checks", "fleet", "analysis", "suite"),
    "reports": ("core", "store", "analysis", "checks", "fleet", "signoff"),
    "api": ("core", "store", "analysis", "checks", "fleet", "signoff", "suite", "run",
            "reports"),
    "cli": ANYTHING, "__main__": ("cli",),
    "testing": ("core", "store", "analysis", "fleet", "run", "suite", "reports", "cli"),
}  # fmt: skip


def _sources() -> Iterator[tuple[str, Path]]:
    for prefix, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            yield ".".join([prefix, *parts]), path


MODULES = dict(_sources())


def _part(mod: str) -> str:
    """The part of fleetval a module belongs to: `fleetval.run.job` -> `run`."""
    return mod.split(".")[1] if mod != "fleetval" else ""


def _imports(path: Path) -> list[str]:
    """The fleetval modules a file imports (a `from m import name` names m.name where that is
    a module), at any depth, those under `if TYPE_CHECKING:` included: an annotation is a
    dependency, and a cycle hidden behind one is still a cycle."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            named = [f"{node.module}.{a.name}" for a in node.names]
            out += [n for n in named if n in MODULES] or [node.module]
    return [m for m in out if m == "fleetval" or m.startswith("fleetval.")]


def _allows(part: str, imported: str) -> bool:
    rules = ALLOWED[part]
    if _part(imported) == part:
        return True
    if rules == ANYTHING:  # but the test helpers: the product never stands on them
        return _part(imported) != "testing"
    names = [r for rule in rules for r in (CORE if rule == "core" else (rule,))]
    target = imported.removeprefix("fleetval.")
    return any(target == n or target.startswith(n + ".") for n in names)


def test_every_part_imports_only_what_the_architecture_allows() -> None:
    problems = []
    for mod, path in MODULES.items():
        part = _part(mod)
        if not part:
            continue  # fleetval/__init__.py: the package itself, empty
        assert part in ALLOWED, f"{mod}: a new part of fleetval; give it a row in {DOC.name}"
        for imported in _imports(path):
            if not _allows(part, imported):
                problems.append(f"{mod} imports {imported} ({part} may import: "
                                f"{', '.join(ALLOWED[part]) or 'nothing of fleetval'})")  # fmt: skip
    assert not problems, "\n".join(sorted(set(problems)))


def test_no_modules_import_each_other_in_a_cycle() -> None:
    graph = {m: {i for i in _imports(p) if i in MODULES and i != m}
             for m, p in MODULES.items()}  # fmt: skip
    done: set[str] = set()

    def visit(mod: str, path: list[str]) -> list[str] | None:
        if mod in path:
            return [*path[path.index(mod) :], mod]
        if mod in done:
            return None
        for nxt in sorted(graph[mod]):
            if cycle := visit(nxt, [*path, mod]):
                return cycle
        done.add(mod)
        return None

    for mod in sorted(graph):
        cycle = visit(mod, [])
        assert cycle is None, " -> ".join(cycle)


def _doc_table() -> dict[str, tuple[str, ...]]:
    """The "may import" table of docs/architecture.md: part(s) -> what they may import."""
    table: dict[str, tuple[str, ...]] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        allowed = tuple(re.findall(r"`([^`]+)`", cells[2]))
        for part in re.findall(r"`([^`]+)`", cells[0]):
            table[part] = ANYTHING if cells[2] == "anything" else allowed
    return table


def test_the_architecture_doc_shows_the_rules_this_test_enforces() -> None:
    assert _doc_table() == ALLOWED
    core_line = next(line for line in DOC.read_text().splitlines() if line.startswith("core:"))
    assert tuple(re.findall(r"`([^`]+)`", core_line)) == CORE


def python(code: str, *, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` in a fresh interpreter at the repository root: what it imports is its own."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT
    )


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
    out = python(code, timeout_s=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


# Validating a suite, `fleetval submit`, `fleetval checks` and the API process (which is a Ray driver: its
# executor runs suites) import no torch: a check's parameters live in its torch-free
# `params.py`; only a rank running a step imports its `rank.py`. An API process that runs no
# executor (a replica, `--no-executor`) imports no Ray either, and no matplotlib until it
# draws an HTML report: a replica starts in 1.2 CPU-s and 110 MiB, not 2.1 and 178 (RESULTS).
VALIDATE = """
import sys, tempfile
from pathlib import Path
from fastapi.testclient import TestClient
from fleetval.suite import load_suite, shipped_suites
from fleetval.cli.checks_cmd import checks
from fleetval.cli.client import suite_body

for name, path in shipped_suites().items():
    load_suite(name)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "suite.yaml"
        local.write_text(path.read_text())
        suite_body(str(local))  # what `fleetval submit` validates before it sends
checks()  # `fleetval checks`: every check's parameters and defaults
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
api_side = sorted(m for m in ("torch", "ray", "matplotlib") if m in sys.modules)
print(len(shipped_suites()), submit_side, api_side)
"""


def test_validating_submitting_and_serving_import_no_torch_and_a_replica_no_ray() -> None:
    out = python(VALIDATE, timeout_s=180)
    assert out.returncode == 0, out.stdout + out.stderr
    count, *rest = out.stdout.splitlines()[-1].split()  # the last line: what was imported
    assert int(count) >= 5 and " ".join(rest) == "[] []", out.stdout


def test_the_layouts_name_only_modules_that_exist() -> None:
    """README's Layout and the architecture table name modules (`x.py`, `name/`): all exist."""
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") :].split("\n## ", 1)[0]
    names = set(re.findall(r"\b([a-z_]+)\.py\b", layout + DOC.read_text()))
    folders = [*SOURCES.values(), ROOT / "tests"]
    files = {p.stem for folder in folders for p in folder.rglob("*.py")}
    assert names - files == set()
    assert set(_doc_table()) == {_part(m) for m in MODULES} - {""}  # every part has its row
