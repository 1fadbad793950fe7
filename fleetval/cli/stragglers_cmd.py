"""`fleetval stragglers PATH...`: which rank of a training job was late, on which node, for
how long, from the Flight Recorder dumps and step logs the job wrote; with the store, what
the nightly sweeps and the hardware readers said about that node."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from fleetval.cli.common import DataOpt, Exit, JsonOpt, console, err_console

if TYPE_CHECKING:
    from fleetval.detect.stragglers import Report

PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Flight Recorder dumps (pickle or JSON, one per rank, the rank ending the file "
        "name; a directory per host names the host) and per-rank step logs; directories are "
        "searched",
        exists=True,
    ),
]


def stragglers(paths: PathsArg, data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """The windows where step time inflated and, for each, the late rank(s) with their host,
    lateness (median and 95% interval), share of collectives reached last and the time the
    job waited. Exit 0 nobody late, 1 a straggler named, 2 nothing readable."""
    from fleetval.detect.stragglers import NothingReadable
    from fleetval.signoff.stragglers import job_stragglers
    from fleetval.store.catalog import default_data_dir

    files = [(str(f), f.read_bytes()) for f in _files(paths)]
    try:
        found = job_stragglers(files, data or default_data_dir())
    except NothingReadable as err:
        what = f"{', '.join(map(str, paths))}: {err}"
        err_console.print(f"[red]error:[/red] {escape(what)}", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT) from err
    if as_json:
        typer.echo(json.dumps(found.to_dict(), indent=2))
    else:
        _print(found.report, found.nodes, found.not_read)
    raise typer.Exit(Exit.FAILED if found.report.named else Exit.OK)


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return out


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3] if t > 1e9 else f"{t:.1f}s"


def _print(report: Report, context: dict[str, list[str]], skipped: list[str]) -> None:
    def say(line: str) -> None:
        console.print(escape(line), highlight=False, soft_wrap=True)

    for w in report.windows:
        steps = f", steps {w.first_step}-{w.last_step}" if w.first_step is not None else ""
        cost = f", step time {w.step_cost_s:.3g} s over the median" if w.step_cost_s else ""
        say(f"window {_when(w.start_s)}-{_when(w.end_s)} (group {w.group}, collectives "
            f"#{w.first_seq}-#{w.last_seq}{steps}{cost})")  # fmt: skip
        for r in w.ranks:
            host = f" on {r.host}" if r.host else ""
            say(
                f"  straggler rank {r.rank}{host}: late at {r.late_at} of {r.collectives} "
                f"collectives, last at {r.share_last:.0%}; lateness {_ms(r.lateness_s)} "
                f"(95% {_ms(r.low_s)}-{_ms(r.high_s)}, {r.z:.0f} x noise), job waited "
                f"{r.waited_s:.3g} s; {r.kind} (late at the call)"
            )
    for s in report.step_windows:
        when = f" ({_when(s.start_s)}-{_when(s.end_s)})" if s.end_s is not None else ""
        say(f"steps {s.first_step}-{s.last_step} inflated{when}: "
            f"peak {s.peak_s:.3g} s against a median of {s.baseline_s:.3g} s, "
            f"{s.cost_s:.3g} s lost")  # fmt: skip
    for host, lines in context.items():
        say(f"{host}: " + ("; ".join(lines) if lines else "nothing in the store"))
    for note in report.notes:
        say(f"note: {note}")
    if skipped:
        say(f"not read: {', '.join(skipped)}")
    noise = ", ".join(f"group {g} {_ms(n)}" for g, n in report.noise_s.items())
    judged = sum(report.collectives.values())
    tail = (
        f" over {judged} collectives of {len(report.ranks)} ranks (noise {noise})" if judged else ""
    )
    who = sorted({r.rank for r in report.named})
    say(f"stragglers: rank {', '.join(map(str, who))}{tail}" if who else f"nobody late{tail}")


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g} ms"
