"""Exact correctness of every collective, nccl-tests style: each element of each result is
known from (seed, rank, index), so a wrong element is counted and traced to its sender.

Sign-off: the `correctness` gate (every correctness row passes, no wrong element anywhere)."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from fleetval.checks.collectives.params import CollectivesParams
from fleetval.checks.spec import (
    CheckPlugin,
    Evidence,
    Gate,
    GateInputs,
    Outcome,
    ident,
    plural,
    row_evidence,
    where,
)
from fleetval.metrics import CORRECT
from fleetval.status import judged
from fleetval.vocab import Status


class CorrectnessGate(BaseModel):
    """Every correctness row passes and no row anywhere has a wrong element."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checks: list[str] = Field(default_factory=lambda: ["collectives", "ddp_health"])


def _correctness(inp: GateInputs, cfg: CorrectnessGate) -> Outcome:
    # NOTE: only judged rows count: a skipped combination (not on this backend) shows nothing
    ran = [r for r in inp.rows if r["check"] in cfg.checks]
    judged_rows = [r for r in ran if judged(r["status"])]
    bad = [
        r
        for r in inp.rows
        if (r["wrong"] or 0) > 0 or (r["check"] in cfg.checks and r["status"] == Status.FAIL)
    ]
    evidence = [
        row_evidence(
            r,
            False,
            f"{r['check']} {ident(r)}: {where(r)}: {r['message']}".strip(),
            value=float(r["wrong"] or 0),
            unit="wrong elements",
        )
        for r in bad
    ]
    if bad:
        steps = sorted({r["step"] for r in bad})
        return Outcome(False, f"{plural(len(bad), 'failing row')} in {', '.join(steps)}", evidence)
    if not judged_rows:
        why = f"{plural(len(ran), 'row')}, none judged" if ran else "no rows"
        return Outcome(None, f"{why} of {', '.join(cfg.checks)} in this run", [])
    counts = Counter(
        (r["check"], r.get("collective") or r.get("metric") or "") for r in judged_rows
    )
    evidence = [
        Evidence(ok=True, text=f"{check} {what}: {n} rows pass", check=check, collective=what)
        for (check, what), n in sorted(counts.items())
    ]
    unjudged = len(ran) - len(judged_rows)
    rest = f"; {unjudged} not judged (skipped or recorded only)" if unjudged else ""
    return Outcome(
        True, f"{plural(len(judged_rows), 'correctness row')} pass, none wrong{rest}", evidence
    )


GATE = Gate(
    name="correctness",
    config=CorrectnessGate,
    evaluate=_correctness,
    requires=lambda c: f"every {', '.join(c.checks)} row passes; no wrong element in any row",
    order=10,
)

PLUGIN = CheckPlugin(
    name="collectives",
    params=CollectivesParams,
    doc="Every listed collective returns exactly the expected elements on every rank.",
    metrics=(CORRECT,),
    gate=GATE,
)
