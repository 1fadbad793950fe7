"""Submit, list, get and cancel runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from fleetval.api import service
from fleetval.api.auth import BEARER_DECLARED
from fleetval.api.deps import DbDep, ExecutorDep, LimitsDep, ReaderDep, StoreDep, SubmitToken
from fleetval.api.models import RunList, RunOut, SubmitRequest
from fleetval.store.records import RunFilter
from fleetval.vocab import QueueStatus, RunStatus

router = APIRouter(prefix="/v1/runs", tags=["runs"])

# A listed run is a submission (QueueStatus) or a run found only in the store (RunStatus).
StatusFilter = QueueStatus | RunStatus
# Follow a submission to its run, its cancel and its results (stateful clients and tests).
_LINKS = {
    name: {"operationId": op, "parameters": {"run_id": "$response.body#/run_id"}}
    for name, op in (
        ("GetRun", "get_run"),
        ("CancelRun", "cancel_run"),
        ("GetResults", "get_results"),
        ("GetEvents", "get_events"),
    )
}


@router.post(
    "",
    status_code=201,
    operation_id="submit_run",
    responses={
        201: {"description": "Queued", "links": _LINKS},
        200: {
            "model": RunOut,
            "description": "The run this owner's submission_id made already",
            "links": _LINKS,
        },
        409: {"description": "The submission_id belongs to another owner's run"},
        422: {"description": "Invalid suite, over a limit, or the cluster cannot place it"},
        429: {"description": "The owner has too many runs queued or running"},
    },
)
def submit(
    body: SubmitRequest,
    token: SubmitToken,
    db: DbDep,
    executor: ExecutorDep,
    limits: LimitsDep,
    response: Response,
) -> RunOut:
    """Queue a suite run; it is on disk before this returns."""
    sub, created = service.submit(db, executor, limits, body, token)
    if not created:
        response.status_code = 200
    return service.run_out(db, sub)


def _json(text: str) -> Response:
    return Response(text, media_type="application/json")


# NOTE: the two hot reads are async and answer JSON text (service.run_json, list_runs): no
# thread-pool hop, no response model per request, and one dependency (`Reader`; resolving
# token, database and store as four took 40% of a lookup's CPU time). They read indexed
# SQLite point reads and one keyset page (WAL: never waiting for a writer), well under a
# millisecond, cheaper on the loop than the hop off it. The models stay their documentation.
# A plain GET of one run, and a page with no filter, are answered before routing
# (api/hot.py); these routes answer the rest.
@router.get("", operation_id="list_runs", response_model=RunList, openapi_extra=BEARER_DECLARED)
async def list_runs(
    r: ReaderDep,
    status: StatusFilter | None = None,
    suite: str | None = None,
    label: Annotated[
        list[Annotated[str, Query(pattern=r"^[^=]+=.*$")]],
        Query(description="KEY=VALUE, repeatable"),
    ] = [],  # noqa: B006
    limit: Annotated[int, Query(ge=1, le=service.PAGE_MAX)] = service.PAGE_DEFAULT,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> Response:
    """Runs, newest first: one keyset page, whatever the history's length."""
    labels = dict(pair.split("=", 1) for pair in label)  # the pattern checked KEY=VALUE
    where = RunFilter(status=status, suite=suite, labels=labels)
    if labels:  # NOTE: a label is no indexed column: a scan, off the event loop
        text = await run_in_threadpool(
            service.list_runs, r.db, r.store, where, limit=limit, cursor=cursor
        )
        return _json(text)
    return _json(service.list_runs(r.db, r.store, where, limit=limit, cursor=cursor))


@router.get(
    "/{run_id}", operation_id="get_run", response_model=RunOut, openapi_extra=BEARER_DECLARED
)
async def get_run(run_id: str, r: ReaderDep) -> Response:
    """A run: status, live progress (job, step, percent, culprits so far) and step verdicts."""
    return _json(service.run_json(r.db, r.store, run_id))


@router.post(
    "/{run_id}/cancel",
    status_code=202,
    operation_id="cancel_run",
    responses={
        403: {"description": "The token lacks the scope, or the run is another owner's"},
        409: {"description": "The run has finished"},
    },
)
def cancel(run_id: str, token: SubmitToken, db: DbDep, store: StoreDep) -> RunOut:
    """Cancel: a queued run never starts; a running one has its actors killed and group removed.
    Only the run's owner or an admin may."""
    return service.cancel(db, store, run_id, token)
