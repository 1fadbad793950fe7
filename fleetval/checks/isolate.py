"""Isolation: bisect the job's ranks over sub-groups until what is slow is named.

A throttled process, a slow link or a NIC that stalls stops everyone inside the
collective, so every rank measures the same slow time and arrival order names nobody.
Timing each half of the ranks alone does: the half holding the culprit is slow, the
other is not. `fleetval.bisection.isolate` picks the halves (O(log N) rounds; a lone
suspect is paired with a rank already cleared); here each group is a `dist.new_group`
that every rank creates, its members run `iters` collectives on it back to back while the
others wait, and the members' times are gathered to every rank, so all ranks take the
same next step. A group's time is wall time per iteration (first entry to last exit,
over iterations), its slowest member's: a mean, not a median, because a process stopped
10 ms in every 20 stalls one iteration in ten, which a median would never see.

Use it after a step that was slow against its baseline or its peers, or on its own in a
health suite (see suites/isolate.yaml): a healthy job costs one round of two groups.
Rows: per round and group, each member's samples with the group and the other half in
`details` (the evidence); then one verdict row per rank, FAIL for the ranks isolated.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Annotated, Any, Literal

import torch
import torch.distributed as dist
from pydantic import AfterValidator, ByteSize, Field

from fleetval.bisection import Isolation, Trial, isolate
from fleetval.checks.base import CheckContext, StepSpec
from fleetval.results import Row
from fleetval.vocab import Collective, Status

TIMED = (Collective.ALL_REDUCE, Collective.ALL_GATHER)


def _timed(c: Collective) -> Collective:
    if c not in TIMED:
        raise ValueError(f"isolation times one of {', '.join(TIMED)}, not {c.value}")
    return c


class IsolateParams(StepSpec):
    """Sub-group bisection of the job's ranks with one timed collective."""

    check: Literal["isolate"]
    collective: Annotated[Collective, AfterValidator(_timed)] = Collective.ALL_REDUCE
    size: ByteSize = ByteSize(64 * 1024)
    warmup: int = Field(default=3, ge=0)
    iters: int = Field(default=20, ge=3)
    # A half slower than the other by this share (0.5: its score, 1/time, is half or less)
    # holds the culprit. Generous: halves of a healthy CPU job differ by tens of percent
    # on a loaded host, while a throttled rank or a slow link costs its group 2x or more.
    threshold: float = Field(default=0.5, gt=0, lt=1)


class _Groups:
    """Runs group measurements for the bisection and keeps what each showed."""

    def __init__(self, ctx: CheckContext, p: IsolateParams) -> None:
        self.ctx, self.p = ctx, p
        self.time_us: dict[tuple[int, ...], float | None] = {}
        self.mine: dict[tuple[int, ...], list[float]] = {}
        n = max(1, int(p.size) // 4)
        self.buf = torch.ones(n, dtype=torch.float32, device=ctx.device)
        self.out = [torch.empty_like(self.buf) for _ in range(ctx.rank.world_size)]

    def measure(self, group: tuple[Any, ...]) -> float | None:
        """Collective: every rank calls it with the same group, in the same order."""
        ranks = [int(r) for r in group]
        pg = dist.new_group(ranks)
        wall_us: float | None = None
        try:
            if self.ctx.rank.rank in ranks:
                timing = self.ctx.measure(
                    self.p.collective.value, self._launch(pg, len(ranks)),
                    warmup=self.p.warmup, iters=self.p.iters,
                )  # fmt: skip
                self.mine[tuple(ranks)] = timing.samples_us
                wall_us = (timing.exit_unix_us[-1] - timing.enter_unix_us[0]) / self.p.iters
        finally:
            gathered: list[float | None] = [None] * self.ctx.rank.world_size
            dist.all_gather_object(gathered, wall_us)
            dist.destroy_process_group(pg)
        time_us = max(float(gathered[r] or 0.0) for r in ranks)
        self.time_us[tuple(ranks)] = time_us
        return 1e6 / time_us if time_us > 0 else None

    def _launch(self, pg: Any, size: int) -> Callable[[], object]:
        if self.p.collective == Collective.ALL_GATHER:
            out = self.out[:size]
            return lambda: dist.all_gather(out, self.buf, group=pg)
        return lambda: dist.all_reduce(self.buf, group=pg)


def _evidence(found: Isolation, times: dict[tuple[int, ...], float | None]) -> list[str]:
    by_round: dict[int, list[Trial]] = {}
    for t in found.trials:
        by_round.setdefault(t.round, []).append(t)
    return [
        f"round {r}: "
        + " vs ".join(f"ranks {_ranks(t.group)} {_us(times.get(t.group))}" for t in ts)
        for r, ts in sorted(by_round.items())
    ]


def _ranks(group: tuple[Any, ...]) -> str:
    return "[" + ",".join(map(str, group)) + "]"


def _us(t: float | None) -> str:
    if t is None:
        return "failed"
    return f"{t / 1000:.2f} ms" if t >= 1000 else f"{t:.0f} µs"


def run_isolate(ctx: CheckContext, p: IsolateParams) -> list[Row]:
    """Names the rank(s) that slow a collective down from inside it, by sub-group bisection."""
    world, me = ctx.rank.world_size, ctx.rank.rank
    ident = {"check": p.check, "collective": p.collective.value, "dtype": "float32"}
    if world < 3:
        why = (
            f"isolation needs at least 3 ranks to tell a slow one from its partner; job has {world}"
        )
        return [ctx.row(**ident, metric="isolated", status=Status.SKIP.value, message=why)]
    where: list[tuple[str, str | None] | None] = [None] * world
    dist.all_gather_object(where, (ctx.rank.node, ctx.rank.device_id))
    groups = _Groups(ctx, p)
    found = isolate(list(range(world)), groups.measure, p.threshold)
    evidence = _evidence(found, groups.time_us)
    rows = [
        _round_row(ctx, p, ident, t, found, groups) for t in found.trials if t.group in groups.mine
    ]
    flagged = [int(r) for r in found.flagged]
    named = ", ".join(
        f"rank {r} on {where[r][0]}" + (f" ({where[r][1]})" if where[r][1] else "") for r in flagged
    )
    if me in flagged:
        status = Status.FAIL.value
        message = f"isolated by sub-group bisection: {named}; " + "; ".join(evidence)
    else:
        status = Status.PASS.value
        message = (
            f"slow: {named}" if flagged else "no slow rank"
        ) + f" after {found.rounds} round(s)"
    if found.note:
        message += f"; {found.note}"
    rows.append(
        ctx.row(
            **ident, size_bytes=int(p.size), iters=p.iters, metric="isolated",
            value=1.0 if me in flagged else 0.0, unit="flag", status=status, message=message,
            details={"flagged": flagged, "rounds": found.rounds, "evidence": evidence,
                     "pid": os.getpid()},
        )
    )  # fmt: skip
    return rows


def _round_row(
    ctx: CheckContext,
    p: IsolateParams,
    ident: dict[str, str],
    trial: Trial,
    found: Isolation,
    groups: _Groups,
) -> Row:
    """This rank's samples in one group of one round, with the other group(s) of the round."""
    samples = groups.mine[trial.group]
    others = [t.group for t in found.trials if t.round == trial.round and t.group != trial.group]
    return ctx.row(
        **ident, size_bytes=int(p.size), iters=len(samples),
        time_us_median=statistics.median(samples), samples_us=tuple(samples),
        metric="isolate_group_time_us", value=groups.time_us[trial.group], unit="us",
        details={"round": trial.round, "group": list(trial.group),
                 "versus": [{"group": list(g), "time_us": groups.time_us.get(g)} for g in others]},
    )  # fmt: skip
