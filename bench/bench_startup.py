"""Benchmark: wall time of the store-reading commands, each in a fresh process.

A store of RUNS generated runs (`fleetval.testing.bandwidth`: 2 nodes x 4 ranks, 200 bandwidth
identities, 1,600 result rows a run), a baseline `base` of all runs but the newest, and an
empty store. Each command runs once untimed, then REPEAT times as `python -m fleetval.cli
...` with this checkout first on the path and bytecode caching on (as an installed package
has it, whatever PYTHONDONTWRITEBYTECODE says here); `python -c pass` is the peer (the
interpreter's own start). One more run under `python -X importtime` names the heavy
modules each command imported.

    python bench/bench_startup.py                 # 5 runs, 9 repeats
    python bench/bench_startup.py --runs 41 --repeat 5
    git archive 0df3f93 | tar -x -C /tmp/before   # then, before and after interleaved:
    python bench/bench_startup.py --against /tmp/before

Prints a Markdown table: command, min and median wall seconds, exit status, heavy imports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetval.testing.bandwidth import FleetModel, GenStore

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "pandas", "scipy", "pyarrow", "numpy", "pydantic", "yaml")


def _commands(data: Path, empty: Path) -> list[tuple[str, list[str]]]:
    """(label, argv) per command; the store's path goes last, as `--data PATH`."""
    cli = [sys.executable, "-m", "fleetval.cli"]
    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("fleetval --help", [*cli, "--help"]),
    ]
    rows.append(("runs (empty store)", [*cli, "runs", "--data", str(empty)]))
    for args in (
        ["runs"],
        ["baseline", "list"],
        ["baseline", "show", "base"],
        ["show", "latest"],
        ["results", "latest", "--collective", "all_reduce", "--rank", "0"],
        ["results", "latest", "--summary"],
        ["results", "latest"],
        ["compare", "-b", "base", "--latest"],
        ["trend"],
    ):
        rows.append((" ".join(args), [*cli, *args, "--data", str(data)]))
    return rows


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def _heavy_imports(argv: list[str], env: dict[str, str]) -> str:
    """The HEAVY modules (top-level packages) the command imported, from -X importtime."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True
    )
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines()}
    return ", ".join(m for m in HEAVY if m in names) or "-"


def _store(root: Path, runs: int) -> None:
    gen = GenStore(root, FleetModel(), seed=1)
    gen.baseline(max(runs - 1, 1), name="base")
    if runs > 1:
        gen.run()


def _env(checkout: Path) -> dict[str, str]:
    """The environment that runs `checkout`'s fleetval, bytecode caching on."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
    return env


def _row(label: str, argv: list[str], envs: list[dict[str, str]], repeat: int) -> str:
    """One command's line: min and median per checkout, exit statuses, heavy imports."""
    for env in envs:
        _time(argv, env)  # warm: bytecode written, files in the page cache
    runs = [[_time(argv, env) for env in envs] for _ in range(repeat)]  # interleaved
    cells = []
    for i in range(len(envs)):
        times = [r[i][0] for r in runs]
        cells += [f"{min(times):.2f}", f"{statistics.median(times):.2f}"]
    exits = "/".join(sorted({str(code) for r in runs for _, code in r}))
    imports = [_heavy_imports(argv, env) for env in envs]
    return f"| `{label}` | {' | '.join(cells)} | {exits} | {' | '.join(imports)} |"


def _header(against: Path | None) -> str:
    cols = ["command", "min s", "median s"]
    if against:
        cols += ["before: min s", "before: median s"]
    cols += ["exit", "heavy imports"] + (["before: heavy imports"] if against else [])
    align = ["---" if c in ("command",) or "imports" in c else "---:" for c in cols]
    return f"| {' | '.join(cols)} |\n|{'|'.join(align)}|"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs in the store")
    parser.add_argument("--repeat", type=int, default=9, help="timed runs per command")
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (e.g. `git archive` of a commit), timed interleaved",
    )
    args = parser.parse_args()
    envs = [_env(ROOT)] + ([_env(args.against.resolve())] if args.against else [])
    with tempfile.TemporaryDirectory() as tmp:
        data, empty = Path(tmp, "data"), Path(tmp, "empty")
        empty.mkdir()
        _store(data, args.runs)
        os.chdir(tmp)  # NOTE: `python -m` puts the working directory first on the path
        print(f"{args.runs} runs, {args.repeat} repeats, load average {_load()}\n")
        print(_header(args.against))
        for label, argv in _commands(data, empty):
            print(_row(label, argv, envs, args.repeat), flush=True)
        print(f"\nload average after: {_load()}")


if __name__ == "__main__":
    main()
