"""A sweep job's score from its result rows: GB/s at the largest size, slowest rank."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence

from fleetval.fleet.judge import HwNote, Measurement, Planned
from fleetval.store.records import JsonObject, StoredRow
from fleetval.store.schema import GPU_METRIC, NODE_HW_METRIC
from fleetval.vocab import Collective, Status

REPEATS = 4  # a job's calls of one size, cut into this many runs of consecutive calls


def _speed(r: StoredRow) -> float | None:
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
        # The samples' own median, not the row's time per call: that counts an injected
        # delay the samples leave out (`fleetval.checks.base.Timing.per_call_us`).
        n = max(1, len(samples) // REPEATS)
        runs = [samples[i : i + n] for i in range(0, len(samples) - n + 1, n)]
        scale = statistics.median(samples) / min(statistics.fmean(run) for run in runs)
    for col in ("busbw_gbps", "algbw_gbps"):
        if r.get(col):
            return r[col] * scale
    return 1e6 / (median / scale) if median else None


def score_rows(rows: Sequence[StoredRow]) -> tuple[float | None, dict[int, float], str]:
    """(score, speed per size, what failed). A failed row fails the job; a job with nothing
    to score (no timed rows, or one rank's collectives: no peer, no link) has score None
    and no failure. Hardware rows are no failure here: `hardware_notes` carries them.

    Per size the slowest rank's reading: a late rank waits least in its own collectives (the
    others wait for it), so only the slowest reading shows the delay. The score is the
    largest size's (the most bandwidth-bound); all_reduce where the job measured it.
    """
    failed = [r for r in rows if r["status"] == Status.FAIL.value and not is_hardware(r)]
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


def measurement(
    p: Planned, rows: Sequence[StoredRow], failed: Sequence[tuple[str, str]]
) -> Measurement:
    """A job's measurement from its rows and its failed steps (step, message).

    NOTE: a step failed only by its hardware rows (the health check's drain line) fails no
    job: the node's busbw is still judged, and the hardware finding rides beside it
    (`Measurement.hardware`), so the drain list says both.
    """
    hw = hardware_notes(rows)
    broke = [(step, msg) for step, msg in failed if not _hardware_only(step, rows)]
    if broke:
        return Measurement(p, None, detail=f"{broke[0][0]}: {broke[0][1]}", hardware=hw)
    return Measurement(p, *score_rows(rows), hardware=hw)


def _hardware_only(step: str, rows: Sequence[StoredRow]) -> bool:
    fails = [r for r in rows if r.get("step") == step and r["status"] == Status.FAIL.value]
    return bool(fails) and all(is_hardware(r) for r in fails)


def is_hardware(r: StoredRow) -> bool:
    """A row of the health check's GPU hardware reading (a node's action, or one GPU's)."""
    return r.get("metric") in (GPU_METRIC, NODE_HW_METRIC)


def hardware_notes(rows: Sequence[StoredRow]) -> dict[str, HwNote]:
    """Per node, what its hardware rows found (warn or fail): the node row's action, said
    with the GPU finding that set it. Nodes whose hardware found nothing are left out."""
    out = {}
    for node_row in rows:
        if node_row.get("metric") != NODE_HW_METRIC or node_row["status"] not in _FOUND:
            continue
        d = _details(node_row)
        node = node_row["node"]
        gpus = [r for r in rows if r.get("metric") == GPU_METRIC and r["node"] == node]
        finding = _finding(gpus, d.get("action", "")) or d.get("reason") or node_row["message"]
        out[node] = HwNote(d.get("action", ""), finding, bool(d.get("drain")))
    return out


_FOUND = (Status.WARN.value, Status.FAIL.value)


def _details(r: StoredRow) -> JsonObject:
    d = r.get("details") or {}
    return json.loads(d) if isinstance(d, str) else dict(d)


def _finding(gpus: Sequence[StoredRow], action: str) -> str:
    """The first finding that calls for the node's action, in words: "Xid 79 (GPU has fallen
    off the bus) on GPU 3 (0000:1b:00)"; "" where none does (a kernel event with no GPU)."""
    for r in gpus:
        d = _details(r)
        for f in d.get("findings", ()):
            if f.get("action") == action and f.get("severity") in _FOUND:
                code = f["code"]
                name = f"Xid {code.removeprefix('xid_')}" if code.startswith("xid_") else code
                return f"{name} ({f['reason']}) on {d.get('gpu') or r.get('device_id')}"
    return ""
