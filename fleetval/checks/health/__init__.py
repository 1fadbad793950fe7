"""Health: is each node and rank set up the way fast, correct collectives need (devices,
GPU count, CPU affinity, NCCL/RCCL version and environment, transport and plugin actually
used, memory balance), and are its GPUs sound (ECC, row remapping, PCIe link, clock limits,
NVLink/XGMI, Xid and RAS events), with the action to take when not?

Sign-off: the `health` gate (no straggler, hang, crash, late rank or unhealthy node)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fleetval.checks.health.params import HealthParams
from fleetval.checks.spec import (
    CheckPlugin,
    Evidence,
    Gate,
    GateInputs,
    Outcome,
    ResultTable,
    plural,
    row_evidence,
    where,
)
from fleetval.store.schema import GPU_METRIC, NODE_HW_METRIC
from fleetval.vocab import CULPRIT_METRIC, Status


class HealthGate(BaseModel):
    """No hang, crash, error or late rank; no straggler; no failing health finding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Checks that must have run for the gate to have evidence; [] accepts hang and crash
    # detection alone.
    checks: list[str] = Field(default_factory=lambda: ["straggler"])
    fail_on_warn: bool = False  # also fail on WARN health findings


def _health(inp: GateInputs, cfg: HealthGate) -> Outcome:
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
        if r["metric"] == CULPRIT_METRIC:  # a culprit's own row: named above from the summary
            continue
        if r["check"] == "straggler" and r["status"] == Status.FAIL:
            evidence.append(
                row_evidence(r, False, r["message"], value=r["value"], unit="last fraction")
            )
        elif r["check"] == "health" and r["status"] in bad:
            text = f"unhealthy: {where(r)}: {r['metric']}: {r['message']}"
            evidence.append(row_evidence(r, False, text))
    ran = {r["check"] for r in inp.rows if r.get("metric") != CULPRIT_METRIC}
    missing = [c for c in cfg.checks if c not in ran]
    if evidence:
        return Outcome(
            False, f"{plural(len(evidence), 'problem')}: " + _reasons(evidence), evidence
        )
    if missing:
        return Outcome(None, f"no {', '.join(missing)} step ran in this run", [])
    steps = inp.record.summary.get("steps", [])
    ok = [Evidence(ok=True, text=f"{plural(len(steps), 'step')}: no hang, crash or late rank")]
    for check in cfg.checks:
        n = sum(1 for r in inp.rows if r["check"] == check)
        ok.append(Evidence(ok=True, text=f"{check}: {n} rows, none failing", check=check))
    return Outcome(True, "no straggler, hang, crash or unhealthy node", ok)


def _reasons(evidence: list[Evidence]) -> str:
    kinds = Counter(e.text.split(":", 1)[0] for e in evidence)
    return ", ".join(f"{n} {k}" for k, n in kinds.most_common())


GATE = Gate(
    name="health",
    config=HealthGate,
    evaluate=_health,
    requires=lambda c: (
        "no straggler, hang, crash or unhealthy node"
        + (f"; {', '.join(c.checks)} must have run" if c.checks else "")
    ),
    order=50,
)


def _tables(rows: Sequence[Mapping[str, Any]]) -> list[ResultTable]:
    """The GPU hardware each node's first rank read and judged, and each node's action."""
    gpus = [r for r in rows if r["metric"] == GPU_METRIC]
    nodes = [r for r in rows if r["metric"] == NODE_HW_METRIC]
    if not gpus and not nodes:
        return []
    return [
        ResultTable(
            "GPU hardware",
            ("node", "status", "GPU and findings (evidence -> action)"),
            tuple((r["node"], r["status"], r["message"]) for r in gpus + nodes),
        )
    ]


PLUGIN = CheckPlugin(
    name="health",
    params=HealthParams,
    doc="This rank's devices, CPU affinity, NCCL/RCCL set-up and memory are as the suite "
    "expects, and its node's GPUs show no hardware fault.",
    gate=GATE,
    incident="unhealthy",
    tables=_tables,
)
