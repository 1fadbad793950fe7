"""Bandwidth sweep: nccl-tests sizes, per-iteration times, algbw and busbw per rank.

Sign-off: the `busbw` gate (minimum busbw per collective at bandwidth-bound sizes, per GPU
model, with public per-SKU floors built in)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ByteSize, ConfigDict, Field, PositiveFloat, PositiveInt

from fleetval.checks.bandwidth.params import BandwidthParams
from fleetval.checks.model_pattern import ModelPattern, model_matches
from fleetval.checks.spec import (
    CheckPlugin,
    Evidence,
    FigureContext,
    Gate,
    GateInputs,
    Outcome,
    gpu_label,
    ident,
    row_evidence,
    tally,
    where,
    worst_rows,
)
from fleetval.metrics import BUSBW, CORRECT, LATENCY
from fleetval.store.records import StoredRow
from fleetval.text import human_bytes


class BusbwMinimum(BaseModel):
    """busbw at least `min_busbw_gbps` for this collective on this GPU model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_model: ModelPattern = Field(min_length=1)  # regex searched in the GPU model; "cpu": no GPU
    collective: str = Field(min_length=1)
    world_size: PositiveInt | None = None  # None: any world size
    nodes: PositiveInt | None = None  # nodes the job spans (1: one node's fabric); None: any
    min_busbw_gbps: PositiveFloat
    min_size: ByteSize = ByteSize(1 << 30)  # sizes at or above this are bandwidth-bound
    source: str = ""  # where the figure comes from


class BusbwGate(BaseModel):
    """Minimum busbw at the largest measured bandwidth-bound size; defaults per GPU model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    minimums: list[BusbwMinimum] = Field(default_factory=list)  # checked before the defaults
    use_defaults: bool = (
        True  # also the public per-SKU figures (fleetval.signoff.evaluate.BUSBW_DEFAULTS)
    )
    fraction: float = Field(default=1.0, gt=0, le=2)  # scales every minimum


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


def _job_models(inp: GateInputs) -> dict[int, tuple[str, int]]:
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
            model_matches(rule.gpu_model, model)
            and rule.collective == collective
            and rule.world_size in (None, world)
            and rule.nodes in (None, nodes)
        ):
            return rule
    return None


def _busbw(inp: GateInputs, cfg: BusbwGate) -> Outcome:
    rules = [*cfg.minimums, *(BUSBW_DEFAULTS if cfg.use_defaults else ())]
    jobs = _job_models(inp)
    # (job, collective, op, dtype) -> size -> the ranks' rows; judged at the slowest rank,
    # as nccl-tests reports the slowest rank's time.
    series: dict[tuple, dict[int, list[StoredRow]]] = defaultdict(lambda: defaultdict(list))
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
        text = (f"{ident(slowest)} on {model}: busbw {slowest['busbw_gbps']:.4g} GB/s "
                f"(slowest: {where(slowest)}) {'>=' if ok else '<'} {need:.4g} GB/s"
                f"{f' [{rule.source}]' if rule.source else ''}")  # fmt: skip
        evidence.append(row_evidence(slowest, ok, text, value=slowest["busbw_gbps"], expected=need,
                                  unit="GB/s"))  # fmt: skip
    run_models = {gpu_label(n) for n in inp.nodes}
    for rule in cfg.minimums:  # a declared minimum for this hardware that nothing measured
        if id(rule) not in used and any(model_matches(rule.gpu_model, m) for m in run_models):
            text = f"{rule.collective} on {rule.gpu_model}: declared minimum, not measured"
            evidence.append(Evidence(ok=False, text=text, collective=rule.collective))
    why = "; ".join(gaps[:6]) or "no bandwidth rows in this run"
    return tally(evidence, noun="measurement", missed="below their minimum",
                 met="at or above the minimum",
                 none=f"no bandwidth-bound measurement with a minimum: {why}")  # fmt: skip


def _figures(rows: Sequence[StoredRow], context: FigureContext) -> list[str]:
    """Per collective, op and dtype: busbw at the largest size (slowest rank) vs its floor."""
    gates = context.gates
    floors = [*(gates.busbw.minimums if gates and gates.busbw else ()), *BUSBW_DEFAULTS]
    models = context.models
    series: dict[tuple, list[StoredRow]] = defaultdict(list)
    for r in rows:
        if r["busbw_gbps"] is not None:
            series[(r["collective"], r["op"], r["dtype"])].append(r)
    out = []
    for (coll, op, dtype), got in sorted(series.items(), key=str):
        top = max(r["size_bytes"] for r in got)
        slowest = min((r for r in got if r["size_bytes"] == top), key=lambda r: r["busbw_gbps"])
        world = slowest["world_size"]
        nodes = sorted({r["node"] for r in got})
        kinds = {models.get(n, "unknown") for n in nodes}
        model = kinds.pop() if len(kinds) == 1 else "mixed"
        head = (f"{coll} {op or ''} {dtype} {human_bytes(top)} n={world}: busbw "
                f"{slowest['busbw_gbps']:.4g} GB/s (slowest: rank {slowest['rank']})")  # fmt: skip
        rule = busbw_rule_for(floors, model, coll, world, len(nodes))
        if rule is None:
            out.append(f"{head}, recorded only: no floor for {model} (declare gates.busbw)")
        elif top < rule.min_size:
            out.append(f"{head}, recorded only: the floor {rule.min_busbw_gbps:g} GB/s for "
                       f"{model} applies from {human_bytes(int(rule.min_size))}")  # fmt: skip
        else:
            ok = slowest["busbw_gbps"] >= rule.min_busbw_gbps
            out.append(f"{head} {'>=' if ok else '<'} floor {rule.min_busbw_gbps:g} GB/s for "
                       f"{model}: {'met' if ok else 'below'}")  # fmt: skip
    return out + worst_rows(rows)


GATE = Gate(
    name="busbw",
    config=BusbwGate,
    evaluate=_busbw,
    requires=lambda c: (
        "busbw at the largest bandwidth-bound size >= the GPU model's minimum"
        + (f" x {c.fraction:g}" if c.fraction != 1 else "")
    ),
    order=30,
)

PLUGIN = CheckPlugin(
    name="bandwidth",
    params=BandwidthParams,
    doc="Achieved algbw and busbw per size on every rank, with exact verification of the result.",
    metrics=(BUSBW, LATENCY, CORRECT),
    gate=GATE,
    figures=_figures,
)
