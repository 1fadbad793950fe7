"""A training job stored as a run (`fleetval ingest` of its Flight Recorder dumps and step
logs): the judgement of `job_stragglers`, the one function behind `fleetval stragglers` and
`POST /v1/stragglers`, written in the store's own vocabulary, so `show`, `report`, `runs
--label job=...`, `trend` and any Parquet reader see a production job next to the sweeps.

- step `stragglers` (check `job_stragglers`), from the dumps: per named rank and window a
  WARN row (metric `lateness_ms`: its median lateness, the window and evidence in `details`)
  and a `late` culprit, as the engine names a late rank of its own runs; a PASS row for each
  dumped rank late nowhere; a SKIP row for each rank of the world without a dump.
- step `step_times` (check `job_step_times`), from the step logs: a WARN row per window of
  inflated steps (metric `step_time_lost_s`), rank -1 and no node: the logs never name a
  rank; a PASS row when steps were judged and none inflated.
- the run's summary keeps the whole JSON of `fleetval stragglers --json` under `stragglers`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from fleetval import status
from fleetval.culprit import Culprit
from fleetval.detect.stragglers import LateRank, Report, StepWindow, Window
from fleetval.metrics import Direction, MetricDecl
from fleetval.signoff.stragglers import JobStragglers
from fleetval.store.catalog import new_run_id
from fleetval.store.dataset import Store
from fleetval.store.records import JsonObject, Run, StoredRow
from fleetval.store.schema import Row
from fleetval.vocab import CulpritReason, Status

SUITE = "ingest-job"
STRAGGLERS = "job_stragglers"
STEP_TIMES = "job_step_times"
LATENESS = "lateness_ms"
STEP_LOST = "step_time_lost_s"
NO_RANK = -1  # a row of the step logs: they name no rank (every rank waits for the late one)
UNKNOWN_HOST = "unknown"
KINDS = {
    "compute": "compute (late at the call)"
}  # a rank whose host neither its dump's folder nor the logs name

# The sign-off of a job's run: it finished and nobody was late. NOTE: no correctness gate (a
# job's artefacts hold no checked results, and a gate with no evidence fails), as a sweep's.
SUITE_JSON = json.dumps({"name": SUITE, "gates": {"health": {"checks": []}}})

# NOTE: findings, judged by their status: never a change for compare or trend to report
METRICS = [
    MetricDecl(name=LATENESS, unit="ms", direction=Direction.NONE, shared=False),
    MetricDecl(name=STEP_LOST, unit="s", direction=Direction.NONE, shared=True),
]


def store_job(
    store: Store,
    found: JobStragglers,
    *,
    job: str,
    source: str,
    labels: dict[str, str] | None = None,
    suite: str | None = None,
) -> Run:
    """A judged job as one stored run labelled `job=<job>`: results, nodes, then the run
    record (a crash in between leaves no run listed with half its rows)."""
    run_id = new_run_id()
    started = datetime.now(UTC)
    report = found.report
    backend = report.backend
    parts = {
        "stragglers": straggler_rows(report, run_id, backend) if report.ranks else [],
        "step_times": step_rows(report, run_id, backend) if report.steps else [],
    }
    store.write_schema_note()
    for part, rows in parts.items():
        if rows:
            store.write_results(run_id, part, rows)
    if hosts := sorted(set(report.hosts.values())):
        store.write_nodes(run_id, [_node(h, job, source) for h in hosts])
    steps = [_step(report, name, rows) for name, rows in parts.items() if rows]
    record = Run(
        run_id=run_id,
        suite=suite or SUITE,
        status=status.run_status(s["status"] for s in steps).value,
        started_at=started,
        finished_at=datetime.now(UTC),
        labels={"source": "training-job", "ingested_from": source, **(labels or {}), "job": job},
        backend=backend,
        suite_json=SUITE_JSON,
        summary={"steps": steps, "stragglers": found.to_dict(),
                 "ingested": {"path": source, "format": "training job", "job": job}},
        message=f"job {job} ingested from {source}: {_verdict(report)}",
        metrics=METRICS,
    )  # fmt: skip
    store.write_run(record)
    return record


def _row(run_id: str, step: str, check: str, backend: str, world: int, **fields: Any) -> Row:
    return Row(run_id=run_id, job=0, step=step, check=check, backend=backend,
               world_size=max(1, world), **fields)  # fmt: skip


def straggler_rows(report: Report, run_id: str, backend: str = "") -> list[Row]:
    """Per named rank and window a WARN row; each dumped rank late nowhere a PASS row (only
    where collectives were judged); each rank of the world without a dump a SKIP row."""
    world = max(report.world, len(report.ranks))
    judged = sum(report.collectives.values())
    named = {r.rank for r in report.named}
    rows = [
        _row(run_id, "stragglers", STRAGGLERS, backend, world, rank=r.rank,
             node=_host(report, r.rank, r.host), metric=LATENESS, value=r.lateness_s * 1e3,
             unit="ms", status=Status.WARN.value, message=late_text(w, r),
             details=_late_details(w, r))
        for w in report.windows for r in w.ranks
    ]  # fmt: skip
    for rank in report.ranks:
        if rank in named:
            continue
        said = f"not late at any of {judged} collectives" if judged else _unjudged(report)
        rows.append(_row(run_id, "stragglers", STRAGGLERS, backend, world, rank=rank,
                         node=_host(report, rank), message=said,
                         status=(Status.PASS if judged else Status.SKIP).value))  # fmt: skip
    for rank in sorted(set(range(world)) - set(report.ranks)):
        rows.append(_row(run_id, "stragglers", STRAGGLERS, backend, world, rank=rank,
                         node=_host(report, rank), status=Status.SKIP.value,
                         message=f"no dump from rank {rank}: its lateness cannot be judged"))  # fmt: skip
    return rows


def _unjudged(report: Report) -> str:
    """Why a dumped rank was not judged: the notes say (too few ranks in its group, ...)."""
    return "not judged: " + ("; ".join(report.notes) or "no collective reached by three ranks")


def step_rows(report: Report, run_id: str, backend: str = "") -> list[Row]:
    """Per window of inflated steps a WARN row naming no rank; else one PASS row."""
    world = max(report.world, len(report.ranks))
    rows = [
        _row(run_id, "step_times", STEP_TIMES, backend, world, rank=NO_RANK, metric=STEP_LOST,
             value=s.cost_s, unit="s", status=Status.WARN.value, message=step_text(s),
             details=asdict(s))
        for s in report.step_windows
    ]  # fmt: skip
    if not rows:
        rows.append(_row(run_id, "step_times", STEP_TIMES, backend, world, rank=NO_RANK,
                         status=Status.PASS.value,
                         message=f"{report.steps} timed steps, none inflated"))  # fmt: skip
    return rows


def _host(report: Report, rank: int, host: str | None = None) -> str:
    return host or report.hosts.get(rank) or UNKNOWN_HOST


def _late_details(w: Window, r: LateRank) -> JsonObject:
    """The evidence of one named rank in one window: what `fleetval stragglers --json` says."""
    window = {k: v for k, v in asdict(w).items() if k != "ranks"}
    return {**asdict(r), "window": window}


def _when(t: float | None) -> str:
    """Wall-clock seconds as UTC (a stored run is read anywhere); a time of day as it is."""
    if t is None:
        return "?"
    if t > 1e9:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    return f"{t:.1f}s"


def late_text(w: Window, r: LateRank) -> str:
    """One named rank in one window, in a sentence (a row's message, a culprit's detail)."""
    steps = f", steps {w.first_step}-{w.last_step}" if w.first_step is not None else ""
    return (
        f"late at {r.late_at} of {r.collectives} collectives (last at {r.share_last:.0%}), "
        f"lateness {r.lateness_s * 1e3:.3g} ms (95% {r.low_s * 1e3:.3g}-{r.high_s * 1e3:.3g} ms, "
        f"{r.z:.0f} x noise), job waited {r.waited_s:.3g} s; window {_when(w.start_s)} to "
        f"{_when(w.end_s)} (group {w.group}, collectives #{w.first_seq}-#{w.last_seq}{steps}); "
        f"{KINDS.get(r.kind, r.kind)}"
    )


def step_text(s: StepWindow) -> str:
    when = f" ({_when(s.start_s)} to {_when(s.end_s)})" if s.end_s is not None else ""
    return (
        f"steps {s.first_step}-{s.last_step} inflated{when}: peak {s.peak_s:.3g} s against a "
        f"median of {s.baseline_s:.3g} s, {s.cost_s:.3g} s lost; the step logs name no rank"
    )


def _culprits(report: Report) -> list[Culprit]:
    """Each named rank in each window as a `late` culprit: how `show` and `report` name the
    ranks that slowed a step of fleetval's own runs."""
    return [
        Culprit(rank=r.rank, node=_host(report, r.rank, r.host), device_id=None,
                reason=CulpritReason.LATE.value, detail=late_text(w, r))
        for w in report.windows for r in w.ranks
    ]  # fmt: skip


def _step(report: Report, name: str, rows: list[Row]) -> JsonObject:
    """A step of the summary, as the engine stores its StepOutcome."""
    culprits = _culprits(report) if name == "stragglers" else []
    state = status.step_status(rows, culprits).value
    return {
        "job": 0, "step": name, "check": rows[0].check, "world_size": rows[0].world_size,
        "status": state, "message": _step_message(report, name), "seconds": 0.0,
        "culprits": [asdict(c) for c in culprits], "deadline": False,
    }  # fmt: skip


def _step_message(report: Report, name: str) -> str:
    """What the step judged, with the notes that bear on it (ranks missing, clocks, logs)."""
    if name == "step_times":
        notes = [x for x in report.notes if x.startswith("step logs")]
        windows = [step_text(s) for s in report.step_windows] or ["none inflated"]
        said = f"{report.steps} timed steps: " + "; ".join(windows)
    else:
        notes = [x for x in report.notes if not x.startswith("step logs")]
        said = _verdict(report)
    return "; ".join([said, *notes])


def _verdict(report: Report) -> str:
    judged = sum(report.collectives.values())
    tail = f" over {judged} collectives of {len(report.ranks)} dumped ranks"
    who = sorted({r.rank for r in report.named})
    if who:
        hosts = [f"{r} on {_host(report, r)}" for r in who]
        return f"straggler rank {', '.join(hosts)} in {len(report.windows)} window(s){tail}"
    if report.ranks:
        return f"nobody late{tail}" if judged else "no collective judged"
    return f"no dumps: {len(report.step_windows)} window(s) of inflated steps, no rank named"


def _node(host: str, job: str, source: str) -> StoredRow:
    return {"node": host, "hostname": host,
            "extra": json.dumps({"ingested_from": source, "job": job}, sort_keys=True)}  # fmt: skip
