"""Stragglers in a training job, from what the job already writes: which rank arrived late at
its collectives, over which window, by how much, and what it cost the job.

The model, per process group, over the Flight Recorder's arrival times A[rank, collective]
(when each rank called each collective, `time_created_ns`):

1. D = A - the median arrival of each collective: what every rank shared (a slow step for
   everyone, the time between collectives) is removed; what is left is each rank's
   arrival against its peers'. Where the dumps carry completion times (NCCL with timing),
   each rank's clock offset is the median of its completions against its peers' (every
   rank leaves a collective together) and is taken off first; otherwise the hosts' clocks
   are taken as synchronised (NTP/PTP: well under the lateness that matters).
2. The noise is the spread of D over the whole job (MAD scaled to a standard deviation,
   floored at NOISE_FLOOR_S): the jitter of one arrival against its peers, measured in this
   job. A rank is late at a collective when D is more than Z_LATE noise units.
3. A rank's late collectives form episodes (flags closer than three times the rank's own median
   gap between flags, at least MERGE_MIN collectives). An episode names the rank only when
   its late count could not come from the job's background rate of late arrivals: a
   binomial tail, times the places such an episode could have been, under ALPHA / ranks
   (Bonferroni over ranks and positions), with at least MIN_EVENTS late arrivals. A clean job's scattered late arrivals spread over ranks and fail this test; a
   rank slowed for a window fails it nowhere.
4. What is said of a named rank: its lateness when late (median of D, with a 95%
   distribution-free interval from the order statistics), in noise units, the share of the
   window's collectives it reached last, and the time the job waited for it (the sum of
   its lateness over the window).

Step logs say when steps inflated (a step's time over the job's median by more than
STEP_Z robust sds and STEP_REL of the median); they never name a rank: every rank's step
grows when one is late, because the others wait for it at the all-reduce.

Pure: numpy and scipy over parsed readings (fleetval.formats.frdump, .steplog).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from scipy.stats import binom

from fleetval.detect.lateness import lateness
from fleetval.formats.frdump import RankTrace
from fleetval.formats.jobfiles import LOOKED_FOR, read_job_files
from fleetval.formats.nccldiag import InspectorRecord, RasReport
from fleetval.formats.steplog import StepLine
from fleetval.store.records import JsonObject

Z_LATE = 6.0  # a late arrival: this many noise units after the collective's median
MIN_EVENTS = 3  # late arrivals an episode needs before it can name a rank
ALPHA = 1e-4  # false-alarm budget per group: Bonferroni over its ranks and episode positions
MERGE_MIN = 8  # late arrivals this many collectives apart or closer are one episode
NOISE_FLOOR_S = 20e-6  # arrival jitter under 20 us is the launcher and the clock, not a rank
BACKGROUND_FLOOR = 1e-4  # the background rate of late arrivals is never taken as lower
MIN_RANKS = 3  # a collective's median and the others' spread need three ranks at least
STEP_Z = 5.0  # an inflated step: this many robust sds over the job's median step time
STEP_REL = 0.20  # and at least this share over it


@dataclass(frozen=True)
class LateRank:
    """A rank named late over a window, with its evidence."""

    rank: int
    host: str | None
    late_at: int  # collectives of the window it reached late
    collectives: int  # collectives in the window
    share_last: float  # of the window's collectives, the share it reached last
    lateness_s: float  # median lateness when late, against the collective's median arrival
    low_s: float  # 95% interval of that median
    high_s: float
    z: float  # lateness in noise units
    p_value: float  # its late count under the job's background rate, over positions
    waited_s: float  # the job's time spent waiting for it in the window
    kind: str  # "compute": late at the call (work before the collective took longer)


@dataclass(frozen=True)
class Window:
    """Collectives over which one or more ranks were late."""

    group: str
    first_seq: int
    last_seq: int
    start_s: float  # wall clock, seconds since the epoch
    end_s: float
    ranks: tuple[LateRank, ...]
    first_step: int | None = None  # from the step logs, where they give steps
    last_step: int | None = None
    step_cost_s: float | None = None  # step time over the median, summed over those steps


@dataclass(frozen=True)
class StepWindow:
    """Consecutive steps whose time inflated, from the step logs alone."""

    first_step: int
    last_step: int
    start_s: float | None
    end_s: float | None
    baseline_s: float  # the job's median step time
    peak_s: float
    cost_s: float  # step time over the baseline, summed


@dataclass
class Report:
    """What the artefacts say: windows with their late ranks, and what could not be told."""

    windows: list[Window] = field(default_factory=list)
    step_windows: list[StepWindow] = field(default_factory=list)
    noise_s: dict[str, float] = field(default_factory=dict)  # per group
    collectives: dict[str, int] = field(default_factory=dict)  # judged, per group
    ranks: list[int] = field(default_factory=list)  # ranks with a dump
    notes: list[str] = field(default_factory=list)
    # What a stored run needs beyond the JSON (fleetval.signoff.jobrun): each dumped rank's
    # host, the world the dumps name (ranks without a dump included), timed steps judged.
    hosts: dict[int, str] = field(default_factory=dict)
    world: int = 0
    steps: int = 0
    backend: str = ""  # as the dumps' collectives name it: `gloo:all_reduce` is gloo

    @property
    def named(self) -> list[LateRank]:
        return [r for w in self.windows for r in w.ranks]

    def to_dict(self) -> JsonObject:
        return {
            "stragglers": sorted({r.rank for r in self.named}),
            "windows": [asdict(w) for w in self.windows],
            "step_windows": [asdict(w) for w in self.step_windows],
            "noise_s": self.noise_s,
            "collectives": self.collectives,
            "ranks": self.ranks,
            "notes": self.notes,
        }


# -- Flight Recorder arrivals ---------------------------------------------------------------


def _matrix(traces: Sequence[RankTrace], group: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """values[rank i, collective j] of `what` for the group's collectives (NaN: not in a
    rank's record), and the sequence ids of the columns."""
    masks = [np.array([g == group for g in t.group], dtype=bool) for t in traces]
    seqs = np.unique(np.concatenate([t.seq[m] for t, m in zip(traces, masks, strict=True)]))
    out = np.full((len(traces), len(seqs)), np.nan)
    for i, (t, m) in enumerate(zip(traces, masks, strict=True)):
        out[i, np.searchsorted(seqs, t.seq[m])] = getattr(t, what)[m]
    return out, seqs


def _median_ci(x: np.ndarray) -> tuple[float, float, float]:
    """Median and its 95% distribution-free interval (order statistics of a binomial(n, 1/2))."""
    s = np.sort(x)
    n = len(s)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    return float(np.median(s)), float(s[lo]), float(s[hi])


def _episodes(cols: np.ndarray) -> list[np.ndarray]:
    """A rank's late collectives (column indices, sorted) cut into episodes."""
    if len(cols) == 0:
        return []
    gaps = np.diff(cols)
    merge = max(MERGE_MIN, 3 * float(np.median(gaps))) if len(gaps) else MERGE_MIN
    cuts = np.nonzero(gaps > merge)[0] + 1
    return np.split(cols, cuts)


def judge_group(traces: Sequence[RankTrace], group: str, report: Report) -> None:
    """Windows of late ranks in one process group, added to `report`."""
    arrive, seqs = _matrix(traces, group, "created_ns")
    done, _ = _matrix(traces, group, "completed_ns")
    if np.isfinite(done).sum() >= arrive.size / 2:
        # NOTE: every rank leaves a collective together, so a rank's completions against
        # its peers' are its clock's offset; the arrivals are corrected by it.
        offset = np.nanmedian(done - np.nanmedian(done, axis=0), axis=1)
        arrive = arrive - np.nan_to_num(offset)[:, None]
    else:
        report.notes.append(
            f"group {group}: no completion times in the dumps (gloo, or NCCL without "
            "TORCH_NCCL_ENABLE_TIMING): hosts' clocks taken as synchronised, and late "
            "completion (communication) cannot be told from late arrival"
        )
    present = np.isfinite(arrive).sum(axis=0)
    keep = present >= MIN_RANKS
    arrive, seqs = arrive[:, keep], seqs[keep]
    if arrive.shape[1] == 0:
        report.notes.append(f"group {group}: no collective reached by {MIN_RANKS} ranks or more")
        return
    d = (arrive - np.nanmedian(arrive, axis=0)) / 1e9  # seconds after the median arrival
    noise = max(NOISE_FLOOR_S, 1.4826 * float(np.nanmedian(np.abs(d))))
    late = d > Z_LATE * noise
    report.noise_s[group] = noise
    report.collectives[group] = int(arrive.shape[1])
    last = np.nanargmax(np.where(np.isfinite(d), d, -np.inf), axis=0)
    cells = np.isfinite(d).sum()
    found: list[tuple[int, int, int, LateRank]] = []
    for i, t in enumerate(traces):
        others = (late.sum() - late[i].sum()) / max(1, cells - np.isfinite(d[i]).sum())
        p0 = max(BACKGROUND_FLOOR, float(others))
        for ep in _episodes(np.nonzero(late[i])[0]):
            first, end = int(ep[0]), int(ep[-1])
            n = end - first + 1
            k = len(ep)
            # NOTE: the episode's place was chosen by the data: its tail probability times
            # the number of places an episode this long could have (the scan's
            # look-elsewhere), so a clean job's chance clusters do not name a rank.
            p = min(1.0, float(binom.sf(k - 1, n, p0)) * max(1.0, d.shape[1] / n))
            if k < MIN_EVENTS or p > ALPHA / len(traces):
                continue
            med, lo, hi = _median_ci(d[i, ep])
            window = slice(first, end + 1)
            found.append((first, end, i, LateRank(
                rank=t.rank, host=t.host, late_at=k, collectives=n,
                share_last=float(np.mean(last[window] == i)),
                lateness_s=med, low_s=lo, high_s=hi, z=med / noise, p_value=p,
                waited_s=float(np.sum(d[i, ep])), kind="compute",
            )))  # fmt: skip
    report.windows += _windows(found, group, seqs, arrive)


def _windows(
    found: list[tuple[int, int, int, LateRank]], group: str, seqs: np.ndarray, arrive: np.ndarray
) -> list[Window]:
    """Overlapping episodes of several ranks (a node's ranks, late together) are one window."""
    out: list[Window] = []
    span: list[Any] = []
    for first, end, _, rank in sorted(found, key=lambda f: (f[0], f[2])):
        if span and first <= span[1]:
            span[1] = max(span[1], end)
            span[2].append(rank)
        else:
            if span:
                out.append(_window(group, seqs, arrive, *span))
            span = [first, end, [rank]]
    if span:
        out.append(_window(group, seqs, arrive, *span))
    return out


def _window(
    group: str, seqs: np.ndarray, arrive: np.ndarray, first: int, end: int, ranks: list[LateRank]
) -> Window:
    return Window(
        group=group,
        first_seq=int(seqs[first]),
        last_seq=int(seqs[end]),
        start_s=float(np.nanmedian(arrive[:, first])) / 1e9,
        end_s=float(np.nanmedian(arrive[:, end])) / 1e9,
        ranks=tuple(sorted(ranks, key=lambda r: -r.waited_s)),
    )


def _coverage(traces: Sequence[RankTrace], report: Report) -> None:
    """Ranks without a dump, and dumps that stop short of their peers' (a rank killed or
    hung): said, and the rest judged."""
    world = max((len(r) for t in traces for r in t.group_ranks.values()), default=0)
    world = max(world, max(t.rank for t in traces) + 1)
    report.world = world
    have = {t.rank for t in traces}
    absent = sorted(set(range(world)) - have)
    if absent:
        report.notes.append(
            f"no dump from rank {', '.join(map(str, absent))} of {world}: "
            "its lateness cannot be judged"
        )
    for group in sorted({g for t in traces for g in t.group}):
        ends = {t.rank: int(t.seq[[g == group for g in t.group]].max(initial=0)) for t in traces}
        top = max(ends.values())
        for rank, end in sorted(ends.items()):
            if end < top:
                report.notes.append(
                    f"rank {rank}'s record in group {group} stops at collective #{end}, its "
                    f"peers' at #{top}: it did not reach #{end + 1} (killed, hung or dumped early)"
                )


def judge_dumps(traces: Sequence[RankTrace], report: Report | None = None) -> Report:
    """Every process group of the dumps judged; what is missing said."""
    report = report or Report()
    traces = sorted(traces, key=lambda t: t.rank)
    report.ranks = [t.rank for t in traces]
    if not traces:
        return report
    _coverage(traces, report)
    for group in sorted({g for t in traces for g in t.group}):
        members = [t for t in traces if group in t.group]
        if len(members) < MIN_RANKS:
            report.notes.append(
                f"group {group}: {len(members)} rank(s) dumped; {MIN_RANKS} needed to judge"
            )
            continue
        judge_group(members, group, report)
    report.windows.sort(key=lambda w: w.start_s)
    return report


# -- step logs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    step: int
    time_s: float | None
    duration_s: float


def _steps(lines: Sequence[StepLine]) -> list[_Step]:
    """Per step, over the ranks that logged it: the median duration and time."""
    by: dict[int, list[StepLine]] = {}
    for s in lines:
        if s.duration_s is not None:
            by.setdefault(s.step, []).append(s)
    out = []
    for step, ls in sorted(by.items()):
        times = [s.time_s for s in ls if s.time_s is not None]
        out.append(_Step(step, float(np.median(times)) if times else None,
                         float(np.median([s.duration_s for s in ls]))))  # fmt: skip
    return out


def judge_steps(lines: Sequence[StepLine], report: Report | None = None) -> Report:
    """Windows of inflated step time; the FR windows get their steps and step-time cost."""
    report = report or Report()
    steps = _steps(lines)
    if len(steps) < 5:
        if lines:
            report.notes.append(f"step logs: {len(steps)} timed step(s); 5 needed to judge")
        return report
    dt = np.array([s.duration_s for s in steps])
    report.steps = len(steps)
    base = float(np.median(dt))
    sd = max(0.01 * base, 1.4826 * float(np.median(np.abs(dt - base))))
    inflated = dt > base + max(STEP_Z * sd, STEP_REL * base)
    i = 0
    while i < len(steps):
        if not inflated[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(steps) and (inflated[j + 1] or (j + 2 < len(steps) and inflated[j + 2])):
            j += 1
        ws = steps[i : j + 1]
        report.step_windows.append(StepWindow(
            first_step=ws[0].step, last_step=ws[-1].step,
            start_s=ws[0].time_s - ws[0].duration_s if ws[0].time_s is not None else None,
            end_s=ws[-1].time_s,
            baseline_s=base, peak_s=float(max(s.duration_s for s in ws)),
            cost_s=float(sum(max(0.0, s.duration_s - base) for s in ws)),
        ))  # fmt: skip
        i = j + 1
    report.windows = [_with_steps(w, steps, base) for w in report.windows]
    return report


def _with_steps(w: Window, steps: list[_Step], base: float) -> Window:
    """The steps a window of late arrivals falls in: a step line is printed as the step
    ends, so the step of a moment is the first one logged after it."""
    timed = [s for s in steps if s.time_s is not None and s.time_s > 1e9]  # epoch, not time of day
    if not timed:
        return w
    ends = np.array([s.time_s for s in timed])
    a = min(int(np.searchsorted(ends, w.start_s)), len(timed) - 1)
    b = min(int(np.searchsorted(ends, w.end_s)), len(timed) - 1)
    cost = sum(max(0.0, s.duration_s - base) for s in timed[a : b + 1])
    return replace(w, first_step=timed[a].step, last_step=timed[b].step, step_cost_s=float(cost))


def hosts_from_steps(lines: Sequence[StepLine]) -> dict[int, str]:
    """rank -> host where the step logs name both (`[host Rank 0]`, JSON `host`)."""
    return {s.rank: s.host for s in lines if s.rank is not None and s.host}


def judge(
    traces: Sequence[RankTrace],
    steps: Sequence[StepLine] = (),
    hosts: Mapping[int, str] | None = None,
) -> Report:
    """The whole judgement: dumps (who was late, when), then the step logs (when steps
    inflated, and the steps and cost of each window)."""
    known = {**hosts_from_steps(steps), **(hosts or {})}
    traces = [
        t if t.host or t.rank not in known else replace(t, host=known[t.rank]) for t in traces
    ]
    report = judge_dumps(traces)
    report.hosts = {t.rank: t.host for t in traces if t.host}
    report.backend = next((n.split(":")[0] for t in traces for n in t.name[:1] if ":" in n), "")
    judge_steps(steps, report)
    if steps and not traces:
        report.notes.append(
            "step logs alone: they show when steps inflated, not who caused it (every rank "
            "waits at the all-reduce for the late one); no rank is named from them"
        )
    return report


def judge_inspector(records: Sequence[InspectorRecord], report: Report) -> None:
    """NCCL Inspector timings as evidence, never a verdict: in a blocking collective the rank
    that arrives last waits least, so its execution time is the shortest (the principle of
    `detect.lateness`). Said per communicator whose collectives three ranks or more reported."""
    by: dict[str, dict[int, dict[int, float]]] = {}
    for r in records:
        by.setdefault(r.comm, {}).setdefault(r.rank, {})[r.seq] = r.exec_us
    for comm, ranks in sorted(by.items()):
        seqs = sorted(set.intersection(*(set(v) for v in ranks.values())))
        if len(ranks) < MIN_RANKS or len(seqs) < MIN_EVENTS:
            n = sum(len(v) for v in ranks.values())
            report.notes.append(
                f"NCCL Inspector: communicator {comm}: {n} record(s) from rank "
                f"{', '.join(map(str, sorted(ranks)))}; {MIN_RANKS} ranks reporting the same "
                f"{MIN_EVENTS} collectives are needed to compare their waits"
            )
            continue
        order = sorted(ranks)
        found = lateness(np.array([[ranks[r][q] for q in seqs] for r in order]))
        worst = int(np.argmax(found.lateness_us))
        report.notes.append(
            f"NCCL Inspector: communicator {comm}: rank {order[worst]} waited least in "
            f"{len(seqs)} collectives ({found.lateness_us[worst] / 1e3:.3g} ms, "
            f"{found.lateness_us[worst] / found.noise_us:.1f} x noise): evidence of late "
            "arrival, not a verdict"
        )


# -- a job's files, whole ------------------------------------------------------------------------


class NothingReadable(ValueError):
    """No file of the job holds a dump, a step log or NCCL diagnostics."""


def judge_files(files: Sequence[tuple[str, bytes]]) -> tuple[Report, list[str]]:
    """A job's files (name, bytes), each read as what it is, judged (`judge`), with NCCL RAS
    reports and Inspector records said beside the verdict; and the files not read, each
    with why. NothingReadable, naming what was looked for, when no file held any of it."""
    found = read_job_files(files)
    if not found.readable:
        what = f"nothing readable in {len(files)} file(s): looked for {LOOKED_FOR}"
        what += f"; not read: {', '.join(found.not_read[:5])}" if found.not_read else ""
        raise NothingReadable(what)
    report = judge(found.traces, found.steps)
    records = [r for d in found.diagnostics if isinstance(d, list) for r in d]
    for d in found.diagnostics:
        if isinstance(d, RasReport):
            report.notes += d.notes()
    if records:
        judge_inspector(records, report)
    return report, found.not_read
