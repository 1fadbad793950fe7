"""Isolation: bisect the job's ranks over sub-groups until what is slow is named.

A throttled process, a slow link or a NIC that stalls stops everyone inside the
collective, so every rank measures the same slow time and arrival order names nobody.
Timing each half of the ranks alone does: the half holding the culprit is slow, the
other is not. `fleetval.detect.bisection.isolate` picks the halves (O(log N) rounds; a lone
suspect is paired with a rank already cleared); here each group is a `dist.new_group`
that every rank creates, the groups of a round take turns in short bursts (so a
passing load hits them alike), and the members' times are gathered to every rank, so all
ranks take the same next step. A group's time is the wall time per iteration of a burst
(first entry to last exit), its slowest member's, median over bursts: wall time, not
the median iteration, because a process stopped 10 ms in every 20 stalls one iteration
in ten, which a median iteration would never see. A verdict, "no slow rank" included,
is kept only when two measurements in a row agree (`fleetval.detect.bisection`): one disturbed
measurement neither names nor hides a culprit.

Use it after a step that was slow against its baseline or its peers, or on its own in a
health suite (see suites/isolate.yaml): a healthy job costs one round of two groups,
measured twice.
Rows: per round and group, each member's samples with the group and the other half in
`details` (the evidence); then one verdict row per rank, FAIL for the ranks isolated.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from fleetval.checks.base import CheckContext
from fleetval.checks.isolate.params import IsolateParams
from fleetval.detect.bisection import Isolation, Trial, isolate
from fleetval.store.schema import Row
from fleetval.vocab import Collective, Status

MAX_BURST_ITERS = 10_000
CALIBRATION_ITERS = 5


class _Groups:
    """Runs group measurements for the bisection and keeps what each showed."""

    def __init__(self, ctx: CheckContext, p: IsolateParams) -> None:
        self.ctx, self.p = ctx, p
        self.mine: dict[tuple[int, ...], list[float]] = {}
        n = max(1, int(p.size) // 4)
        self.buf = torch.ones(n, dtype=torch.float32, device=ctx.device)
        self.out = [torch.empty_like(self.buf) for _ in range(ctx.rank.world_size)]

    def together(self, groups: list[tuple[Any, ...]]) -> list[float | None]:
        """Collective: every rank calls it with the same groups, in the same order.

        The groups take turns in bursts of at least `burst_ms`, a world barrier between
        bursts, so a load that comes and goes on the host hits every group alike. A group's
        time per burst is its slowest member's wall time per iteration; its score, the
        median over bursts, inverted (higher is better).
        """
        me, p = self.ctx.rank.rank, self.p
        members = [[int(r) for r in g] for g in groups]
        pgs = [dist.new_group(m) for m in members]
        walls: list[list[float]] = [[] for _ in groups]
        try:
            iters = [self._calibrate(pg, ranks) for ranks, pg in zip(members, pgs, strict=True)]
            for _ in range(p.bursts):
                for i, (ranks, pg) in enumerate(zip(members, pgs, strict=True)):
                    if me in ranks:
                        timing = self.ctx.measure(
                            p.collective.value, self._launch(pg, len(ranks)), warmup=0,
                            iters=iters[i],
                        )  # fmt: skip
                        self.mine.setdefault(tuple(ranks), []).extend(timing.samples_us)
                        span = timing.exit_unix_us[-1] - timing.enter_unix_us[0]
                        walls[i].append(span / iters[i])
                    dist.barrier()
            gathered: list[list[list[float]] | None] = [None] * self.ctx.rank.world_size
            dist.all_gather_object(gathered, walls)
        finally:
            for pg in pgs:
                dist.destroy_process_group(pg)
        scores: list[float | None] = []
        for i, ranks in enumerate(members):
            per_burst_us = [max(gathered[r][i][b] for r in ranks) for b in range(p.bursts)]
            time_us = statistics.median(per_burst_us)
            scores.append(1e6 / time_us if time_us > 0 else None)
        return scores

    def _calibrate(self, pg: Any, ranks: list[int]) -> int:
        """Warm the group up and agree on how many iterations fill a burst (0: not a member).

        From the median of at least 5 warm-up iterations: a mean, or the median of 2, that
        caught a stall would make a burst short enough to fit between two stalls, hiding
        the very throttle it must show; the fastest iteration would make bursts of a loaded
        host several times longer than they need to be.
        """
        if self.ctx.rank.rank not in ranks:
            return 0
        warm = self.ctx.measure(
            self.p.collective.value, self._launch(pg, len(ranks)), warmup=1,
            iters=max(CALIBRATION_ITERS, self.p.warmup),
        )  # fmt: skip
        slowest = torch.tensor([statistics.median(warm.samples_us)], device=self.ctx.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=pg)
        per_iter_us = max(float(slowest), 1.0)
        return min(MAX_BURST_ITERS, max(2, math.ceil(self.p.burst_ms * 1e3 / per_iter_us)))

    def _launch(self, pg: Any, size: int) -> Callable[[], object]:
        if self.p.collective == Collective.ALL_GATHER:
            out = self.out[:size]
            return lambda: dist.all_gather(out, self.buf, group=pg)
        return lambda: dist.all_reduce(self.buf, group=pg)


def _evidence(found: Isolation) -> list[str]:
    by_round: dict[int, list[Trial]] = {}
    for t in found.trials:
        by_round.setdefault(t.round, []).append(t)
    return [
        f"round {r}: " + " vs ".join(f"ranks {_ranks(t.group)} {_us(_time_us(t))}" for t in ts)
        for r, ts in sorted(by_round.items())
    ]


def _time_us(t: Trial) -> float | None:
    return 1e6 / t.score if t.score else None


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
    found = isolate(list(range(world)), None, p.threshold, together=groups.together, confirm=True)
    evidence = _evidence(found)
    mine = {(t.round, t.group): t for t in found.trials if t.group in groups.mine}
    rows = [_round_row(ctx, p, ident, t, found, groups) for t in mine.values()]
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
            **ident, size_bytes=int(p.size), iters=p.bursts, metric="isolated",
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
    others = {t.group: t for t in found.trials if t.round == trial.round and t.group != trial.group}
    return ctx.row(
        **ident, size_bytes=int(p.size), iters=len(samples),
        time_us_median=statistics.median(samples), samples_us=tuple(samples),
        metric="isolate_group_time_us", value=_time_us(trial), unit="us",
        details={"round": trial.round, "group": list(trial.group),
                 "versus": [{"group": list(g), "time_us": _time_us(t)} for g, t in others.items()]},
    )  # fmt: skip
