"""Cost of the exact collectives' expectations: peak memory and time, against materialising
every rank's contribution (what `reduce_exact` did before patterns had a closed form).

    python bench/bench_patterns.py [--mib 64 256] [--worlds 64 4096]

Each measurement runs in its own process, so its peak resident size is its own: growth of
the peak over the resident size before `prepare`, for making the buffer (and the copy kept
to reset it), then for verifying it against the expected values. Times are CPU seconds of
that process (one thread), so a busy shared machine does not inflate them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from rich.console import Console
from rich.table import Table

MiB = 1 << 20

ONE = """
import json, sys, time, torch
from fleetval.checks.base import CheckContext, Heartbeat, RankContext
from fleetval.checks.collectives.rank import CHUNK, pattern, prepare
from fleetval.vocab import Collective, DType, ReduceOp

how, world, nbytes, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), DType(sys.argv[4])
count = nbytes // torch.empty(0, dtype=getattr(torch, dtype.value)).element_size()

def status(key):  # VmRSS now, or VmHWM: this process image's peak (ru_maxrss survives exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

def peak():
    return status("VmHWM")

before = status("VmRSS")
t0 = time.process_time()
if how == "closed form":
    rank = RankContext(run_id="b", job=0, rank=1, world_size=world, local_rank=0,
                       local_world_size=1, node="n", node_rank=0, backend="gloo",
                       device="cpu", device_id=None, seed=7)
    case = prepare(CheckContext(rank, "b", (), Heartbeat()), Collective.ALL_REDUCE,
                   ReduceOp.SUM, dtype, count)
    made, t1 = peak(), time.process_time()
    for lo in range(0, count, CHUNK):
        case.output[lo : lo + CHUNK] = case.expect(torch.arange(lo, min(lo + CHUNK, count)))
    t2 = time.process_time()
    wrong = case.wrong(dtype, ReduceOp.SUM)[0]
else:  # every rank's contribution, then the reduction (the former reduce_exact)
    made, t1 = peak(), time.process_time()
    parts = [pattern(7, r, count, ReduceOp.SUM, world=world) for r in range(world)]
    expected = torch.stack(parts).sum(0)
    t2 = time.process_time()
    wrong = 0
t3 = time.process_time()
print(json.dumps({"make_mib": (made - before) / 2**20, "verify_mib": (peak() - made) / 2**20,
                  "make_s": t1 - t0, "verify_s": t3 - t2 if how == "closed form" else t2 - t1,
                  "wrong": wrong}))
"""


def measure(how: str, world: int, nbytes: int, dtype: str) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", ONE, how, str(world), str(nbytes), dtype],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--worlds", type=int, nargs="+", default=[64, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--peer-mib", type=int, default=4, help="message for the materialising peer")
    ap.add_argument("--peer-worlds", type=int, nargs="+", default=[8, 32])
    args = ap.parse_args()

    table = Table(title="expected values of an all_reduce sum, per rank (CPU, 1 thread)")
    for col in (
        "method",
        "world",
        "message",
        "dtype",
        "make + reset copy",
        "verify",
        "verify CPU s",
    ):
        table.add_column(col, justify="right")
    runs = [("closed form", w, m, d) for m in args.mib for w in args.worlds for d in args.dtypes]
    runs += [("every rank", w, args.peer_mib, "float32") for w in args.peer_worlds]
    runs += [("closed form", w, args.peer_mib, "float32") for w in args.peer_worlds]
    for how, world, mib, dtype in runs:
        got = measure(how, world, mib * MiB, dtype)
        assert got["wrong"] == 0, got
        table.add_row(
            how,
            str(world),
            f"{mib} MiB",
            dtype,
            f"{got['make_mib']:.0f} MiB" if how == "closed form" else "-",
            f"{got['verify_mib']:.0f} MiB",
            f"{got['verify_s']:.2f}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
