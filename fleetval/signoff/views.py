"""What a sign-off report shows beside its gates, as plain data: busbw curves with the
baseline's spread, scaling points, the node x check status map, incidents, the GPU hardware
findings, the environment, and for a fleet sweep its verdict and each node's history
(`fleetval.signoff.sweep`). What grows with the fleet is also given cut and grouped (top N,
compressed host lists, "and N more"), so a report of 1,024 nodes reads like one of 16; the
JSON report keeps every entry.

Plain frozen dataclasses of numbers and strings, so `fleetval.reports` only formats them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.analysis.attribute import what_it_did
from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import Comparison
from fleetval.checks import CHECKS, bandwidth
from fleetval.checks.ddp import scaling_efficiency, scaling_steps
from fleetval.checks.health import NODE_HW_METRIC
from fleetval.detect.hardware import ACTION_RANK, Action, HwFinding
from fleetval.nodesets import SHOWN, EnvSummary, compress, group_env, natural
from fleetval.signoff.sweep import SWEEPS_SHOWN, SweepView, sweep_view
from fleetval.status import severity
from fleetval.store.dataset import Store
from fleetval.store.records import JsonObject, Run, StoredRow
from fleetval.store.schema import ENV_COLUMNS, GPU_METRIC
from fleetval.vocab import CULPRIT_METRIC, Status

ENV_SHOWN = (
    "hostname", "gpu_model", "gpu_count", "driver_version", "cuda_version", "rocm_version",
    "nccl_version", "rccl_version", "torch_version", "ray_version", "python_version", "kernel",
)  # fmt: skip
ENV_GROUPED = ENV_SHOWN[1:]  # the hostname names a node: never shared, never grouped on
HEAT_SHOWN = 32  # node rows of the heat map; beyond, the worst nodes and a count of the rest
NodeEnv = dict[str, str | int | None]  # a node's name and its ENV_SHOWN values


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
class IncidentGroup:
    """Incidents of one kind in one step, their nodes as a compressed host list."""

    kind: str
    step: str
    count: int
    nodes: tuple[str, ...]

    @property
    def hosts_shown(self) -> str:
        return compress(self.nodes, limit=SHOWN)


@dataclass(frozen=True, kw_only=True)
class HeatView:
    """The heat map as drawn: every node up to HEAT_SHOWN, else the worst HEAT_SHOWN nodes;
    the rest counted by their worst status."""

    nodes: tuple[str, ...]
    checks: tuple[str, ...]
    cells: tuple[tuple[str | None, ...], ...]
    left: int  # nodes not drawn
    left_worst: dict[str, int]  # their worst status -> how many nodes
    left_hosts: str  # compressed, cut to SHOWN ranges


@dataclass(frozen=True, kw_only=True)
class NodeHwFinding(HwFinding):
    """One hardware finding on one GPU (or a node's kernel event), as a report lists it: the
    finding (status warn or fail) and where it was."""

    node: str
    gpu: str  # "GPU 3 (0000:1b:00, GPU-...)"

    def report_json(self) -> NodeHwFindingJSON:
        """The JSON report's entry (its keys in the order reports have always had)."""
        return NodeHwFindingJSON(node=self.node, gpu=self.gpu, code=self.code,
                                 severity=self.status.value, action=self.action.value,
                                 evidence=self.evidence, reason=self.reason)  # fmt: skip


class NodeHwFindingJSON(TypedDict):
    node: str
    gpu: str
    code: str
    severity: str
    action: str
    evidence: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class HwGroup:
    """Every occurrence of one finding with one action: how many GPUs, on which nodes."""

    code: str
    action: Action
    severity: Status
    gpus: int
    nodes: tuple[str, ...]
    evidence: str  # the first occurrence's, as an example
    reason: str

    @property
    def hosts_shown(self) -> str:
        return compress(self.nodes, limit=SHOWN)


@dataclass(frozen=True, kw_only=True)
class HardwareView:
    """The GPU hardware the run's health steps read and judged (`gpu_hardware` rows)."""

    gpus: int  # GPU rows (one per GPU, or per kernel event at an address no reading names)
    healthy: int  # judged, no finding
    unjudged: int  # read, but the source did not say enough to judge (never a pass)
    findings: tuple[NodeHwFinding, ...]  # worst action first, then node
    groups: tuple[HwGroup, ...]  # by finding and action, worst first
    node_actions: dict[str, tuple[str, ...]]  # node action (worst first) -> nodes

    @property
    def nodes(self) -> tuple[str, ...]:
        """Nodes with a finding, worst action first."""
        return tuple(dict.fromkeys(f.node for f in self.findings))

    def to_dict(self) -> HardwareJSON:
        return HardwareJSON(
            gpus=self.gpus,
            healthy=self.healthy,
            unjudged=self.unjudged,
            findings=[f.report_json() for f in self.findings],
            groups=[HwGroupJSON(**asdict(g), hosts=compress(g.nodes)) for g in self.groups],
            node_actions={a: list(n) for a, n in self.node_actions.items()},
        )


class HwGroupJSON(TypedDict):
    code: str
    action: str
    severity: str
    gpus: int
    nodes: tuple[str, ...]
    evidence: str
    reason: str
    hosts: str  # the nodes, compressed


class HardwareJSON(TypedDict):
    """The JSON report's `hardware`."""

    gpus: int
    healthy: int
    unjudged: int
    findings: list[NodeHwFindingJSON]
    groups: list[HwGroupJSON]
    node_actions: dict[str, list[str]]


@dataclass(frozen=True, kw_only=True)
class Views:
    busbw: dict[str, tuple[Series, ...]]  # collective -> lines (candidate first)
    scaling: tuple[ScalingView, ...]
    heat_nodes: tuple[str, ...]
    heat_checks: tuple[str, ...]
    heat: tuple[tuple[str | None, ...], ...]  # [node][check] worst status, None: not run there
    incidents: tuple[Incident, ...]
    incident_groups: tuple[IncidentGroup, ...]  # by kind and step, most first
    heat_view: HeatView
    hardware: HardwareView | None  # None: no step read GPU hardware
    environment: tuple[NodeEnv, ...]  # one per node: node + ENV_SHOWN
    env: EnvSummary  # the same, nodes grouped by identical environment (what a report prints)
    env_diff: tuple[tuple[str, str, str], ...]  # (key, baseline values, candidate values)
    faults: tuple[JsonObject, ...]  # each as the suite declared it
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


def _heat(rows: list[StoredRow]) -> tuple[tuple[str, ...], tuple[str, ...], tuple]:
    worst: dict[tuple[str, str], str] = {}
    for r in rows:
        cell = (r["node"], r["check"])
        if max(severity(r["status"]), 0) >= severity(worst.get(cell)):
            worst[cell] = r["status"]
    nodes = tuple(sorted({n for n, _ in worst}))
    checks = tuple(sorted({c for _, c in worst}))
    return nodes, checks, tuple(tuple(worst.get((n, c)) for c in checks) for n in nodes)


def _heat_view(
    nodes: tuple[str, ...], checks: tuple[str, ...], heat: tuple, shown: int = HEAT_SHOWN
) -> HeatView:
    """All nodes when they fit; else the `shown` worst (by their row's worst status, then
    how many cells are that bad), drawn in name order."""
    worst = [max((severity(c) for c in row), default=0) for row in heat]
    order = sorted(range(len(nodes)), key=lambda i: (-worst[i], -sum(
        severity(c) == worst[i] for c in heat[i]), natural(nodes[i])))  # fmt: skip
    keep = sorted(order[:shown], key=lambda i: natural(nodes[i]))
    rest = order[shown:]
    counts: dict[str, int] = defaultdict(int)
    for i in rest:
        counts[max((c for c in heat[i] if c), key=severity, default="not run")] += 1
    return HeatView(
        nodes=tuple(nodes[i] for i in keep),
        checks=checks,
        cells=tuple(heat[i] for i in keep),
        left=len(rest),
        left_worst=dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        left_hosts=compress((nodes[i] for i in rest), limit=SHOWN),
    )


def _incident_groups(incidents: tuple[Incident, ...]) -> tuple[IncidentGroup, ...]:
    members: dict[tuple[str, str], list[str]] = defaultdict(list)
    for i in incidents:
        members[(i.kind, i.step)].append(i.node)
    return tuple(
        sorted(
            (IncidentGroup(kind=k, step=s, count=len(n),
                           nodes=tuple(sorted(set(n), key=natural)))
             for (k, s), n in members.items()),
            key=lambda g: (-g.count, g.kind, g.step),
        )
    )  # fmt: skip


def hardware_view(rows: list[StoredRow]) -> HardwareView | None:
    """The hardware findings of the run's `gpu_hardware` rows (details parsed), grouped."""
    gpu_rows = [r for r in rows if r["metric"] == GPU_METRIC]
    if not gpu_rows:
        return None
    findings = [
        NodeHwFinding(
            **vars(HwFinding.from_json(f)),
            node=r["node"],
            gpu=r["details"].get("gpu") or r["device_id"] or "?",
        )
        for r in gpu_rows
        for f in r["details"].get("findings", [])
    ]
    findings = [f for f in findings if f.bad]
    findings.sort(key=lambda f: (-ACTION_RANK[f.action], -severity(f.status),
                                 natural(f.node), f.gpu))  # fmt: skip
    return HardwareView(
        gpus=len(gpu_rows),
        healthy=sum(r["status"] == Status.PASS for r in gpu_rows),
        unjudged=sum(r["status"] in (Status.SKIP, Status.UNJUDGED) for r in gpu_rows),
        findings=tuple(findings),
        groups=_hw_groups(findings),
        node_actions=_node_actions(rows),
    )


def _action_rank(action: str) -> int:
    return ACTION_RANK.get(action, 0)  # type: ignore[call-overload]  # NOTE: StrEnum keys hash as str


def _hw_groups(findings: list[NodeHwFinding]) -> tuple[HwGroup, ...]:
    members: dict[tuple[str, Action], list[NodeHwFinding]] = defaultdict(list)
    for f in findings:  # already worst first, so the groups keep that order
        members[(f.code, f.action)].append(f)
    return tuple(
        HwGroup(code=code, action=action, severity=fs[0].status, gpus=len(fs),
                nodes=tuple(sorted({f.node for f in fs}, key=natural)),
                evidence=fs[0].evidence, reason=fs[0].reason)
        for (code, action), fs in members.items()
    )  # fmt: skip


def _node_actions(rows: list[StoredRow]) -> dict[str, tuple[str, ...]]:
    """Each node's one action (its `hw_node_action` row), worst action first; none left out."""
    by_action: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        action = r["details"].get("action") if r["metric"] == NODE_HW_METRIC else None
        if action and action != Action.NONE:
            by_action[action].add(r["node"])
    return {
        a: tuple(sorted(n, key=natural))
        for a, n in sorted(by_action.items(), key=lambda kv: -_action_rank(kv[0]))
    }


def _incidents(
    record: Run, rows: list[StoredRow], comparison: Comparison | None
) -> tuple[Incident, ...]:
    out = [
        Incident(kind=c["reason"], step=s["step"], rank=c["rank"], node=c["node"],
                 device_id=c.get("device_id"), detail=c["detail"])
        for s in record.summary.get("steps", [])
        for c in s.get("culprits") or []
    ]  # fmt: skip
    for r in rows:
        kind = CHECKS[r["check"]].incident if r["check"] in CHECKS else None
        if kind and r["status"] == Status.FAIL and r["metric"] != CULPRIT_METRIC:
            out.append(Incident(kind=kind, step=r["step"], rank=r["rank"], node=r["node"],
                                device_id=r["device_id"], detail=r["message"]))  # fmt: skip
    for o in comparison.outliers if comparison else ():
        detail = (f"{o.identity.label()}: {o.value:.4g} vs peer median {o.peer_median:.4g} "
                  f"({o.deviation_pct:+.1f}%, robust z {o.robust_z:.1f}, {o.peers} peers)")  # fmt: skip
        node, _, device = o.unit.partition("/")
        out.append(Incident(kind="outlier", step=o.identity.check, rank=None, node=node,
                            device_id=device or None, detail=detail))  # fmt: skip
    return tuple(out)


def scaling_points(rows: list[StoredRow]) -> tuple[ScalingView, ...]:
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
    record: Run,
    rows: list[StoredRow],
    nodes: list[StoredRow],
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
    incidents = _incidents(record, rows, comparison)
    return Views(
        busbw=_busbw_views(store, record.run_id, baseline_runs),
        scaling=scaling_points(rows),
        heat_nodes=heat_nodes,
        heat_checks=heat_checks,
        heat=heat,
        incidents=incidents,
        incident_groups=_incident_groups(incidents),
        heat_view=_heat_view(heat_nodes, heat_checks, heat),
        hardware=hardware_view(rows),
        environment=environment,
        env=group_env(environment, ENV_GROUPED),
        env_diff=diff,
        faults=tuple(record.faults),
        sweep=sweep_view(store, record, sweeps),
        what_it_did=what_it_did(store, record.suite, [k for k, _, _ in diff]),
    )
