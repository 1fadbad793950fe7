"""fleetval vs a bare torchrun script: all_reduce busbw per size, latency, start-up, smoke wall time.

    python bench/bench_collectives.py [--world 4] [--repeats 5] [--max-size 64MiB]

Pairs each fleetval sweep with a torchrun sweep over the same sizes and world size (gloo
over loopback varies run to run, so each pair runs back to back and the median of the
per-pair ratios is reported).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fleetval.checks.bandwidth.rank import busbw_factor
from fleetval.run.execute import run_suite
from fleetval.store.dataset import Store
from fleetval.suite import load_suite, parse_suite
from fleetval.vocab import Collective

HERE = Path(__file__).resolve().parent
MiB = 1 << 20


def gpus_per_rank(world: int, cuda: bool) -> float:
    """0 on CPU; on GPUs, the ranks spread evenly (4 ranks on one GPU: a quarter each)."""
    if not cuda:
        return 0
    import torch

    return min(1.0, torch.cuda.device_count() / world)


def fleetval_sweep(
    store: Store, world: int, sizes: list[int], warmup: int, iters: int, cuda: bool = False
) -> dict[int, float]:
    """Mean over ranks of each rank's median time (us) per size, as nccl-tests averages ranks."""
    spec = parse_suite(
        {
            "name": "bench-allreduce",
            "placement": {"world_sizes": [world], "gpus_per_rank": gpus_per_rank(world, cuda)},
            "steps": [
                {
                    "check": "bandwidth",
                    "sizes": {"min": sizes[0], "max": sizes[-1], "factor": sizes[1] // sizes[0]},
                    "warmup": warmup,
                    "iters": iters,
                    "verify": False,
                }
            ],
        }
    )
    record = run_suite(spec, store)
    rows = store.results([record.run_id]).to_pylist()
    return {
        s: statistics.mean(r["time_us_median"] for r in rows if r["size_bytes"] == s) for s in sizes
    }


def torchrun_sweep(
    world: int, sizes: list[int], warmup: int, iters: int, cuda: bool = False
) -> dict[int, float]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={world}",
        str(HERE / "torchrun_allreduce.py"),
        "--warmup",
        str(warmup),
        "--iters",
        str(iters),
        "--sizes",
        *map(str, sizes),
        *(["--cuda"] if cuda else []),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout
    return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def latency_pairs(
    store: Store, world: int, repeats: int, warmup: int, iters: int, cuda: bool = False
) -> dict[str, list[float]]:
    """8-byte all_reduce time, fleetval and torchrun back to back, alternating who goes first."""
    out: dict[str, list[float]] = {"fleetval": [], "torchrun": [], "ratio": []}
    for i in range(repeats):
        runs = [
            ("fleetval", lambda: fleetval_sweep(store, world, [8, 64], warmup, iters, cuda)[8]),
            ("torchrun", lambda: torchrun_sweep(world, [8, 64], warmup, iters, cuda)[8]),
        ]
        got = dict((name, fn()) for name, fn in (runs if i % 2 == 0 else runs[::-1]))
        out["fleetval"].append(got["fleetval"])
        out["torchrun"].append(got["torchrun"])
        out["ratio"].append(got["fleetval"] / got["torchrun"])
    return out


def busbw(size: int, us: float, world: int) -> float:
    return size / (us * 1e-6) / 1e9 * busbw_factor(Collective.ALL_REDUCE, world)


def startup_and_smoke(store: Store) -> tuple[float, float]:
    """In a fresh process state: seconds from run start (incl. Ray start) to the first step, and the whole smoke suite."""
    first: list[float] = []
    t0 = time.monotonic()
    run_suite(
        load_suite("smoke"), store, on_event=lambda e: first or first.append(time.monotonic())
    )
    return first[0] - t0, time.monotonic() - t0


def cli_smoke_wall(data: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "fleetval.cli", "run", "smoke", "--data", data, "--json"],
        check=True,
        capture_output=True,
        env=env,
        timeout=600,
    )
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    # 8-byte latency is scheduler noise at 10 iterations on a few cores: its own, longer pairs.
    ap.add_argument("--latency-iters", type=int, default=200)
    ap.add_argument("--cuda", action="store_true", help="gloo over CUDA tensors (ranks share GPUs)")
    ap.add_argument("--no-smoke", action="store_true", help="skip the start-up and smoke timings")
    args = ap.parse_args()
    sizes = [8]
    while sizes[-1] * 8 <= args.max_mib * MiB:
        sizes.append(sizes[-1] * 8)
    console = Console(width=150)
    tmp = tempfile.mkdtemp(prefix="fleetval-bench-")
    store = Store(Path(tmp) / "data")
    if not args.no_smoke:
        smoke_cli = cli_smoke_wall(str(Path(tmp) / "cli"))  # first: a cold process, no cache
        to_first, smoke_inproc = startup_and_smoke(store)
    ratios: dict[int, list[float]] = {s: [] for s in sizes}
    fv_all: dict[int, list[float]] = {s: [] for s in sizes}
    tr_all: dict[int, list[float]] = {s: [] for s in sizes}
    for i in range(args.repeats):
        pair = [
            (
                "fleetval",
                lambda: fleetval_sweep(
                    store, args.world, sizes, args.warmup, args.iters, args.cuda
                ),
            ),
            (
                "torchrun",
                lambda: torchrun_sweep(args.world, sizes, args.warmup, args.iters, args.cuda),
            ),
        ]
        got = dict(
            (name, fn()) for name, fn in (pair if i % 2 == 0 else pair[::-1])
        )  # alternate order
        for s in sizes:
            fv_all[s].append(got["fleetval"][s])
            tr_all[s].append(got["torchrun"][s])
            ratios[s].append(
                got["torchrun"][s] / got["fleetval"][s]
            )  # busbw ratio = inverse time ratio

    table = Table(
        title=f"all_reduce float32, gloo{' over CUDA' if args.cuda else ''}, {args.world} ranks, "
        f"{args.repeats} paired repeats"
    )
    for col in (
        "size",
        "fleetval us",
        "torchrun us",
        "fleetval busbw GB/s",
        "torchrun busbw GB/s",
        "busbw ratio (median)",
        "ratio min..max",
    ):
        table.add_column(col, justify="right")
    for s in sizes:
        fv, tr = statistics.median(fv_all[s]), statistics.median(tr_all[s])
        table.add_row(
            f"{s:,}",
            f"{fv:.1f}",
            f"{tr:.1f}",
            f"{busbw(s, fv, args.world):.3f}",
            f"{busbw(s, tr, args.world):.3f}",
            f"{statistics.median(ratios[s]):.3f}",
            f"{min(ratios[s]):.2f}..{max(ratios[s]):.2f}",
        )
    console.print(table)
    lat = latency_pairs(store, args.world, args.repeats, args.warmup, args.latency_iters, args.cuda)
    console.print(
        f"8-byte latency, {args.latency_iters} iterations x {args.repeats} pairs: fleetval "
        f"{statistics.median(lat['fleetval']):.1f} us, torchrun {statistics.median(lat['torchrun']):.1f} us; "
        f"ratio fleetval/torchrun (median of pairs) {statistics.median(lat['ratio']):.3f}  (target <= 1.10)"
    )
    big = [statistics.median(ratios[s]) for s in sizes if s >= 16 * MiB]
    console.print(
        f"busbw ratio at >= 16 MiB: {', '.join(f'{r:.3f}' for r in big)}  (target >= 0.97)"
    )
    if args.no_smoke:
        return
    console.print(f"run start (incl. Ray start) to first step: {to_first:.1f} s")
    console.print(
        f"smoke suite in-process (incl. Ray start): {smoke_inproc:.1f} s; `fleetval run smoke` CLI wall: {smoke_cli:.1f} s (target < 20 s)"
    )


if __name__ == "__main__":
    main()
