"""Attribution over simulated rollout histories (`fleetval.testing.rollouts`), many seeds.

    python bench/bench_attribute.py [--seeds 200] [--big-seeds 10] [--first-seed 0]

Per scenario and fleet (16 nodes x 30 nights; 1,024 nodes x 90 nights), over seeds:
- named: seeds where the RCCL change is a `regression` at every affected size (>= 64 MiB);
- covered: affected-size intervals that cover the planted -8% (per interval, and seeds
  where all of them do);
- misattributed: seeds with a regression attributed to the driver or ROCm, or to RCCL at an
  unaffected size;
- anything: seeds with any regression or improvement attributed;
- confounded: seeds where ROCm+RCCL are reported confounded (and never attributed);
- exit 1: seeds where `fleetval attribute` would exit 1 (a regression attributed, or a
  confounded change that regressed);
- seconds and peak RSS of one 1,024 x 90 attribution (the history generated beforehand).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from fleetval.analysis.attribute import Attribution, attribute
from fleetval.testing.rollouts import AFFECTED, simulate

LOSS_PCT = -8.0


def score(a: Attribution) -> dict[str, bool | list[bool]]:
    rccl = [f for f in a.findings if f.component == "rccl" and f.identity["size_bytes"] >= AFFECTED]
    hit = [(f.component, f.identity["size_bytes"]) for f in a.findings if f.verdict == "regression"]
    cover = [bool(f.ci_pct and f.ci_pct[0] <= LOSS_PCT <= f.ci_pct[1]) for f in rccl]
    pair = {"rocm", "rccl"}
    return {
        "named": bool(rccl) and all(f.verdict == "regression" for f in rccl),
        "cover": cover,
        "misattributed": any(c != "rccl" or s < AFFECTED for c, s in hit),
        "anything": any(f.verdict in ("regression", "improvement") for f in a.findings),
        "exit 1": a.exit_code == 1,
        "confounded": any(set(c.components) == pair for c in a.confounded)
        and not any(
            f.component in pair and f.verdict in ("regression", "improvement") for f in a.findings
        ),
    }


def cell(kind: str, nodes: int, nights: int, seeds: range) -> list[str]:
    scores = []
    for seed in seeds:
        h = simulate(nodes=nodes, nights=nights, seed=seed, scenario=kind)
        scores.append(score(attribute(h.values, h.nodes, h.nights)))
    n = len(scores)

    def pct(key: str) -> str:
        return f"{100 * sum(bool(s[key]) for s in scores) / n:.1f}%"

    cover = [c for s in scores for c in s["cover"]]
    every = sum(all(s["cover"]) and bool(s["cover"]) for s in scores) / n
    return [
        kind, f"{nodes} x {nights}", str(n), pct("named"),
        f"{100 * np.mean(cover):.1f}% / {100 * every:.1f}%" if cover and kind != "null" else "-",
        pct("misattributed"), pct("anything"), pct("confounded"), pct("exit 1"),
    ]  # fmt: skip


def timed_big(seed: int) -> tuple[float, float, float]:
    """Wall and CPU seconds of one attribution at 1,024 x 90, and the peak RSS so far (MiB)."""
    h = simulate(nodes=1024, nights=90, seed=seed)
    wall, cpu = time.perf_counter(), time.process_time()
    attribute(h.values, h.nodes, h.nights)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--big-seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args()
    wall, cpu, rss = timed_big(args.first_seed)  # first: the peak RSS is this process's so far
    table = Table("scenario", "fleet", "seeds", "named", "covered (interval / seed)",
                  "misattributed", "anything attributed", "ROCm+RCCL confounded", "exit 1")  # fmt: skip
    for nodes, nights, count in ((16, 30, args.seeds), (1024, 90, args.big_seeds)):
        seeds = range(args.first_seed, args.first_seed + count)
        if not count:
            continue
        for kind in ("planted", "null", "together", "bundled"):
            row = cell(kind, nodes, nights, seeds)
            print(" | ".join(row), flush=True)  # progress: a cell can take minutes
            table.add_row(*row)
    console = Console(width=160)
    console.print(table)
    console.print(
        f"1,024 nodes x 90 nights x 6 sizes: attribute {wall:.2f} s wall, {cpu:.2f} s CPU, "
        f"peak RSS {rss:.0f} MiB"
    )


if __name__ == "__main__":
    main()
