"""Runs from results files (nccl-tests, rccl-tests): stored through the same path as a run.

`ingest_files` reads every file first (`fleetval.formats.ingest`), so a bad one stops the
command before anything is written; then each file is stored as one run: its results part
(with summaries and lateness), its nodes, and last its run record.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from fleetval import status
from fleetval.checks import declared_metrics
from fleetval.formats.ingest import Ingested, IngestError, node_records, read_results, result_rows
from fleetval.run.outcome import StepOutcome
from fleetval.store.catalog import RunRecord, new_run_id
from fleetval.store.dataset import Store
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
) -> RunRecord:
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
    record = RunRecord(
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


def ingest_files(
    store: Store,
    paths: list[Path],
    *,
    labels: dict[str, str] | None = None,
    suite: str | None = None,
) -> list[RunRecord]:
    """Read all files, then store each as a run. `labels["collective"]` and
    `labels["world_size"]` name what a file does not say."""
    labels = dict(labels or {})
    world = labels.get("world_size")
    if world is not None and not world.isdigit():
        raise IngestError(f"--label world_size={world}: expected a whole number")
    parsed = read_files(paths, collective=labels.get("collective"),
                        world_size=int(world) if world else None)  # fmt: skip
    return [store_ingested(store, ing, labels=labels, suite=suite) for ing in parsed]
