"""`fleetval ingest` (results files as runs) and `fleetval nccl-log` (what a debug log says)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from fleetval.cli.common import DataOpt, Exit, JsonOpt, bad_input_exits, console, open_store
from fleetval.store.catalog import parse_pairs


def ingest(
    files: Annotated[list[Path], typer.Argument(help="nccl-tests/rccl-tests output files")],
    data: DataOpt = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="KEY=VALUE on every run (repeatable); collective=NAME and "
            "world_size=N name what a table does not say (else they are read from its "
            "busbw/algbw, redop, root and count, and labelled *_inferred=true)",
        ),
    ] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="Suite name of the runs")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Store nccl-tests / rccl-tests results (stdout, -J JSON, rccl-tests JSON/CSV) as runs."""
    from fleetval.run.imported import ingest_files

    with bad_input_exits():
        labels = parse_pairs(label or [], "--label")
        records = ingest_files(open_store(data), files, labels=labels, suite=suite)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in records], default=str, indent=2))
        return
    for r in records:
        console.print(f"{r.run_id}  {r.status:<9} {r.labels.get('ingested_from', '')}  "
                      f"{r.message}", highlight=False)  # fmt: skip


def nccl_log(
    file: Annotated[Path, typer.Argument(help="A log written with NCCL_DEBUG=INFO")],
    as_json: JsonOpt = False,
) -> None:
    """What an NCCL/RCCL debug log says: library, versions, network, plugin, HCAs, transports,
    ranks and nodes, warnings and errors, and whether init completed (the health check's parser).

    Exit 0 read (an excerpt without init's end too: `init` says so), 1 the log reports an
    NCCL error, 2 not an NCCL/RCCL debug log."""
    from fleetval.formats.nccllog import parse_nccl_log

    with bad_input_exits():
        try:
            text = file.read_text(errors="replace")
        except OSError as err:
            raise ValueError(f"{file}: cannot read ({err.strerror})") from err
        log = parse_nccl_log(text)
        if not (log.version or log.network or log.hosts or log.warnings):
            raise ValueError(f"{file}: no NCCL/RCCL debug lines ('host:pid:tid [dev] NCCL INFO "
                             "...'); was it written with NCCL_DEBUG=INFO?")  # fmt: skip
    if as_json:
        typer.echo(json.dumps({**asdict(log), "fabric": log.fabric, "ok": log.ok}, indent=2))
    else:
        for key, value in _lines(log):
            console.print(f"{key:<13} {value}", highlight=False, soft_wrap=True)
    if log.errors:
        raise typer.Exit(Exit.FAILED)


def _lines(log: object) -> list[tuple[str, str]]:
    from fleetval.formats.nccllog import NcclLogSummary

    assert isinstance(log, NcclLogSummary)

    def show(*parts: object) -> str:
        return " ".join(str(p) for p in parts if p not in (None, "", ())) or "-"

    lines = [
        ("library", show(log.library, log.version)),
        ("runtime", show(f"CUDA {log.cuda_version}" if log.cuda_version else None,
                         f"(driver CUDA {log.cuda_driver_version})"
                         if log.cuda_driver_version else None,
                         f"HIP {log.hip_version}" if log.hip_version else None,
                         f"ROCm {log.rocm_version}" if log.rocm_version else None)),
        ("network", show(log.network, f"({log.fabric})" if log.fabric != log.network else None,
                         "SHARP" if log.sharp else None)),
        ("plugin", show(log.net_plugin, log.net_plugin_path,
                        f"provider {log.ofi_provider}" if log.ofi_provider else None,
                        f"collnet {log.collnet_plugin}" if log.collnet_plugin else None,
                        "(none found)" if log.net_plugin_missing and not log.net_plugin else None)),
        ("HCAs", show(", ".join(log.ib_devices))),
        ("sockets", show(", ".join(log.socket_interfaces))),
        ("GDR", show({True: "enabled", False: "disabled"}.get(log.gdr_enabled))),  # type: ignore[arg-type]
        ("transports", show(", ".join(log.transports))),
        ("channels", show(log.channels, f"(collnet {log.collnet_channels})"
                          if log.collnet_channels else None)),
        ("ranks", show(log.nranks, f"on {log.nnodes} nodes" if log.nnodes else None)),
        ("hosts", show(", ".join(log.hosts) or log.hostname)),
        ("init", "complete" if log.init_complete else "not completed in this log"),
    ]  # fmt: skip
    lines += [("warning", w) for w in log.warnings]
    lines += [("nccl error", e) for e in log.errors]
    return lines
