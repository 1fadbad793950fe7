"""Submit, list, get and cancel runs."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response

from fleetval.api import service
from fleetval.api.deps import DbDep, ExecutorDep, ReadToken, StoreDep, SubmitToken
from fleetval.api.models import RunList, RunOut, SubmitRequest
from fleetval.vocab import QueueStatus, RunStatus

router = APIRouter(prefix="/v1/runs", tags=["runs"])

# A listed run is a submission (QueueStatus) or a run found only in the store (RunStatus).
StatusFilter = QueueStatus | RunStatus
_ERRORS = {404: {"description": "No such run"}}


@router.post(
    "",
    status_code=201,
    responses={
        200: {"model": RunOut, "description": "The run this submission_id made already"},
        413: {"description": "Body too large"},
        422: {"description": "Invalid suite or request"},
    },
)
def submit(
    body: SubmitRequest, token: SubmitToken, db: DbDep, executor: ExecutorDep, response: Response
) -> RunOut:
    """Queue a suite run; it is on disk before this returns."""
    sub, created = service.submit(db, executor, body, token)
    if not created:
        response.status_code = 200
    return service.run_out(db, sub)


@router.get("")
def list_runs(
    _: ReadToken,
    db: DbDep,
    store: StoreDep,
    status: StatusFilter | None = None,
    suite: str | None = None,
    label: Annotated[list[str], Query(description="KEY=VALUE, repeatable")] = [],  # noqa: B006
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> RunList:
    """Runs, newest first."""
    labels = {}
    for pair in label:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise HTTPException(
                422,
                [
                    {
                        "loc": ["query", "label"],
                        "msg": f"expected KEY=VALUE, got {pair!r}",
                        "type": "value_error",
                    }
                ],
            )
        labels[key] = value
    return service.list_runs(
        db, store, status=status, suite=suite, labels=labels, limit=limit, cursor=cursor
    )


@router.get("/{run_id}", responses=_ERRORS)
async def get_run(run_id: str, _: ReadToken, db: DbDep, store: StoreDep) -> RunOut:
    """A run: status, live progress (job, step, percent, culprits so far) and step verdicts."""
    sub = db.get(run_id)  # one indexed read: served on the event loop
    if sub is not None:
        return service.run_out(db, sub)
    return await asyncio.to_thread(service.get_run, db, store, run_id)  # a scan of the store


@router.post(
    "/{run_id}/cancel",
    status_code=202,
    responses={**_ERRORS, 409: {"description": "The run has finished"}},
)
def cancel(run_id: str, _: SubmitToken, db: DbDep, store: StoreDep) -> RunOut:
    """Cancel: a queued run never starts; a running one has its actors killed and group removed."""
    return service.cancel(db, store, run_id)
