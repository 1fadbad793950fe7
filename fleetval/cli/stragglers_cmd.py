"""`fleetval stragglers PATH...`: which rank of a training job was late, on which node, for
how long, from the Flight Recorder dumps and step logs the job wrote; with the store, what
the nightly sweeps and the hardware readers said about that node."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from fleetval.cli.common import DataOpt, Exit, JsonOpt, console, err_console

if TYPE_CHECKING:
    from fleetval.detect.stragglers import Report
    from fleetval.formats.frdump import RankTrace
    from fleetval.formats.steplog import StepLine

PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Flight Recorder dumps (pickle or JSON, one per rank, the rank ending the file "
        "name; a directory per host names the host) and per-rank step logs; directories are "
        "searched",
        exists=True,
    ),
]
LOOKED_FOR = (
    "PyTorch Flight Recorder dumps (pickle or JSON, as TORCH_FR_DUMP_TEMP_FILE or "
    "_dump_fr_trace write them) and step logs (lines with a step number and a time or a "
    "duration: torchrun [rankN]: prefixes, torchtitan, Megatron-LM, key=value, JSON lines)"
)
SWEEPS = 5  # the newest sweeps whose verdicts are shown for a named node


def stragglers(paths: PathsArg, data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """The windows where step time inflated and, for each, the late rank(s) with their host,
    lateness (median and 95% interval), share of collectives reached last and the time the
    job waited. Exit 0 nobody late, 1 a straggler named, 2 nothing readable."""
    from fleetval.detect.stragglers import judge

    traces, steps, diag, skipped = _read(paths)
    if not traces and not steps and not diag:
        what = f"nothing readable in {', '.join(map(str, paths))}: looked for {LOOKED_FOR}"
        what += f"; not read: {', '.join(skipped[:5])}" if skipped else ""
        err_console.print(f"[red]error:[/red] {escape(what)}", highlight=False)
        raise typer.Exit(Exit.BAD_INPUT)
    report = judge(traces, steps)
    _diagnostics(diag, report)
    context = _node_context(data, sorted({r.host for r in report.named if r.host}))
    if as_json:
        doc = report.to_dict() | {"nodes": context, "not_read": skipped}
        typer.echo(json.dumps(doc, indent=2))
    else:
        _print(report, context, skipped)
    raise typer.Exit(Exit.FAILED if report.named else Exit.OK)


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return out


def _read(paths: list[Path]) -> tuple[list[RankTrace], list[StepLine], list[Any], list[str]]:
    """Each file as what it is: a dump, NCCL RAS or Inspector output, a step log, or none of
    these (named, not fatal)."""
    from fleetval.formats import frdump, nccldiag, steplog

    dumps: list[Path] = []
    steps: list[StepLine] = []
    diag: list[Any] = []
    skipped: list[str] = []
    for f in _files(paths):
        with f.open("rb") as fh:
            head = fh.read(4096)
        if frdump.looks_like_dump(head):
            dumps.append(f)
            continue
        text = f.read_text(errors="replace") if b"\x00" not in head else ""
        if nccldiag.looks_like_ras(text):
            diag.append(nccldiag.parse_ras(text))
            continue
        if nccldiag.looks_like_inspector(text):
            try:
                diag.append(nccldiag.parse_inspector(text))
            except ValueError as err:
                skipped.append(f"{f} ({err})")
            continue
        found = steplog.parse(text, file_rank=steplog.file_rank(f)) if text else []
        if found:
            steps += found
        else:
            skipped.append(str(f))
    # NOTE: dumps spread over directories are a directory per host (as gathered from nodes).
    per_host = len({d.parent for d in dumps}) > 1
    traces = []
    for d in dumps:
        try:
            traces.append(frdump.read(d, host=d.parent.name if per_host else None))
        except ValueError as err:
            skipped.append(f"{d} ({err})")
    return traces, steps, diag, skipped


def _diagnostics(diag: list[Any], report: Report) -> None:
    """NCCL RAS reports and Inspector records, said as evidence beside the verdict."""
    from fleetval.detect.stragglers import judge_inspector
    from fleetval.formats.nccldiag import RasReport

    records = [r for d in diag if isinstance(d, list) for r in d]
    for d in diag:
        if isinstance(d, RasReport):
            report.notes += d.notes()
    if records:
        judge_inspector(records, report)


def _node_context(data: Path | None, hosts: list[str]) -> dict[str, list[str]]:
    """Per named host, what the store says: its verdicts in the last sweeps, its GPUs'
    findings in the newest reading, and its counters that grew (the watch list)."""
    from fleetval.store.catalog import default_data_dir

    root = data or default_data_dir()
    if not hosts or not root.exists():
        return {}
    from fleetval.detect.hardware import watch_list
    from fleetval.fleet.history import node_histories, sweep_runs
    from fleetval.store.catalog import Catalog
    from fleetval.store.dataset import Store

    runs = sweep_runs(Catalog(root), SWEEPS)
    out: dict[str, list[str]] = {h: [] for h in hosts}
    for h in node_histories(runs):
        if h.node in out:
            states = ", ".join(f"{s.state.value} ({s.run_id})" for s in h.seen)
            out[h.node].append(f"sweeps, oldest first: {states}")
            out[h.node] += h.findings
    rows = [r for r in Store(root).gpus().to_pylist() if r["node"] in out]
    newest = max((r["run_id"] for r in rows), default=None)
    for r in rows:
        if r["run_id"] == newest and r.get("findings"):
            out[r["node"]].append(f"{r['device_id']}: {', '.join(r['findings'])} ({newest})")
    for i in watch_list(rows):
        out[i.node].append(f"watch {i.device_id}: {i.what} {i.evidence}")
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
