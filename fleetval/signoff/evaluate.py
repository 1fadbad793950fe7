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
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import CompareError, Comparison, compare_runs, human_bytes
from fleetval.signoff.gates import (
    DEFAULT_GATES,
    BusbwGate,
    BusbwMinimum,
    CorrectnessGate,
    GateName,
    Gates,
    GateStatus,
    HealthGate,
    MicrobenchGate,
    RegressionGate,
    ScalingGate,
    Waiver,
    gates_from_suite_json,
)
from fleetval.signoff.views import ScalingPoint, Views, build_views, gpu_label, scaling_points
from fleetval.status import completed, judged, signoff_completed
from fleetval.store.dataset import RunRecord, Store
from fleetval.vocab import Status, Verdict

# Public per-SKU all_reduce busbw of one 8-GPU node at a bandwidth-bound size (16 GiB),
# the floor a healthy node reaches with nccl-tests / rccl-tests `all_reduce_perf`.
# Sources: H100 SXM 460 GB/s and MI300X 314 GB/s are the figures of fleetval issue 10,
# in line with NVIDIA's published DGX H100 NCCL results (NVLink 4 / NVSwitch, ~450-480 GB/s)
# and AMD's "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X"
# (ROCm blog, 2025: 7 xGMI links x ~48 GB/s usable each) and the Instinct system-acceptance
# guide's RCCL benchmarking chapter. H200 SXM has the H100's NVLink 4 fabric, so the same
# floor. A100 SXM (NVLink 3, 600 GB/s bidirectional): ~230 GB/s in NVIDIA's DGX A100
# nccl-tests results. Other collectives and SKUs: declare them in the suite.
_SKU_SOURCE = "public per-SKU figure (fleetval.signoff.BUSBW_DEFAULTS)"
BUSBW_DEFAULTS: tuple[BusbwMinimum, ...] = tuple(
    BusbwMinimum(gpu_model=pattern, collective="all_reduce", world_size=8, nodes=1,
                 min_busbw_gbps=gbps, min_size=16 << 30, source=f"{sku}: {_SKU_SOURCE}")
    for pattern, sku, gbps in (
        (r"H100(?!.*(PCIe|NVL))", "H100 SXM 8-GPU", 460.0),
        (r"H200(?!.*NVL)", "H200 SXM 8-GPU", 460.0),
        (r"MI300X", "MI300X 8-GPU", 314.0),
        (r"A100(?!.*PCIE)", "A100 SXM 8-GPU", 230.0),
    )
)  # fmt: skip

_EVIDENCE_CAP = 200  # per gate: a fleet can fail thousands of rows; the count says the rest


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One row behind a gate: what was measured or found, where, and whether it holds."""

    ok: bool  # supports the gate (True) or breaks it (False)
    text: str  # one line a person reads
    check: str | None = None
    step: str | None = None
    collective: str | None = None
    dtype: str | None = None
    size_bytes: int | None = None
    world_size: int | None = None
    rank: int | None = None
    node: str | None = None
    device_id: str | None = None
    value: float | None = None
    expected: float | None = None
    unit: str | None = None


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

    run: RunRecord
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


@dataclass(frozen=True)
class _Outcome:
    ok: bool | None  # None: no evidence
    summary: str
    evidence: list[Evidence]


@dataclass(frozen=True)
class _Inputs:
    record: RunRecord
    rows: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    comparison: Comparison | None
    compare_problem: str | None


# -- reading -------------------------------------------------------------------------------

_COLUMNS = [
    "job", "step", "check", "collective", "op", "dtype", "size_bytes", "world_size", "rank",
    "node", "device", "device_id", "iters", "time_us_median", "algbw_gbps", "busbw_gbps",
    "metric", "value", "unit", "wrong", "status", "message", "details",
]  # fmt: skip


def _rows(store: Store, run_id: str) -> list[dict[str, Any]]:
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


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _where(r: dict[str, Any]) -> str:
    dev = f" ({r['device_id']})" if r.get("device_id") else ""
    return f"rank {r['rank']} on {r['node']}{dev}"


def _ident(r: dict[str, Any]) -> str:
    size = human_bytes(r["size_bytes"]) if r.get("size_bytes") is not None else None
    parts = [r.get("collective"), r.get("op"), r.get("dtype"), size, f"n={r['world_size']}"]
    return " ".join(p for p in parts if p)


def _evidence(r: dict[str, Any], ok: bool, text: str, **extra: Any) -> Evidence:
    keys = ("check", "step", "collective", "dtype", "size_bytes", "world_size", "rank", "node",
            "device_id")  # fmt: skip
    return Evidence(ok=ok, text=text, **{k: r.get(k) for k in keys}, **extra)


def _completed(inp: _Inputs, _: object) -> _Outcome:
    rec = inp.record
    steps = rec.summary.get("steps", [])
    cut = [s for s in steps if s.get("deadline")]  # ran out of time: nothing blamed, not done
    if signoff_completed(rec.status) and not cut:  # what it found is the other gates' to judge
        text = f"run finished ({rec.status}) with {len(steps)} steps"
        return _Outcome(True, text, [Evidence(ok=True, text=text)])
    if cut:
        evidence = [Evidence(ok=False, text=f"step {s['step']} (n={s['world_size']}): "
                             f"{s['message']}", check=s["check"], step=s["step"],
                             world_size=s["world_size"]) for s in cut]  # fmt: skip
        return _Outcome(False, f"{_n(len(cut), 'step')} cut off by its deadline", evidence)
    if completed(rec.status):  # it ran to the end, but judged nothing
        text = (f"run {rec.status}: no step judged anything against an expectation "
                f"({len(steps)} steps); waive the gate to sign off on recorded figures")  # fmt: skip
        return _Outcome(False, text, [Evidence(ok=False, text=text)])
    text = f"run {rec.status}: {rec.message or 'no message'}; {len(steps)} steps recorded"
    return _Outcome(False, text, [Evidence(ok=False, text=text)])


def _correctness(inp: _Inputs, cfg: CorrectnessGate) -> _Outcome:
    # NOTE: only judged rows count: a skipped combination (not on this backend) shows nothing
    ran = [r for r in inp.rows if r["check"] in cfg.checks]
    judged_rows = [r for r in ran if judged(r["status"])]
    bad = [
        r
        for r in inp.rows
        if (r["wrong"] or 0) > 0 or (r["check"] in cfg.checks and r["status"] == Status.FAIL)
    ]
    evidence = [
        _evidence(
            r,
            False,
            f"{r['check']} {_ident(r)}: {_where(r)}: {r['message']}".strip(),
            value=float(r["wrong"] or 0),
            unit="wrong elements",
        )
        for r in bad
    ]
    if bad:
        steps = sorted({r["step"] for r in bad})
        return _Outcome(False, f"{_n(len(bad), 'failing row')} in {', '.join(steps)}", evidence)
    if not judged_rows:
        why = f"{_n(len(ran), 'row')}, none judged" if ran else "no rows"
        return _Outcome(None, f"{why} of {', '.join(cfg.checks)} in this run", [])
    counts = Counter(
        (r["check"], r.get("collective") or r.get("metric") or "") for r in judged_rows
    )
    evidence = [
        Evidence(ok=True, text=f"{check} {what}: {n} rows pass", check=check, collective=what)
        for (check, what), n in sorted(counts.items())
    ]
    unjudged = len(ran) - len(judged_rows)
    rest = f"; {unjudged} not judged (skipped or recorded only)" if unjudged else ""
    return _Outcome(
        True, f"{_n(len(judged_rows), 'correctness row')} pass, none wrong{rest}", evidence
    )


# NOTE: a sign-off is `compare --strict`: a change beyond the threshold that the runs cannot
# prove (noisy, e.g. one run a side) or a measurement the candidate lacks (missing) blocks it
# until more runs settle it or someone waives it. Failed rows belong to the correctness gate,
# late ranks to the health gate.
SIGNOFF_FAILS = (Verdict.REGRESSION, Verdict.NOISY, Verdict.MISSING)


def _regression(inp: _Inputs, cfg: RegressionGate) -> _Outcome:
    cmp = inp.comparison
    if cmp is None:
        return _Outcome(None, inp.compare_problem or "no baseline named", [])
    evidence = []
    for m in cmp.having(*SIGNOFF_FAILS):
        i = m.identity
        ci = (
            f" (CI {m.ci_low_pct:+.1f}% .. {m.ci_high_pct:+.1f}%)"
            if m.ci_low_pct is not None
            else ""
        )
        text = (f"{m.verdict.value}: {i.label()}: {m.change_pct:+.1f}%{ci}, "
                f"{m.baseline_median:.4g} -> {m.candidate_median:.4g} {m.unit}"
                if m.change_pct is not None and m.baseline_median is not None
                and m.candidate_median is not None
                else f"{m.verdict.value}: {i.label()}: {m.reason or 'not in the candidate'}")  # fmt: skip
        evidence.append(
            Evidence(ok=False, text=text, check=i.check,
                     collective=i.collective, dtype=i.dtype, size_bytes=i.size_bytes,
                     world_size=i.world_size, value=m.candidate_median,
                     expected=m.baseline_median, unit=m.unit)
        )  # fmt: skip
    counts = {v.value: n for v, n in cmp.counts().items() if n}
    said = ", ".join(f"{n} {v}" for v, n in counts.items())
    judged = sum(counts.get(v.value, 0) for v in (Verdict.UNCHANGED, Verdict.IMPROVEMENT,
                                                     Verdict.NOISY, Verdict.REGRESSION))  # fmt: skip
    if evidence:
        return _Outcome(
            False,
            f"{_n(len(evidence), 'measurement')} not shown unchanged vs {cmp.baseline}: {said}",
            evidence,
        )
    if not judged:
        return _Outcome(None, f"nothing judged against {cmp.baseline}: {said}", evidence)
    return _Outcome(True, f"no regression vs {cmp.baseline}: {said}", evidence)


def _job_models(inp: _Inputs) -> dict[int, tuple[str, int]]:
    """job -> (its GPU model, or "mixed"; the number of nodes it spans)."""
    models = {n["node"]: gpu_label(n) for n in inp.nodes}
    nodes: dict[int, set[str]] = defaultdict(set)
    for r in inp.rows:
        nodes[r["job"]].add(r["node"])
    out = {}
    for job, names in nodes.items():
        kinds = {models.get(n, "unknown") for n in names}
        out[job] = (kinds.pop() if len(kinds) == 1 else "mixed", len(names))
    return out


def busbw_rule_for(
    rules: Iterable[BusbwMinimum], model: str, collective: str, world: int, nodes: int
) -> BusbwMinimum | None:
    for rule in rules:
        if (
            re.search(rule.gpu_model, model, re.IGNORECASE)
            and rule.collective == collective
            and rule.world_size in (None, world)
            and rule.nodes in (None, nodes)
        ):
            return rule
    return None


def _busbw(inp: _Inputs, cfg: BusbwGate) -> _Outcome:
    rules = [*cfg.minimums, *(BUSBW_DEFAULTS if cfg.use_defaults else ())]
    jobs = _job_models(inp)
    # (job, collective, op, dtype) -> size -> the ranks' rows; judged at the slowest rank,
    # as nccl-tests reports the slowest rank's time.
    series: dict[tuple, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in inp.rows:  # NOTE: one rank moves nothing over a bus: busbw is 0 by definition
        if r["check"] == "bandwidth" and r["busbw_gbps"] is not None and r["world_size"] > 1:
            series[(r["job"], r["collective"], r["op"], r["dtype"])][r["size_bytes"]].append(r)
    evidence, gaps, used = [], [], set()
    for (job, coll, _op, _dtype), by_size in sorted(series.items(), key=str):
        model, nnodes = jobs[job]
        world = next(iter(by_size.values()))[0]["world_size"]
        rule = busbw_rule_for(rules, model, coll, world, nnodes)
        if rule is None:
            gaps.append(f"{coll} n={world} on {model} ({nnodes} node(s)): no minimum declared")
            continue
        used.add(id(rule))
        sizes = [s for s in by_size if s >= rule.min_size]
        if not sizes:
            top = human_bytes(max(by_size))
            gaps.append(f"{coll} n={world} on {model}: largest size {top} is below the "
                        f"bandwidth-bound {human_bytes(int(rule.min_size))}")  # fmt: skip
            continue
        slowest = min(by_size[max(sizes)], key=lambda r: r["busbw_gbps"])
        need = rule.min_busbw_gbps * cfg.fraction
        ok = slowest["busbw_gbps"] >= need
        text = (f"{_ident(slowest)} on {model}: busbw {slowest['busbw_gbps']:.4g} GB/s "
                f"(slowest: {_where(slowest)}) {'>=' if ok else '<'} {need:.4g} GB/s"
                f"{f' [{rule.source}]' if rule.source else ''}")  # fmt: skip
        evidence.append(_evidence(slowest, ok, text, value=slowest["busbw_gbps"], expected=need,
                                  unit="GB/s"))  # fmt: skip
    run_models = {gpu_label(n) for n in inp.nodes}
    for rule in cfg.minimums:  # a declared minimum for this hardware that nothing measured
        if id(rule) not in used and any(re.search(rule.gpu_model, m, re.I) for m in run_models):
            text = f"{rule.collective} on {rule.gpu_model}: declared minimum, not measured"
            evidence.append(Evidence(ok=False, text=text, collective=rule.collective))
    failing = [e for e in evidence if not e.ok]
    if failing:
        return _Outcome(False, f"{len(failing)} of {len(evidence)} below their minimum", evidence)
    if not evidence:
        why = "; ".join(gaps[:6]) or "no bandwidth rows in this run"
        return _Outcome(None, f"no bandwidth-bound measurement with a minimum: {why}", [])
    return _Outcome(True, f"{_n(len(evidence), 'measurement')} at or above the minimum", evidence)


def _scaling(inp: _Inputs, cfg: ScalingGate) -> _Outcome:
    points: dict[str, list[ScalingPoint]] = defaultdict(list)
    for p in scaling_points(inp.rows):
        points[p.step].append(p)
    if not points:
        return _Outcome(None, "no ddp_scaling throughput rows in this run", [])
    evidence, failing, gaps = [], [], []
    for step, pts in sorted(points.items()):
        top = pts[-1]
        for p in pts:
            eff = "n/a" if p.efficiency is None else f"{p.efficiency:.2f}"
            judged = p is top and p.efficiency is not None and p.world_size > 1
            ok = not judged or p.efficiency >= cfg.min_efficiency
            text = f"{step} n={p.world_size}: {p.throughput:.4g} samples/s, efficiency {eff}"
            if judged:
                text += f" ({'>=' if ok else '<'} {cfg.min_efficiency:g} at the largest world size)"
            evidence.append(Evidence(ok=ok, text=text, check="ddp_scaling", step=step,
                                     world_size=p.world_size, value=p.efficiency,
                                     expected=cfg.min_efficiency if judged else None))  # fmt: skip
            if not ok:
                failing.append(text)
        if top.efficiency is None:
            gaps.append(f"{step}: no world-size-1 job, so no efficiency")
        elif top.world_size == 1:
            gaps.append(f"{step}: only world size 1 was measured")
    if failing:
        return _Outcome(False, "; ".join(failing), evidence)
    if gaps:
        return _Outcome(None, "; ".join(gaps), evidence)
    return _Outcome(
        True, f"efficiency at the largest world size >= {cfg.min_efficiency:g}", evidence
    )


def _health(inp: _Inputs, cfg: HealthGate) -> _Outcome:
    evidence = []
    for s in inp.record.summary.get("steps", []):
        for c in s.get("culprits") or []:
            dev = f" ({c['device_id']})" if c.get("device_id") else ""
            text = f"{c['reason']}: rank {c['rank']} on {c['node']}{dev} in step {s['step']} (n={s['world_size']}): {c['detail']}"
            evidence.append(Evidence(ok=False, text=text, check=s["check"], step=s["step"],
                                     world_size=s["world_size"], rank=c["rank"], node=c["node"],
                                     device_id=c.get("device_id")))  # fmt: skip
    bad = {Status.FAIL.value, *([Status.WARN.value] if cfg.fail_on_warn else [])}
    for r in inp.rows:
        if r["metric"] == "step_outcome":  # a culprit's own row: named above from the summary
            continue
        if r["check"] == "straggler" and r["status"] == Status.FAIL:
            evidence.append(
                _evidence(r, False, r["message"], value=r["value"], unit="last fraction")
            )
        elif r["check"] == "health" and r["status"] in bad:
            text = f"unhealthy: {_where(r)}: {r['metric']}: {r['message']}"
            evidence.append(_evidence(r, False, text))
    ran = {r["check"] for r in inp.rows if r.get("metric") != "step_outcome"}
    missing = [c for c in cfg.checks if c not in ran]
    if evidence:
        return _Outcome(False, f"{_n(len(evidence), 'problem')}: " + _reasons(evidence), evidence)
    if missing:
        return _Outcome(None, f"no {', '.join(missing)} step ran in this run", [])
    steps = inp.record.summary.get("steps", [])
    ok = [Evidence(ok=True, text=f"{_n(len(steps), 'step')}: no hang, crash or late rank")]
    for check in cfg.checks:
        n = sum(1 for r in inp.rows if r["check"] == check)
        ok.append(Evidence(ok=True, text=f"{check}: {n} rows, none failing", check=check))
    return _Outcome(True, "no straggler, hang, crash or unhealthy node", ok)


def _reasons(evidence: list[Evidence]) -> str:
    kinds = Counter(e.text.split(":", 1)[0] for e in evidence)
    return ", ".join(f"{n} {k}" for k, n in kinds.most_common())


def _microbench(inp: _Inputs, cfg: MicrobenchGate) -> _Outcome:
    rows = [r for r in inp.rows if r["check"] == "microbench"]
    judged = [r for r in rows if (r["details"] or {}).get("expectation") and r["value"] is not None]
    evidence = []
    for r in judged:
        exp = r["details"]["expectation"]
        peak = exp["peak"]
        need = cfg.min_fraction * peak if cfg.min_fraction is not None else exp["pass_at"]
        ok = r["value"] >= need
        text = (f"{r['metric']} {r.get('dtype') or ''} on {_where(r)}: {r['value']:.4g} {r['unit']} "
                f"= {r['value'] / peak:.0%} of {peak:g} ({'>=' if ok else '<'} {need / peak:.0%})")  # fmt: skip
        evidence.append(_evidence(r, ok, text, value=r["value"], expected=need, unit=r["unit"]))
    failing = [e for e in evidence if not e.ok]
    if failing:
        return _Outcome(
            False, f"{len(failing)} of {len(evidence)} below their expected fraction", evidence
        )
    if not evidence:
        names = sorted({(r["details"] or {}).get("device_name") or r["device"] for r in rows})
        why = f"no expectations for {', '.join(names)}" if rows else "no microbench step ran"
        return _Outcome(None, f"nothing judged against a spec sheet: {why}", [])
    return _Outcome(
        True, f"{_n(len(evidence), 'micro-benchmark')} at or above the expected fraction", evidence
    )


_EVALUATORS: dict[GateName, Callable[[_Inputs, Any], _Outcome]] = {
    GateName.COMPLETED: _completed,
    GateName.CORRECTNESS: _correctness,
    GateName.REGRESSION: _regression,
    GateName.BUSBW: _busbw,
    GateName.SCALING: _scaling,
    GateName.HEALTH: _health,
    GateName.MICROBENCH: _microbench,
}

_REQUIRES: dict[GateName, Callable[[Any], str]] = {
    GateName.COMPLETED: lambda _: "the run finished (not cancelled, cut off or errored) and "
    "judged something against an expectation",
    GateName.CORRECTNESS: lambda c: f"every {', '.join(c.checks)} row passes; no wrong element in any row",
    GateName.REGRESSION: lambda c: "every measurement shown unchanged (or better) vs the baseline, "
    "beyond the thresholds: regressions, unproven (noisy) changes and missing ones fail"
    + (f" ({c.threshold_pct:g}%)" if c.threshold_pct else " (the suite's compare section)"),
    GateName.BUSBW: lambda c: "busbw at the largest bandwidth-bound size >= the GPU model's minimum"
    + (f" x {c.fraction:g}" if c.fraction != 1 else ""),
    GateName.SCALING: lambda c: f"DDP weak-scaling efficiency >= {c.min_efficiency:g} at the largest world size",
    GateName.HEALTH: lambda c: "no straggler, hang, crash or unhealthy node"
    + (f"; {', '.join(c.checks)} must have run" if c.checks else ""),
    GateName.MICROBENCH: lambda c: "every judged micro-benchmark at its expected fraction"
    + (f" ({c.min_fraction:.0%} of peak)" if c.min_fraction else " (the check's pass fraction)"),
}  # fmt: skip


def _judge(gate: GateName, cfg: Any, inp: _Inputs, waiver: Waiver | None) -> GateResult:
    out = _EVALUATORS[gate](inp, cfg)
    status = GateStatus.PASS if out.ok else GateStatus.FAIL
    summary = out.summary if out.ok is not None else f"no evidence: {out.summary}"
    if waiver is not None and status == GateStatus.FAIL:
        status = GateStatus.WAIVED
    evidence = sorted(out.evidence, key=lambda e: e.ok)  # failing first
    return GateResult(
        gate=gate,
        status=status,
        requires=_REQUIRES[gate](cfg),
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


def build_signoff(
    store: Store,
    run_id: str,
    *,
    baseline: str | None = None,
    waivers: Iterable[Waiver] = (),
) -> Signoff:
    """Judge a stored run against its suite's gates (ValueError for bad input: unknown run,
    unknown baseline named here, an invalid stored gates section)."""
    record = store.run(run_id)
    declared = gates_from_suite_json(record.suite_json)
    gates = declared or DEFAULT_GATES
    if baseline is not None:
        Baselines(store).get(baseline)  # unknown -> bad input naming the known ones
        if gates.regression is None:  # a named baseline is a gate to pass
            gates = gates.model_copy(update={"regression": RegressionGate(baseline=baseline)})
    base = baseline or (gates.regression.baseline if gates.regression else None)
    comparison, problem = None, None
    if gates.regression is not None:
        comparison, problem = _compare(store, base, run_id, gates.regression)
    inp = _Inputs(
        record, _rows(store, run_id), store.nodes([run_id]).to_pylist(), comparison, problem
    )
    by_gate = {w.gate: w for w in gates.waivers} | {w.gate: w for w in waivers}
    names = gates.declared()
    results = tuple(_judge(g, getattr(gates, g.value, None), inp, by_gate.get(g)) for g in names)
    notes = _notes(declared, by_gate, names, results)
    verdict = (
        GateStatus.FAIL if any(r.status == GateStatus.FAIL for r in results) else GateStatus.PASS
    )
    return Signoff(
        run=record,
        verdict=verdict,
        gates=results,
        baseline=base,
        gates_declared=declared is not None,
        views=build_views(store, inp.record, inp.rows, inp.nodes, comparison, base),
        comparison=comparison,
        parquet_paths=parquet_paths(store, run_id),
        notes=notes,
    )


def _notes(
    declared: Gates | None,
    waivers: dict[GateName, Waiver],
    names: list[GateName],
    results: tuple[GateResult, ...],
) -> tuple[str, ...]:
    notes = []
    if declared is None:
        notes.append("the suite declares no gates: the default gates were applied "
                     "(completed, correctness, health; regression when a baseline is named)")  # fmt: skip
    for gate, w in waivers.items():
        if gate not in names:
            notes.append(f"waiver for {gate.value} by {w.by} ignored: that gate is not evaluated")
    for r in results:
        if r.waiver and r.status == GateStatus.PASS:
            notes.append(
                f"waiver for {r.gate.value} by {r.waiver.by} was not needed: the gate passed"
            )
    return tuple(notes)
