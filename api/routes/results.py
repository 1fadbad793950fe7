"""A run's measurement rows: JSON pages (filterable) or a Parquet download."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fastapi import APIRouter, Header, Query, Response

from fleetval.api import service
from fleetval.api.deps import DbDep, ReadToken, StoreDep
from fleetval.api.models import ResultPage
from fleetval.store.catalog import CorruptFile, check_name
from fleetval.store.dataset import Store, parquet_options
from fleetval.store.query import filter_rows
from fleetval.store.schema import RESULTS_SCHEMA

router = APIRouter(prefix="/v1/runs", tags=["results"])

PARQUET = "application/vnd.apache.parquet"
SAMPLES = "samples_us"
# A JSON page with samples stops at the row that takes it past this many samples (at least
# one row): a run of 10,000 rows x 100,000 iterations is 8 GB of samples, never one page.
MAX_PAGE_SAMPLES = 1_000_000
_POS = "__position"  # a row's place among the run's rows, in file order


def select(
    store: Store, run_id: str, filters: dict[str, str | int | None], samples: bool
) -> pa.Table:
    """The run's rows matching `filters` (the CLI's `results` filter); samples only if asked."""
    columns = [c for c in RESULTS_SCHEMA.names if samples or c != "samples_us"]
    return filter_rows(store.results([run_id], columns=columns), filters)


@router.get(
    "/{run_id}/results",
    operation_id="get_results",
    responses={
        200: {
            "content": {"application/json": {}, PARQUET: {}},
            "description": "A page of result rows (JSON), or every matching row (Parquet)",
        },
    },
)
def results(
    run_id: str,
    _: ReadToken,
    db: DbDep,
    store: StoreDep,
    step: str | None = None,
    check: str | None = None,
    collective: str | None = None,
    rank: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    node: str | None = None,
    samples: Annotated[bool, Query(description="Include per-iteration samples (JSON)")] = False,
    limit: Annotated[int, Query(ge=1, le=10_000, description="Rows per page (JSON)")] = 1000,
    cursor: Annotated[
        str | None, Query(pattern=r"^[0-9]{1,12}$", description="next_cursor of the previous page")
    ] = None,
    format: Literal["json", "parquet"] | None = None,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Rows of the run (the steps finished so far while it runs), in pages of `limit` (with
    samples, also at most MAX_PAGE_SAMPLES samples: follow next_cursor); Parquet keeps every
    column and every matching row."""
    service.require_run(db, store, run_id)
    filters = {"step": step, "check": check, "collective": collective, "rank": rank, "node": node}
    parquet = format == "parquet" or (format is None and PARQUET in (accept or ""))
    if parquet:
        table = select(store, run_id, filters, samples=True)
        buf = io.BytesIO()
        pq.write_table(table, buf, **parquet_options(table.schema))
        return Response(
            buf.getvalue(),
            media_type=PARQUET,
            headers={"Content-Disposition": f'attachment; filename="{run_id}.parquet"'},
        )
    start = int(cursor or 0)
    if samples:
        rows, total = samples_page(store, run_id, filters, start, limit)
    else:
        table = select(store, run_id, filters, samples=False)
        rows, total = table.slice(start, limit).to_pylist(), table.num_rows
    end = start + len(rows)
    body = ResultPage(
        run_id=run_id,
        count=len(rows),
        rows=rows,
        next_cursor=str(end) if end < total else None,
    )
    return Response(body.model_dump_json(), media_type="application/json")


def samples_page(
    store: Store, run_id: str, filters: dict[str, str | int | None], start: int, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """A JSON page with samples, read in bounded memory: the matching rows without samples
    first, then the samples of the page's rows alone, one row group at a time, until
    MAX_PAGE_SAMPLES; the page's rows and how many rows match in all."""
    table = select(store, run_id, {}, samples=False)
    table = table.append_column(_POS, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    table = filter_rows(table, filters)
    page = table.slice(start, limit)
    wanted = page[_POS].to_pylist()
    found = _samples_of(_result_files(store, run_id), wanted)
    rows = page.drop_columns([_POS]).to_pylist()[: len(found)]
    for row, values in zip(rows, found, strict=True):
        row[SAMPLES] = values
    return rows, table.num_rows


def _result_files(store: Store, run_id: str) -> list[Path]:
    """The run's result files in the order `Store.results` reads them."""
    return sorted((store.root / "results" / check_name("run", run_id)).rglob("*.parquet"))


def _samples_of(files: list[Path], positions: list[int]) -> list[list[float] | None]:
    """The samples of the rows at `positions` (ascending), from the row groups holding
    them; stops before the row that would pass MAX_PAGE_SAMPLES (never before the first)."""
    out: list[list[float] | None] = []
    todo, budget, offset = list(positions), MAX_PAGE_SAMPLES, 0
    for f in files:
        if not todo:
            break
        try:
            pf = pq.ParquetFile(f)
            for group in range(pf.num_row_groups):
                n = pf.metadata.row_group(group).num_rows
                local = [p - offset for p in todo if offset <= p < offset + n]
                offset += n
                if not local:
                    continue
                column = _group_samples(pf, group)
                for i in local:
                    values = column[i] if column is not None else None
                    budget -= len(values or ())
                    if budget < 0 and out:
                        return out
                    out.append(values)
                todo = todo[len(local) :]
        except (OSError, pa.ArrowException) as err:  # NOTE: as Store.results: name the file
            raise CorruptFile(f, err) from err
    return out


def _group_samples(pf: pq.ParquetFile, group: int) -> list[list[float] | None] | None:
    """One row group's samples column (None for a file written before samples were kept)."""
    if SAMPLES not in pf.schema_arrow.names:
        return None
    return pf.read_row_group(group, columns=[SAMPLES])[SAMPLES].to_pylist()
