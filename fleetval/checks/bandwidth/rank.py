"""Bandwidth sweep: nccl-tests sizes, per-iteration times, algbw and busbw.

Time per call (median, p99, algbw, busbw) counts a rank's injected delay as part of its
call, as a slow device's would be (`Timing.per_call_us`); `samples_us` keep the time inside
the collective alone, where a late rank waits least (`fleetval.detect.lateness`).
"""

from __future__ import annotations

import statistics
from typing import TypedDict

from fleetval.checks.bandwidth.params import BandwidthParams
from fleetval.checks.base import CheckContext
from fleetval.checks.collectives.rank import (
    TORCH_DTYPE,
    Verified,
    elements_for,
    prepare,
    runnable,
    verdict_fields,
)
from fleetval.store.schema import Row
from fleetval.vocab import Collective, Status


def busbw_factor(collective: Collective, world: int) -> float:
    """nccl-tests' bus-bandwidth factor: what each link carries relative to algbw."""
    if world <= 1:
        return 1.0 if collective in {Collective.BROADCAST, Collective.REDUCE} else 0.0
    if collective == Collective.ALL_REDUCE:
        return 2 * (world - 1) / world
    if collective in {Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL}:
        return (world - 1) / world
    return 1.0


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Timed(TypedDict):
    """A timed measurement's row columns."""

    iters: int
    time_us_median: float
    time_us_p99: float
    samples_us: tuple[float, ...]


def timed(samples: list[float]) -> Timed:
    """The columns of a measurement timed `samples` (one time per iteration, microseconds)."""
    return Timed(
        iters=len(samples),
        time_us_median=statistics.median(samples),
        time_us_p99=percentile(samples, 0.99),
        samples_us=tuple(samples),
    )


def run_bandwidth(ctx: CheckContext, p: BandwidthParams) -> list[Row]:
    """Achieved algbw and busbw per size on every rank, with exact verification of the result."""
    rows: list[Row] = []
    world = ctx.rank.world_size
    cases = list(runnable(ctx, p.check, p.collectives, p.ops, p.dtypes, rows))
    ctx.plan(len(cases) * len(p.sizes.sizes()) * (p.warmup + p.iters))
    for ident, collective, op, dtype in cases:
        for size in p.sizes.sizes():
            count = elements_for(collective, size, dtype, world)
            nbytes = count * TORCH_DTYPE[dtype].itemsize
            # NOTE: the previous case's buffers go before this one's are made: at 16 GiB both
            # alive at once (and the verification's temporaries) would not fit beside each other
            case = None
            case = prepare(ctx, collective, op, dtype, count)
            timing = ctx.measure(collective.value, case.launch, warmup=p.warmup, iters=p.iters)
            samples, calls = timing.samples_us, timing.per_call_us
            verdict = Verified(status=Status.INFO.value, message="timed only (verify: false)")
            if p.verify:
                case.reset()
                case.launch()
                ctx.synchronize()
                wrong, by_source = case.wrong(dtype, op)
                verdict = verdict_fields(wrong, by_source, case.output.numel())
            median = statistics.median(calls)
            algbw = nbytes / (median * 1e-6) / 1e9 if collective != Collective.BARRIER else None
            rows.append(
                ctx.row(
                    **ident,
                    size_bytes=nbytes,
                    iters=p.iters,
                    time_us_median=median,
                    time_us_p99=percentile(calls, 0.99),
                    algbw_gbps=algbw,
                    busbw_gbps=algbw * busbw_factor(collective, world) if algbw else None,
                    samples_us=tuple(samples),
                    **verdict,
                )
            )
    return rows
