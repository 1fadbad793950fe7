"""The `gates:` section of a suite: what a release sign-off requires, numbers not code.

```yaml
gates:
  correctness: {}                         # every correctness check passes, no wrong element
  regression: {baseline: rocm6.1}         # no regression vs the baseline beyond the thresholds
  busbw:                                  # minimum busbw at bandwidth-bound sizes per GPU model
    minimums:
      - {gpu_model: "MI300X", collective: all_gather, world_size: 8, min_busbw_gbps: 280}
  scaling: {min_efficiency: 0.85}         # DDP weak-scaling efficiency at the largest world size
  health: {checks: [straggler, health]}   # no straggler, hang, crash or unhealthy node
  microbench: {}                          # per-GPU micro-benchmarks at their expected fraction
  waivers:
    - {gate: busbw, by: "jane@example.com", reason: "new fabric firmware, tracked in FAB-12"}
```

A gate that is not declared is not evaluated. A declared gate that finds no evidence in
the run (a CPU run has no GPU model, a suite without a `microbench` step) FAILS, saying
so: a sign-off never passes on evidence it does not have. Waive it to accept that.
The gates come from one registry, `GATES`: the sign-off's own (completed, sweep,
regression) and the one each check plug-in declares (`fleetval/checks/<name>/__init__.py`,
`GATE`), in report order. A fleet sweep's run always gets the `sweep` gate (its verdict
flagged nothing). Pure pydantic: reading a stored run's gates needs neither torch nor Ray.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    create_model,
    model_validator,
)

from fleetval.checks import check_gates
from fleetval.checks.spec import Evidence, Gate, GateInputs, Outcome, plural
from fleetval.fleet.verdict import FleetVerdict, NodeVerdict
from fleetval.status import completed, signoff_completed
from fleetval.vocab import Verdict

if TYPE_CHECKING:  # NOTE: compare imports pyarrow; a suite's `gates:` model needs none
    from fleetval.analysis.compare import Comparison


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CompletedGate(_Model):
    """The run finished: not cancelled, cut off or crashed in the driver (always evaluated)."""


class RegressionGate(_Model):
    """No regression verdict against the baseline (`fleetval report --baseline` overrides it)."""

    baseline: str | None = None
    threshold_pct: PositiveFloat | None = None  # replaces the suite's `compare:` thresholds


def _completed(inp: GateInputs, _: object) -> Outcome:
    rec = inp.record
    steps = rec.summary.get("steps", [])
    cut = [s for s in steps if s.get("deadline")]  # ran out of time: nothing blamed, not done
    if signoff_completed(rec.status) and not cut:  # what it found is the other gates' to judge
        text = f"run finished with {len(steps)} steps (what they found: status {rec.status})"
        return Outcome(True, text, [Evidence(ok=True, text=text)])
    if cut:
        evidence = [Evidence(ok=False, text=f"step {s['step']} (n={s['world_size']}): "
                             f"{s['message']}", check=s["check"], step=s["step"],
                             world_size=s["world_size"]) for s in cut]  # fmt: skip
        return Outcome(False, f"{plural(len(cut), 'step')} cut off by its deadline", evidence)
    if completed(rec.status):  # it ran to the end, but judged nothing
        text = (f"run {rec.status}: no step judged anything against an expectation "
                f"({len(steps)} steps); waive the gate to sign off on recorded figures")  # fmt: skip
        return Outcome(False, text, [Evidence(ok=False, text=text)])
    text = f"run {rec.status}: {rec.message or 'no message'}; {len(steps)} steps recorded"
    return Outcome(False, text, [Evidence(ok=False, text=text)])


class SweepGate(_Model):
    """The fleet sweep judged every node healthy and flagged no node, link or trunk and
    nothing about the fleet as a whole (added to the gates of every sweep run: a report
    never signs off a sweep that flagged, nor one that left nodes unjudged)."""


def is_sweep(summary: Mapping[str, object]) -> bool:
    """Whether a run is a fleet sweep: its summary holds the verdict (`fleetval.run.sweep`)."""
    return "sweep" in summary


def _node_evidence(n: NodeVerdict) -> Evidence:
    return Evidence(ok=False, text=f"{n.state.value} {n.node}: {n.reason} (confidence {n.confidence})",
                    node=n.node, value=n.pair_gbps or n.alone_gbps, unit="GB/s")  # fmt: skip


def _sweep(inp: GateInputs, _: object) -> Outcome:
    if not is_sweep(inp.record.summary):
        return Outcome(None, "the run is not a fleet sweep: no sweep verdict in its summary", [])
    v = FleetVerdict.from_dict(inp.record.summary["sweep"])
    evidence = [_node_evidence(n) for n in v.drain]
    evidence += [
        Evidence(ok=False, text=f"slow link {' <-> '.join(link.nodes)}: {link.evidence[0]}"
                 if link.evidence else f"slow link {' <-> '.join(link.nodes)}")
        for link in v.bad_links
    ]  # fmt: skip
    evidence += [
        Evidence(ok=False, text=f"slow trunk {t.level} {' <-> '.join(t.groups)}")
        for t in v.bad_trunks
    ]
    evidence += [Evidence(ok=False, text=f) for f in v.findings]
    if evidence:
        said = [plural(len(v.drain), "node") + " drained"] if v.drain else []
        said += [plural(len(v.bad_links), "slow link")] if v.bad_links else []
        said += [plural(len(v.bad_trunks), "slow trunk")] if v.bad_trunks else []
        said += [plural(len(v.findings), "fleet finding")] if v.findings else []
        return Outcome(False, f"the sweep flagged: {', '.join(said)}", evidence)
    if not v.nodes:
        return Outcome(None, "the sweep judged no node", [])
    if v.unjudged or v.unproven:  # NOTE: nothing flagged, but not all judged: not a pass
        open_ = [plural(len(v.unjudged), "node")] if v.unjudged else []
        open_ += [f"{len(v.unproven)} estimated slow link(s) or trunk(s)"] if v.unproven else []
        unproven = [
            Evidence(ok=False, text=f"estimated slow, not proven: {x.evidence[0]}")
            for x in v.unproven
        ]
        return Outcome(
            None,
            f"{' and '.join(open_)} not judged (nothing flagged)",
            [_node_evidence(n) for n in v.unjudged] + unproven,
        )
    text = f"{plural(len(v.nodes), 'node')} healthy in {v.rounds} rounds ({v.jobs} jobs)"
    return Outcome(True, text, [Evidence(ok=True, text=text)])


@dataclass(frozen=True)
class RunInputs(GateInputs):
    """A check gate's inputs and the comparison against the baseline the regression gate judges."""

    comparison: Comparison | None
    compare_problem: str | None


# NOTE: a sign-off is `compare --strict`: a change beyond the threshold that the runs cannot
# prove (noisy, e.g. one run a side) or a measurement the candidate lacks (missing) blocks it
# until more runs settle it or someone waives it. Failed rows belong to the correctness gate,
# late ranks to the health gate.
SIGNOFF_FAILS = (Verdict.REGRESSION, Verdict.NOISY, Verdict.MISSING)


def _regression(inp: RunInputs, cfg: RegressionGate) -> Outcome:
    cmp = inp.comparison
    if cmp is None:
        return Outcome(None, inp.compare_problem or "no baseline named", [])
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
        return Outcome(
            False,
            f"{plural(len(evidence), 'measurement')} not shown unchanged vs {cmp.baseline}: "
            f"{said}{_noisy_said(cmp)}",
            evidence,
        )
    if not judged:
        return Outcome(None, f"nothing judged against {cmp.baseline}: {said}", evidence)
    return Outcome(True, f"no regression vs {cmp.baseline}: {said}", evidence)


def _noisy_said(cmp: Comparison) -> str:
    """Why noisy fails here while `compare` (not --strict) passes it, and what settles it."""
    if not cmp.counts().get(Verdict.NOISY):
        return ""
    few = (
        f"; with {plural(len(cmp.baseline_runs), 'baseline run')} no change can be shown "
        "unchanged: a baseline of 5+ runs gives verdicts"
        if len(cmp.baseline_runs) < 2
        else ""
    )
    return f" (noisy fails a sign-off, as `compare --strict`: `compare` alone passes it{few})"


COMPLETED = Gate(
    name="completed",
    config=CompletedGate,
    evaluate=_completed,
    requires=lambda _: (
        "the run finished (not cancelled, cut off or errored) and "
        "judged something against an expectation"
    ),
    order=0,
)
REGRESSION = Gate(
    name="regression",
    config=RegressionGate,
    evaluate=_regression,
    requires=lambda c: (
        "every measurement shown unchanged (or better) vs the baseline, "
        "beyond the thresholds: regressions, unproven (noisy) changes and missing ones fail"
        + (f" ({c.threshold_pct:g}%)" if c.threshold_pct else " (the suite's compare section)")
    ),
    order=20,
)
SWEEP = Gate(
    name="sweep",
    config=SweepGate,
    evaluate=_sweep,
    requires=lambda _: (
        "the fleet sweep named no node (suspect or drain), no slow link and "
        "no finding about the whole fleet"
    ),
    order=5,
)

# The one registry of gates, in the order a report lists them.
GATES: dict[str, Gate] = {
    g.name: g for g in sorted((COMPLETED, SWEEP, REGRESSION, *check_gates()), key=lambda g: g.order)
}
GateName = StrEnum("GateName", [(name.upper(), name) for name in GATES])  # type: ignore[misc]
GateName.__doc__ = "The gates a sign-off knows, in the order a report lists them."


class Waiver(_Model):
    """Accepts a gate's failure: who accepted it and why, shown with the gate."""

    gate: GateName
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class _GatesBase(_Model):
    waivers: list[Waiver] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_waiver_each(self) -> Self:
        named = [w.gate.value for w in self.waivers]
        dupes = sorted({g for g in named if named.count(g) > 1})
        if dupes:
            raise ValueError(f"waivers: one waiver per gate; repeated: {', '.join(dupes)}")
        return self

    def named_checks(self) -> dict[str, list[str]]:
        """Check names the gates refer to, by field path (the suite validates them)."""
        out = {}
        for name in GATES:
            cfg = getattr(self, name, None)
            if cfg is not None and isinstance(getattr(cfg, "checks", None), list):
                out[f"{name}.checks"] = cfg.checks
        return out

    def declared(self) -> list[GateName]:
        return [GateName(n) for n in GATES if n == COMPLETED.name or getattr(self, n)]


# Sign-off gates of a suite (see the module docstring): one optional field per registered gate.
Gates = create_model(
    "Gates",
    __base__=_GatesBase,
    __doc__="Sign-off gates of a suite; see the fleetval.signoff.gates docstring.",
    **{n: (g.config | None, None) for n, g in GATES.items() if n != COMPLETED.name},
)  # type: ignore[call-overload]


# What a run whose suite declares no gates is held to: it finished, its correctness checks
# passed, nothing hung or crashed (a regression gate joins when a baseline is named).
DEFAULT_GATES = Gates(correctness={}, health={"checks": []})
# A fleet sweep's: it finished, its verdict flagged nothing, nothing hung or crashed.
# NOTE: no correctness gate: a sweep measures bandwidth, and a gate with no evidence fails.
SWEEP_DEFAULT_GATES = Gates(sweep={}, health={"checks": []})


def gates_from_suite_json(suite_json: str) -> Gates | None:
    """The stored suite's `gates:` section, None when it declares none.

    NOTE: suite_json is the validated suite stored with the run; an invalid section can only
    come from a store written by another tool, so it is bad input, not a crash.
    """
    if not suite_json:
        return None
    section: Any = json.loads(suite_json).get("gates")
    if not section:
        return None
    try:
        return Gates.model_validate(section)
    except ValidationError as err:
        raise ValueError(f"the run's suite has an invalid gates section: {err}") from err


def parse_waiver(text: str) -> Waiver:
    """`GATE:WHO:REASON` from the command line."""
    gate, _, rest = text.partition(":")
    by, _, reason = rest.partition(":")
    known = ", ".join(g.value for g in GateName)
    if gate.strip() not in {g.value for g in GateName}:
        raise ValueError(f"--waive {text!r}: unknown gate {gate.strip()!r}; known: {known}")
    if not by.strip() or not reason.strip():
        raise ValueError(f"--waive {text!r}: expected GATE:WHO:REASON, e.g. busbw:jane:FAB-12")
    return Waiver(gate=GateName(gate.strip()), by=by.strip(), reason=reason.strip())
