"""Release sign-off: a stored run judged against its suite's gates, with the evidence behind each.

`build_signoff(store, run_id, baseline=..., waivers=...)` reads the run (record, rows,
nodes), the gates its suite declared (fleetval/signoff/gates.py; defaults when none), compares it
with the baseline where one is named, and evaluates every gate to PASS, FAIL or WAIVED.
A gate without evidence FAILS and says why. The `Signoff` also carries what a report
shows beside the gates (fleetval/signoff/views.py): busbw curves, scaling, the node x
check map, incidents, the environment; `fleetval.reports.render` formats it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import CompareError, Comparison, compare_runs
from fleetval.checks.spec import Evidence
from fleetval.signoff.gates import (
    DEFAULT_GATES,
    GATES,
    SWEEP_DEFAULT_GATES,
    GateName,
    Gates,
    RegressionGate,
    RunInputs,
    SweepGate,
    Waiver,
    gates_from_suite_json,
    is_sweep,
)
from fleetval.signoff.sweep import SWEEPS_SHOWN
from fleetval.signoff.views import Views, build_views
from fleetval.store.dataset import Store
from fleetval.store.records import Run, StoredRow
from fleetval.vocab import GateStatus

_EVIDENCE_CAP = 200  # per gate: a fleet can fail thousands of rows; the count says the rest


@dataclass(frozen=True, kw_only=True)
class GateResult:
    gate: GateName
    status: GateStatus
    requires: str  # what the gate asks, in words
    summary: str  # what was found, in words
    evidence: tuple[Evidence, ...] = ()
    evidence_total: int = 0  # before the cap
    no_evidence: bool = False  # FAIL because nothing in the run could show it either way
    waiver: Waiver | None = None

    @property
    def failing(self) -> tuple[Evidence, ...]:
        return tuple(e for e in self.evidence if not e.ok)


@dataclass(frozen=True, kw_only=True)
class Signoff:
    """A run judged for release: the verdict first, then each gate and what a report shows."""

    run: Run
    verdict: GateStatus  # PASS when every gate is PASS or WAIVED
    gates: tuple[GateResult, ...]
    baseline: str | None
    gates_declared: bool  # False: the suite declared none and DEFAULT_GATES were applied
    views: Views
    comparison: Comparison | None = None
    parquet_paths: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    generated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == GateStatus.PASS else 1


# -- reading -------------------------------------------------------------------------------

_COLUMNS = [
    "job", "step", "check", "collective", "op", "dtype", "size_bytes", "world_size", "rank",
    "node", "device", "device_id", "iters", "time_us_median", "algbw_gbps", "busbw_gbps",
    "metric", "value", "unit", "wrong", "status", "message", "details",
]  # fmt: skip


def _rows(store: Store, run_id: str) -> list[StoredRow]:
    rows = store.results([run_id], columns=_COLUMNS).to_pylist()
    for r in rows:
        r["details"] = json.loads(r["details"] or "{}")
    return rows


def parquet_paths(store: Store, run_id: str) -> tuple[str, ...]:
    """Every stored file of the run, absolute: runs/, nodes/, results/, artifacts/."""
    root = store.root.resolve()
    files = [root / "runs" / f"{run_id}.parquet", root / "nodes" / f"{run_id}.parquet"]
    files += sorted((root / "results" / run_id).glob("*.parquet"))
    files += sorted((root / "artifacts" / run_id).glob("*"))
    return tuple(str(f) for f in files if f.exists())


# -- the gates ----------------------------------------------------------------------------


def _judge(gate: GateName, cfg: Any, inp: RunInputs, waiver: Waiver | None) -> GateResult:
    out = GATES[gate].evaluate(inp, cfg)
    status = GateStatus.PASS if out.ok else GateStatus.FAIL
    summary = out.summary if out.ok is not None else f"no evidence: {out.summary}"
    if waiver is not None and status == GateStatus.FAIL:
        status = GateStatus.WAIVED
    evidence = sorted(out.evidence, key=lambda e: e.ok)  # failing first
    return GateResult(
        gate=gate,
        status=status,
        requires=GATES[gate].requires(cfg),
        summary=summary,
        evidence=tuple(evidence[:_EVIDENCE_CAP]),
        evidence_total=len(evidence),
        no_evidence=out.ok is None,
        waiver=waiver,
    )


# -- the entry point ----------------------------------------------------------------------


def _compare(
    store: Store, baseline: str | None, run_id: str, cfg: RegressionGate | None
) -> tuple[Comparison | None, str | None]:
    if baseline is None:
        return None, "no baseline named: pass --baseline or set gates.regression.baseline"
    threshold = cfg.threshold_pct if cfg else None
    try:
        return compare_runs(store, baseline, [run_id], threshold_pct=threshold), None
    except (CompareError, ValueError) as err:  # BaselineError too: no run matches, etc.
        return None, f"cannot compare with {baseline!r}: {err}"


def _gates(record: Run, declared: Gates | None) -> Gates:
    """The suite's gates, else the defaults; a sweep's verdict is always a gate to pass."""
    if not is_sweep(record.summary):
        return declared or DEFAULT_GATES
    gates = declared or SWEEP_DEFAULT_GATES
    return gates if gates.sweep else gates.model_copy(update={"sweep": SweepGate()})


def build_signoff(
    store: Store,
    run_id: str,
    *,
    baseline: str | None = None,
    waivers: Iterable[Waiver] = (),
    sweeps: int = SWEEPS_SHOWN,
) -> Signoff:
    """Judge a stored run against its suite's gates (ValueError for bad input: unknown run,
    unknown baseline named here, an invalid stored gates section). A sweep's report also
    shows each node over the last `sweeps` sweeps up to this one."""
    record = store.run(run_id)
    declared = gates_from_suite_json(record.suite_json)
    gates = _gates(record, declared)
    if baseline is not None:
        Baselines(store).get(baseline)  # unknown -> bad input naming the known ones
        if gates.regression is None:  # a named baseline is a gate to pass
            gates = gates.model_copy(update={"regression": RegressionGate(baseline=baseline)})
    base = baseline or (gates.regression.baseline if gates.regression else None)
    comparison, problem = None, None
    if gates.regression is not None:
        comparison, problem = _compare(store, base, run_id, gates.regression)
    inp = RunInputs(
        record, _rows(store, run_id), store.nodes([run_id]).to_pylist(), comparison, problem
    )
    by_gate = {w.gate: w for w in gates.waivers} | {w.gate: w for w in waivers}
    names = gates.declared()
    results = tuple(_judge(g, getattr(gates, g.value, None), inp, by_gate.get(g)) for g in names)
    notes = _notes(declared, gates, by_gate, names, results)
    verdict = (
        GateStatus.FAIL if any(r.status == GateStatus.FAIL for r in results) else GateStatus.PASS
    )
    return Signoff(
        run=record,
        verdict=verdict,
        gates=results,
        baseline=base,
        gates_declared=declared is not None,
        views=build_views(store, inp.record, inp.rows, inp.nodes, comparison, base, sweeps=sweeps),
        comparison=comparison,
        parquet_paths=parquet_paths(store, run_id),
        notes=notes,
    )


def _notes(
    declared: Gates | None,
    gates: Gates,
    waivers: dict[GateName, Waiver],
    names: list[GateName],
    results: tuple[GateResult, ...],
) -> tuple[str, ...]:
    notes = []
    if declared is None:
        applied = ", ".join(g.value for g in gates.declared() if g != GateName.REGRESSION)
        notes.append(f"the suite declares no gates: the default gates were applied "
                     f"({applied}; regression when a baseline is named)")  # fmt: skip
    for gate, w in waivers.items():
        if gate not in names:
            notes.append(f"waiver for {gate.value} by {w.by} ignored: that gate is not evaluated")
    for r in results:
        if r.waiver and r.status == GateStatus.PASS:
            notes.append(
                f"waiver for {r.gate.value} by {r.waiver.by} was not needed: the gate passed"
            )
    return tuple(notes)
