"""Attribution: which component's version change cost how much, from a fleet's own nightly runs.

A rollout is an experiment the fleet runs on itself: on a night when some nodes already have
the new version and others not yet, the two groups see the same fabric. Per identity
(check, collective, op, dtype, size, world size, metric, GPU model) the log value of each
node on each night is modelled as

    y[node, night] = a[node] + b[night] + sum over components c of e[c, version of c] + noise

a two-way fixed-effects regression: the generalised (staggered) difference-in-differences.
Node and night are nuisance parameters, swept out by alternating projections (the
within transformation), so only same-node-over-time and same-night-across-nodes contrasts
inform an effect. A change from version u to v is the contrast e[c, v] - e[c, u], with a
Student's t interval on the residual degrees of freedom and a p-value; q-values are
Benjamini-Hochberg over every change tested at every identity. docs/attribution.md says why
fixed effects rather than a mixed model.

What the data cannot separate is said, never guessed: components whose versions split the
(node, night) observations identically (they always changed together) are one bundle, and a
change whose column vanishes once nodes and nights are swept out (it reached every node on
the same night, or no node was measured on both versions) has no same-night contrast. Both
are `confounded`, with the joint (or fleet-wide before/after) effect and a canary plan.

Pure: numpy and pyarrow over the stored per-node run values and the nodes table;
`attribute_store` is the one reader of a store.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from itertools import pairwise
from typing import TypedDict, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.analysis.baselines import select_runs
from fleetval.analysis.compare import CompareError
from fleetval.analysis.compare_settings import settings_from_suite_json
from fleetval.analysis.runvalues import run_values
from fleetval.analysis.statistics import bh_adjust, t_test, verdicts
from fleetval.arrays import group_rows, np_col, one_chunk
from fleetval.finding import Finding
from fleetval.metrics import BUSBW, LATENCY
from fleetval.store.dataset import Store
from fleetval.text import human_bytes
from fleetval.vocab import AttributionVerdict, Status, Verdict

# What a version change is attributed to, and the nodes-table columns that say its version
# (the first non-null one: HIP is ROCm's own runtime, so it stands in only where ROCm is
# not recorded; `extra.firmware` once a reader records firmware).
COMPONENTS: dict[str, tuple[str, ...]] = {
    "driver": ("driver_version",),
    "cuda": ("cuda_version",),
    "rocm": ("rocm_version", "hip_version"),
    "nccl": ("nccl_version",),
    "rccl": ("rccl_version",),
    "torch": ("torch_version",),
    "kernel": ("kernel",),
    "firmware": ("extra.firmware",),
}
METRICS = {"busbw": BUSBW, "latency": LATENCY}
ID_KEYS = ("check", "collective", "op", "dtype", "size_bytes", "world_size", "metric", "gpu_model")
CONFIDENCE = 0.95
# Residual df are capped here (a fleet's nights x nodes give thousands): t on 100 df is the
# normal to 1.2% at the 95% interval, wider, so conservative; and `t_test`'s exact series
# costs grow with df.
MAX_DF = 100
# A column whose norm falls below this fraction once node and night are swept out carries
# no same-night, same-node contrast (exact collinearity up to rounding).
VANISHED = 1e-6
CONFOUNDED = AttributionVerdict.CONFOUNDED
INSUFFICIENT = AttributionVerdict.INSUFFICIENT


class AttributionError(CompareError):
    """An attribution that cannot be made from the runs chosen (nothing per node, no runs)."""


@dataclass(frozen=True, kw_only=True)
class AttributeSettings:
    threshold_pct: float = 5.0  # a smaller effect is `unchanged`, however significant
    fdr: float = 0.01  # BH level over every change tested at every identity
    min_nodes: int = 2  # nodes on each side on the same nights
    min_nights: int = 2  # nights with both versions measured side by side
    canary_nights: int = 3


class Identity(TypedDict):
    """What was measured (ID_KEYS), as a run's values name it."""

    check: str
    collective: str | None
    op: str | None
    dtype: str | None
    size_bytes: int | None
    world_size: int | None
    metric: str
    gpu_model: str | None


# A version finding in `fleetval attribute --json` (`from` is a keyword: the functional form).
VersionFindingJSON = TypedDict("VersionFindingJSON", {
    "component": str, "from": str, "to": str, "collective": str | None,
    "size_bytes": int | None, "dtype": str | None, "gpu_model": str | None, "metric": str,
    "effect_pct": float | None, "ci_pct": list[float | None] | None, "q": float | None,
    "nodes": int, "nights": int, "verdict": str,
})  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class VersionFinding(Finding):
    """A version change's effect at one measurement: a `Finding` (code: the component; status
    FAIL where the effect is a regression, a confounded one included, WARN confounded, SKIP
    too little evidence, else PASS; reason: the line a sign-off prints) with the change and its
    estimate."""

    from_version: str
    to_version: str
    identity: Identity
    effect_pct: float | None
    ci_pct: tuple[float, float] | None
    q: float | None
    nodes: int  # nodes measured on either version on the nights both were measured
    nights: int  # nights both versions were measured side by side
    verdict: AttributionVerdict

    @property
    def component(self) -> str:
        return self.code

    @property
    def regressed(self) -> bool:
        """The (joint) effect is a regression: a confounded one counts."""
        return self.status == Status.FAIL

    def to_json(self) -> VersionFindingJSON:
        i = self.identity
        return {
            "component": self.component, "from": self.from_version, "to": self.to_version,
            "collective": i["collective"], "size_bytes": i["size_bytes"], "dtype": i["dtype"],
            "gpu_model": i["gpu_model"], "metric": i["metric"],
            "effect_pct": _round(self.effect_pct),
            "ci_pct": [_round(x) for x in self.ci_pct] if self.ci_pct else None,
            "q": _round(self.q, 6), "nodes": self.nodes, "nights": self.nights,
            "verdict": self.verdict,
        }  # fmt: skip


class CanaryGroup(TypedDict):
    label: str  # "canary=control", "canary=rccl-2.21"
    nodes: list[str]
    pin: dict[str, str]  # nodes-table column -> the version pinned


class CanaryPlan(TypedDict):
    """Nodes pinned so each confounded change is measured alone beside a control."""

    suite: str
    nights: int
    groups: list[CanaryGroup]
    rest: str
    run: str


class ConfoundedJSON(TypedDict):
    components: list[str]
    changes: list[str]
    why: str
    plan: CanaryPlan


@dataclass(frozen=True, kw_only=True)
class Confounded:
    components: tuple[str, ...]
    changes: tuple[str, ...]
    why: str
    plan: CanaryPlan
    regressed: bool

    def to_json(self) -> ConfoundedJSON:
        return ConfoundedJSON(components=list(self.components), changes=list(self.changes),
                              why=self.why, plan=self.plan)  # fmt: skip


class AttributionJSON(TypedDict):
    findings: list[VersionFindingJSON]
    confounded: list[ConfoundedJSON]
    notes: list[str]


@dataclass(frozen=True, kw_only=True)
class Attribution:
    findings: tuple[VersionFinding, ...]
    confounded: tuple[Confounded, ...]
    notes: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        """1 when a regression is attributed or a confounded change regressed, else 0."""
        return int(any(f.regressed for f in self.findings))

    def to_dict(self) -> AttributionJSON:
        return AttributionJSON(findings=[f.to_json() for f in self.findings],
                               confounded=[c.to_json() for c in self.confounded],
                               notes=list(self.notes))  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def hint(changed: Iterable[str]) -> str | None:
    """The line compare and trend print when a regression coincides with version changes
    (`changed`: the nodes-table columns that changed)."""
    keys = set(changed)
    comps = [c for c, cols in COMPONENTS.items() if set(cols) & keys]
    if not comps:
        return None
    return (f"{', '.join(comps)} changed with this regression: `fleetval attribute` says which "
            "change did it (same-night comparisons of upgraded and not-yet-upgraded nodes)")  # fmt: skip


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


# -- reading a store ---------------------------------------------------------------------


def attribute_store(
    store: Store,
    *,
    where: dict[str, str] | None = None,
    since: date | None = None,
    metric: str | None = None,
    last: int | None = None,
) -> Attribution:
    """Attribution over the runs `where` chooses (fnmatch, as `runs`), started on or after
    `since`, the newest `last` of them; the newest run's suite `compare:` section sets
    threshold, FDR and latency cutoff."""
    _metric_name(metric)  # bad input before any file is read
    records = {r.run_id: r for r in store.runs()}
    runs = [
        r for r in select_runs(store, where or {}) if since is None or records[r].started_at.date() >= since
    ]  # fmt: skip
    if not runs:
        raise AttributionError("no run matches; `fleetval runs` lists them")
    capped = []
    if last is not None and len(runs) > last:
        capped = [f"only the newest {last} of the {len(runs)} matching runs were read"]
        runs = runs[-last:]
    compare = settings_from_suite_json(records[runs[-1]].suite_json)
    values = run_values(
        store.summaries(runs), models=None, cutoff_bytes=int(compare.latency_cutoff_bytes)
    )
    values = values.rename_columns(["node" if c == "group" else c for c in values.column_names])
    nodes = store.nodes(runs)
    local = _node_local(values, nodes)
    notes = []
    if not local.all():
        notes.append(
            f"{int((~local).sum())} multi-node measurements left out: attribution compares nodes, "
            "so it reads node-local ones (a sweep's single-node jobs, node-local suites, per-node nccl-tests)"
        )
    suites = Counter(records[r].suite for r in runs)
    result = attribute(
        values.filter(pa.array(local)),
        nodes,
        {r: records[r].started_at.date().isoformat() for r in runs},
        metric=metric,
        settings=AttributeSettings(threshold_pct=compare.threshold_pct, fdr=compare.fdr),
        suite=suites.most_common(1)[0][0],
    )
    return Attribution(
        findings=result.findings,
        confounded=result.confounded,
        notes=(*capped, *notes, *result.notes),
    )


def _node_local(values: pa.Table, nodes: pa.Table) -> np.ndarray:
    """Per value, whether one node made it alone: it held every rank (the engine writes a row
    per rank), or the run had that one node with GPUs enough for the world size (an
    ingested single-node nccl-tests file: one row for all ranks).

    NOTE: a collective across several nodes is one measurement of all of them, whatever their
    versions, so attribution leaves it out."""
    world = np_col(values["world_size"])
    local = np_col(values["ranks"]) >= world
    count = Counter(nodes["run_id"].to_pylist())
    alone = {r["run_id"]: r["gpu_count"] or 0 for r in nodes.select(["run_id", "gpu_count"]).to_pylist()
             if count[r["run_id"]] == 1}  # fmt: skip
    if alone:
        gpus = np.array([*alone.values(), 0])  # a run not alone looks up the trailing 0
        local |= gpus[_index_in(values["run_id"], list(alone))] >= world
    return local


def what_it_did(store: Store, suite: str, changed: list[str]) -> tuple[str, ...]:
    """For a sign-off: per component among `changed` (nodes-table columns changed against the
    baseline), what attribution over the suite's stored runs says its change did."""
    comps = [c for c, cols in COMPONENTS.items() if set(cols) & set(changed)]
    if not comps:
        return ()
    try:
        a = attribute_store(store, where={"suite": suite})
    except ValueError as err:
        return (f"{', '.join(comps)} changed; not attributed: {err}",)
    shown = [
        f for f in a.findings if f.component in comps and f.verdict != AttributionVerdict.UNCHANGED
    ]
    lines = [f.reason for f in shown if f.verdict != CONFOUNDED]
    lines += [
        f"confounded: {', '.join(c.changes)}: {c.why}"
        for c in a.confounded
        if set(c.components) & set(comps)
    ]
    tested = {f.component for f in a.findings}
    quiet = [c for c in comps if c in tested and not any(f.component == c for f in shown)]
    lines += [f"{c}: unchanged at every measurement (within the threshold)" for c in quiet]
    lines += [
        f"{c}: not measured on both versions in this suite's runs" for c in comps if c not in tested
    ]
    return tuple(lines)


# -- the model ---------------------------------------------------------------------------


def attribute(
    values: pa.Table,
    nodes: pa.Table,
    nights: dict[str, str],
    *,
    metric: str | None = None,
    settings: AttributeSettings | None = None,
    suite: str = "SUITE",
) -> Attribution:
    """Per identity and version change, its effect with node and night swept out.

    `values`: one row per run, node and identity (run_id, node, the ID_KEYS but gpu_model,
    value); `nodes`: the nodes table of those runs; `nights`: run_id -> the night (any
    sortable text, e.g. the date) it ran.
    """
    settings = settings or AttributeSettings()
    panel = _panel(values, nodes, nights, _metric_name(metric))
    if not len(panel.idents):
        raise AttributionError(
            "no busbw or latency measurement of a node with its versions recorded "
            "(attribution reads node-local measurements)"
        )
    cache: dict[bytes, _Design | None] = {}
    raw = [e for i in range(len(panel.idents)) for e in _fit_identity(panel, i, cache)]
    if not raw:
        return Attribution(
            findings=(), confounded=(), notes=("no component changed version in these runs",)
        )
    return _judge(raw, panel, settings, suite)


def _metric_name(metric: str | None) -> str | None:
    if metric is not None and metric not in METRICS:
        raise AttributionError(f"metric: {metric!r} is not one of {', '.join(METRICS)}")
    return METRICS[metric].name if metric else None


@dataclass(frozen=True, kw_only=True)
class _Panel:
    """Observations (one per run, node and identity), sorted by identity, night and node."""

    y: np.ndarray  # log value
    node: np.ndarray  # codes into node_names
    night: np.ndarray  # codes into night_names (sorted)
    comp: dict[str, tuple[np.ndarray, list[str]]]  # component -> (codes, version names)
    node_names: list[str]
    night_names: list[str]
    idents: list[Identity]
    bounds: np.ndarray  # identity i is rows bounds[i]:bounds[i + 1]

    def rows(self, i: int) -> slice:
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """Dense codes and names of a string column, nulls as "unknown"."""
    enc = pc.dictionary_encode(pc.fill_null(pc.cast(col, pa.string()), "unknown")).combine_chunks()
    return np_col(enc.indices).astype(np.int64), [str(v) for v in enc.dictionary.to_pylist()]


def _index_in(col: pa.ChunkedArray, names: list[str]) -> np.ndarray:
    """Per row the position of its value in `names`, -1 if absent or null; a dictionary
    column is looked up once per dictionary entry."""
    col = one_chunk(col)
    value_set = pa.array(names, pa.string())
    if not pa.types.is_dictionary(col.type):
        return np_col(pc.index_in(col, value_set=value_set), null=-1).astype(np.int64)
    at = np.append(np_col(pc.index_in(col.dictionary, value_set=value_set), null=-1), -1)
    return at[np_col(col.indices, null=-1).astype(np.int64)].astype(np.int64)


def _versions(nodes: pa.Table) -> pa.Table:
    """run_id, node, gpu_model and one version column per component recorded in the nodes table."""
    cols: dict[str, pa.ChunkedArray | pa.Array] = {
        c: nodes[c] for c in ("run_id", "node", "gpu_model")
    }
    for comp, sources in COMPONENTS.items():
        got = [g for g in (_column(nodes, s) for s in sources) if g is not None]
        if got:
            cols[comp] = pc.coalesce(*got) if len(got) > 1 else got[0]
    return pa.table(cols)


def _column(nodes: pa.Table, source: str) -> pa.ChunkedArray | pa.Array | None:
    if not source.startswith("extra."):
        return nodes[source] if source in nodes.column_names else None
    key = source.removeprefix("extra.")
    extra = nodes["extra"] if "extra" in nodes.column_names else None
    if extra is None or not pc.any(pc.match_substring(extra, f'"{key}"')).as_py():
        return None
    vals = [json.loads(e or "{}").get(key) for e in extra.to_pylist()]
    text = [v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True) for v in vals]
    return pa.array(text, pa.string())


def _panel(values: pa.Table, nodes: pa.Table, nights: dict[str, str], metric: str | None) -> _Panel:
    """Each value with its node's versions in that run (matched on run and node codes: a
    join of strings costs seconds at 1,024 nodes x 90 nights)."""
    keep = pc.is_in(values["metric"], pa.array([metric] if metric else [BUSBW.name, LATENCY.name]))
    values = values.filter(pc.and_(keep, pc.greater(pc.fill_null(values["value"], 0.0), 0.0)))
    versions = _versions(nodes)
    runs = sorted(nights)
    names = sorted(n for n in pc.unique(versions["node"]).to_pylist() if n is not None)
    key_n = _index_in(versions["run_id"], runs) * len(names) + _index_in(versions["node"], names)
    lookup = np.full(len(runs) * len(names) + 1, -1, np.int64)
    ok_n = key_n >= 0
    lookup[key_n[ok_n]] = np.flatnonzero(ok_n)
    run_v, node_v = _index_in(values["run_id"], runs), _index_in(values["node"], names)
    row = np.where(
        (run_v >= 0) & (node_v >= 0), lookup[np.maximum(run_v * len(names) + node_v, -1)], -1
    )
    found = row >= 0
    values, row, run_v, node_v = (
        values.filter(pa.array(found)),
        row[found],
        run_v[found],
        node_v[found],
    )
    gpu, gpus = _codes(versions["gpu_model"])
    values = values.append_column(
        "gpu_model", pa.DictionaryArray.from_arrays(pa.array(gpu[row]), pa.array(gpus))
    )
    night_names = sorted(set(nights.values()))
    night = np.array([night_names.index(nights[r]) for r in runs], np.int64)[run_v]
    ident, first = group_rows(values, list(ID_KEYS))
    order = np.lexsort((node_v, night, ident))
    comp = {c: _codes(versions[c]) for c in COMPONENTS if c in versions.column_names}
    return _Panel(
        y=np.log(np_col(values["value"]).astype(float))[order],
        node=node_v[order], night=night[order],
        comp={c: (codes[row][order], vnames) for c, (codes, vnames) in comp.items()},
        node_names=names, night_names=night_names,
        idents=cast(list[Identity], values.select(list(ID_KEYS)).take(pa.array(first)).to_pylist()),
        bounds=np.searchsorted(ident[order], np.arange(len(first) + 1)),
    )  # fmt: skip


# -- one identity --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Estimate:
    """One change of one bundle of components at one identity, before the BH step."""

    ident: int
    components: tuple[str, ...]
    from_versions: tuple[str, ...]
    to_versions: tuple[str, ...]
    log_effect: float  # NaN: not estimated
    se: float
    df: int
    nodes: int
    nights: int
    side_nodes: tuple[int, int]  # nodes on the from and the to side on the shared nights
    why: str | None = None  # set: confounded (the reason)
    first_night: str = ""  # the first night the new version was measured


@dataclass(frozen=True, kw_only=True)
class _Change:
    """A version change of a bundle and what the panel offers to estimate it."""

    bundle: tuple[str, ...]
    codes: np.ndarray  # the bundle's version code per observation
    a: int
    z: int
    col_a: int | None  # design columns (None: the reference version)
    col_z: int | None
    from_versions: tuple[str, ...]
    to_versions: tuple[str, ...]
    nodes: int
    nights: int
    side_nodes: tuple[int, int]
    first_night: str


@dataclass(frozen=True, kw_only=True)
class _Design:
    """What an identity's observations (nodes, nights, versions) allow, whatever its values:
    identities measured on the same nodes and nights share it."""

    node: np.ndarray
    night: np.ndarray
    x: np.ndarray  # version dummies
    xd: np.ndarray  # the same, node and night swept out
    kept: list[int]  # columns that keep a contrast of their own
    xtx_inv: np.ndarray
    df: int
    changes: list[_Change]


def _sweep(m: np.ndarray, node: np.ndarray, night: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """The within transformation: m less its node and night means (alternating projections,
    exact in one pass for a balanced panel)."""
    out = m - m.mean(axis=0)
    counts = [(g, np.maximum(np.bincount(g), 1).astype(float)) for g in (node, night)]
    scale = max(float(np.abs(out).max(initial=0.0)), 1e-300)

    def means(g: np.ndarray, count: np.ndarray) -> np.ndarray:
        cols = [
            np.bincount(g, weights=out[:, j], minlength=len(count)) for j in range(out.shape[1])
        ]
        return np.stack(cols, 1) / count[:, None]

    for _ in range(1000):
        for g, count in counts:
            out = out - means(g, count)[g]
        if np.abs(means(*counts[0])).max(initial=0.0) < tol * scale:
            break
    return out


def _bundles(codes: dict[str, np.ndarray]) -> list[list[str]]:
    """Components whose versions split the observations identically: they always changed together."""
    out: list[list[str]] = []
    for c, v in codes.items():
        for b in out:
            w = codes[b[0]]
            joint = len(np.unique(v * (int(w.max()) + 1) + w))
            if joint == int(v.max()) + 1 == int(w.max()) + 1:
                b.append(c)
                break
        else:
            out.append([c])
    return out


def _design(panel: _Panel, rows: slice) -> _Design | None:
    node = np.unique(panel.node[rows], return_inverse=True)[1]
    night_u, night = np.unique(panel.night[rows], return_inverse=True)
    raw = {c: v[rows] for c, (v, _) in panel.comp.items()}
    codes = {c: np.unique(v, return_inverse=True)[1] for c, v in raw.items()}
    codes = {c: v for c, v in codes.items() if v.max(initial=0) > 0}
    if not codes:
        return None
    cols, changes = [], []
    for b in _bundles(codes):
        v = codes[b[0]]
        first = np.full(int(v.max()) + 1, len(night_u))
        np.minimum.at(first, v, night)
        ref = int(np.argmin(first))
        column = {k: None if k == ref else len(cols) + k - (k > ref) for k in range(len(first))}
        cols += [(v == k).astype(float) for k in range(len(first)) if k != ref]

        def version(c: str, k: int, v: np.ndarray = v) -> str:
            return panel.comp[c][1][int(raw[c][np.flatnonzero(v == k)[0]])]

        for a, z in _transitions(v, node, night, first):
            n_all, n_shared, side = _support(v, a, z, node, night)
            changes.append(
                _Change(
                    bundle=tuple(b), codes=v, a=a, z=z, col_a=column[a], col_z=column[z],
                    from_versions=tuple(version(c, a) for c in b),
                    to_versions=tuple(version(c, z) for c in b),
                    nodes=n_all, nights=n_shared, side_nodes=side,
                    first_night=panel.night_names[int(night_u[first[z]])],
                )
            )  # fmt: skip
    x = np.stack(cols, 1)
    xd = _sweep(x, node, night)
    kept = _independent(xd, x - x.mean(axis=0))
    df = len(node) - (int(node.max()) + int(night.max()) + 1) - len(kept)
    xk = xd[:, kept]
    inv = np.linalg.inv(xk.T @ xk) if kept and df >= 1 else np.full((len(kept), len(kept)), np.nan)
    return _Design(
        node=node, night=night, x=x, xd=xd, kept=kept, xtx_inv=inv, df=max(df, 0), changes=changes
    )


def _fit_identity(panel: _Panel, i: int, cache: dict[bytes, _Design | None]) -> list[_Estimate]:
    rows = panel.rows(i)
    key = b"".join(
        a[rows].tobytes() for a in (panel.node, panel.night, *(v for v, _ in panel.comp.values()))
    )
    if key not in cache:
        cache[key] = _design(panel, rows)
    d = cache[key]
    if d is None:
        return []
    y = panel.y[rows]
    yd = _sweep(y[:, None], d.node, d.night)[:, 0]
    xk = d.xd[:, d.kept]
    beta = d.xtx_inv @ (xk.T @ yd) if d.kept else np.zeros(0)
    s2 = float(((yd - xk @ beta) ** 2).sum()) / d.df if d.df >= 1 else math.nan
    fitted = d.x[:, d.kept] @ beta if d.kept else np.zeros(len(y))
    out = []
    for ch in d.changes:
        est = _contrast(ch.col_a, ch.col_z, d.kept, beta, s2 * d.xtx_inv, d.df)
        why = _why(ch.bundle, est, ch.nights)
        if why and not math.isfinite(est[0]):
            est = _before_after(y - fitted, ch.codes, ch.a, ch.z, d.node, d.night)
        out.append(
            _Estimate(
                ident=i, components=ch.bundle, from_versions=ch.from_versions,
                to_versions=ch.to_versions, log_effect=est[0], se=est[1], df=est[2],
                nodes=ch.nodes, nights=ch.nights, side_nodes=ch.side_nodes, why=why,
                first_night=ch.first_night,
            )
        )  # fmt: skip
    return out


def _independent(xd: np.ndarray, xc: np.ndarray) -> list[int]:
    """Columns kept in order while each adds a direction the ones before it do not span."""
    kept: list[int] = []
    for j in range(xd.shape[1]):
        base = float(np.linalg.norm(xc[:, j])) or 1.0
        col = xd[:, j]
        if kept:
            a = xd[:, kept]
            col = col - a @ np.linalg.lstsq(a, col, rcond=None)[0]
        if np.linalg.norm(col) > VANISHED * base:
            kept.append(j)
    return kept


def _transitions(
    v: np.ndarray, node: np.ndarray, night: np.ndarray, first: np.ndarray
) -> list[tuple[int, int]]:
    """Version pairs some node went between, oriented from the version seen first.

    NOTE: observations arrive sorted by night, then node, so a stable sort by node puts each
    node's nights in order."""
    order = np.argsort(node, kind="stable")
    vn, nn = v[order], node[order]
    step = (nn[1:] == nn[:-1]) & (vn[1:] != vn[:-1])
    pairs = set(zip(vn[:-1][step].tolist(), vn[1:][step].tolist(), strict=True))

    def seen(k: int) -> tuple[int, int]:
        return int(first[k]), k

    oriented = {(a, z) if seen(a) <= seen(z) else (z, a) for a, z in pairs}
    if not oriented:  # no node was seen on two versions: versions in order of first night
        ks = sorted(range(len(first)), key=seen)
        oriented = set(pairwise(ks))
    return sorted(oriented, key=lambda p: (seen(p[1]), p))


def _contrast(
    a: int | None, z: int | None, kept: list[int], beta: np.ndarray, cov: np.ndarray, df: int
) -> tuple[float, float, int]:
    """e[z] - e[a] (the reference version's e is 0) and its standard error; NaN when a
    version's column did not survive the sweep."""
    pos = {j: p for p, j in enumerate(kept)}
    c = np.zeros(len(kept))
    for col, sign in ((z, 1.0), (a, -1.0)):
        if col is not None:
            if col not in pos:
                return math.nan, math.nan, df
            c[pos[col]] += sign
    var = float(c @ cov @ c)
    return float(c @ beta), math.sqrt(var) if var >= 0 else math.nan, df


def _support(
    v: np.ndarray, a: int, z: int, node: np.ndarray, night: np.ndarray
) -> tuple[int, int, tuple[int, int]]:
    """Nodes and nights of the same-night contrast: nights with both versions measured."""
    both = np.intersect1d(night[v == a], night[v == z])
    shared = np.isin(night, both)
    side = (len(np.unique(node[shared & (v == a)])), len(np.unique(node[shared & (v == z)])))
    return len(np.unique(node[shared & ((v == a) | (v == z))])), len(both), side


def _why(bundle: tuple[str, ...], est: tuple[float, float, int], nights: int) -> str | None:
    """Why the change cannot be told apart from something else, or None when it can."""
    together = (
        f"{' and '.join(bundle)} always changed together on the same nodes and nights"
        if len(bundle) > 1
        else ""
    )
    if math.isfinite(est[0]):
        return together or None
    if nights == 0:
        alone = ("reached every node measured on the same night, so it cannot be told from anything "
                 "else that changed that night (the fabric, firmware, the other components)")  # fmt: skip
    else:
        alone = "cannot be separated from the other changes and the nodes themselves"
    return f"{together}; the change {alone}" if together else f"the change {alone}"


def _before_after(
    r: np.ndarray, v: np.ndarray, a: int, z: int, node: np.ndarray, night: np.ndarray
) -> tuple[float, float, int]:
    """The fleet's step at the change: node-centred night means after less before (t on the
    nights); confounded with whatever else changed that night, so it only says how big."""
    centred = r - (np.bincount(node, weights=r) / np.bincount(node))[node]
    level = np.bincount(night, weights=centred) / np.maximum(np.bincount(night), 1)
    before = np.setdiff1d(night[v == a], night[v == z])
    after = np.setdiff1d(night[v == z], night[v == a])
    if len(before) < 2 or len(after) < 2:
        return math.nan, math.nan, 0
    lb, la = level[before], level[after]
    df = len(lb) + len(la) - 2
    pooled = (float(((lb - lb.mean()) ** 2).sum()) + float(((la - la.mean()) ** 2).sum())) / df
    return float(la.mean() - lb.mean()), math.sqrt(pooled * (1 / len(lb) + 1 / len(la))), df


# -- judging all of them together --------------------------------------------------------------


def _judge(raw: list[_Estimate], panel: _Panel, s: AttributeSettings, suite: str) -> Attribution:
    effect = np.array([e.log_effect for e in raw])
    se = np.array([e.se for e in raw])
    df = np.minimum(np.array([max(e.df, 1) for e in raw]), MAX_DF)
    short = np.array([e.why is None and not _enough(e, s) for e in raw])
    testable = np.isfinite(effect) & np.isfinite(se) & ~short
    p = np.full(len(raw), np.nan)
    half = np.full(len(raw), np.nan)
    if testable.any():
        p[testable], half[testable] = t_test(
            effect[testable], se[testable] ** 2, df[testable], CONFIDENCE
        )
    q = bh_adjust(np.clip(p, 0.0, 1.0))  # NOTE: 1 - P(|T| <= t) can round below 0
    higher = np.array([panel.idents[e.ident]["metric"] != LATENCY.name for e in raw])
    pct = np.expm1(effect) * 100
    better = np.where(higher, pct, -pct)
    judged = verdicts(np.nan_to_num(better), q, np.full(len(raw), s.threshold_pct), s.fdr)
    findings, notes = [], []
    for k, e in enumerate(raw):
        verdict = _verdict(e, str(judged[k]), bool(short[k]), bool(testable[k]))
        ci = (
            float(np.expm1(effect[k] - half[k]) * 100),
            float(np.expm1(effect[k] + half[k]) * 100),
        )
        regressed = judged[k] == Verdict.REGRESSION.value and testable[k]
        status = (Status.FAIL if regressed else Status.WARN if verdict == CONFOUNDED
                  else Status.SKIP if verdict == INSUFFICIENT else Status.PASS)  # fmt: skip
        identity = panel.idents[e.ident]
        effect_pct = float(pct[k]) if math.isfinite(pct[k]) else None
        for j, comp in enumerate(e.components):
            said = (f"{comp} {e.from_versions[j]} -> {e.to_versions[j]}: {verdict}"
                    + (f", {effect_pct:+.1f}% {identity['metric']}" if effect_pct is not None else "")
                    + f" at {_ident_label(identity)} ({e.nodes} nodes, {e.nights} nights side by side)")  # fmt: skip
            findings.append(
                VersionFinding(
                    code=comp, status=status, reason=said,
                    from_version=e.from_versions[j], to_version=e.to_versions[j],
                    identity=identity, effect_pct=effect_pct,
                    ci_pct=ci if testable[k] else None, q=float(q[k]) if testable[k] else None,
                    nodes=e.nodes, nights=e.nights, verdict=verdict,
                )
            )  # fmt: skip
    notes += _insufficient_notes(raw, short, judged, testable, s)
    return Attribution(
        findings=tuple(findings),
        confounded=_confounded(raw, findings, panel, s, suite),
        notes=tuple(notes),
    )


def _enough(e: _Estimate, s: AttributeSettings) -> bool:
    return min(e.side_nodes) >= s.min_nodes and e.nights >= s.min_nights


def _verdict(e: _Estimate, judged: str, short: bool, testable: bool) -> AttributionVerdict:
    if e.why is not None:
        return CONFOUNDED
    if short or not testable or judged == Verdict.NOISY.value:
        return INSUFFICIENT
    return AttributionVerdict(judged)


def _change(e: _Estimate) -> str:
    return "; ".join(
        f"{c} {a}->{z}"
        for c, a, z in zip(e.components, e.from_versions, e.to_versions, strict=True)
    )


def _insufficient_notes(
    raw: list[_Estimate],
    short: np.ndarray,
    judged: np.ndarray,
    testable: np.ndarray,
    s: AttributeSettings,
) -> list[str]:
    """One line per change that was insufficient somewhere, saying what is missing."""
    lines: dict[str, tuple[int, str]] = {}
    for k, e in enumerate(raw):
        if e.why is not None:
            continue
        if short[k]:
            missing = [f"{n} node(s) on {side} on the nights both were measured (need {s.min_nodes})"
                       for n, side in zip(e.side_nodes, ("the old version", "the new version"), strict=True)
                       if n < s.min_nodes]  # fmt: skip
            if e.nights < s.min_nights:
                missing.append(
                    f"{e.nights} night(s) with both versions side by side (need {s.min_nights})"
                )
            reason = "; ".join(missing)
        elif not testable[k]:
            reason = "no residual degrees of freedom: more nodes or nights needed"
        elif judged[k] == Verdict.NOISY.value:
            reason = (f"the effect may pass the {s.threshold_pct:g}% threshold but its interval is too wide "
                      f"for FDR {s.fdr:g}: more nodes on each side or more nights")  # fmt: skip
        else:
            continue
        count, _ = lines.get(_change(e), (0, reason))
        lines[_change(e)] = (count + 1, reason)
    return [f"{c}: insufficient at {n} measurement(s): {r}" for c, (n, r) in lines.items()]


def _confounded(
    raw: list[_Estimate],
    findings: list[VersionFinding],
    panel: _Panel,
    s: AttributeSettings,
    suite: str,
) -> tuple[Confounded, ...]:
    """The confounded sets over all identities, each with what it did and a canary plan."""
    regressed = {}
    by_set: dict[tuple, list[_Estimate]] = {}
    flat = iter(findings)
    for e in raw:
        fs = [next(flat) for _ in e.components]
        if e.why is None:
            continue
        key = (e.components, e.from_versions, e.to_versions, e.why)
        by_set.setdefault(key, []).append(e)
        regressed[key] = regressed.get(key, False) or any(f.regressed for f in fs)
    out = []
    for key, ests in by_set.items():
        comps, frm, to, why = key
        changes = tuple(f"{c} {a}->{z}" for c, a, z in zip(comps, frm, to, strict=True))
        joint = [f for f in findings if f.verdict == CONFOUNDED and f.component == comps[0]
                 and f.from_version == frm[0] and f.effect_pct is not None]  # fmt: skip
        said = f"{why} (from {ests[0].first_night}, at {len(ests)} measurement(s)"
        if joint:
            big = max(joint, key=lambda f: abs(f.effect_pct or 0.0))
            said += (f"; largest joint effect {big.effect_pct:+.1f}% {big.identity['metric']} "
                     f"at {_ident_label(big.identity)}")  # fmt: skip
        said += "; a regression" if regressed[key] else ""
        out.append(
            Confounded(
                components=comps,
                changes=changes,
                why=said + ")",
                plan=_plan(comps, frm, to, panel, s, suite),
                regressed=regressed[key],
            )
        )
    return tuple(out)


def _ident_label(i: Identity) -> str:
    size = human_bytes(i["size_bytes"]) if i["size_bytes"] is not None else ""
    return " ".join(str(p) for p in (i["collective"], i["dtype"], size, i["gpu_model"]) if p)


def _plan(
    comps: tuple[str, ...],
    frm: tuple[str, ...],
    to: tuple[str, ...],
    panel: _Panel,
    s: AttributeSettings,
    suite: str,
) -> CanaryPlan:
    """Nodes pinned so each change is measured alone beside a control on the same nights."""
    columns = {c: COMPONENTS[c][0] for c in comps}
    groups = [("control", dict(zip(comps, frm, strict=True)))]
    if len(comps) > 1:
        groups += [(f"{c}-{z}", {d: (z if d == c else a) for d, a in zip(comps, frm, strict=True)})
                   for c, z in zip(comps, to, strict=True)]  # fmt: skip
    nodes = sorted(panel.node_names)
    per = s.min_nodes
    out = []
    for g, (label, pins) in enumerate(groups):
        picked = nodes[g * per : (g + 1) * per]
        out.append(CanaryGroup(label=f"canary={label}", nodes=picked,
                               pin={columns[c]: v for c, v in pins.items()}))  # fmt: skip
    rest = ", ".join(f"{columns[c]}={z}" for c, z in zip(comps, to, strict=True))
    return CanaryPlan(
        suite=suite,
        nights=s.canary_nights,
        groups=out,
        rest=f"every other node on {rest}",
        run=f"each night, on each group's nodes: fleetval run {suite} --label canary=<group>; "
        f"then fleetval attribute --since <first canary night>",
    )
