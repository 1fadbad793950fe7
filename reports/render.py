"""A Signoff as HTML (one self-contained file), Markdown (CI summary / PR comment) or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from pydantic import BaseModel

from fleetval.checks.spec import plural
from fleetval.nodesets import SHOWN, compress, more
from fleetval.signoff.evaluate import Signoff
from fleetval.signoff.sweep import MARKDOWN_DRAIN_FORM, SweepView, SweepViewJSON
from fleetval.signoff.views import HardwareJSON, NodeEnv
from fleetval.text import human_bytes
from fleetval.vocab import Status, Verdict

JSON_SCHEMA = "fleetval.signoff/1"


class ReportFormat(StrEnum):
    """What `render` writes; chosen by the output file's suffix or an HTTP Accept header."""

    HTML = "html"  # self-contained: inline CSS and SVG plots, nothing fetched
    MD = "md"  # GitHub-flavoured Markdown
    JSON = "json"  # verdict, gates and evidence for machines


@dataclass(frozen=True)
class ReportKind:
    """How one report format is asked for and answered."""

    media_type: str  # what the service answers with
    accepts: tuple[str, ...]  # the Accept media types that ask the service for it
    suffixes: tuple[str, ...]  # the `-o FILE` suffixes that ask the CLI for it
    body: str  # its body's type in the service's OpenAPI document

    @property
    def media(self) -> str:
        """The media type without its parameters (charset)."""
        return self.media_type.split(";")[0]


# The report formats, named once: the CLI's suffixes, the service's Accept header and its
# OpenAPI responses all read this.
REPORTS: dict[ReportFormat, ReportKind] = {
    ReportFormat.HTML: ReportKind("text/html; charset=utf-8", ("text/html", "*/*", "text/*"),
                                  (".html", ".htm"), "string"),
    ReportFormat.MD: ReportKind("text/markdown; charset=utf-8",
                                ("text/markdown", "text/x-markdown"), (".md", ".markdown"),
                                "string"),
    ReportFormat.JSON: ReportKind("application/json", ("application/json", "text/json"),
                                  (".json",), "object"),
}  # fmt: skip


def format_for_path(path: Path | str) -> ReportFormat:
    suffix = Path(path).suffix.lower()
    for fmt, kind in REPORTS.items():
        if suffix in kind.suffixes:
            return fmt
    *most, last = (kind.suffixes[0] for kind in REPORTS.values())
    raise ValueError(f"-o {path}: the suffix picks the format: {', '.join(most)} or {last}")


def format_for_accept(accept: str | None) -> ReportFormat:
    """HTML unless the Accept header prefers Markdown or JSON (first match in its order)."""
    for part in (accept or "").split(","):
        media = part.split(";")[0].strip().lower()
        for fmt, kind in REPORTS.items():
            if media in kind.accepts:
                return fmt
    return ReportFormat.HTML


_env = Environment(
    loader=PackageLoader("fleetval.reports", "templates"),
    autoescape=select_autoescape(["html", "html.j2"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["bytes"] = lambda n: "" if n is None else human_bytes(int(n))
_env.filters["num"] = lambda x: "" if x is None else f"{x:.4g}"
_env.filters["when"] = lambda t: t.strftime("%Y-%m-%d %H:%M:%S UTC") if t else ""
_env.filters["md"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ")
# A node's state in one sweep as one letter (Markdown) or a cell's class (HTML); "-": not in it.
_env.filters["plural"] = plural
_env.tests["failing"] = lambda status: str(status) == Status.FAIL.value  # a row status, named once
_env.filters["hosts"] = lambda nodes: compress(nodes, limit=SHOWN)  # node-[1-7,9] ...
_env.filters["letter"] = lambda state: state.value[0].upper() if state else "-"


class Plots(TypedDict):
    """Every plot of the HTML page as inline SVG; None: not drawn (said in words instead)."""

    busbw: dict[str, str]  # per collective
    scaling: str | None
    heat: str | None
    trends: dict[str, str]  # per node: its GB/s over the sweeps
    links: str | None


def _plots(s: Signoff) -> Plots:
    """Every plot of the page as inline SVG; absent views are said in words instead."""
    # NOTE: matplotlib loads here, for an HTML page, not with the module: Markdown and JSON
    # reports, and every process that imports the service's app, skip it (bench/RESULTS.md).
    from fleetval.reports import plots

    v = s.views
    busbw = {c: plots.busbw_plot(c, series, f"busbw-{c}") for c, series in v.busbw.items()}
    scaling = (
        plots.scaling_plot(v.scaling, "scaling")
        if any(p.efficiency is not None for p in v.scaling)
        else None
    )
    h = v.heat_view
    heat = plots.heat_map(h.nodes, h.checks, h.cells, "heat") if h.nodes else None
    trends = _trends(v.sweep) if v.sweep else {}
    matrix = plots.link_matrix_svg(v.sweep.matrix, "links") if v.sweep and v.sweep.matrix else None
    return Plots(busbw=busbw, scaling=scaling, heat=heat, trends=trends, links=matrix)


def _trends(sw: SweepView) -> dict[str, str]:
    """Each node's GB/s over the sweeps, all on one scale: 0 to the most any node measured."""
    from fleetval.reports import plots

    top = max((c.score or 0.0 for t in sw.history for c in t.cells), default=0.0)
    return {t.node: plots.sparkline([c.score for c in t.cells], top) for t in sw.history}


def _changes(s: Signoff) -> list[Any]:
    """Comparison results worth a line, worst first (compare's order)."""
    if s.comparison is None:
        return []
    hidden = (Verdict.UNCHANGED, Verdict.MISSING, Verdict.NEW)  # counted in the regression gate
    return [m for m in s.comparison.results if m.verdict not in hidden][:200]


class Context(TypedDict):
    """What the HTML and Markdown templates read."""

    s: Signoff
    counts: dict[str, int]  # gate status -> gates
    changes: list[Any]  # compare's results worth a line
    shown: int
    more: Callable[[int, str], str]


def _context(s: Signoff) -> Context:
    counts: dict[str, int] = {}
    for g in s.gates:
        counts[g.status.value] = counts.get(g.status.value, 0) + 1
    return Context(s=s, counts=counts, changes=_changes(s), shown=SHOWN, more=more)


class RunJSON(TypedDict):
    run_id: str
    suite: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    labels: dict[str, str]
    backend: str
    faults: list[Any]  # each as the suite declared it


class HeatJSON(TypedDict):
    checks: list[str]
    nodes: dict[str, list[str | None]]  # node -> its worst status per check


class EnvDiffJSON(TypedDict):
    key: str
    baseline: str
    candidate: str


class ReportJSON(TypedDict):
    """The JSON report (`JSON_SCHEMA`): what machines read of a sign-off."""

    schema: str
    verdict: str
    exit_code: int
    run: RunJSON
    baseline: str | None
    gates_declared: bool
    gates: list[Any]  # each gate's result with its evidence (asdict)
    incidents: list[Any]  # asdict of each Incident
    hardware: HardwareJSON | None
    heat: HeatJSON
    environment: list[NodeEnv]
    env_diff: list[EnvDiffJSON]
    parquet_paths: list[str]
    notes: list[str]
    sweep: SweepViewJSON | None
    generated_at: datetime


def to_json(s: Signoff) -> ReportJSON:
    """The machine view: verdict, gates with evidence, incidents, environment, paths."""
    r = s.run
    return ReportJSON(
        schema=JSON_SCHEMA,
        verdict=s.verdict.value,
        exit_code=s.exit_code,
        run=RunJSON(
            run_id=r.run_id,
            suite=r.suite,
            status=r.status,
            started_at=r.started_at,
            finished_at=r.finished_at,
            labels=r.labels,
            backend=r.backend,
            faults=r.faults,
        ),
        baseline=s.baseline,
        gates_declared=s.gates_declared,
        gates=[asdict(g) for g in s.gates],
        incidents=[asdict(i) for i in s.views.incidents],
        hardware=s.views.hardware.to_dict() if s.views.hardware else None,
        heat=HeatJSON(
            checks=list(s.views.heat_checks),
            nodes=dict(zip(s.views.heat_nodes, map(list, s.views.heat), strict=True)),
        ),
        environment=list(s.views.environment),
        env_diff=[EnvDiffJSON(key=k, baseline=b, candidate=c) for k, b, c in s.views.env_diff],
        parquet_paths=list(s.parquet_paths),
        notes=list(s.notes),
        sweep=s.views.sweep.to_dict() if s.views.sweep else None,
        generated_at=s.generated_at,
    )


def _default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if isinstance(o, BaseModel):  # a Waiver inside a gate
        return o.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def render(signoff: Signoff, fmt: ReportFormat | str) -> str:
    """The report as text in the given format ("html", "md" or "json")."""
    fmt = ReportFormat(fmt)
    if fmt == ReportFormat.JSON:
        return json.dumps(to_json(signoff), indent=2, default=_default) + "\n"
    if fmt == ReportFormat.MD:
        md = _env.get_template("report.md.j2")
        return md.render(**_context(signoff), drain_form=MARKDOWN_DRAIN_FORM)
    return _env.get_template("report.html.j2").render(**_context(signoff), plots=_plots(signoff))
