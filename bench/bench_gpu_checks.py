"""Benchmark: the microbench check's kernels against a plain torch script, in the same run.

The check's measuring functions (`fleetval.checks.microbench.rank`) time every iteration with
CUDA/HIP events through `CheckContext.measure`; the plain peer below times a back-to-back
loop with one pair of events, the way a hand-written script would. Same process, same
device, same sizes: if the check's per-iteration timing cost anything, the ratio shows it.

    python bench/bench_gpu_checks.py                 # bf16 8192^3 matmul, 1 GiB copy, 256 MiB h2d/d2h
    python bench/bench_gpu_checks.py --iters 50

No Ray: the functions are imported directly. Exits 2 with a message on a host without a
GPU, 1 when a ratio (check / plain, both as rates) is below the target 0.9.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fleetval.checks.base import CheckContext, Heartbeat, RankContext
from fleetval.checks.microbench.rank import (
    copy_samples,
    expectations_for,
    gbps,
    gemm_samples,
    gemm_tflops,
    host_samples,
)

TARGET = 0.9
GEMM_N = 8192
COPY_BYTES = 1024**3
HOST_BYTES = 256 * 1024**2


@dataclass(frozen=True)
class Result:
    name: str
    unit: str
    check: float
    plain: float

    @property
    def ratio(self) -> float:
        return self.check / self.plain


def check_context(device: torch.device) -> CheckContext:
    """The context a rank actor would build, minus Ray and the process group."""
    rank = RankContext(run_id="bench", job=0, rank=0, world_size=1, local_rank=0,
                       local_world_size=1, node="local", node_rank=0, backend="none",
                       device=str(device), device_id=None, seed=0)  # fmt: skip
    return CheckContext(rank, "bench", (), Heartbeat())


def plain_us(fn: Callable[[], object], warmup: int, iters: int) -> float:
    """Mean microseconds per call of a back-to-back loop timed by one pair of events."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def plain_gemm(device: torch.device, warmup: int, iters: int) -> float:
    a = torch.randn(GEMM_N, GEMM_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device=device, dtype=torch.bfloat16)
    return gemm_tflops(GEMM_N, plain_us(lambda: a @ b, warmup, iters))


def plain_copy(device: torch.device, warmup: int, iters: int) -> float:
    src = torch.ones(COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)
    return gbps(2 * COPY_BYTES, plain_us(lambda: dst.copy_(src), warmup, iters))


def plain_host(device: torch.device, warmup: int, iters: int) -> tuple[float, float]:
    host = torch.empty(HOST_BYTES, dtype=torch.uint8).pin_memory()
    dev = torch.empty(HOST_BYTES, dtype=torch.uint8, device=device)
    h2d = plain_us(lambda: dev.copy_(host, non_blocking=True), warmup, iters)
    d2h = plain_us(lambda: host.copy_(dev, non_blocking=True), warmup, iters)
    return gbps(HOST_BYTES, h2d), gbps(HOST_BYTES, d2h)


def plain_results(device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    """The same four measurements, written as a plain torch script would."""
    h2d, d2h = plain_host(device, warmup, iters)
    return {
        "gemm": plain_gemm(device, warmup, iters),
        "copy": plain_copy(device, warmup, iters),
        "h2d": h2d,
        "d2h": d2h,
    }


def check_results(device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    """The microbench check's own functions and timer (median of per-iteration events)."""
    ctx = check_context(device)
    kw = {"repeat": lambda fn: ctx.measure("bench", fn, warmup=warmup, iters=iters).samples_us}
    med = statistics.median
    return {
        "gemm": gemm_tflops(GEMM_N, med(gemm_samples(device, GEMM_N, torch.bfloat16, **kw))),
        "copy": gbps(2 * COPY_BYTES, med(copy_samples(device, COPY_BYTES, **kw))),
        "h2d": gbps(HOST_BYTES, med(host_samples(device, HOST_BYTES, "h2d", **kw))),
        "d2h": gbps(HOST_BYTES, med(host_samples(device, HOST_BYTES, "d2h", **kw))),
    }


LABELS = {
    "gemm": (f"bf16 matmul {GEMM_N}^3", "TFLOP/s"),
    "copy": (f"device copy {COPY_BYTES >> 20} MiB (r+w)", "GB/s"),
    "h2d": (f"pinned h2d {HOST_BYTES >> 20} MiB", "GB/s"),
    "d2h": (f"pinned d2h {HOST_BYTES >> 20} MiB", "GB/s"),
}


def print_table(results: list[Result], device_name: str) -> None:
    spec = expectations_for(device_name)
    print(f"device: {device_name} (expectations: {spec.model if spec else 'none'})")
    print(f"{'measurement':<28} {'unit':>8} {'check':>10} {'plain':>10} {'ratio':>7}")
    for r in results:
        flag = "" if r.ratio >= TARGET else f"  below target {TARGET}"
        print(f"{r.name:<28} {r.unit:>8} {r.check:>10.1f} {r.plain:>10.1f} {r.ratio:>7.3f}{flag}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "bench_gpu_checks: no GPU visible to torch (torch.cuda.is_available() is False); "
            "run it on a CUDA or ROCm host.",
            file=sys.stderr,
        )
        return 2
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    # Interleave: plain, check, plain again; the better plain run is the peer (clock warm-up).
    first = plain_results(device, args.warmup, args.iters)
    check = check_results(device, args.warmup, args.iters)
    second = plain_results(device, args.warmup, args.iters)
    results = [
        Result(LABELS[k][0], LABELS[k][1], check[k], max(first[k], second[k])) for k in check
    ]
    print_table(results, torch.cuda.get_device_name(device))
    return 0 if all(r.ratio >= TARGET for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
