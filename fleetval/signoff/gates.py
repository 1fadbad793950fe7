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
Pure pydantic: reading a stored run's gates needs neither torch nor Ray.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)


class GateName(StrEnum):
    """The gates a sign-off knows, in the order a report lists them."""

    COMPLETED = "completed"  # the run finished: not cancelled, cut off or crashed in the driver
    CORRECTNESS = "correctness"  # every correctness check passes, no wrong element anywhere
    REGRESSION = "regression"  # no regression against the named baseline beyond thresholds
    BUSBW = "busbw"  # minimum busbw per collective at bandwidth-bound sizes, per GPU model
    SCALING = "scaling"  # minimum weak-scaling efficiency at the largest world size
    HEALTH = "health"  # no straggler, hang, crash or unhealthy node
    MICROBENCH = "microbench"  # per-GPU micro-benchmarks at or above their expected fraction


class GateStatus(StrEnum):
    """Outcome of one gate, and of the whole sign-off (PASS or FAIL)."""

    PASS = "PASS"
    FAIL = "FAIL"  # also when the gate found no evidence: never a silent PASS
    WAIVED = "WAIVED"  # failed, but accepted by a named person for a stated reason


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Waiver(_Model):
    """Accepts a gate's failure: who accepted it and why, shown with the gate."""

    gate: GateName
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class CorrectnessGate(_Model):
    """Every correctness row passes and no row anywhere has a wrong element."""

    checks: list[str] = Field(default_factory=lambda: ["collectives", "ddp_health"])


class RegressionGate(_Model):
    """No regression verdict against the baseline (`fleetval report --baseline` overrides it)."""

    baseline: str | None = None
    threshold_pct: PositiveFloat | None = None  # replaces the suite's `compare:` thresholds


class BusbwMinimum(_Model):
    """busbw at least `min_busbw_gbps` for this collective on this GPU model."""

    gpu_model: str = Field(min_length=1)  # regex searched in the node's GPU model; "cpu": no GPU
    collective: str = Field(min_length=1)
    world_size: PositiveInt | None = None  # None: any world size
    nodes: PositiveInt | None = None  # nodes the job spans (1: one node's fabric); None: any
    min_busbw_gbps: PositiveFloat
    min_size: ByteSize = ByteSize(1 << 30)  # sizes at or above this are bandwidth-bound
    source: str = ""  # where the figure comes from


class BusbwGate(_Model):
    """Minimum busbw at the largest measured bandwidth-bound size; defaults per GPU model."""

    minimums: list[BusbwMinimum] = Field(default_factory=list)  # checked before the defaults
    use_defaults: bool = True  # also the public per-SKU figures (fleetval.signoff.evaluate.BUSBW_DEFAULTS)
    fraction: float = Field(default=1.0, gt=0, le=2)  # scales every minimum


class ScalingGate(_Model):
    """DDP weak-scaling efficiency T_n / (n x T_1) at the largest world size."""

    min_efficiency: float = Field(default=0.8, gt=0, le=1.5)


class HealthGate(_Model):
    """No hang, crash, error or late rank; no straggler; no failing health finding."""

    # Checks that must have run for the gate to have evidence; [] accepts hang and crash
    # detection alone.
    checks: list[str] = Field(default_factory=lambda: ["straggler"])
    fail_on_warn: bool = False  # also fail on WARN health findings


class MicrobenchGate(_Model):
    """Every judged micro-benchmark at or above its expected fraction of the spec sheet."""

    min_fraction: float | None = Field(default=None, gt=0, le=1)  # default: the check's own


class Gates(_Model):
    """Sign-off gates of a suite; see the module docstring."""

    correctness: CorrectnessGate | None = None
    regression: RegressionGate | None = None
    busbw: BusbwGate | None = None
    scaling: ScalingGate | None = None
    health: HealthGate | None = None
    microbench: MicrobenchGate | None = None
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
        if self.correctness:
            out["correctness.checks"] = self.correctness.checks
        if self.health:
            out["health.checks"] = self.health.checks
        return out

    def declared(self) -> list[GateName]:
        return [g for g in GateName if g == GateName.COMPLETED or getattr(self, g.value)]


# What a run whose suite declares no gates is held to: it finished, its correctness checks
# passed, nothing hung or crashed (a regression gate joins when a baseline is named).
DEFAULT_GATES = Gates(correctness=CorrectnessGate(), health=HealthGate(checks=[]))


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
