"""Per-GPU micro-benchmarks against the GPU model's spec sheet.

GEMM TFLOP/s per dtype, device-memory copy bandwidth and pinned host<->device bandwidth,
each timed per iteration with device events (`CheckContext.measure`), judged against
`EXPECTATIONS` for the GPU model `torch.cuda.get_device_name` reports. Every rank measures
its own device independently: the process group is never used, so one slow GPU shows as
one slow row, not as a slow collective.

The measuring functions take a `Repeat` callable (warm-up, then per-iteration times of
a call) rather than a context, so `bench/bench_gpu_checks.py` runs exactly these kernels
without Ray.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypedDict

import torch

from fleetval.checks.bandwidth.rank import Timed, timed
from fleetval.checks.base import CheckContext
from fleetval.checks.collectives.rank import TORCH_DTYPE
from fleetval.checks.microbench.params import (
    GpuSpec,
    MicrobenchParams,
    ModelExpectation,
)
from fleetval.checks.model_pattern import model_matches
from fleetval.store.records import JsonObject
from fleetval.store.schema import Row
from fleetval.vocab import Status

Repeat = Callable[[Callable[[], object]], list[float]]  # warm up, then time each iteration
Direction = Literal["h2d", "d2h"]


# Spec-sheet peaks, dense (the sparsity figures are 2x these). float32 is the non-tensor
# (SIMT / vector) rate on NVIDIA, since torch keeps TF32 off for matmul by default; on AMD
# it is the matrix-core FP32 rate rocBLAS uses. Host links: PCIe 4.0 x16 ~32 GB/s, 5.0 x16
# ~64 GB/s per direction. Order matters: the first pattern that matches the name wins.
EXPECTATIONS: tuple[tuple[str, GpuSpec], ...] = (
    (r"H100.*PCIe", GpuSpec("H100 PCIe", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.0}, 2000.0, 64.0, "NVIDIA H100 datasheet (PCIe)")),
    (r"H100.*NVL", GpuSpec("H100 NVL", {"bfloat16": 835.0, "float16": 835.0, "float32": 60.0}, 3900.0, 64.0, "NVIDIA H100 datasheet (NVL)")),
    (r"H100", GpuSpec("H100 SXM", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}, 3350.0, 64.0, "NVIDIA H100 datasheet (SXM5)")),
    (r"H200.*NVL", GpuSpec("H200 NVL", {"bfloat16": 835.0, "float16": 835.0, "float32": 60.0}, 4800.0, 64.0, "NVIDIA H200 datasheet (NVL)")),
    (r"H200", GpuSpec("H200 SXM", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}, 4800.0, 64.0, "NVIDIA H200 datasheet (SXM)")),
    (r"A100.*PCIE.*40GB|A100.*40GB.*PCIE", GpuSpec("A100 PCIe 40GB", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 1555.0, 32.0, "NVIDIA A100 datasheet")),
    (r"A100.*PCIE", GpuSpec("A100 PCIe 80GB", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 1935.0, 32.0, "NVIDIA A100 datasheet")),
    (r"A100.*40GB", GpuSpec("A100 SXM4 40GB", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 1555.0, 32.0, "NVIDIA A100 datasheet")),
    (r"A100", GpuSpec("A100 SXM4 80GB", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 2039.0, 32.0, "NVIDIA A100 datasheet")),
    # NOTE: an MI250X is two GCDs and torch sees each as one device, so the per-device
    # peaks are half the card's (383 TFLOP/s bf16/fp16, 95.7 fp32 matrix, 3.2 TB/s).
    (r"MI250X?", GpuSpec("MI250X (one GCD)", {"bfloat16": 191.5, "float16": 191.5, "float32": 47.9}, 1638.4, 32.0, "AMD Instinct MI250X datasheet, halved per GCD")),
    (r"MI300X", GpuSpec("MI300X", {"bfloat16": 1307.4, "float16": 1307.4, "float32": 163.4}, 5300.0, 64.0, "AMD Instinct MI300X datasheet")),
)  # fmt: skip


def expectations_for(device_name: str, own: Sequence[ModelExpectation] = ()) -> GpuSpec | None:
    """The suite's first matching expectation, else the first table entry whose pattern
    matches the device name; None where neither knows the model."""
    for e in own:
        if model_matches(e.gpu_model, device_name):
            return e.spec()
    for pattern, spec in EXPECTATIONS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return spec
    return None


# -- measuring (no context, no Ray: the bench calls these directly) -----------------------


def gemm_tflops(n: int, us: float) -> float:
    """TFLOP/s of an n x n x n matmul (2 n^3 flops) taking `us` microseconds."""
    return 2 * n**3 / (us * 1e-6) / 1e12


def gbps(nbytes: float, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


def gemm_samples(
    device: torch.device, n: int, dtype: torch.dtype, *, repeat: Repeat
) -> list[float]:
    """Per-iteration microseconds of C = A @ B, all n x n, written into a preallocated C."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return repeat(lambda: torch.mm(a, b, out=c))


def copy_samples(device: torch.device, nbytes: int, *, repeat: Repeat) -> list[float]:
    """Per-iteration microseconds of copying `nbytes` within device memory."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return repeat(lambda: dst.copy_(src))


def host_samples(
    device: torch.device,
    nbytes: int,
    direction: Direction,
    *,
    repeat: Repeat,
) -> list[float]:
    """Per-iteration microseconds of one pinned host <-> device copy of `nbytes`."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if direction == "h2d":
        return repeat(lambda: dev.copy_(host, non_blocking=True))
    return repeat(lambda: host.copy_(dev, non_blocking=True))


# -- judging ------------------------------------------------------------------------------


def judge(
    measured: float, peak: float | None, pass_fraction: float, fail_fraction: float
) -> Status:
    """PASS at or above pass_fraction x peak, FAIL below fail_fraction of that, else WARN;
    INFO (recorded, not judged) without a peak."""
    if peak is None:
        return Status.INFO
    threshold = pass_fraction * peak
    if measured >= threshold:
        return Status.PASS
    return Status.FAIL if measured < fail_fraction * threshold else Status.WARN


class Expectation(TypedDict):
    """What a row was judged against (stored in its details)."""

    peak: float
    pass_at: float
    fail_below: float


def expectation(
    peak: float | None, pass_fraction: float, fail_fraction: float
) -> Expectation | None:
    """What a row was judged against, or None where there is none."""
    if peak is None:
        return None
    return Expectation(
        peak=peak,
        pass_at=pass_fraction * peak,
        fail_below=fail_fraction * pass_fraction * peak,
    )


@dataclass(frozen=True)
class Device:
    """The device a rank measures: torch's name for it and its expectations, if known."""

    name: str  # torch.cuda.get_device_name, or "cpu"
    spec: GpuSpec | None


@dataclass(frozen=True)
class _Judged:
    value: float
    peak: float | None
    pass_fraction: float


class Measured(Timed):
    """A judged, timed measurement's row columns."""

    value: float
    status: str
    message: str
    details: JsonObject  # the row's JSON details: the expectation, the device, the case


def _fields(
    j: _Judged, p: MicrobenchParams, samples: list[float], dev: Device, what: str
) -> Measured:
    status = judge(j.value, j.peak, j.pass_fraction, p.fail_fraction)
    exp = expectation(j.peak, j.pass_fraction, p.fail_fraction)
    if exp is None:
        msg = (f"{what}: {j.value:.4g}, recorded only: no expectation for {dev.name!r}; add one "
               f"to the step: expectations: [{{gpu_model: ..., tflops: {{bfloat16: ...}}, "
               f"hbm_gbps: ..., host_gbps: ...}}]")  # fmt: skip
    else:
        msg = f"{what}: {j.value:.4g} vs peak {j.peak:g} ({j.value / j.peak:.0%}; passes at {j.pass_fraction:.0%})"
    return Measured(
        value=j.value,
        status=status.value,
        message=msg,
        **timed(samples),
        details={
            "expectation": exp,
            "device_name": dev.name,
            "gpu_model": dev.spec.model if dev.spec else None,
        },
    )


def _repeat(ctx: CheckContext, p: MicrobenchParams, name: str) -> Repeat:
    return lambda fn: ctx.measure(name, fn, warmup=p.warmup, iters=p.iters).samples_us


def _peak(dev: Device, pick: Callable[[GpuSpec], float | None]) -> float | None:
    return pick(dev.spec) if dev.spec is not None else None


def _gemm_rows(ctx: CheckContext, p: MicrobenchParams, dev: Device) -> list[Row]:
    sizes = p.gemm_sizes if ctx.on_gpu else p.cpu_gemm_sizes
    rows = []
    for dtype in p.dtypes:
        tdt = TORCH_DTYPE[dtype]
        for n in sizes:
            samples = gemm_samples(ctx.device, n, tdt, repeat=_repeat(ctx, p, "gemm"))
            value = gemm_tflops(n, statistics.median(samples))
            peak = _peak(dev, lambda s, d=dtype: s.tflops.get(d.value))
            fields = _fields(_Judged(value, peak, p.pass_fraction), p, samples, dev, "TFLOP/s")
            fields["details"] |= {"m": n, "n": n, "k": n}
            if ctx.on_gpu:  # TF32 would lift float32 far above its non-tensor peak
                fields["details"]["tf32"] = torch.backends.cuda.matmul.allow_tf32
            rows.append(
                ctx.row(check=p.check, metric="gemm_tflops", unit="TFLOP/s", dtype=dtype.value,
                        size_bytes=n * n * tdt.itemsize, **fields)
            )  # fmt: skip
    return rows


def _copy_row(ctx: CheckContext, p: MicrobenchParams, dev: Device) -> Row:
    nbytes = int(p.copy_bytes if ctx.on_gpu else p.cpu_copy_bytes) // 4 * 4
    samples = copy_samples(ctx.device, nbytes, repeat=_repeat(ctx, p, "memory_copy"))
    # A copy reads and writes every byte: 2 x nbytes cross the memory bus.
    value = gbps(2 * nbytes, statistics.median(samples))
    peak = _peak(dev, lambda s: s.hbm_gbps)
    fields = _fields(_Judged(value, peak, p.bandwidth_pass_fraction), p, samples, dev, "GB/s")
    fields["details"] |= {"bytes_counted": "read + write"}
    return ctx.row(check=p.check, metric="memory_bw_gbps", unit="GB/s", size_bytes=nbytes, **fields)


def _host_rows(ctx: CheckContext, p: MicrobenchParams, dev: Device) -> list[Row]:
    rows = []
    for direction in ("h2d", "d2h"):
        metric = f"{direction}_gbps"
        if not ctx.on_gpu:
            why = f"host<->device bandwidth needs a GPU; this rank is on {ctx.device}"
            rows.append(ctx.row(check=p.check, metric=metric, unit="GB/s",
                                status=Status.SKIP.value, message=why))  # fmt: skip
            continue
        nbytes = int(p.host_bytes)
        samples = host_samples(ctx.device, nbytes, direction, repeat=_repeat(ctx, p, metric))
        value = gbps(nbytes, statistics.median(samples))
        peak = _peak(dev, lambda s: s.host_gbps)
        fields = _fields(_Judged(value, peak, p.bandwidth_pass_fraction), p, samples, dev, "GB/s")
        fields["details"] |= {"pinned": True}
        rows.append(ctx.row(check=p.check, metric=metric, unit="GB/s", size_bytes=nbytes, **fields))
    return rows


def probe_device(ctx: CheckContext, own: Sequence[ModelExpectation] = ()) -> Device:
    """The rank's device and its expectations (None on CPU or for a model not in the table)."""
    if not ctx.on_gpu:
        return Device("cpu", expectations_for("cpu", own) if own else None)
    name = torch.cuda.get_device_name(ctx.device)
    return Device(name, expectations_for(name, own))


def turns(devices: Sequence[tuple[str, str] | None]) -> list[tuple[int, int]]:
    """Each rank's (turn, ranks sharing its device), by rank: ranks on one GPU (the same node
    and device) take turns in rank order; a rank without a GPU (None) never waits."""
    out = []
    for rank, dev in enumerate(devices):
        same = [r for r, d in enumerate(devices) if d is not None and d == dev]
        out.append((same.index(rank), len(same)) if dev is not None else (0, 1))
    return out


def _turn(ctx: CheckContext) -> tuple[int, int, int]:
    """(this rank's turn, ranks sharing its GPU, rounds every rank takes part in).

    NOTE: fractional GPU ranks (gloo, gpus_per_rank 0.25) measuring at once would each get a
    share of the device and fail against its spec sheet."""
    import torch.distributed as dist

    if not ctx.on_gpu or ctx.rank.world_size == 1 or not dist.is_initialized():
        return 0, 1, 1
    mine = (ctx.rank.node, ctx.rank.device_id or f"{ctx.rank.node}/{ctx.device}")
    devices: list[tuple[str, str] | None] = [None] * ctx.rank.world_size
    ctx.enter("all_gather_object", 0)
    dist.all_gather_object(devices, mine)
    every = turns(devices)
    turn, sharers = every[ctx.rank.rank]
    return turn, sharers, max(n for _, n in every)


def run_microbench(ctx: CheckContext, p: MicrobenchParams) -> list[Row]:
    """This rank's GPU reaches its model's expected GEMM, memory and host-link throughput."""
    import torch.distributed as dist

    dev = probe_device(ctx, p.expectations)
    turn, sharers, rounds = _turn(ctx)
    rows: list[Row] = []
    for now in range(rounds):  # ranks sharing a GPU measure one after another, alone on it
        if now == turn:
            # GEMM first: it also warms clocks and the allocator for the bandwidth tests.
            rows = [*_gemm_rows(ctx, p, dev), _copy_row(ctx, p, dev), *_host_rows(ctx, p, dev)]
            ctx.synchronize()
        if rounds > 1:
            ctx.enter("barrier", now)
            dist.barrier()
    if sharers > 1:
        shared = {"shared_device": {"turn": turn, "sharers": sharers}}
        rows = [replace(r, details={**(r.details or {}), **shared}) for r in rows]
    return rows
