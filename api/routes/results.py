"""A run's measurement rows: JSON pages (filterable) or a Parquet download."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fastapi import APIRouter, Header, Query, Request, Response

from fleetval.api import service
from fleetval.api.deps import DbDep, LimitsDep, ReadToken, StoreDep
from fleetval.api.errors import TooMany
from fleetval.api.limits import Limits
from fleetval.api.models import ResultPage
from fleetval.store.catalog import CorruptFile, check_name
from fleetval.store.dataset import Store, parquet_options
from fleetval.store.query import filter_rows
from fleetval.store.schema import RESULTS_SCHEMA
from fleetval.vocab import OutputFormat

router = APIRouter(prefix="/v1/runs", tags=["results"])

PARQUET = "application/vnd.apache.parquet"
ResultsFormat = Literal[OutputFormat.JSON, OutputFormat.PARQUET]  # `?format=`; else by Accept
SAMPLES = "samples_us"
# A JSON page with samples stops at the row that takes it past this many samples (at least
# one row): a run of 10,000 rows x 100,000 iterations is 8 GB of samples, never one page.
MAX_PAGE_SAMPLES = 1_000_000
_POS = "__position"  # a row's place among the run's rows, in file order
SAMPLES_TYPE = RESULTS_SCHEMA.field(SAMPLES).type
# A Parquet response holding part of the matching rows names where the next one starts, as a
# JSON page's next_cursor does (pass it as `cursor`), and how many rows match in all.
NEXT_CURSOR = "X-Fleetval-Next-Cursor"
TRUNCATED = "X-Fleetval-Truncated"
TOTAL_ROWS = "X-Fleetval-Total-Rows"
_PARQUET_HEADERS = {
    NEXT_CURSOR: {
        "description": "Only with more rows to fetch: the `cursor` of the next part",
        "schema": {"type": "string", "pattern": "^[0-9]{1,12}$"},
    },
    TRUNCATED: {
        "description": "`true` when the file stops before the last matching row "
        "(limits max_parquet_rows, max_parquet_samples)",
        "schema": {"type": "string", "enum": ["true", "false"]},
    },
    TOTAL_ROWS: {"description": "Matching rows in all", "schema": {"type": "string"}},
}


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
            "description": "A page of result rows (JSON), or up to max_parquet_rows of them "
            "with their samples (Parquet; the headers say where the next part starts)",
            "headers": _PARQUET_HEADERS,
        },
    },
)
def results(
    run_id: str,
    request: Request,
    _: ReadToken,
    db: DbDep,
    store: StoreDep,
    limits: LimitsDep,
    step: str | None = None,
    check: str | None = None,
    collective: str | None = None,
    rank: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    node: str | None = None,
    samples: Annotated[bool, Query(description="Include per-iteration samples (JSON)")] = False,
    limit: Annotated[int, Query(ge=1, le=10_000, description="Rows per page (JSON)")] = 1000,
    cursor: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9]{1,12}$",
            description="next_cursor of the previous page (JSON), "
            "or X-Fleetval-Next-Cursor of the previous file (Parquet)",
        ),
    ] = None,
    format: ResultsFormat | None = None,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Rows of the run (the steps finished so far while it runs), in pages of `limit` (with
    samples, also at most MAX_PAGE_SAMPLES samples: follow next_cursor). Parquet keeps every
    column, samples included, of at most max_parquet_rows rows and max_parquet_samples
    samples per response: X-Fleetval-Next-Cursor says where the rest starts."""
    service.require_run(db, store, run_id)
    filters = {"step": step, "check": check, "collective": collective, "rank": rank, "node": node}
    start = int(cursor or 0)
    if format == OutputFormat.PARQUET or (format is None and PARQUET in (accept or "")):
        with _sample_read(request, limits):
            return parquet_part(store, run_id, filters, start, limits)
    if samples:
        with _sample_read(request, limits):
            page, total = samples_page(store, run_id, filters, start, limit, MAX_PAGE_SAMPLES)
            rows = page.to_pylist()
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


@contextmanager
def _sample_read(request: Request, limits: Limits) -> Iterator[None]:
    """One of the process's `max_sample_reads` slots for a read of samples, else 429: each
    holds up to a page of samples (and a row group's) in memory."""
    slots = request.app.state.sample_reads
    if not slots.acquire(blocking=False):
        raise TooMany(
            f"{limits.max_sample_reads} reads of samples are under way in this process "
            "(max_sample_reads); retry shortly",
            retry_after_s=2,
        )
    try:
        yield
    finally:
        slots.release()


def parquet_part(
    store: Store, run_id: str, filters: dict[str, str | int | None], start: int, limits: Limits
) -> Response:
    """The matching rows from `start` as one Parquet file, bounded as a JSON page is: a run
    of 10^6 rows x 10^4 samples would otherwise be read whole into memory for one request."""
    page, total = samples_page(
        store, run_id, filters, start, limits.max_parquet_rows, limits.max_parquet_samples
    )
    buf = io.BytesIO()
    pq.write_table(page, buf, **parquet_options(page.schema))
    end = start + page.num_rows
    headers = {
        "Content-Disposition": f'attachment; filename="{run_id}.parquet"',
        TOTAL_ROWS: str(total),
        TRUNCATED: "true" if end < total else "false",
    }
    if end < total:
        headers[NEXT_CURSOR] = str(end)
    return Response(buf.getvalue(), media_type=PARQUET, headers=headers)


def samples_page(
    store: Store,
    run_id: str,
    filters: dict[str, str | int | None],
    start: int,
    limit: int,
    max_samples: int,
) -> tuple[pa.Table, int]:
    """Matching rows from `start` with their samples (every column of RESULTS_SCHEMA), read
    in bounded memory: the rows without samples first, then the samples of the page's rows
    alone, one row group at a time, until `max_samples`; the page, and how many rows match
    in all."""
    table = select(store, run_id, {}, samples=False)
    table = table.append_column(_POS, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    table = filter_rows(table, filters)
    page = table.slice(start, limit)
    positions = page[_POS].to_numpy()
    found = _samples_of(_result_files(store, run_id), positions, max_samples)
    page = page.slice(0, len(found)).drop_columns([_POS]).append_column(SAMPLES, found)
    return page.select(RESULTS_SCHEMA.names), table.num_rows


def _result_files(store: Store, run_id: str) -> list[Path]:
    """The run's result files in the order `Store.results` reads them."""
    return sorted((store.root / "results" / check_name("run", run_id)).rglob("*.parquet"))


def _samples_of(files: list[Path], positions: np.ndarray, budget: int) -> pa.Array:
    """The samples of the rows at `positions` (ascending), from the row groups holding
    them; stops before the row that would pass `budget` samples (never before the first)."""
    chunks: list[pa.Array] = []
    offset, done = 0, 0
    for f in files:
        try:
            pf = pq.ParquetFile(f)
            for group in range(pf.num_row_groups):
                if done == len(positions) or budget < 0:
                    return _concat(chunks)
                n = pf.metadata.row_group(group).num_rows
                stop = int(np.searchsorted(positions, offset + n))
                local, offset = positions[done:stop] - offset, offset + n
                if not len(local):
                    continue
                picked, budget = _within(_group_samples(pf, group, local), budget, not chunks)
                chunks.append(picked)
                done += len(picked)
        except (OSError, pa.ArrowException) as err:  # NOTE: as Store.results: name the file
            raise CorruptFile(f, err) from err
    return _concat(chunks)


def _within(picked: pa.Array, budget: int, first: bool) -> tuple[pa.Array, int]:
    """The leading rows of `picked` whose samples fit `budget` (at least one when `first`),
    and the budget left (below 0 once a row did not fit)."""
    lengths = pc.fill_null(pc.list_value_length(picked), 0).to_numpy(zero_copy_only=False)
    used = np.cumsum(lengths)
    fit = max(int(np.searchsorted(used, budget, side="right")), 1 if first else 0)
    if fit < len(picked):
        return picked.slice(0, fit), -1
    return picked, budget - int(used[-1]) if len(used) else budget


def _concat(chunks: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(chunks) if chunks else pa.array([], SAMPLES_TYPE)


def _group_samples(pf: pq.ParquetFile, group: int, rows: np.ndarray) -> pa.Array:
    """The samples of some rows of one row group (nulls for a file written before samples
    were kept)."""
    if SAMPLES not in pf.schema_arrow.names:
        return pa.nulls(len(rows), SAMPLES_TYPE)
    column = pf.read_row_group(group, columns=[SAMPLES])[SAMPLES].combine_chunks()
    return column.take(pa.array(rows)).cast(SAMPLES_TYPE)
