"""`fleetval ingest` (results files, and a training job's artefacts, as runs) and
`fleetval nccl-log` (what a debug log says)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetval.cli.common import DataOpt, Exit, JsonOpt, bad_input_exits, console, open_store
from fleetval.store.catalog import parse_pairs

if TYPE_CHECKING:
    from fleetval.store.dataset import Store
    from fleetval.store.records import Run


def ingest(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="nccl-tests/rccl-tests output files; a training job's Flight Recorder dumps "
            "and step logs (files, or folders searched), stored as one run labelled job=NAME"
        ),
    ],
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
    job: Annotated[
        str | None,
        typer.Option(
            "--job", help="The training job's name (label job=NAME) [default: its folder's name]"
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Store nccl-tests / rccl-tests results (stdout, -J JSON, rccl-tests JSON/CSV) as runs,
    and a training job's Flight Recorder dumps and step logs as one run of its stragglers
    (as `fleetval stragglers` judges them). Exit 2, nothing written, on a file that is none
    of these."""
    with bad_input_exits():
        labels = parse_pairs(label or [], "--label")
        records = _ingest(open_store(data), files, labels, suite, job)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in records], default=str, indent=2))
        return
    for r in records:
        console.print(f"{r.run_id}  {r.status:<9} {r.labels.get('ingested_from', '')}  "
                      f"{r.message}", highlight=False)  # fmt: skip


def _ingest(
    store: Store, files: list[Path], labels: dict[str, str], suite: str | None, job: str | None
) -> list[Run]:
    """Everything read and judged first, then written: a bad file stops it all."""
    from fleetval.formats.ingest import IngestError
    from fleetval.run.imported import read_inputs, store_results, world_label
    from fleetval.signoff.jobrun import store_job
    from fleetval.signoff.stragglers import job_stragglers

    inputs = read_inputs(files, collective=labels.get("collective"),
                         world_size=world_label(labels))  # fmt: skip
    if job is not None and not inputs.has_job:
        raise IngestError(f"--job {job}: no Flight Recorder dump or step log among the files")
    name = job or labels.get("job") or (inputs.job_name() if inputs.has_job else "")
    if inputs.has_job and not name:
        raise IngestError("the job's files share no folder to name it: name it with --job NAME")
    found = job_stragglers(inputs.job, store.root) if inputs.has_job else None
    records = store_results(store, inputs.results, labels=labels, suite=suite)
    if found is not None:
        records.append(store_job(store, found, job=name, source=inputs.source(),
                                 labels=labels, suite=suite))  # fmt: skip
    return records


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
