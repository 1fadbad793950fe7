"""Late ranks and slow nodes, named from the per-iteration samples of any timed step.

In a blocking collective every rank leaves at about the same moment, so a rank that
arrives late waits least: its own time for that iteration is smaller than its peers' by
about its delay. Clock-free across nodes, this needs nothing but `samples_us`, which
every timed row stores for every rank and iteration.

Per measurement (one collective at one size, or one DDP step), with samples S[rank, it]:

1. D = S - the median of each iteration over ranks: what all ranks shared that iteration
   (a slow iteration for everyone) is removed.
2. A rank's offset is the median over iterations of its row of D. Lateness is the
   largest offset (the rank that arrived first, so waited most) minus the rank's own.
   Measuring from the earliest rank, not the median one, keeps a slow node visible when
   it hosts half the ranks or more: the median rank would then be a slow one.
3. Noise is the spread of what is left once each rank's offset is removed (MAD, scaled to
   a standard deviation), pooled over ranks and iterations: the jitter of one iteration
   of one rank against its peers, measured in this step, on this fabric. A floor of a
   small share of the iteration time keeps the exit skew of a collective's algorithm
   (ranks leave a ring a few microseconds apart) from reading as lateness when the
   measured jitter is tiny. The iteration is all of a call, not the collective alone:
   where ranks work (or wait out a delay) between collectives, their arrival jitters with
   that work (two ranks each delayed 20 ms a call arrived 176 us apart on a loaded box:
   rank 0 was named late at 3.6x a noise read from the collectives' own 2 us).

A rank's score is its lateness in units of noise, averaged over measurements; a rank is
late when the score, each measurement capped at RATIO_CAP, reaches `threshold`. The mean (not the median) over measurements
lets a small delay that only rises above the noise at small sizes still count.

Pure: no Ray, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetval.store.records import JsonObject
from fleetval.store.schema import Row

THRESHOLD = 3.0  # lateness in units of measured noise; figures in bench/RESULTS.md
MIN_ITERS = 3  # a median over fewer iterations says nothing
# One measurement counts at most this many noise units towards the verdict: a burst of
# load on one rank during one size must not outvote the others (the score keeps it all).
# With few measurements the cap is lower still (`_cap`).
RATIO_CAP = 10.0
REL_FLOOR = 0.02  # noise is at least this share of the median iteration time
ABS_FLOOR_US = 0.5  # and at least the timer's resolution
# Measurements in which every rank leaves together, so arrival shows in its own time.
# Rooted and point-to-point patterns (broadcast, reduce, send/recv) let ranks leave at
# different times by design, and compute-only or per-GPU timings have no peers to wait on.
SYNCHRONIZING = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})


@dataclass(frozen=True)
class LateRank:
    """A rank that arrived late at the collectives of a step, with the evidence."""

    rank: int
    node: str
    device_id: str | None
    score: float  # lateness in units of the measured noise, averaged over measurements
    lateness_us: float  # median over measurements of the rank's lateness
    detail: str


@dataclass(frozen=True)
class Lateness:
    """One measurement's verdict material: per-rank lateness and the noise it is judged by."""

    lateness_us: np.ndarray  # per rank (row order of the samples matrix)
    noise_us: float
    iters: int


def lateness(samples_us: np.ndarray, call_us: float = 0.0) -> Lateness:
    """Lateness per rank and noise from samples_us[rank, iteration] of one measurement;
    `call_us`: the time of a whole call where it is longer than the collective's samples
    (work or an injected delay between collectives)."""
    s = np.asarray(samples_us, dtype=np.float64)
    d = s - np.median(s, axis=0, keepdims=True)
    offset = np.median(d, axis=1)
    residual = d - offset[:, None]
    mad = 1.4826 * float(np.median(np.abs(residual)))
    floor = max(ABS_FLOOR_US, REL_FLOOR * max(float(np.median(s)), call_us))
    return Lateness(offset.max() - offset, max(mad, floor), s.shape[1])


@dataclass(frozen=True)
class Scores:
    """Per rank, over measurements taken by the same ranks."""

    score: np.ndarray  # mean over measurements of lateness / noise
    verdict: np.ndarray  # the same with each measurement capped (`_cap`): what is judged
    lateness_us: np.ndarray  # median over measurements
    noise_us: float  # median over measurements
    iters: int  # iterations the evidence rests on, in all


def scores(
    measurements: Sequence[np.ndarray],
    threshold: float = THRESHOLD,
    calls_us: Sequence[float] | None = None,
) -> Scores:
    """Scores of the ranks (rows) of every samples_us[rank, iteration] matrix given (and
    each one's whole call, `lateness`)."""
    found = [lateness(m, c) for m, c in zip(measurements, calls_us or [0.0] * len(measurements),
                                            strict=True)]  # fmt: skip
    ratios = np.array([f.lateness_us / f.noise_us for f in found])
    return Scores(
        score=ratios.mean(axis=0),
        verdict=np.minimum(ratios, _cap(len(found), threshold)).mean(axis=0),
        lateness_us=np.median([f.lateness_us for f in found], axis=0),
        noise_us=float(np.median([f.noise_us for f in found])),
        iters=sum(f.iters for f in found),
    )


def _cap(measurements: int, threshold: float) -> float:
    """What one measurement may count towards the verdict: never the threshold's worth of
    all of them, so one burst among quiet measurements cannot name a rank alone (one
    measurement is all the evidence there is: RATIO_CAP).

    NOTE: at RATIO_CAP alone, a step of three sizes named a rank on one size's burst (10 / 3
    is over 3): "rank 0 late by 0 us (score 4.4)" on a clean run, and a 3.0x warn in a full
    test run (bench/RESULTS.md, "Test time on 2 cores, 2026-11-27 01:08-03:16 UTC")."""
    if measurements < 2:
        return RATIO_CAP
    return min(RATIO_CAP, threshold * (measurements - 1))


# -- rows -> measurements -----------------------------------------------------------------


def _record(row: Row | Mapping[str, Any]) -> Mapping[str, Any]:
    return row.to_record() if isinstance(row, Row) else row


def _details(rec: Mapping[str, Any]) -> JsonObject:
    d = rec.get("details") or {}
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except ValueError:
            return {}
    return d if isinstance(d, dict) else {}


def _synchronizing(rec: Mapping[str, Any], metrics: frozenset[str]) -> bool:
    if not rec.get("samples_us"):  # culprit rows, skipped measurements
        return False
    return rec.get("collective") in SYNCHRONIZING or rec.get("metric") in metrics


def _key(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    # A sub-group measurement (isolation) names its group: its ranks wait on each other only.
    group = tuple(_details(rec).get("group") or ())
    return (
        rec.get("run_id"), rec.get("job"), rec.get("step"), rec.get("check"),
        rec.get("collective"), rec.get("op"), rec.get("dtype"), rec.get("size_bytes"),
        rec.get("metric"), group,
    )  # fmt: skip


@dataclass(frozen=True)
class _Who:
    node: str
    device_id: str | None


def _measurements(
    recs: Sequence[Mapping[str, Any]], metrics: frozenset[str]
) -> dict[tuple[Any, ...], tuple[dict[int, list[float]], float]]:
    """Per measurement, its samples (rank -> samples) and the median over its ranks of their
    time per call (what they did between collectives included; 0 where no row says)."""
    samples: dict[tuple[Any, ...], dict[int, list[float]]] = {}
    calls: dict[tuple[Any, ...], list[float]] = {}
    for rec in recs:
        if _synchronizing(rec, metrics):
            key = _key(rec)
            samples.setdefault(key, {})[int(rec["rank"])] = list(rec["samples_us"])
            if rec.get("time_us_median") is not None:
                calls.setdefault(key, []).append(float(rec["time_us_median"]))
    return {k: (v, float(np.median(calls[k])) if k in calls else 0.0) for k, v in samples.items()}


def late_ranks_in_step(
    rows: Sequence[Row | Mapping[str, Any]],
    threshold: float = THRESHOLD,
    *,
    metrics: frozenset[str] = frozenset(),
) -> list[LateRank]:
    """The late ranks of a finished step (or steps), most late first; nobody on clean data.

    `rows` are one run's Row objects or stored records (as `Store.results(...).to_pylist()`
    gives). Rows without per-iteration samples (culprit rows) and measurements in which
    ranks need not leave together are ignored. Ranks are judged per job, over every
    measurement that the same set of ranks took part in. Collectives are judged by their
    name; `metrics` names the other timed rows whose end is a collective (the checks
    declare them: `fleetval.checks.synchronizing_metrics()`).
    """
    recs = [_record(r) for r in rows]
    who = {
        (rec.get("job"), int(rec["rank"])): _Who(rec.get("node") or "", rec.get("device_id"))
        for rec in recs
    }
    # Group measurements by (job, ranks taking part): each group is judged on its own.
    groups: dict[tuple[Any, tuple[int, ...]], list[tuple[np.ndarray, float]]] = {}
    for key, (per_rank, call_us) in _measurements(recs, metrics).items():
        ranks = tuple(sorted(per_rank))
        n = min(len(per_rank[r]) for r in ranks)
        if len(ranks) < 2 or n < MIN_ITERS:
            continue
        matrix = np.array([per_rank[r][:n] for r in ranks], dtype=np.float64)
        groups.setdefault((key[1], ranks), []).append((matrix, call_us))
    found: dict[tuple[Any, int], LateRank] = {}
    for (job, ranks), measured in groups.items():
        matrices = [m for m, _ in measured]
        sc = scores(matrices, threshold, [c for _, c in measured])
        for i in np.flatnonzero(sc.verdict >= threshold):
            w = who[(job, ranks[i])]
            evidence = (
                f"late by {_fmt_us(sc.lateness_us[i])} (median over {sc.iters} iterations of "
                f"{len(matrices)} measurement(s)) vs noise {_fmt_us(sc.noise_us)}: "
                f"{sc.score[i]:.1f}x the noise"
            )
            prior = found.get((job, ranks[i]))
            if prior is None or prior.score < sc.score[i]:
                found[(job, ranks[i])] = LateRank(
                    ranks[i], w.node, w.device_id, float(sc.score[i]),
                    float(sc.lateness_us[i]), evidence,
                )  # fmt: skip
    out = [_with_node(lr, job, found, who) for (job, _), lr in found.items()]
    return sorted(out, key=lambda x: (-x.score, x.rank))


def _with_node(
    lr: LateRank,
    job: Any,
    found: Mapping[tuple[Any, int], LateRank],
    who: Mapping[tuple[Any, int], _Who],
) -> LateRank:
    """Say, for a node hosting several of the job's ranks, whether the whole node is late."""
    ranks = sorted(r for (j, r), w in who.items() if j == job and w.node == lr.node)
    if len(ranks) < 2:
        return lr
    late = [r for r in ranks if (job, r) in found]
    listed = ",".join(map(str, ranks))
    if late == ranks:
        extra = f"; {lr.node} hosts ranks {listed}: node late"
    else:
        extra = f"; {lr.node} hosts ranks {listed}, late: {','.join(map(str, late))}"
    return LateRank(lr.rank, lr.node, lr.device_id, lr.score, lr.lateness_us, lr.detail + extra)


def _fmt_us(us: float) -> str:
    if abs(us) >= 1000:
        return f"{us / 1000:.1f} ms"
    return f"{us:.1f} µs" if abs(us) >= 10 else f"{us:.2f} µs"
