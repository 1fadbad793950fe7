"""DDP on a synthetic MLP, two checks: `ddp_scaling` (weak-scaling throughput and what
communication costs it) and `ddp_health` (replicas identical, gradients equal to a
single process's, loss falling).

Sign-off: the `scaling` gate (weak-scaling efficiency T_n / (n x T_1) at the largest world
size). `show` prints the efficiency table of every ddp_scaling step."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from fleetval.checks.ddp.params import DdpHealthParams, DdpScalingParams
from fleetval.checks.spec import (
    CheckPlugin,
    Evidence,
    FigureContext,
    Gate,
    GateInputs,
    Outcome,
    ResultTable,
    worst_rows,
)
from fleetval.metrics import Direction, MetricDecl
from fleetval.status import measured
from fleetval.store.records import StoredRow
from fleetval.store.schema import Row


@dataclass(frozen=True)
class ScalingPoint:
    """One world size of a weak-scaling run."""

    world_size: int
    throughput: float  # samples/s of the whole job: mean per-rank throughput x world size
    # throughput / (world_size x world-size-1 throughput); None without a world-size-1 job
    efficiency: float | None
    ranks_reporting: int  # ranks whose throughput row was measured


def _records(rows: pa.Table | Iterable[Row | Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(rows, pa.Table):
        return rows.to_pylist()
    return [r.to_record() if isinstance(r, Row) else r for r in rows]


def scaling_efficiency(
    rows: pa.Table | Iterable[Row | Mapping[str, Any]], *, step: str | None = None
) -> list[ScalingPoint]:
    """Per world size, job throughput and weak-scaling efficiency T_n / (n x T_1), ascending.

    `rows` are one run's rows (Row objects, stored records or an Arrow table); only the
    measured (recorded, not failed) `throughput` rows of `ddp_scaling` are used. With several ddp_scaling steps in
    the rows, `step` picks one. Efficiency is None when the run had no world-size-1 job.
    """
    picked = [
        r
        for r in _records(rows)
        if r.get("check") == "ddp_scaling"
        and r.get("metric") == "throughput"
        and measured(r.get("status") or "")
        and r.get("value") is not None
    ]
    runs = sorted({r.get("run_id", "") for r in picked})
    if len(runs) > 1:
        raise ValueError(f"rows from {len(runs)} runs ({', '.join(runs)}); pass one run's rows")
    steps = sorted({r.get("step", "") for r in picked})
    if step is not None:
        picked = [r for r in picked if r.get("step") == step]
    elif len(steps) > 1:
        raise ValueError(
            f"rows from several ddp_scaling steps ({', '.join(steps)}); pick one with step="
        )
    by_world: dict[int, list[float]] = {}
    for r in picked:
        by_world.setdefault(int(r["world_size"]), []).append(float(r["value"]))
    totals = {n: statistics.fmean(v) * n for n, v in by_world.items()}
    base = totals.get(1)
    return [
        ScalingPoint(n, totals[n], totals[n] / (n * base) if base else None, len(by_world[n]))
        for n in sorted(totals)
    ]


def scaling_steps(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted({r["step"] for r in rows if r["check"] == "ddp_scaling"})


class ScalingGate(BaseModel):
    """DDP weak-scaling efficiency T_n / (n x T_1) at the largest world size."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_efficiency: float = Field(default=0.8, gt=0, le=1.5)


def _scaling(inp: GateInputs, cfg: ScalingGate) -> Outcome:
    points: dict[str, list[ScalingPoint]] = {}
    for step in scaling_steps(inp.rows):
        if pts := scaling_efficiency(inp.rows, step=step):
            points[step] = pts
    if not points:
        return Outcome(None, "no ddp_scaling throughput rows in this run", [])
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
        return Outcome(False, "; ".join(failing), evidence)
    if gaps:
        return Outcome(None, "; ".join(gaps), evidence)
    return Outcome(
        True, f"efficiency at the largest world size >= {cfg.min_efficiency:g}", evidence
    )


def _tables(rows: Sequence[Mapping[str, Any]]) -> list[ResultTable]:
    """Weak-scaling efficiency of each ddp_scaling step, as `show` prints it."""
    columns = ("world size", "throughput (samples/s)", "efficiency T_n / (n x T_1)")
    return [
        ResultTable(
            f"weak scaling: {step}",
            columns,
            tuple(
                (
                    str(p.world_size),
                    f"{p.throughput:,.0f}",
                    "n/a (no world size 1)" if p.efficiency is None else f"{p.efficiency:.2f}",
                )
                for p in scaling_efficiency(rows, step=step)
            ),
        )
        for step in scaling_steps(rows)
    ]


SCALING_GATE = Gate(
    name="scaling",
    config=ScalingGate,
    evaluate=_scaling,
    requires=lambda c: (
        f"DDP weak-scaling efficiency >= {c.min_efficiency:g} at the largest world size"
    ),
    order=40,
)


def _shared(name: str, unit: str, direction: Direction) -> MetricDecl:
    return MetricDecl(name=name, unit=unit, direction=direction, shared=True)


def _scaling_figures(rows: Sequence[StoredRow], _: FigureContext) -> list[str]:
    """The job's throughput; efficiency needs every world size, so `report` judges it."""
    tput = [r for r in rows if r["metric"] == "throughput" and r["value"] is not None]
    if not tput:
        return worst_rows(rows)
    total = sum(r["value"] for r in tput)
    world = tput[0]["world_size"]
    return [f"throughput {total:.4g} samples/s at n={world}, recorded only: efficiency is "
            "judged against gates.scaling by `fleetval report`"]  # fmt: skip


SCALING = CheckPlugin(
    name="ddp_scaling",
    params=DdpScalingParams,
    doc="DDP training throughput per rank at this world size, and what communication costs it.",
    metrics=(  # one training step measured by every rank together: shared
        _shared("step_time_ms", "ms", Direction.LOWER),
        _shared("compute_time_ms", "ms", Direction.LOWER),
        _shared("throughput", "samples/s", Direction.HIGHER),
        _shared("comm_share", "", Direction.LOWER),
    ),
    gate=SCALING_GATE,
    synchronizing=frozenset({"step_time_ms"}),  # a DDP step ends in its gradient all-reduce
    tables=_tables,
    figures=_scaling_figures,
)

HEALTH = CheckPlugin(
    name="ddp_health",
    params=DdpHealthParams,
    doc="Replicas stay identical, DDP gradients equal single-process ones and the loss falls.",
)
