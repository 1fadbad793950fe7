"""The report's plots: matplotlib figures (no pyplot state) written as inline SVG.

SVG keeps the HTML one self-contained file that opens with no network; text stays text
(`svg.fonttype: none`) so the browser draws it with its own fonts.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import LinearSegmentedColormap, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from fleetval.signoff.sweep import LinkMatrix
from fleetval.signoff.views import ScalingView, Series
from fleetval.text import human_bytes
from fleetval.vocab import Status

# Status -> heat map colour index: not run, skip, recorded only (info, unjudged), pass, warn, fail.
_HEAT_CODES: dict[str | None, int] = {
    None: 0,
    Status.SKIP: 1,
    Status.INFO: 2,
    Status.UNJUDGED: 2,
    Status.PASS: 3,
    Status.WARN: 4,
    Status.FAIL: 5,
}
_HEAT_COLOURS = ["#f2f2f2", "#c9c9c9", "#90caf9", "#4caf50", "#ffb300", "#e53935"]
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_CANDIDATE = ["#1565c0", "#6a1b9a", "#00838f", "#ef6c00", "#2e7d32", "#ad1457"]


def _svg(fig: Figure, salt: str) -> str:
    """The figure as an <svg> element (no XML prolog); `salt` keeps element ids unique
    across the plots of one page.

    NOTE: rc_context sets matplotlib's global rcParams for the save; both values only
    shape the SVG text, so a concurrent render at worst gets the other plot's id salt.
    """
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # The RDF block only names the tool and date; dropping it keeps the page free of URLs.
    return _METADATA.sub("", text[text.index("<svg") :], count=1)


def _bytes_axis(ax: Axes) -> None:
    """Powers of two, at most ~10 labelled ticks (a sweep spans 8 B to GiB: 30 sizes)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=10))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_bytes(int(x)) if x >= 1 else ""))


def busbw_plot(collective: str, series: Sequence[Series], salt: str) -> str:
    """busbw against message size (log axis): the run's lines, the baseline's median and
    10-90% spread of per-iteration busbw."""
    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.add_subplot()
    colours = iter(_CANDIDATE * 4)
    for s in series:
        if s.baseline:
            ax.fill_between(
                s.sizes, s.low, s.high, color="#9e9e9e", alpha=0.3, label=f"{s.label} (10-90%)"
            )
            ax.plot(s.sizes, s.busbw, color="#616161", linestyle="--", marker=".", label=s.label)
        else:
            ax.plot(s.sizes, s.busbw, color=next(colours), marker="o", markersize=3, label=s.label)
    _bytes_axis(ax)
    values = [v for s in series for v in (*s.busbw, *s.low) if v > 0]
    if values and max(values) / min(values) > 20:  # small sizes are latency-bound: decades apart
        ax.set_yscale("log")
        # NOTE: plain numbers: the default 10^x labels go through mathtext, ~4x the draw time.
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s, slowest rank)")
    ax.set_title(f"{collective}: bus bandwidth vs message size")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return _svg(fig, salt)


def scaling_plot(points: Sequence[ScalingView], salt: str) -> str:
    """Weak-scaling efficiency against world size, one line per ddp_scaling step."""
    fig = Figure(figsize=(6, 3.2))
    ax = fig.add_subplot()
    for step in sorted({p.step for p in points}):
        pts = [p for p in points if p.step == step and p.efficiency is not None]
        ax.plot([p.world_size for p in pts], [p.efficiency for p in pts], marker="o", label=step)
    ax.axhline(1.0, color="#9e9e9e", linestyle=":", label="ideal")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("efficiency T_n / (n T_1)")
    ax.set_ylim(bottom=0)
    ax.set_title("DDP weak-scaling efficiency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig, salt)


def heat_map(
    nodes: Sequence[str], checks: Sequence[str], heat: Sequence[Sequence[str | None]], salt: str
) -> str:
    """Worst status per node and check: green pass, amber warn, red fail, blue recorded
    only (info), grey skip / not run."""
    grid = np.array([[_HEAT_CODES.get(s, 0) for s in row] for row in heat], dtype=float)
    fig = Figure(figsize=(1.6 + 1.1 * len(checks), 1.0 + 0.38 * len(nodes)))
    ax = fig.add_subplot()
    top = len(_HEAT_COLOURS) - 1
    ax.imshow(grid, cmap=ListedColormap(_HEAT_COLOURS), vmin=0, vmax=top, aspect="auto")
    ax.set_xticks(range(len(checks)), checks, rotation=30, ha="right")
    ax.set_yticks(range(len(nodes)), nodes)
    for i, row in enumerate(heat):
        for j, status in enumerate(row):
            ax.text(j, i, status or "-", ha="center", va="center", fontsize=8)
    ax.set_title("node x check: worst status")
    return _svg(fig, salt)


def sparkline(
    values: Sequence[float | None], top: float, width: int = 120, height: int = 24
) -> str:
    """A node's GB/s over sweeps, oldest left, from 0 to `top` (the same for every node, so
    a 10% dip looks like one), as a small inline <svg> (no matplotlib: one per node of a
    fleet); a sweep that did not measure the node is skipped. Empty below two measurements."""
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(known) < 2 or top <= 0:
        return ""
    pad = 3
    step = (width - 2 * pad) / max(len(values) - 1, 1)
    pts = [
        (pad + i * step, height - pad - min(v / top, 1.0) * (height - 2 * pad)) for i, v in known
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8"/>' for x, y in pts)
    lo, hi = min(v for _, v in known), max(v for _, v in known)
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img"><title>{lo:.4g} to {hi:.4g} GB/s (axis 0 to {top:.4g})</title>'
        f'<line x1="0" y1="{height - pad}" x2="{width}" y2="{height - pad}" stroke="#e0e0e0"/>'
        f'<polyline points="{line}" fill="none" stroke="#1565c0" stroke-width="1.5"/>'
        f'<g fill="#1565c0">{dots}</g></svg>'
    )


_SPEED = LinearSegmentedColormap.from_list("speed", ["#b71c1c", "#ffca28", "#66bb6a"])
MATRIX_LABELS = 64  # past this many rows the axes name the blocks, not every row


def link_matrix_figure(mx: LinkMatrix) -> Figure:
    """A link's (or a pair of groups' worst link's) measured speed against the model's
    level, node x node ordered by group (group x group on a large fleet): red at 0, yellow
    at half, green at the level; grey not measured; flagged links outlined in black, flagged
    trunks' blocks in blue. Reads at 8 rows and at 1,024 (blocks then label the axes)."""
    n = len(mx.rows)
    index = {r: i for i, r in enumerate(mx.rows)}
    grid = np.full((n, n), np.nan)
    for (a, b), c in mx.cells.items():
        if c.verdict == "failed":
            grid[index[a], index[b]] = 0.0
        elif c.ratio is not None:
            grid[index[a], index[b]] = min(c.ratio, 1.0)
    side = min(14.0, 2.5 + 0.3 * n)
    fig = Figure(figsize=(side + 1.5, side))
    ax = fig.add_subplot()
    cmap = _SPEED.with_extremes(bad="#eeeeee")
    image = ax.imshow(
        np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, interpolation="nearest"
    )
    fig.colorbar(image, ax=ax, fraction=0.04, label="measured / model's level")
    _matrix_axes(ax, mx)
    for a, b in mx.flagged:
        if a in index and b in index:
            ax.add_patch(
                Rectangle((index[b] - 0.5, index[a] - 0.5), 1, 1, fill=False, lw=2, ec="k")
            )
    spans = _spans(mx)
    for ga, gb in mx.trunks:
        if ga in spans and gb in spans:
            (x0, x1), (y0, y1) = spans[gb], spans[ga]
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, lw=2.5,
                                   ec="#1565c0"))  # fmt: skip
    kind = "node x node" if mx.level == "node" else f"{mx.level} x {mx.level} (worst link)"
    ax.set_title(
        f"pair busbw, {kind}" + (f": level {mx.reference:.4g} GB/s" if mx.reference else "")
    )
    return fig


def _spans(mx: LinkMatrix) -> dict[str, tuple[int, int]]:
    """Each group's first row and one past its last (group-level matrices: one row each)."""
    if mx.level != "node":
        return {r: (i, i + 1) for i, r in enumerate(mx.rows)}
    out, at = {}, 0
    for g, k in mx.blocks:
        out[g] = (at, at + k)
        at += k
    return out


def _matrix_axes(ax: Axes, mx: LinkMatrix) -> None:
    n = len(mx.rows)
    if n <= MATRIX_LABELS:
        ax.set_xticks(range(n), mx.rows, rotation=90, fontsize=7)
        ax.set_yticks(range(n), mx.rows, fontsize=7)
    elif mx.blocks:
        mids = [(lo + hi - 1) / 2 for lo, hi in _spans(mx).values()]
        names = list(_spans(mx))
        ax.set_xticks(mids, names, rotation=90, fontsize=6)
        ax.set_yticks(mids, names, fontsize=6)
    for start in mx.starts:
        ax.axhline(start - 0.5, color="#37474f", lw=0.8)
        ax.axvline(start - 0.5, color="#37474f", lw=0.8)


def link_matrix_svg(mx: LinkMatrix, salt: str) -> str:
    return _svg(link_matrix_figure(mx), salt)


def save_link_matrix(mx: LinkMatrix, path: str) -> None:
    """The figure to `path`, PNG or SVG by its suffix (ValueError for another)."""
    fmt = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if fmt not in ("png", "svg"):
        raise ValueError(f"--plot {path!r}: a .png or .svg file")
    link_matrix_figure(mx).savefig(path, format=fmt, bbox_inches="tight", dpi=120)
