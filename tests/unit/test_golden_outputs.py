"""What users read stays put: show, results --summary, compare and report from a fixed store,
as a pipe or a CI log gets them (plain text, nothing cut).

The store in tests/data/store holds four real `fleetval run` runs (three clean smoke runs, the
baseline `base`, and one with a 5 ms delay on rank 2). Regenerate the expected files only for a
deliberate change of output: FLEETVAL_REGEN_GOLDEN=1 python -m pytest tests/unit/test_golden_outputs.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent.parent / "data"
CANDIDATE = "20261124-205630-d5213d"
COMMANDS = {
    "show.txt": ["show", CANDIDATE],
    "summary.txt": ["results", CANDIDATE, "--summary"],
    "compare.json": ["compare", "--baseline", "base", "--run", CANDIDATE, "--format", "json"],
    "compare.md": ["compare", "--baseline", "base", "--run", CANDIDATE, "--format", "markdown"],
    "report.json": ["report", CANDIDATE, "--baseline", "base", "-o", "{out}"],
}


def _normalise(name: str, text: str, store: Path) -> str:
    text = text.replace(str(store), "<store>")  # raw Parquet paths name the copy
    if name != "report.json":
        return text
    doc = json.loads(text)
    doc.pop("generated_at", None)  # the one field that is the time of the call
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("golden") / "store"
    shutil.copytree(DATA / "store", root)
    return root


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_is_unchanged(name: str, store: Path, tmp_path: Path) -> None:
    out = tmp_path / name
    args = [a.replace("{out}", str(out)) for a in COMMANDS[name]]
    env = {**os.environ, "COLUMNS": "200", "FLEETVAL_DATA": str(store)}
    proc = subprocess.run(
        [sys.executable, "-m", "fleetval", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    text = _normalise(name, out.read_text() if out.exists() else proc.stdout, store)
    golden = DATA / "golden-cli" / name
    if os.environ.get("FLEETVAL_REGEN_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_through_a_pipe_nothing_is_cut_or_wrapped(store: Path) -> None:
    """Output read in a CI log or a pipe, even with COLUMNS=40: plain columns with whole
    headers (no box, no "..."), run ids whole on one line, an error message on one line."""
    env = {**os.environ, "COLUMNS": "40", "FLEETVAL_DATA": str(store)}
    env.pop("TTY_COMPATIBLE", None), env.pop("FORCE_COLOR", None)

    def fleetval(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fleetval", *args], capture_output=True,
                              text=True, env=env, timeout=120, check=False)  # fmt: skip

    lines = fleetval("results", CANDIDATE, "--summary").stdout.splitlines()
    header = ["step", "size", "count", "type", "redop", "collective", "ranks", "time_us",
              "algbw_gbps", "busbw_gbps", "wrong", "time_min_us", "time_avg_us", "time_max_us"]  # fmt: skip
    assert lines[1].split() == header
    assert all(len(line.split()) == len(header) for line in lines[2:]) and len(lines) == 7
    assert not any(c in "\n".join(lines) for c in "…┃│━")
    compare = fleetval("compare", "--baseline", "base", "--run", CANDIDATE).stdout.splitlines()
    assert any(line.startswith(f"late rank in {CANDIDATE}: rank 2 (vm)") and
               line.endswith("(peers 1%)") for line in compare)  # fmt: skip
    assert not any("…" in line for line in compare)
    bad = fleetval("results", CANDIDATE, "--step", "nowhere")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_html_report_s_header_reads_as_a_sentence(store: Path, tmp_path: Path) -> None:
    """The run line of the HTML sign-off, as a browser shows it: no space before `;` or `.`."""
    import re

    out = tmp_path / "r.html"
    env = {**os.environ, "FLEETVAL_DATA": str(store)}
    subprocess.run([sys.executable, "-m", "fleetval", "report", CANDIDATE, "-o", str(out)],
                   capture_output=True, text=True, env=env, timeout=120, check=False)  # fmt: skip
    shown = " ".join(re.sub(r"<[^>]+>", "", out.read_text()).split())
    assert "; backend gloo; labels driver=581. Generated " in shown
