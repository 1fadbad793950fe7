"""The peer: a bare torch.distributed all_reduce timing loop, launched by torchrun.

Same method as fleetval's bandwidth check (per-iteration wall time around one call,
synchronised on GPU), so the two differ only by what fleetval adds around it.
Prints one JSON line on rank 0: {size_bytes: mean over ranks of the per-rank median us}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def timed(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--cuda", action="store_true", help="gloo over CUDA tensors, ranks share GPUs")
    args = ap.parse_args()
    dist.init_process_group(args.backend)
    device = torch.device("cpu")
    if args.backend == "nccl" or args.cuda:  # ranks spread evenly over the GPUs, as Ray's shares
        local, world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
        device = torch.device("cuda", local * torch.cuda.device_count() // world)
        torch.cuda.set_device(device)
    medians = {}
    for size in args.sizes:
        buf = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        samples = [timed(lambda: dist.all_reduce(buf), device) for _ in range(args.iters)]  # noqa: B023
        medians[size] = statistics.median(samples)
    gathered: list[dict[int, float]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, medians)
    if dist.get_rank() == 0:
        print(json.dumps({s: statistics.mean(g[s] for g in gathered) for s in args.sizes}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
