"""The drain list in the forms operators paste: kubectl, scontrol, Ray labels, JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum

from fleetval.fleet.verdict import FleetVerdict, NodeVerdict

LABEL = "fleetval/verdict"  # the label and taint key every form uses


class DrainForm(StrEnum):
    """The drain forms, named once: `--drain-format`'s choices, the report's pasted lists."""

    KUBECTL = "kubectl"
    SLURM = "slurm"  # scontrol
    RAY = "ray"  # node labels
    JSON = "json"


def _reason(v: NodeVerdict, run_id: str) -> str:
    """One line, safe inside double quotes and as a label value's explanation."""
    text = f"fleetval: {v.reason} (run {run_id})" if run_id else f"fleetval: {v.reason}"
    return text.replace('"', "'").replace("\n", " ")


def kubectl(verdict: FleetVerdict, run_id: str = "") -> list[str]:
    out = []
    for v in verdict.drain:
        out += [
            f"# {v.node}: {_reason(v, run_id)}",
            f"kubectl cordon {v.node}",
            f"kubectl taint nodes {v.node} {LABEL}=drain:NoSchedule --overwrite",
            f"kubectl label nodes {v.node} {LABEL}=drain --overwrite",
        ]
    return out


def slurm(verdict: FleetVerdict, run_id: str = "") -> list[str]:
    return [
        f'scontrol update nodename={v.node} state=drain reason="{_reason(v, run_id)}"'
        for v in verdict.drain
    ]


def ray(verdict: FleetVerdict, run_id: str = "") -> list[str]:
    """Ray node labels are set when a node starts: the label to start it with, and the
    selector that keeps work off the drained nodes meanwhile."""
    if not verdict.drain:
        return []
    names = ",".join(v.node for v in verdict.drain)
    out = [f"# {v.node}: {_reason(v, run_id)}" for v in verdict.drain]
    out.append(f'# restart each with: ray start ... --labels=\'{{"{LABEL}": "drain"}}\'')
    out.append(json.dumps({"label_selector": {"fleetval/node": f"!in({names})"}}))
    return out


def as_json(verdict: FleetVerdict, run_id: str = "") -> list[str]:
    doc = {
        "run_id": run_id,
        "breaker": verdict.breaker,
        "drain_limit": verdict.drain_limit,
        "drain": [
            {
                "node": v.node,
                "reason": _reason(v, run_id),
                "confidence": v.confidence,
                "evidence": list(v.evidence),
                "hardware": {"finding": v.hardware, "action": v.hardware_action}
                if v.hardware
                else None,
            }
            for v in verdict.drain
        ],
    }
    return [json.dumps(doc, indent=2)]


FORMATS: dict[DrainForm, Callable[[FleetVerdict, str], list[str]]] = {
    DrainForm.KUBECTL: kubectl,
    DrainForm.SLURM: slurm,
    DrainForm.RAY: ray,
    DrainForm.JSON: as_json,
}


def drain_lines(verdict: FleetVerdict, fmt: str, run_id: str = "") -> list[str]:
    if fmt not in FORMATS:
        raise ValueError(f"--drain-format: {fmt!r} is not one of {', '.join(FORMATS)}")
    return FORMATS[fmt](verdict, run_id)
