"""How an attribution reads: a table for the terminal, Markdown for tickets (JSON: Attribution.to_json)."""

from __future__ import annotations

from collections import Counter

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleetval.analysis.attribute import Attribution, Confounded, VersionFinding
from fleetval.text import human_bytes
from fleetval.vocab import AttributionVerdict

COLUMNS = (
    "component",
    "change",
    "measurement",
    "effect",
    "95% CI",
    "q",
    "nodes",
    "nights",
    "verdict",
)
STYLE = {AttributionVerdict.REGRESSION: "red", AttributionVerdict.IMPROVEMENT: "green",
         AttributionVerdict.CONFOUNDED: "yellow"}  # fmt: skip


def summary_line(a: Attribution) -> str:
    counts = Counter(f.verdict for f in a.findings)
    said = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no version change"
    changes = len({(f.component, f.from_version, f.to_version) for f in a.findings})
    return f"{changes} version change(s) at {len(a.findings)} measurement(s): {said}"


def shown(a: Attribution, *, all_rows: bool = False) -> list[VersionFinding]:
    """Everything but `unchanged`, unless all rows are asked for."""
    return [f for f in a.findings if all_rows or f.verdict != AttributionVerdict.UNCHANGED]


def _cells(f: VersionFinding) -> list[str]:
    i = f.identity
    size = human_bytes(i["size_bytes"]) if i["size_bytes"] is not None else ""
    what = " ".join(
        str(p) for p in (i["collective"], i["dtype"], size, i["gpu_model"], i["metric"]) if p
    )
    ci = f"[{f.ci_pct[0]:+.1f}, {f.ci_pct[1]:+.1f}]" if f.ci_pct else "-"
    return [
        f.component, f"{f.from_version} -> {f.to_version}", what,
        f"{f.effect_pct:+.1f}%" if f.effect_pct is not None else "-", ci,
        f"{f.q:.2g}" if f.q is not None else "-", str(f.nodes), str(f.nights), f.verdict,
    ]  # fmt: skip


def plan_lines(c: Confounded) -> list[str]:
    p = c.plan
    lines = [f"canary plan ({p['nights']} nights, suite {p['suite']}):"]
    for g in p["groups"]:
        pins = ", ".join(f"{k}={v}" for k, v in g["pin"].items())
        lines.append(f"  {g['label']}: {', '.join(g['nodes'])} pinned to {pins}")
    lines += [f"  {p['rest']}", f"  {p['run']}"]
    return lines


def to_rich(a: Attribution, *, all_rows: bool = False) -> Group:
    """One table per change and measurement family (collective, dtype, GPU model, metric), a
    row per size, so it fits a terminal: what moved, how much, how sure."""
    parts: list[Table | Text] = [Text(summary_line(a), style="bold")]
    tables: dict[str, Table] = {}
    for f in shown(a, all_rows=all_rows):
        i = f.identity
        family = " ".join(str(i[k]) for k in ("collective", "dtype", "gpu_model", "metric") if i[k])
        title = f"{f.component} {f.from_version} -> {f.to_version}: {family}"
        if title not in tables:
            tables[title] = Table(title=title, title_justify="left", title_style="bold",
                                  box=box.SIMPLE_HEAD, pad_edge=False)  # fmt: skip
            for col in ("size", "effect", "95% CI", "q", "nodes", "nights", "verdict"):
                tables[title].add_column(
                    col, no_wrap=True, justify="left" if col == "verdict" else "right"
                )
        size = human_bytes(i["size_bytes"]) if i["size_bytes"] is not None else ""
        tables[title].add_row(
            size, *_cells(f)[3:8], Text(f.verdict, style=STYLE.get(f.verdict, ""))
        )
    parts += tables.values()
    for c in a.confounded:
        parts.append(Text(f"confounded: {', '.join(c.changes)}: {c.why}", style="yellow"))
        parts += [Text(line) for line in plan_lines(c)]
    parts += [Text(f"note: {n}", style="dim") for n in a.notes]
    return Group(*parts)


def to_markdown(a: Attribution, *, all_rows: bool = False) -> str:
    lines = ["## Which change did it", "", summary_line(a), ""]
    rows = shown(a, all_rows=all_rows)
    if rows:
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(f)) + " |" for f in rows]
        lines.append("")
    for c in a.confounded:
        lines += [
            f"**Confounded**: {', '.join(c.changes)}: {c.why}",
            "",
            "```",
            *plan_lines(c),
            "```",
            "",
        ]
    lines += [f"- {n}" for n in a.notes]
    return "\n".join(lines).rstrip() + "\n"
