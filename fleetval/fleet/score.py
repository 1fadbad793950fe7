"""A sweep job's score from its result rows: GB/s at the largest size, slowest rank."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from fleetval.vocab import Collective, Status


def _speed(r: dict[str, Any]) -> float | None:
    """busbw (algbw where busbw is 0: one rank, nothing crosses a link; else 1/time), at the
    mean time per call: throughput, so a process stopped now and then shows as it costs.

    NOTE: the median of short calls hides a duty-cycled stall (most calls fall between
    stops); the mean does not, and a sweep scores throughput as nccl-tests does.
    """
    median, samples = r.get("time_us_median"), r.get("samples_us") or []
    scale = median / statistics.fmean(samples) if median and samples else 1.0
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
