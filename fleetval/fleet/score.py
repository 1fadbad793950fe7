"""A sweep job's score from its result rows: GB/s at the largest size, slowest rank."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from fleetval.vocab import Collective, Status

REPEATS = 4  # a job's calls of one size, cut into this many runs of consecutive calls


def _speed(r: dict[str, Any]) -> float | None:
    """busbw (algbw where busbw is 0; else 1/time) at the best throughput of REPEATS runs of
    consecutive calls: a throttled or slow node is slow in every run, a healthy one that a
    passing load slowed is fast in one of them.

    NOTE: throughput (mean time per call within a run), not the median call: the median of
    short calls hides a duty-cycled stall (most calls fall between stops). The best run, not
    the mean of all: contention on a shared host only ever slows a run, never speeds it up.
    """
    median, samples = r.get("time_us_median"), list(r.get("samples_us") or [])
    scale = 1.0
    if median and samples:
        n = max(1, len(samples) // REPEATS)
        runs = [samples[i : i + n] for i in range(0, len(samples) - n + 1, n)]
        scale = median / min(statistics.fmean(run) for run in runs)
    for col in ("busbw_gbps", "algbw_gbps"):
        if r.get(col):
            return r[col] * scale
    return 1e6 / (median / scale) if median else None


def score_rows(rows: Sequence[dict[str, Any]]) -> tuple[float | None, dict[int, float], str]:
    """(score, speed per size, what failed). A failed row fails the job; a job with nothing
    to score (no timed rows, or one rank's collectives: no peer, no link) has score None
    and no failure.

    Per size the slowest rank's reading: a late rank waits least in its own collectives (the
    others wait for it), so only the slowest reading shows the delay. The score is the
    largest size's (the most bandwidth-bound); all_reduce where the job measured it.
    """
    failed = [r for r in rows if r["status"] == Status.FAIL.value]
    if failed:
        return None, {}, failed[0]["message"] or f"{failed[0]['check']} failed"
    timed = [
        r
        for r in rows
        if r.get("size_bytes") and r.get("world_size", 2) > 1 and _speed(r) is not None
    ]
    reduce = [r for r in timed if r.get("collective") == Collective.ALL_REDUCE.value]
    by_size: dict[int, float] = {}
    for r in reduce or timed:
        speed = _speed(r)
        assert speed is not None
        by_size[r["size_bytes"]] = min(speed, by_size.get(r["size_bytes"], speed))
    if not by_size:
        return None, {}, ""
    return by_size[max(by_size)], by_size, ""
