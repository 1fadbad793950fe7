"""Per-GPU micro-benchmarks (GEMM TFLOP/s by dtype, device memory bandwidth, host<->device
bandwidth) against the GPU model's spec sheet.

Sign-off: the `microbench` gate (every judged micro-benchmark at its expected fraction)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from fleetval.checks.microbench.params import MicrobenchParams
from fleetval.checks.spec import (
    CheckPlugin,
    FigureContext,
    Gate,
    GateInputs,
    Outcome,
    row_evidence,
    tally,
    where,
)
from fleetval.metrics import Direction, MetricDecl
from fleetval.store.records import StoredRow
from fleetval.text import human_bytes


class MicrobenchGate(BaseModel):
    """Every judged micro-benchmark at or above its expected fraction of the spec sheet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_fraction: float | None = Field(default=None, gt=0, le=1)  # default: the check's own


def _microbench(inp: GateInputs, cfg: MicrobenchGate) -> Outcome:
    rows = [r for r in inp.rows if r["check"] == "microbench"]
    judged = [r for r in rows if (r["details"] or {}).get("expectation") and r["value"] is not None]
    evidence = []
    for r in judged:
        exp = r["details"]["expectation"]
        peak = exp["peak"]
        need = cfg.min_fraction * peak if cfg.min_fraction is not None else exp["pass_at"]
        ok = r["value"] >= need
        text = (f"{r['metric']} {r.get('dtype') or ''} on {where(r)}: {r['value']:.4g} {r['unit']} "
                f"= {r['value'] / peak:.0%} of {peak:g} ({'>=' if ok else '<'} {need / peak:.0%})")  # fmt: skip
        evidence.append(row_evidence(r, ok, text, value=r["value"], expected=need, unit=r["unit"]))
    names = sorted({(r["details"] or {}).get("device_name") or r["device"] for r in rows})
    why = f"no expectations for {', '.join(names)}" if rows else "no microbench step ran"
    return tally(evidence, noun="micro-benchmark", missed="below their expected fraction",
                 met="at or above the expected fraction",
                 none=f"nothing judged against a spec sheet: {why}")  # fmt: skip


GATE = Gate(
    name="microbench",
    config=MicrobenchGate,
    evaluate=_microbench,
    requires=lambda c: (
        "every judged micro-benchmark at its expected fraction"
        + (f" ({c.min_fraction:.0%} of peak)" if c.min_fraction else " (the check's pass fraction)")
    ),
    order=60,
)


def _own(name: str, unit: str) -> MetricDecl:  # every rank measures its own GPU: independent
    return MetricDecl(name=name, unit=unit, direction=Direction.HIGHER, shared=False)


def _figures(rows: Sequence[StoredRow], _: FigureContext) -> list[str]:
    """Per metric, dtype and size: the slowest rank against its expectation, if any."""
    groups: dict[tuple, list[StoredRow]] = defaultdict(list)
    for r in rows:
        if r["value"] is not None:
            groups[(r["metric"], r["dtype"] or "", r["size_bytes"] or 0)].append(r)
    out = []
    for (metric, dtype, size), got in sorted(groups.items(), key=str):
        worst = min(got, key=lambda r: r["value"])
        exp = worst["details"].get("expectation")
        device = worst["details"].get("device_name") or "this device"
        n = worst["details"].get("n")
        shape = f"{n}x{n}" if n else human_bytes(size) if size else ""
        what = " ".join(w for w in (metric, dtype, shape) if w)
        head = f"{what}: {worst['value']:.4g} {worst['unit']} (slowest: rank {worst['rank']})"
        if exp is None:
            out.append(f"{head}, recorded only: no expectation for {device!r}")
        else:
            verdict = worst["status"]
            out.append(f"{head} vs pass at {exp['pass_at']:.4g} (peak {exp['peak']:g}): {verdict}")
    return out


PLUGIN = CheckPlugin(
    name="microbench",
    params=MicrobenchParams,
    doc="This rank's GPU reaches its model's expected GEMM, memory and host-link throughput.",
    metrics=(
        _own("gemm_tflops", "TFLOP/s"),
        _own("memory_bw_gbps", "GB/s"),
        _own("h2d_gbps", "GB/s"),
        _own("d2h_gbps", "GB/s"),
    ),
    gate=GATE,
    figures=_figures,
)
