"""A run's measurement rows: JSON (filterable) or a Parquet download."""

from __future__ import annotations

import io
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import JSONResponse

from fleetval.api import service
from fleetval.api.deps import DbDep, ReadToken, StoreDep
from fleetval.store.dataset import Store, parquet_options

router = APIRouter(prefix="/v1/runs", tags=["results"])

PARQUET = "application/vnd.apache.parquet"


def select(
    store: Store, run_id: str, filters: dict[str, str | int | None], samples: bool
) -> pa.Table:
    table = store.results([run_id])
    for column, value in filters.items():
        if value is not None:
            table = table.filter(pc.equal(table[column], value))
    return table if samples else table.drop_columns(["samples_us"])


@router.get(
    "/{run_id}/results",
    responses={
        200: {"content": {"application/json": {}, PARQUET: {}}, "description": "Result rows"},
        404: {"description": "No such run"},
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
    rank: Annotated[int | None, Query(ge=0)] = None,
    node: str | None = None,
    samples: Annotated[bool, Query(description="Include per-iteration samples (JSON)")] = False,
    format: Literal["json", "parquet"] | None = None,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Rows of the run (the steps finished so far while it runs); Parquet keeps every column."""
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
    return JSONResponse({"run_id": run_id, "count": table.num_rows, "rows": table.to_pylist()})
