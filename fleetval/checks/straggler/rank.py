"""Stragglers: which rank arrives last at the collectives, and by how much against the noise.

Clock-free across nodes: in a blocking collective the last rank to arrive waits least,
while everyone else waits for it. Every rank's waits are gathered and scored by
`fleetval.detect.lateness` (each rank's lateness against the earliest rank, in units of the
jitter measured in this very step), so a 30 µs GPU all_reduce and a 5 ms CPU one are
judged alike, and a slow node hosting half the ranks is as visible as one slow rank.
Entry and exit times are kept per iteration for later analysis.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from fleetval.checks.base import CheckContext
from fleetval.checks.collectives.rank import pattern
from fleetval.checks.straggler.params import StragglerParams
from fleetval.detect.lateness import scores
from fleetval.store.schema import Row
from fleetval.vocab import Status


@dataclass(frozen=True)
class Score:
    """A rank's straggler score from everyone's waits."""

    rank: int
    last_fraction: float  # share of iterations in which this rank waited least (arrived last)
    lateness_ms: float  # median over iterations, against the earliest rank
    score: float  # lateness in units of the measured noise
    noise_ms: float  # the jitter of one iteration of one rank against its peers


def score(waits_us: list[list[float]]) -> list[Score]:
    """Scores from waits_us[rank][iteration]."""
    matrix = np.asarray(waits_us, dtype=np.float64)
    sc = scores([matrix])
    lasts = np.bincount(matrix.argmin(axis=0), minlength=matrix.shape[0]) / matrix.shape[1]
    return [
        Score(r, float(lasts[r]), float(sc.lateness_us[r]) / 1e3, float(sc.score[r]),
              sc.noise_us / 1e3)
        for r in range(matrix.shape[0])
    ]  # fmt: skip


def stragglers(scores: list[Score], threshold: float, min_lateness_ms: float = 0.0) -> list[Score]:
    return [s for s in scores if s.score >= threshold and s.lateness_ms >= min_lateness_ms]


def run_straggler(ctx: CheckContext, p: StragglerParams) -> list[Row]:
    """Names the rank (and node) that arrives last at collectives; a clean run names nobody."""
    n = max(1, int(p.size) // 4)
    buf = pattern(ctx.rank.seed, ctx.rank.rank, n, None).to(ctx.device, torch.float32)
    ctx.plan(p.warmup + p.iters)
    timing = ctx.measure("all_reduce", lambda: dist.all_reduce(buf), warmup=p.warmup, iters=p.iters)
    waits = timing.samples_us
    everyone: list[tuple[str, list[float]] | None] = [None] * ctx.rank.world_size
    dist.all_gather_object(everyone, (ctx.rank.node, waits))
    nodes = [e[0] for e in everyone]
    scored = score([e[1] for e in everyone])
    slow = {s.rank for s in stragglers(scored, p.threshold, p.min_lateness_ms)}
    mine = scored[ctx.rank.rank]
    status, message = Status.PASS.value, ""
    if ctx.rank.rank in slow:
        status = Status.FAIL.value
        message = (
            f"straggler: rank {mine.rank} on {nodes[mine.rank]} arrives last in "
            f"{mine.last_fraction:.0%} of iterations, {mine.lateness_ms:.3g} ms behind the "
            f"earliest rank ({mine.score:.1f}x the noise of {mine.noise_ms:.3g} ms)"
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
                "lateness_ms": round(mine.lateness_ms, 4),
                "score": round(mine.score, 2),
                "noise_ms": round(mine.noise_ms, 4),
                "stragglers": sorted(slow),
                "enter_unix_us": [round(e) for e in timing.enter_unix_us],
                "exit_unix_us": [round(e) for e in timing.exit_unix_us],
            },
        )
    ]
