"""Runs from results files (nccl-tests, rccl-tests): stored through the same path as a run.

`ingest_files` reads every file first (`fleetval.formats.ingest`), so a bad one stops the
command before anything is written; then each file is stored as one run: its results part
(with summaries and lateness), its nodes, and last its run record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fleetval import status
from fleetval.checks import declared_metrics
from fleetval.formats.frdump import looks_like_dump
from fleetval.formats.ingest import Ingested, IngestError, node_records, read_results, result_rows
from fleetval.formats.jobfiles import LOOKED_FOR, read_job_files
from fleetval.run.outcome import StepOutcome
from fleetval.store.catalog import new_run_id
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row


def read_files(
    paths: list[Path], *, collective: str | None = None, world_size: int | None = None
) -> list[Ingested]:
    """Every file parsed, or IngestError naming the first bad one (nothing is written)."""
    out = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError as err:
            raise IngestError(f"{path}: cannot read ({err.strerror})") from err
        out.append(read_results(text, str(path), collective=collective, world_size=world_size))
    return out


def store_ingested(
    store: Store, ing: Ingested, *, labels: dict[str, str], suite: str | None = None
) -> Run:
    """One parsed file as a stored run: results, nodes, then the run record."""
    run_id = new_run_id()
    started = datetime.now(UTC)
    store.write_schema_note()
    rows = [Row(**fields) for fields in result_rows(ing, run_id)]
    store.write_results(run_id, "ingested", rows)
    store.write_nodes(run_id, node_records(ing))
    steps = [
        StepOutcome(0, int(ing.world_size or 0), check, check, _step_status(rows, check),
                    f"{ing.tool} {ing.fmt}: {sum(r.check == check for r in rows)} rows", 0.0)
        for check in sorted({r.check for r in rows})
    ]  # fmt: skip
    record = Run(
        run_id=run_id,
        suite=suite or f"ingest-{ing.tool}",
        status=status.run_status(s.status for s in steps).value,
        started_at=started,
        finished_at=datetime.now(UTC),
        labels={"source": ing.tool, "ingested_from": Path(ing.path).name,
                **{f"{name}_inferred": "true" for name in ing.inferred}, **labels},
        backend="rccl" if ing.tool == "rccl-tests" else "nccl",
        summary={"steps": [asdict(s) for s in steps], "ingested": {"path": ing.path,
                 "format": ing.fmt, "results": len(ing.results), **ing.notes}},
        message=f"ingested from {ing.path} ({ing.fmt})" + _inferred(ing),
        metrics=declared_metrics(["bandwidth"]),
    )  # fmt: skip
    store.write_run(record)
    return record


def _inferred(ing: Ingested) -> str:
    """What the table did not name and was read from its numbers, said where the run is listed."""
    said = {
        "collective": f"collective {ing.collective}",
        "world_size": f"world size {ing.world_size}",
    }
    return "".join(f"; {said[n]} read from the table" for n in ing.inferred)


def _step_status(rows: list[Row], check: str) -> str:
    return status.run_status(r.status for r in rows if r.check == check).value


def world_label(labels: dict[str, str]) -> int | None:
    """`--label world_size=N`: what a table without rank lines does not say."""
    world = labels.get("world_size")
    if world is not None and not world.isdigit():
        raise IngestError(f"--label world_size={world}: expected a whole number")
    return int(world) if world else None


def ingest_files(
    store: Store,
    paths: list[Path],
    *,
    labels: dict[str, str] | None = None,
    suite: str | None = None,
) -> list[Run]:
    """Read all files, then store each as a run. `labels["collective"]` and
    `labels["world_size"]` name what a file does not say."""
    labels = dict(labels or {})
    parsed = read_files(paths, collective=labels.get("collective"),
                        world_size=world_label(labels))  # fmt: skip
    return [store_ingested(store, ing, labels=labels, suite=suite) for ing in parsed]


# -- a training job's artefacts beside results files -----------------------------------------


@dataclass
class Inputs:
    """What `fleetval ingest` was given, each file read as what it is: results files parsed,
    and a training job's artefacts (Flight Recorder dumps, step logs) as (name, bytes) for
    `fleetval.signoff.stragglers.job_stragglers`, with the folders they were found in."""

    results: list[Ingested] = field(default_factory=list)
    job: list[tuple[str, bytes]] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # job artefacts named one by one

    @property
    def has_job(self) -> bool:
        return bool(self.job or self.folders)

    def job_name(self) -> str:
        """The job a run is labelled with, when no --job names it: its folder's name (the
        first folder given, else the folder the files share)."""
        if self.folders:
            return self.folders[0].resolve().name
        common = Path(*_common([f.resolve().parent.parts for f in self.files]))
        return common.name

    def source(self) -> str:
        """Where the job's artefacts came from, for the run's labels and message."""
        given = [*map(str, self.folders), *map(str, self.files)]
        return given[0] if len(given) == 1 else f"{given[0]} and {len(given) - 1} more"


def _common(parts: list[tuple[str, ...]]) -> tuple[str, ...]:
    out: tuple[str, ...] = ()
    for column in zip(*parts, strict=False):
        if len(set(column)) > 1:
            break
        out += (column[0],)
    return out


def read_inputs(
    paths: list[Path], *, collective: str | None = None, world_size: int | None = None
) -> Inputs:
    """Every path read: a folder is a job's artefacts; a file is a results file, or else a
    job's artefact (a dump, a step log); IngestError names the first that is neither, before
    anything is written."""
    out = Inputs()
    for path in paths:
        if path.is_dir():
            # NOTE: every file under it, as `fleetval stragglers` reads a folder: files that
            # hold nothing are said in the run (not_read), never fatal
            out.job += [(str(f), _bytes(f)) for f in sorted(path.rglob("*")) if f.is_file()]
            out.folders.append(path)
            continue
        raw = _bytes(path)
        ing = _results_or_none(path, raw, collective, world_size)
        if ing is None:
            out.job.append((str(path), raw))
            out.files.append(path)
        else:
            out.results.append(ing)
    return out


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise IngestError(f"{path}: cannot read ({err.strerror})") from err


def _results_or_none(
    path: Path, raw: bytes, collective: str | None, world_size: int | None
) -> Ingested | None:
    """A results file parsed; None for a job's artefact; IngestError for neither."""
    if looks_like_dump(raw[:4096]):
        return None
    text = raw.decode(errors="replace")
    try:
        return read_results(text, str(path), collective=collective, world_size=world_size)
    except IngestError as err:
        if read_job_files([(str(path), raw)]).readable:
            return None
        raise IngestError(f"{err}; nor a training job's artefact: {LOOKED_FOR}") from None


def store_results(
    store: Store, parsed: list[Ingested], *, labels: dict[str, str], suite: str | None = None
) -> list[Run]:
    """Each parsed results file as a run (`read_inputs` read them all first)."""
    return [store_ingested(store, ing, labels=labels, suite=suite) for ing in parsed]
