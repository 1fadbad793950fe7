"""What a report shows of a fleet sweep: its verdict, and each node over the last N sweeps.

A sweep is a stored run whose summary holds its verdict (`summary["sweep"]`, written by
`fleetval.run.sweep`). The history is `fleetval.fleet.history`'s (what `fleetval
sweep-history` prints), cut at the reported run: a report of an older sweep never shows
newer ones. Plain frozen dataclasses, so `fleetval.reports` only formats them.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import TypedDict

from fleetval.fleet.drain import DrainForm, drain_lines
from fleetval.fleet.history import DRIFT, NodeHistory, node_histories, sweep_runs
from fleetval.fleet.topology import LEVELS
from fleetval.fleet.verdict import FleetVerdict, LinkMeasured
from fleetval.signoff.gates import is_sweep
from fleetval.store.catalog import Catalog
from fleetval.store.records import JsonObject, Run
from fleetval.vocab import LinkState, NodeState

SWEEPS_SHOWN = 10  # `fleetval report --sweeps`
MATRIX_NODES = 48  # up to this many nodes a matrix cell is a link; beyond, a pair of groups
# The drain list as a report pastes it: HTML and JSON in each of these forms, Markdown in
# one (a CI summary has room for one block): the scheduler's.
DRAIN_FORMS = (DrainForm.KUBECTL, DrainForm.SLURM)
MARKDOWN_DRAIN_FORM = DrainForm.SLURM


@dataclass(frozen=True, kw_only=True)
class SweepCell:
    """One node in one sweep of the history; state None: the node was not in that sweep."""

    run_id: str
    state: NodeState | None
    score: float | None  # GB/s: pair busbw where paired, else alone


@dataclass(frozen=True, kw_only=True)
class NodeTrend:
    """One node across the sweeps shown, a cell per sweep (oldest first), and its flags."""

    history: NodeHistory
    cells: tuple[SweepCell, ...]

    @property
    def node(self) -> str:
        return self.history.node

    @property
    def notable(self) -> bool:
        """Not healthy in some sweep shown, or flagged (what a short report lists)."""
        unhealthy = any(c.state not in (None, NodeState.HEALTHY) for c in self.cells)
        return unhealthy or bool(self.history.findings)


@dataclass(frozen=True, kw_only=True)
class MatrixCell:
    """A link (or the worst link between two groups) in the reported sweep."""

    gbps: float | None
    ratio: float | None  # against the sweep's pair level (its reference)
    verdict: LinkState
    change: float | None = None  # against the median of the earlier sweeps' measurements
    links: int = 1

    def to_dict(self) -> MatrixCellJSON:
        return MatrixCellJSON(**dataclasses.asdict(self))


class MatrixCellJSON(TypedDict):
    gbps: float | None
    ratio: float | None
    verdict: str
    change: float | None
    links: int


class LinkCellJSON(MatrixCellJSON):
    a: str
    b: str


class BlockJSON(TypedDict):
    group: str
    rows: int


class LinkMatrixJSON(TypedDict):
    level: str
    rows: list[str]
    blocks: list[BlockJSON]
    blocks_by: str
    reference_gbps: float | None
    earlier_sweeps: int
    flagged_links: list[list[str]]
    flagged_trunks: list[list[str]]
    cells: list[LinkCellJSON]


@dataclass(frozen=True, kw_only=True)
class LinkMatrix:
    """Pair busbw node by node (or group by group on a large fleet), rows in racks."""

    level: str  # "node", or the topology level whose groups the rows are
    rows: tuple[str, ...]
    blocks: tuple[tuple[str, int], ...]  # (group, rows in it), in row order; () unlabelled
    cells: dict[tuple[str, str], MatrixCell]  # (row, column) and (column, row)
    reference: float | None  # the pair level, GB/s
    earlier: int  # sweeps the change is measured against
    by: str = ""  # the topology level of the blocks ("" without topology)
    flagged: frozenset[tuple[str, str]] = frozenset()  # cells of flagged links (both orders)
    trunks: frozenset[tuple[str, str]] = frozenset()  # pairs of groups whose trunk is flagged

    def cell(self, a: str, b: str) -> MatrixCell | None:
        return self.cells.get((a, b))

    @property
    def starts(self) -> set[int]:
        """Row indexes that begin a block (a thicker line before them)."""
        out, at = set(), 0
        for _, n in self.blocks:
            out.add(at)
            at += n
        return out - {0}

    def to_dict(self) -> LinkMatrixJSON:
        return LinkMatrixJSON(
            level=self.level,
            rows=list(self.rows),
            blocks=[BlockJSON(group=g, rows=n) for g, n in self.blocks],
            blocks_by=self.by,
            reference_gbps=self.reference,
            earlier_sweeps=self.earlier,
            flagged_links=sorted([a, b] for a, b in self.flagged if a < b),
            flagged_trunks=sorted([a, b] for a, b in self.trunks if a < b),
            cells=[
                {"a": a, "b": b, **c.to_dict()} for (a, b), c in sorted(self.cells.items()) if a < b
            ],
        )


@dataclass(frozen=True, kw_only=True)
class SweepView:
    verdict: FleetVerdict  # the reported sweep's, read back from its summary
    stored: JsonObject  # the same as stored (with references and trials), for JSON
    drain_lines: dict[DrainForm, tuple[str, ...]]  # form -> lines to paste (DRAIN_FORMS)
    last: int  # how many sweeps were asked for
    runs: tuple[str, ...]  # the sweeps shown, oldest first; the reported one last
    history: tuple[NodeTrend, ...]  # by node name
    matrix: LinkMatrix | None = None  # None: the sweep stored no link measurements
    drift_limit: float = DRIFT  # drifting: the newer sweeps' median this much below the older

    def to_dict(self) -> SweepViewJSON:
        return SweepViewJSON(
            verdict=self.stored,
            drain_lines={f: list(lines) for f, lines in self.drain_lines.items()},
            history=HistoryJSON(
                last=self.last,
                runs=list(self.runs),
                nodes=[t.history.to_dict() for t in self.history],
            ),
            matrix=self.matrix.to_dict() if self.matrix else None,
        )


class HistoryJSON(TypedDict):
    last: int
    runs: list[str]
    nodes: list[JsonObject]  # fleet.history.NodeHistory.to_dict


class SweepViewJSON(TypedDict):
    verdict: JsonObject  # the sweep's verdict as stored in its run's summary
    drain_lines: dict[str, list[str]]
    history: HistoryJSON
    matrix: LinkMatrixJSON | None


def sweep_view(catalog: Catalog, record: Run, last: int = SWEEPS_SHOWN) -> SweepView | None:
    """The sweep section of `record`'s report, None when the run is not a sweep."""
    if not is_sweep(record.summary):
        return None
    if last < 1:
        raise ValueError(f"sweeps: {last} sweeps shown; at least 1 (the reported one)")
    runs = sweep_runs(catalog, last, until=record.run_id)
    ids = tuple(r.run_id for r in runs)
    verdict = FleetVerdict.from_dict(record.summary["sweep"])
    return SweepView(
        verdict=verdict,
        stored=record.summary["sweep"],
        drain_lines={f: tuple(drain_lines(verdict, f, record.run_id)) for f in DRAIN_FORMS},
        last=last,
        runs=ids,
        history=tuple(_trend(h, ids) for h in node_histories(runs)),
        matrix=link_matrix(verdict, record.summary["sweep"], runs[:-1]),
    )


def link_matrix(v: FleetVerdict, stored: JsonObject, earlier: list[Run]) -> LinkMatrix | None:
    """The reported sweep's links as a matrix, rows grouped by the coarsest topology level;
    each cell's change against the median of the `earlier` sweeps' measurements of it."""
    if not v.coverage:
        return None
    levels = stored.get("levels", {})
    ref = next((g for k, g in sorted(levels.items()) if k.startswith("pair/")), None)
    past: dict[tuple[str, str], list[float]] = {}
    for r in earlier:
        for c in r.summary["sweep"].get("coverage", ()):
            if c.get("gbps") is not None:
                past.setdefault(tuple(c["nodes"]), []).append(c["gbps"])  # type: ignore[arg-type]
    level = next((lv for lv in LEVELS if any(lv in g for g in v.topology.values())), None)
    group = {n.node: (v.topology.get(n.node, {}).get(level, "") if level else "") for n in v.nodes}
    cells = {c.nodes: _cell(c, ref, past.get(c.nodes, [])) for c in v.coverage}
    trunks = frozenset(p for t in v.bad_trunks if t.level == level for p in _orders(t.groups))
    if len(v.nodes) > MATRIX_NODES:
        if level is None:
            return None
        flagged = frozenset(
            p for x in v.bad_links for p in _orders((group[x.nodes[0]], group[x.nodes[1]]))
        )
        return dataclasses.replace(
            _groups(level, group, cells, ref, len(earlier)), flagged=flagged, trunks=trunks
        )
    rows = tuple(sorted(group, key=lambda n: (group[n], n)))
    return LinkMatrix(
        level="node", rows=rows, blocks=_blocks([group[n] for n in rows]) if level else (),
        cells=_both(cells), reference=ref, earlier=len(earlier), by=level or "",
        flagged=frozenset(p for x in v.bad_links for p in _orders(x.nodes)), trunks=trunks,
    )  # fmt: skip


def _orders(p: tuple[str, str]) -> tuple[tuple[str, str], tuple[str, str]]:
    return (p[0], p[1]), (p[1], p[0])


def _cell(c: LinkMeasured, ref: float | None, past: list[float]) -> MatrixCell:
    ratio = c.gbps / ref if c.gbps is not None and ref else None
    before = statistics.median(past) if past else None
    change = c.gbps / before - 1 if c.gbps is not None and before else None
    return MatrixCell(gbps=c.gbps, ratio=ratio, verdict=LinkState(c.verdict), change=change)


WORST = tuple(LinkState)  # worst first


def _groups(
    level: str,
    group: dict[str, str],
    cells: dict[tuple[str, str], MatrixCell],
    ref: float | None,
    earlier: int,
) -> LinkMatrix:
    """A large fleet: one cell per pair of groups, its worst link (and how many were measured)."""
    worst: dict[tuple[str, str], list[MatrixCell]] = {}
    for (a, b), c in cells.items():
        ga, gb = sorted((group.get(a, ""), group.get(b, "")))
        worst.setdefault((ga, gb), []).append(c)
    out = {}
    for key, cs in worst.items():
        w = min(cs, key=lambda c: (WORST.index(c.verdict), c.ratio if c.ratio is not None else 0))
        out[key] = MatrixCell(gbps=w.gbps, ratio=w.ratio, verdict=w.verdict, change=w.change,
                              links=len(cs))  # fmt: skip
    rows = tuple(sorted(set(group.values())))
    return LinkMatrix(level=level, rows=rows, blocks=(), cells=_both(out), reference=ref,
                      earlier=earlier)  # fmt: skip


def _both(cells: dict[tuple[str, str], MatrixCell]) -> dict[tuple[str, str], MatrixCell]:
    return cells | {(b, a): c for (a, b), c in cells.items()}


def _blocks(groups: list[str]) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    for g in groups:
        if out and out[-1][0] == g:
            out[-1] = (g, out[-1][1] + 1)
        else:
            out.append((g, 1))
    return tuple(out)


def _trend(h: NodeHistory, runs: tuple[str, ...]) -> NodeTrend:
    seen = {s.run_id: s for s in h.seen}
    cells = tuple(
        SweepCell(run_id=r, state=seen[r].state, score=seen[r].score)
        if r in seen
        else SweepCell(run_id=r, state=None, score=None)
        for r in runs
    )
    return NodeTrend(history=h, cells=cells)
