"""A run's measurement rows: JSON pages (filterable) or a Parquet download."""

from __future__ import annotations

import io
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from fastapi import APIRouter, Header, Query, Response

from fleetval.api import service
from fleetval.api.deps import DbDep, ReadToken, StoreDep
from fleetval.api.models import ResultPage
from fleetval.store.dataset import Store, parquet_options
from fleetval.store.query import filter_rows
from fleetval.store.schema import RESULTS_SCHEMA

router = APIRouter(prefix="/v1/runs", tags=["results"])

PARQUET = "application/vnd.apache.parquet"


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
    """Rows of the run (the steps finished so far while it runs), in pages of `limit`;
    Parquet keeps every column and every matching row."""
    service.require_run(db, store, run_id)
    filters = {"step": step, "check": check, "collective": collective, "rank": rank, "node": node}
    parquet = format == "parquet" or (format is None and PARQUET in (accept or ""))
    table = select(store, run_id, filters, samples or parquet)
    if parquet:
        buf = io.BytesIO()
        pq.write_table(table, buf, **parquet_options(table.schema))
        return Response(
            buf.getvalue(),
            media_type=PARQUET,
            headers={"Content-Disposition": f'attachment; filename="{run_id}.parquet"'},
        )
    start = int(cursor or 0)
    page = table.slice(start, limit)
    end = start + page.num_rows
    body = ResultPage(
        run_id=run_id,
        count=page.num_rows,
        rows=page.to_pylist(),
        next_cursor=str(end) if end < table.num_rows else None,
    )
    return Response(body.model_dump_json(), media_type="application/json")
