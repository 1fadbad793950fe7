"""`fleetval sweep SUITE`: per-node verdicts and a drain list; exit 0 every node judged
healthy, 1 a node, link or trunk flagged, 5 nothing flagged but some nodes not judged, 2 bad
input. `fleetval sweep-history`: each node over the last sweeps."""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.table import Table

from fleetval.cli.common import (
    AddressOpt,
    DataOpt,
    Exit,
    JsonOpt,
    bad_input_exits,
    choices,
    console,
    open_catalog,
    open_store,
)
from fleetval.fleet.drain import DrainForm
from fleetval.vocab import OutputFormat

if TYPE_CHECKING:
    from pathlib import Path

    from fleetval.detect.hardware import WatchItem
    from fleetval.fleet.history import JobLate, LinkCoverage, NodeHistory
    from fleetval.fleet.verdict import FleetVerdict
    from fleetval.store.records import Run


Format = choices("SweepFormat", (OutputFormat.TABLE, OutputFormat.JSON))
MAX_REPEAT = 64  # back-to-back sweeps in one command (a fleet of 65 nodes covered)


def sweep(
    suite: Annotated[str, typer.Argument(help="Suite whose steps measure each job (e.g. sweep)")],
    address: AddressOpt = None,
    data: DataOpt = None,
    baseline: Annotated[
        str | None, typer.Option(help="Judge the fleet's level against this baseline's sweeps")
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", help="Output")] = Format.TABLE,
    as_json: JsonOpt = False,
    drain_format: Annotated[
        DrainForm, typer.Option(help="Form of the drain list")
    ] = DrainForm.KUBECTL,
    local_fleet: Annotated[
        int | None,
        typer.Option(
            "--local-fleet",
            help="Try it on this machine: a simulated Ray fleet of N one-CPU nodes in racks "
            "(CPU, gloo), started for this sweep and stopped after it (2 to 16)",
        ),
    ] = None,
    repeat: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_REPEAT,
            help="Sweep this many times back to back on warm ranks, each planned from the ones "
            "before (N-1 sweeps measure every link of N nodes); JSON: one document per line",
        ),
    ] = 1,
) -> None:
    """Fleet sweep: every node alone, node pairs side by side, re-pairs; drain list."""
    from fleetval.fleet.drain import drain_lines
    from fleetval.run.interrupt import EXIT_INTERRUPTED, ctrl_c_cancels
    from fleetval.run.localfleet import LOCAL_FLEET_MAX, simulated_fleet
    from fleetval.run.sweep import keep_warm
    from fleetval.run.sweep import sweep as run_sweep
    from fleetval.suite import load_suite  # NOTE: torch and ray only for commands that run

    fmt = Format.JSON if as_json else fmt
    worst = Exit.OK
    if local_fleet is not None and (address or not 2 <= local_fleet <= LOCAL_FLEET_MAX):
        _bad(f"--local-fleet: 2 to {LOCAL_FLEET_MAX} nodes, and no --address with it")
    with bad_input_exits(), ExitStack() as stack:
        spec = load_suite(suite)
        store = open_store(data)
        if local_fleet is not None:
            address = stack.enter_context(simulated_fleet(local_fleet))
        with ctrl_c_cancels(spec.timeouts.cancel_grace_s) as cancel, keep_warm():
            for _ in range(repeat):
                record, verdict = run_sweep(
                    spec, store, address=address, baseline=baseline, cancel=cancel
                )
                if verdict is None:
                    typer.echo(f"sweep {record.run_id} cancelled: {record.message}", err=True)
                    raise typer.Exit(EXIT_INTERRUPTED)
                drain = drain_lines(verdict, drain_format.value, record.run_id)
                if fmt == Format.JSON:
                    doc = {"run_id": record.run_id, **verdict.to_dict(), "drain_lines": drain}
                    typer.echo(json.dumps(doc, indent=2 if repeat == 1 else None))
                else:
                    _show(verdict, record.run_id, drain, drain_format.value)
                code = Exit(verdict.exit_code)
                worst = code if code == Exit.FAILED or worst == Exit.OK else worst
    raise typer.Exit(worst)


def _show(v: FleetVerdict, run_id: str, drain: list[str], drain_format: str) -> None:
    table = Table(title=f"sweep {run_id}: {len(v.nodes)} nodes, {v.rounds} rounds, {v.jobs} jobs")
    for col in ("node", "verdict", "confidence", "alone GB/s", "pair GB/s", "reason"):
        table.add_column(col, justify="right" if "GB/s" in col else "left")
    for n in v.nodes:
        table.add_row(
            n.node, n.state.value, n.confidence, _num(n.alone_gbps), _num(n.pair_gbps), n.reason
        )
    console.print(table)
    for r in v.references:
        typer.echo(
            f"level {r.phase.value}{' ' + r.sku if r.sku else ''}: {r.median:.4g} GB/s over "
            f"{r.count} jobs, noise {r.noise:.1%} (the model's residuals), slow below -{r.tolerance:.0%}"
        )
    # NOTE: plain lines, one per flagged node or link, so scripts can grep them.
    for n in v.named:
        typer.echo(f"{n.state.value} {n.node}: {n.reason} (confidence {n.confidence})")
    for link in v.links:
        a, b = link.nodes
        if link.confirmed:
            typer.echo(f"slow link {a} <-> {b}: {link.evidence[-1]}")
        else:  # NOTE: no flag word: a link estimated slow but not proven is said, not flagged
            typer.echo(f"link {a} <-> {b} estimated slow, not proven: {link.evidence[0]}")
    for t in v.trunks:  # NOTE: a trunk drains nobody: the fabric between two groups
        a, b = t.groups
        word = "slow trunk" if t.confirmed else "trunk slow, not confirmed:"
        typer.echo(f"{word} {t.level} {a} <-> {b}: {t.evidence[0]}")
    for line in (*v.findings, *v.notes):
        typer.echo(line)
    if drain:
        typer.echo(f"drain list ({drain_format}):")
        typer.echo("\n".join(drain))
    if v.exit_code == 0:
        typer.echo(f"fleet healthy: {len(v.nodes)} nodes judged in {v.rounds} rounds")
    elif not v.flagged:
        typer.echo(
            f"nothing flagged, {len(v.unjudged)} of {len(v.nodes)} nodes and "
            f"{len(v.unproven)} links or trunks estimated slow not judged in {v.rounds} "
            "rounds (exit 5): their reasons are above"
        )


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def sweep_history(
    data: DataOpt = None,
    last: Annotated[int, typer.Option(help="How many of the newest sweeps", min=1)] = 10,
    node: Annotated[str | None, typer.Option(help="Only this node")] = None,
    until: Annotated[
        str | None, typer.Option(help="Only sweeps up to this run (default: the newest)")
    ] = None,
    as_json: JsonOpt = False,
    links: Annotated[
        bool, typer.Option("--links", help="Every link measured: when last, and its verdict")
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="With --links: the newest sweep's pair matrix (node x node by rack; group x "
            "group past 48 nodes) against the model's level, to this .png or .svg file",
        ),
    ] = None,
) -> None:
    """Each node's verdicts and busbw over the last sweeps: repeat offenders, flapping, drift;
    the training jobs stored since the oldest of them (`fleetval ingest`) that found a rank on
    it late; link coverage: how many links the sweeps measured, when each last, with what
    verdict; and the GPUs to watch: hardware counters that grew over these sweeps (as
    `gpu-watch`)."""
    from fleetval.fleet.history import (
        job_runs,
        late_in_jobs,
        link_coverage,
        node_histories,
        strongest_hint,
        sweep_runs,
    )

    catalog = open_catalog(data)
    if until is not None:
        with bad_input_exits():
            catalog.run(until)  # an unknown run is bad input, not an empty history
    runs = sweep_runs(catalog, last, until=until)
    found = node_histories(runs, node)
    if node is not None and not found:
        console.print(f"[red]error:[/red] no node {node!r} in the last {len(runs)} sweep(s)")
        raise typer.Exit(Exit.BAD_INPUT)
    cover = link_coverage(runs)
    if plot is not None:
        _plot(runs, plot, links)
    watch = _hardware_watch(data, [r.run_id for r in runs], node)
    late = late_in_jobs(job_runs(catalog, runs, until), {h.node for h in found})
    hints = [line for h in found if (line := strongest_hint(h, late.get(h.node, [])))]
    if as_json:
        doc = {"runs": [r.run_id for r in runs], "nodes": [h.to_dict() for h in found]}
        jobs = {"late_in_jobs": {n: [j.to_dict() for j in js] for n, js in late.items()},
                "strongest_hints": hints}  # fmt: skip
        hw = {"hardware_watch": [i._asdict() for i in watch]}
        typer.echo(json.dumps(doc | jobs | {"coverage": cover.to_dict()} | hw))
        return
    table = Table(
        title=f"{len(runs)} sweep(s): {', '.join(r.run_id for r in runs) or 'none stored'}"
    )
    for col in ("node", "verdicts (oldest first)", "GB/s (oldest first)", "findings"):
        table.add_column(col)
    for h in found:
        states = " ".join(s.state.value for s in h.seen)
        scores = " ".join(_num(s.score) for s in h.seen)
        table.add_row(h.node, states, scores, ", ".join(h.findings))
    console.print(table)
    _late_in_jobs(found, late, hints)
    _coverage(cover, len(runs), links)
    typer.echo(f"hardware watch: {len(watch)} counter(s) or finding(s) grew over these sweeps")
    for i in watch:
        typer.echo(f"watch {i.node} {i.device_id}: {i.what} {i.evidence}")


def _late_in_jobs(
    found: list[NodeHistory], late: dict[str, list[JobLate]], hints: list[str]
) -> None:
    """Per node shown, each job window that found a rank on it late; then the nodes both a
    sweep and a job named. NOTE: plain lines, so scripts can grep a node's name."""
    for h in found:
        for j in late.get(h.node, ()):
            typer.echo(f"{h.node}: late in job {j.job} (run {j.run_id}), rank {j.rank}, {j.text()}")
    for line in hints:
        typer.echo(line)


def _plot(runs: list[Run], path: str, links: bool) -> None:
    """The newest sweep's link matrix to `path` (bad input: exit 2, nothing written)."""
    from fleetval.fleet.verdict import FleetVerdict
    from fleetval.reports.plots import save_link_matrix
    from fleetval.signoff.sweep import link_matrix

    if not links:
        _bad("--plot draws the link matrix: give --links with it")
    mx = None
    if runs:
        stored = runs[-1].summary["sweep"]
        mx = link_matrix(FleetVerdict.from_dict(stored), stored, runs[:-1])
    if mx is None:
        _bad("--plot: no stored sweep measured a link (or a fleet past 48 nodes has no groups)")
    try:
        save_link_matrix(mx, path)
    except (ValueError, OSError) as err:
        _bad(str(err))
    typer.echo(f"link matrix of {runs[-1].run_id}: {path}")


def _bad(message: str) -> NoReturn:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(Exit.BAD_INPUT)


def _hardware_watch(data: Path | None, run_ids: list[str], node: str | None) -> list[WatchItem]:
    """GPUs whose counters grew over these sweeps (the health check's `gpus` rows): the
    `gpu-watch` list, cut to the sweeps shown."""
    from fleetval.detect.hardware import watch_list

    items = watch_list(open_store(data).gpus(run_ids).to_pylist()) if run_ids else []
    return [i for i in items if node is None or i.node == node]


def _coverage(cover: LinkCoverage, sweeps: int, every: bool) -> None:
    share = f" ({len(cover.links) / cover.total:.0%})" if cover.total else ""
    typer.echo(
        f"link coverage: {len(cover.links)} of {cover.total} links{share} measured "
        f"in the last {sweeps} sweep(s)"
    )
    if not every:
        return
    table = Table(title="links, newest measurement")
    for col in ("link", "sweep", "verdict", "GB/s"):
        table.add_column(col, justify="right" if col == "GB/s" else "left")
    for (a, b), s in sorted(cover.links.items()):
        table.add_row(f"{a} <-> {b}", s.run_id, s.verdict, _num(s.gbps))
    console.print(table)
