"""What a sign-off report shows beside its gates, as plain data: busbw curves with the
baseline's spread, scaling points, the node x check status map, incidents, the environment,
and for a fleet sweep its verdict and each node's history (`fleetval.signoff.sweep`).

Plain frozen dataclasses of numbers and strings, so `fleetval.reports` only formats them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.analysis.attribute import what_it_did
from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import Comparison
from fleetval.checks import CHECKS, bandwidth
from fleetval.checks.ddp import scaling_efficiency, scaling_steps
from fleetval.nodesets import EnvSummary, group_env
from fleetval.signoff.sweep import SWEEPS_SHOWN, SweepView, sweep_view
from fleetval.status import severity
from fleetval.store.dataset import RunRecord, Store
from fleetval.store.schema import ENV_COLUMNS
from fleetval.vocab import Status

ENV_SHOWN = (
    "hostname", "gpu_model", "gpu_count", "driver_version", "cuda_version", "rocm_version",
    "nccl_version", "rccl_version", "torch_version", "ray_version", "python_version", "kernel",
)  # fmt: skip
ENV_GROUPED = ENV_SHOWN[1:]  # the hostname names a node: never shared, never grouped on


@dataclass(frozen=True, kw_only=True)
class Series:
    """One line of a busbw plot. An iteration's time is its slowest rank's (the nccl-tests view)."""

    label: str  # "n=4 float32 sum"
    baseline: bool
    sizes: tuple[int, ...]
    busbw: tuple[float, ...]  # median per-iteration busbw (median over runs for a baseline)
    low: tuple[float, ...] = ()  # baseline only: 10th percentile of per-iteration busbw
    high: tuple[float, ...] = ()  # 90th percentile


@dataclass(frozen=True, kw_only=True)
class ScalingView:
    """One point of a ddp_scaling step, as the report plots it (checks.ddp.ScalingPoint plus its step)."""

    step: str
    world_size: int
    throughput: float
    efficiency: float | None


@dataclass(frozen=True, kw_only=True)
class Incident:
    """A named rank (or node) that hung, crashed, straggled or was found unhealthy."""

    kind: str  # hang, crash, error, late, not placed, straggler, unhealthy, outlier
    step: str
    rank: int | None
    node: str
    device_id: str | None
    detail: str


@dataclass(frozen=True, kw_only=True)
class Views:
    busbw: dict[str, tuple[Series, ...]]  # collective -> lines (candidate first)
    scaling: tuple[ScalingView, ...]
    heat_nodes: tuple[str, ...]
    heat_checks: tuple[str, ...]
    heat: tuple[tuple[str | None, ...], ...]  # [node][check] worst status, None: not run there
    incidents: tuple[Incident, ...]
    environment: tuple[dict[str, Any], ...]  # one per node: node + ENV_SHOWN
    env: EnvSummary  # the same, nodes grouped by identical environment (what a report prints)
    env_diff: tuple[tuple[str, str, str], ...]  # (key, baseline values, candidate values)
    faults: tuple[dict[str, Any], ...]
    sweep: SweepView | None = None  # the run is a fleet sweep
    what_it_did: tuple[str, ...] = ()  # per version changed against the baseline: its attribution


def _label(key: tuple) -> str:
    _, world, dtype, op = key
    return " ".join(p for p in (f"n={world}", dtype, op) if p)


_CALL_KEYS = ["run_id", "job", "collective", "world_size", "dtype", "op", "size_bytes"]
_BW_COLUMNS = [*_CALL_KEYS, "check", "busbw_gbps", "time_us_median", "samples_us"]


def _per_call(table: pa.Table) -> dict[tuple, dict[int, list[np.ndarray]]]:
    """line -> size -> per-iteration busbw, one array per (run, job) that measured it.

    An iteration's time is its slowest rank's: busbw_i = busbw x median / max over ranks
    of t_i, with the same scale on every rank (same bytes, same factor). Vectorised: rows
    sorted by call, samples as one matrix, maxima by segment.
    """
    busbw = pc.fill_null(table["busbw_gbps"], 0.0)
    keep = pc.and_(
        pc.and_(pc.equal(table["check"], bandwidth.PLUGIN.name), pc.greater(busbw, 0.0)),
        pc.and_(
            pc.greater(table["world_size"], 1),
            pc.greater(pc.list_value_length(table["samples_us"]), 0),
        ),
    )
    t = table.filter(keep).sort_by([(c, "ascending") for c in _CALL_KEYS])
    if t.num_rows == 0:
        return {}
    n = int(pc.min(pc.list_value_length(t["samples_us"])).as_py())
    samples = pc.list_flatten(pc.list_slice(t["samples_us"], 0, n)).to_numpy().reshape(-1, n)
    keys = list(zip(*(t[c].to_pylist() for c in _CALL_KEYS), strict=True))
    starts = np.array([0, *(i for i in range(1, len(keys)) if keys[i] != keys[i - 1])])
    scale = (t["busbw_gbps"].to_numpy() * t["time_us_median"].to_numpy())[starts]
    per_iter = scale[:, None] / np.maximum.reduceat(samples, starts, axis=0)
    out: dict[tuple, dict[int, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for values, s in zip(per_iter, starts, strict=True):
        _, _, coll, world, dtype, op, size = keys[s]
        out[(coll, world, dtype or "", op or "")][size].append(values)
    return out


def _series(store: Store, run_ids: list[str], baseline: bool) -> dict[tuple, Series]:
    """Per line and size: the median over runs of each run's median per-iteration busbw;
    for the baseline also the 10-90% spread of all its per-iteration busbw."""
    calls = _per_call(store.results(run_ids, columns=_BW_COLUMNS))
    out = {}
    for key, by_size in calls.items():
        sizes = sorted(by_size)
        mids = tuple(float(np.median([np.median(a) for a in by_size[s]])) for s in sizes)
        pooled = [np.concatenate(by_size[s]) for s in sizes]
        out[key] = Series(
            label=f"baseline {_label(key)}" if baseline else _label(key),
            baseline=baseline,
            sizes=tuple(sizes),
            busbw=mids,
            low=tuple(float(np.percentile(p, 10)) for p in pooled) if baseline else (),
            high=tuple(float(np.percentile(p, 90)) for p in pooled) if baseline else (),
        )
    return out


def _busbw_views(
    store: Store, run_id: str, baseline_runs: list[str]
) -> dict[str, tuple[Series, ...]]:
    cand = _series(store, [run_id], baseline=False)
    base = _series(store, baseline_runs, baseline=True) if baseline_runs else {}
    out: dict[str, list[Series]] = defaultdict(list)
    for key in sorted(cand, key=str):
        out[key[0]].append(cand[key])
    for key in sorted(base, key=str):
        if key[0] in out:  # a baseline curve only beside the run's own
            out[key[0]].append(base[key])
    return {coll: tuple(series) for coll, series in sorted(out.items())}


def _heat(rows: list[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[str, ...], tuple]:
    worst: dict[tuple[str, str], str] = {}
    for r in rows:
        cell = (r["node"], r["check"])
        if max(severity(r["status"]), 0) >= severity(worst.get(cell)):
            worst[cell] = r["status"]
    nodes = tuple(sorted({n for n, _ in worst}))
    checks = tuple(sorted({c for _, c in worst}))
    return nodes, checks, tuple(tuple(worst.get((n, c)) for c in checks) for n in nodes)


def _incidents(
    record: RunRecord, rows: list[dict[str, Any]], comparison: Comparison | None
) -> tuple[Incident, ...]:
    out = [
        Incident(kind=c["reason"], step=s["step"], rank=c["rank"], node=c["node"],
                 device_id=c.get("device_id"), detail=c["detail"])
        for s in record.summary.get("steps", [])
        for c in s.get("culprits") or []
    ]  # fmt: skip
    for r in rows:
        kind = CHECKS[r["check"]].incident if r["check"] in CHECKS else None
        if kind and r["status"] == Status.FAIL and r["metric"] != "step_outcome":
            out.append(Incident(kind=kind, step=r["step"], rank=r["rank"], node=r["node"],
                                device_id=r["device_id"], detail=r["message"]))  # fmt: skip
    for o in comparison.outliers if comparison else ():
        detail = (f"{o.identity.label()}: {o.value:.4g} vs peer median {o.peer_median:.4g} "
                  f"({o.deviation_pct:+.1f}%, robust z {o.robust_z:.1f}, {o.peers} peers)")  # fmt: skip
        node, _, device = o.unit.partition("/")
        out.append(Incident(kind="outlier", step=o.identity.check, rank=None, node=node,
                            device_id=device or None, detail=detail))  # fmt: skip
    return tuple(out)


def scaling_points(rows: list[dict[str, Any]]) -> tuple[ScalingView, ...]:
    """Per ddp_scaling step and world size: job throughput and weak-scaling efficiency."""
    return tuple(
        ScalingView(
            step=s, world_size=p.world_size, throughput=p.throughput, efficiency=p.efficiency
        )
        for s in scaling_steps(rows)
        for p in scaling_efficiency(rows, step=s)
    )


def build_views(
    store: Store,
    record: RunRecord,
    rows: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    comparison: Comparison | None,
    baseline: str | None,
    *,
    sweeps: int = SWEEPS_SHOWN,
) -> Views:
    baseline_runs: list[str] = []
    if baseline and comparison is not None:
        resolved = Baselines(store).resolve(baseline).run_ids
        baseline_runs = [r for r in resolved if r != record.run_id]
    environment = tuple(
        {"node": n["node"], **{k: n.get(k) for k in ENV_SHOWN}}
        for n in sorted(nodes, key=lambda n: n["node"])
    )
    diff = tuple(
        (c.key, ", ".join(c.baseline), ", ".join(c.candidate))
        for c in (comparison.env_diff if comparison else ())
        if c.key in ENV_COLUMNS
    )
    heat_nodes, heat_checks, heat = _heat(rows)
    return Views(
        busbw=_busbw_views(store, record.run_id, baseline_runs),
        scaling=scaling_points(rows),
        heat_nodes=heat_nodes,
        heat_checks=heat_checks,
        heat=heat,
        incidents=_incidents(record, rows, comparison),
        environment=environment,
        env=group_env(environment, ENV_GROUPED),
        env_diff=diff,
        faults=tuple(record.faults),
        sweep=sweep_view(store, record, sweeps),
        what_it_did=what_it_did(store, record.suite, [k for k, _, _ in diff]),
    )
