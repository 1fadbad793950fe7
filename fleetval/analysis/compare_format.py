"""Comparison output: a rich table for people, JSON for tools, Markdown for CI summaries, JUnit XML.

Pure functions from a `Comparison` (or `TrendReport`) to a string or a rich renderable.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any
from xml.etree import ElementTree as ET

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleetval.analysis.attribute import hint
from fleetval.analysis.compare import Comparison, MetricComparison, Outlier
from fleetval.analysis.compare_settings import COMPARE_FORMATS
from fleetval.analysis.trend import TrendReport
from fleetval.text import human_bytes
from fleetval.vocab import OutputFormat, Verdict

_STYLE = {
    Verdict.FAILED: "bold red",
    Verdict.REGRESSION: "red",
    Verdict.NOISY: "yellow",
    Verdict.MISSING: "magenta",
    Verdict.NEW: "cyan",
    Verdict.IMPROVEMENT: "green",
    Verdict.UNCHANGED: "dim",
}


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "" if x is None else format(x, fmt)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.2f}%"


def _ci(r: MetricComparison) -> str:
    if r.ci_low_pct is None or r.ci_high_pct is None:
        return ""
    return f"[{r.ci_low_pct:+.2f}, {r.ci_high_pct:+.2f}]"


def _df(r: MetricComparison) -> str:
    """The test's df as own+history+family ("4+0+92"): few is why a big change is noisy."""
    if r.df is None:
        return ""
    return f"{r.own_df}+{r.history_df}+{r.family_df}"


_DF_LEGEND = (
    "df: the run sd's degrees of freedom, own runs + history + family prior; "
    "few make a wide interval, so a large change can be noisy"
)


def summary_line(c: Comparison, strict: bool = False) -> str:
    counts = ", ".join(f"{n} {v.value}" for v, n in c.counts().items() if n)
    reasons = c.gate_reasons(strict)
    head = f"GATE FAILS ({'; '.join(reasons)})" if reasons else "gate passes"
    return f"{head}: {counts} ({len(c.candidate_runs)} candidate vs {len(c.baseline_runs)} baseline runs)"


def _env_lines(c: Comparison) -> list[str]:
    return [
        f"{e.key}: {', '.join(e.baseline) or '-'} -> {', '.join(e.candidate) or '-'}"
        for e in c.env_diff
    ]


def _hint(c: Comparison) -> list[str]:
    """Point at `fleetval attribute` when a regression coincides with a version change."""
    said = hint(e.key for e in c.env_diff) if c.having(Verdict.REGRESSION) else None
    return [said] if said else []


def _size(r: MetricComparison) -> str:
    return human_bytes(r.identity.size_bytes) if r.identity.size_bytes is not None else ""


def to_rich(
    c: Comparison, *, all_rows: bool = False, strict: bool = False, width: int = 80
) -> Group:
    """Verdicts grouped by what was measured (check, collective, op, dtype, world size,
    group), so the identity shows in any terminal width; unchanged rows folded unless all_rows."""
    parts: list[Any] = [
        Text(
            f"baseline {c.baseline}: {c.baseline_selection} -> {len(c.baseline_runs)} runs",
            style="bold",
        ),
        Text(f"candidate: {', '.join(c.candidate_runs)}  (matched per {c.per})"),
    ]
    if c.env_diff:
        parts.append(Text("environment changed: " + "; ".join(_env_lines(c)), style="yellow"))
        parts += [Text(h, style="yellow") for h in _hint(c)]
    shown = _shown(c, all_rows)
    wide = width >= 110
    families: dict[str, list[MetricComparison]] = {}
    for r in shown:
        families.setdefault(r.identity.family(), []).append(r)
    for family, rows in families.items():
        table = Table(title=family, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                      pad_edge=False)  # fmt: skip
        cols = ["verdict", "size", "metric", *(["baseline", "candidate"] if wide else []),
                "change", "interval", "q", "runs", *(["df"] if wide else [])]  # fmt: skip
        for col in cols:
            table.add_column(col, justify="left" if col in ("verdict", "metric") else "right",
                             no_wrap=True)  # fmt: skip
        for r in rows:
            cells = [Text(r.verdict.value, style=_STYLE[r.verdict]), _size(r), r.identity.metric]
            if wide:
                cells += [_num(r.baseline_median), _num(r.candidate_median)]
            cells += [
                _pct(r.change_pct),
                _ci(r),
                _num(r.q_value, ".2g"),
                f"{r.n_baseline}+{r.n_candidate}",
                *([_df(r)] if wide else []),
            ]
            table.add_row(*cells)
        parts.append(table)
    if wide and any(r.df is not None for r in shown):
        parts.append(Text(_DF_LEGEND, style="dim"))
    folded = len(c.results) - len(shown)
    if folded:
        parts.append(
            Text(f"{folded} unchanged (within threshold) not shown; --all shows them", style="dim")
        )
    parts += [outlier_text(o) for o in c.outliers]
    parts += [Text(n, style="dim") for n in c.notes]
    bad = c.exit_code(strict)
    parts.append(Text(summary_line(c, strict), style="bold red" if bad else "bold green"))
    return Group(*parts)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def outlier_line(o: Outlier) -> str:
    """One fleet outlier in a line: who, on what, how far from its peers."""
    if o.kind == "late_rank":
        return (
            f"late rank in {o.run_id}: {o.unit} in {o.identity.check} {o.identity.collective} "
            f"n={o.identity.world_size}: the others wait for it {o.value:.0f}% of the collective's "
            f"time (peers {o.peer_median:.0f}%)"
        )
    return (
        f"outlier in {o.run_id}: {o.unit} {o.identity.label()} {o.value:.4g} vs peers "
        f"{o.peer_median:.4g} ({o.deviation_pct:+.1f}%, robust z {o.robust_z:.1f})"
    )


def outlier_text(o: Outlier) -> Text:
    return Text(outlier_line(o), style="yellow")


def to_json(c: Comparison, *, strict: bool = False) -> str:
    """Everything in the comparison, stable keys; verdicts as their string values."""
    data = {
        "baseline": c.baseline,
        "baseline_selection": c.baseline_selection,
        "baseline_runs": list(c.baseline_runs),
        "candidate_runs": list(c.candidate_runs),
        "history_runs": list(c.history_runs),
        "per": c.per,
        "settings": c.settings.model_dump(mode="json"),
        "summary": {v.value: n for v, n in c.counts().items()},
        "exit_code": c.exit_code(strict),
        "strict": strict,
        "gate": c.gate_reasons(strict),
        "failed_candidates": list(c.failed_candidates),
        "results": [asdict(r) for r in c.results],
        "env_diff": [asdict(e) for e in c.env_diff],
        "outliers": [asdict(o) for o in c.outliers],
        "notes": list(c.notes),
    }
    return json.dumps(_jsonable(data), indent=2, default=str) + "\n"


def _shown(c: Comparison, all_rows: bool) -> tuple[MetricComparison, ...]:
    """The results to show: all, or all but the unchanged (only those are made)."""
    if all_rows:
        return tuple(c.results)
    return c.having(*(v for v in Verdict if v != Verdict.UNCHANGED))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(c: Comparison, *, all_rows: bool = False, strict: bool = False) -> str:
    """A CI step summary: the verdict first, then what moved and why."""
    icon = "❌" if c.exit_code(strict) else "✅"
    lines = [
        f"## {icon} fleetval compare vs `{c.baseline}`",
        "",
        f"**{summary_line(c, strict)}**",
        "",
        f"- baseline: {c.baseline_selection} → {len(c.baseline_runs)} runs",
        f"- candidate: {', '.join(f'`{r}`' for r in c.candidate_runs)} (matched per {c.per})",
    ]
    if c.env_diff:
        env = [f"- {_md_cell(s)}" for s in _env_lines(c) + _hint(c)]
        lines += ["", "### Environment changes", "", *env]
    shown = _shown(c, all_rows)
    if shown:
        lines += [
            "",
            "| verdict | measurement | baseline | candidate | change | interval | q | why |",
            "|---|---|---:|---:|---:|---|---:|---|",
        ]
        for r in shown:
            lines.append(
                f"| {r.verdict.value} | {_md_cell(r.identity.label())} | {_num(r.baseline_median)} "
                f"| {_num(r.candidate_median)} | {_pct(r.change_pct)} | {_ci(r)} "
                f"| {_num(r.q_value, '.2g')} | {_md_cell(r.reason)} |"
            )
    if len(shown) < len(c.results):
        lines += ["", f"{len(c.results) - len(shown)} measurements unchanged (within threshold)."]
    if c.outliers:
        lines += ["", "### Fleet outliers", ""]
        lines += [f"- {_md_cell(outlier_line(o))}" for o in c.outliers]
    return "\n".join(lines) + "\n"


def to_junit(c: Comparison, *, strict: bool = False) -> str:
    """One test case per comparison; what fails the gate is a failure (noisy only if strict)."""
    bad = (Verdict.REGRESSION, Verdict.FAILED, Verdict.MISSING) + (
        (Verdict.NOISY,) if strict else ()
    )
    suite = ET.Element(
        "testsuite",
        name=f"fleetval compare vs {c.baseline}",
        tests=str(len(c.results)),
        failures=str(sum(r.verdict in bad for r in c.results)),
        skipped=str(sum(r.verdict == Verdict.NEW for r in c.results)),
        errors="0",
    )
    props = ET.SubElement(suite, "properties")
    for e in c.env_diff:
        ET.SubElement(
            props,
            "property",
            name=f"env.{e.key}",
            value=f"{', '.join(e.baseline)} -> {', '.join(e.candidate)}",
        )
    for r in c.results:
        i = r.identity
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"fleetval.{i.check}.{i.collective or i.metric}",
            name=i.label(),
        )
        text = f"{r.verdict.value}: {r.reason}"
        if r.verdict in bad:
            ET.SubElement(case, "failure", message=text, type=r.verdict.value).text = text
        elif r.verdict == Verdict.NEW:
            ET.SubElement(case, "skipped", message=text)
        else:
            ET.SubElement(case, "system-out").text = text
    for o in c.outliers:
        case = ET.SubElement(suite, "testcase", classname="fleetval.outliers", name=o.unit)
        ET.SubElement(case, "failure", message=outlier_line(o), type=o.kind).text = outlier_line(o)
    for run_id in c.failed_candidates:
        case = ET.SubElement(suite, "testcase", classname="fleetval.run", name=run_id)
        ET.SubElement(case, "failure", message="the candidate run did not pass", type="run")
    suite.set("tests", str(len(c.results) + len(c.outliers) + len(c.failed_candidates)))
    suite.set(
        "failures",
        str(sum(r.verdict in bad for r in c.results) + len(c.outliers) + len(c.failed_candidates)),
    )
    suites = ET.Element("testsuites")
    suites.append(suite)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def format_comparison(
    c: Comparison,
    fmt: OutputFormat,
    *,
    all_rows: bool = False,
    strict: bool = False,
    width: int = 80,
) -> str | Group:
    """The comparison in one of: table (a rich renderable), json, markdown, junit."""
    if fmt == OutputFormat.TABLE:
        return to_rich(c, all_rows=all_rows, strict=strict, width=width)
    if fmt == OutputFormat.JSON:
        return to_json(c, strict=strict)
    if fmt == OutputFormat.MARKDOWN:
        return to_markdown(c, all_rows=all_rows, strict=strict)
    if fmt == OutputFormat.JUNIT:
        return to_junit(c, strict=strict)
    raise ValueError(f"--format must be {' or '.join(COMPARE_FORMATS)}, not {fmt!r}")


def trend_table(report: TrendReport) -> Group:
    """Change points, each with the run where the step happened and what changed there."""
    table = Table(box=box.SIMPLE_HEAD)
    for col in (
        "measurement",
        "step at run",
        "before",
        "after",
        "change",
        "status",
        "versions changed",
    ):
        table.add_column(col, overflow="fold")
    for t in report.trends:
        for p in t.change_points:
            style = "red" if p.worse else ("green" if p.worse is False else "")
            if p.worse:
                status = f"recovered at {p.recovered_at}" if p.recovered_at else "worse"
            else:
                status = "better" if p.worse is False else ""
            env = "; ".join(
                f"{e.key} {','.join(e.baseline)}->{','.join(e.candidate)}" for e in p.env_changes
            )
            table.add_row(
                t.identity.label(), p.run_id, f"{p.before:.4g}", f"{p.after:.4g}",
                Text(f"{p.change_pct:+.2f}%", style=style), status, env,
            )  # fmt: skip
    head = Text(
        f"{report.series} series over {len(report.runs)} runs; {len(report.trends)} with a step "
        f"(threshold {report.threshold_pct:g}%)"
    )
    worse = [e.key for t in report.trends for p in t.change_points if p.worse and not p.recovered_at
             for e in p.env_changes]  # fmt: skip
    said = [Text(h, style="yellow") for h in [hint(worse)] if h]
    return Group(head, table, *said) if report.trends else Group(head)


def trend_json(report: TrendReport) -> str:
    return json.dumps(_jsonable(asdict(report)), indent=2, default=str) + "\n"
