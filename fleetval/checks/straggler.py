"""Stragglers: which rank arrives last at the collectives, how often, and by how much.

Clock-free across nodes: in a blocking collective the last rank to arrive waits least,
while everyone else waits for it. So per iteration a rank's lateness is the median
wait of all ranks minus its own wait; a straggler is last in most iterations and late
by more than the noise. Entry and exit times are kept per iteration for later analysis.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from pydantic import ByteSize, Field

from fleetval.checks.base import CheckContext, StepSpec
from fleetval.checks.collectives import pattern
from fleetval.results import Row
from fleetval.vocab import Status


class StragglerParams(StepSpec):
    """Many small all_reduces; every rank's wait per iteration, gathered and scored."""

    check: Literal["straggler"]
    size: ByteSize = ByteSize(1024)  # small: latency-bound, so arrival order dominates
    warmup: int = Field(default=5, ge=0)
    iters: int = Field(default=40, ge=5)
    last_fraction: float = Field(
        default=0.6, gt=0, le=1
    )  # last in at least this share of iterations
    min_lateness_ms: float = Field(default=5.0, ge=0)  # and late by at least this (median)


@dataclass(frozen=True)
class Score:
    """A rank's straggler score from everyone's waits."""

    rank: int
    last_fraction: float  # share of iterations in which this rank waited least (arrived last)
    lateness_ms: float  # median over iterations of (median wait of all ranks - own wait)


def score(waits_us: list[list[float]]) -> list[Score]:
    """Scores from waits_us[rank][iteration]."""
    world, iters = len(waits_us), len(waits_us[0])
    lasts = [0] * world
    late: list[list[float]] = [[] for _ in range(world)]
    for k in range(iters):
        column = [waits_us[r][k] for r in range(world)]
        middle = statistics.median(column)
        lasts[min(range(world), key=column.__getitem__)] += 1
        for r in range(world):
            late[r].append((middle - column[r]) / 1000.0)
    return [Score(r, lasts[r] / iters, statistics.median(late[r])) for r in range(world)]


def stragglers(scores: list[Score], last_fraction: float, min_lateness_ms: float) -> list[Score]:
    return [
        s for s in scores if s.last_fraction >= last_fraction and s.lateness_ms >= min_lateness_ms
    ]


def run_straggler(ctx: CheckContext, p: StragglerParams) -> list[Row]:
    """Names the rank (and node) that arrives last at collectives; a clean run names nobody."""
    n = max(1, int(p.size) // 4)
    buf = pattern(ctx.rank.seed, ctx.rank.rank, n, None).to(ctx.device, torch.float32)
    for i in range(p.warmup):
        ctx.enter("all_reduce", -1 - i)
        dist.all_reduce(buf)
    waits, enters = [], []
    for i in range(p.iters):
        ctx.enter("all_reduce", i)
        enters.append(time.time() * 1e6)
        waits.append(ctx.time_us(lambda: dist.all_reduce(buf)))
    everyone: list[tuple[str, list[float]] | None] = [None] * ctx.rank.world_size
    dist.all_gather_object(everyone, (ctx.rank.node, waits))
    nodes = [e[0] for e in everyone]
    scores = score([e[1] for e in everyone])
    slow = {s.rank for s in stragglers(scores, p.last_fraction, p.min_lateness_ms)}
    mine = scores[ctx.rank.rank]
    status, message = Status.PASS.value, ""
    if ctx.rank.rank in slow:
        status = Status.FAIL.value
        message = (
            f"straggler: rank {mine.rank} on {nodes[mine.rank]} arrives last in "
            f"{mine.last_fraction:.0%} of iterations, {mine.lateness_ms:.1f} ms behind the median rank"
        )
    return [
        ctx.row(
            check=p.check,
            collective="all_reduce",
            op="sum",
            dtype="float32",
            size_bytes=n * 4,
            iters=p.iters,
            time_us_median=statistics.median(waits),
            metric="straggler_last_fraction",
            value=mine.last_fraction,
            unit="fraction",
            status=status,
            message=message,
            samples_us=tuple(waits),
            details={
                "lateness_ms": round(mine.lateness_ms, 3),
                "stragglers": sorted(slow),
                "enter_unix_us": [round(e) for e in enters],
            },
        )
    ]
