"""Benchmark: what an API process costs to start, in a fresh interpreter each time.

The process builds the service's app as an API replica does (`fleetval serve --no-executor`:
no executor, no scheduler) and reports its CPU seconds, peak memory and whether Ray or
matplotlib got imported. `python -c pass` is the peer (the interpreter's own start);
`--against DIR` runs the same in another tree (e.g. `git archive REV | tar -x -C DIR`),
interleaved with this one, so both see the same machine.

    python bench/bench_api_start.py                       # 7 repeats
    python bench/bench_api_start.py --against /tmp/before

Prints a Markdown table: tree, median and min CPU-s, median peak RSS (MiB), heavy imports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import importlib.machinery, json, resource, sys, tempfile
from pathlib import Path

class Tree:  # the tree's api/, reports/ and suites/ as fleetval.*, as the install maps them
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in ("fleetval.api", "fleetval.reports", "fleetval.suites"):
            return importlib.machinery.PathFinder.find_spec(name, [sys.argv[2]])
        return None

sys.meta_path.insert(0, Tree)
if sys.argv[1] == "app":
    from fleetval.api import Settings, create_app
    create_app(Settings(data_dir=Path(tempfile.mkdtemp()), run_executor=False, run_scheduler=False))
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu": r.ru_utime + r.ru_stime, "rss": r.ru_maxrss / 1024,
                  "heavy": [m for m in ("torch", "ray", "matplotlib") if m in sys.modules]}))
"""


def once(tree: Path, what: str) -> dict:
    """One fresh interpreter with `tree` first on the path (bytecode caching on)."""
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, what, str(tree)], env=env, cwd=tempfile.gettempdir(),
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--against", type=Path, help="another tree, run interleaved")
    args = ap.parse_args()
    cases = [("python -c pass", ROOT, "pass"), ("this tree", ROOT, "app")]
    if args.against:
        cases.append((f"{args.against}", args.against.resolve(), "app"))
    for _, tree, what in cases:  # warm: bytecode written, files in the page cache
        once(tree, what)
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in cases}
    for _ in range(args.repeat):
        for name, tree, what in cases:
            runs[name].append(once(tree, what))
    print("| process | CPU-s median | CPU-s min | peak RSS MiB | imported |")
    print("|---|---:|---:|---:|---|")
    for name, got in runs.items():
        cpu = [g["cpu"] for g in got]
        rss = statistics.median(g["rss"] for g in got)
        heavy = ", ".join(got[0]["heavy"]) or "-"
        print(f"| {name} | {statistics.median(cpu):.2f} | {min(cpu):.2f} | {rss:.0f} | {heavy} |")


if __name__ == "__main__":
    main()
