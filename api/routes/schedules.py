"""Named cron schedules: create, list, get, delete (the same as `fleetval schedule ...`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from fleetval.api import service
from fleetval.api.deps import DbDep, LimitsDep, ReadToken, SubmitToken
from fleetval.api.models import ScheduleOut, ScheduleRequest

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])
ScheduleName = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
# Follow a new schedule to its read and its delete (stateful clients and tests).
_LINKS = {
    name: {"operationId": op, "parameters": {"name": "$response.body#/name"}}
    for name, op in (("GetSchedule", "get_schedule"), ("DeleteSchedule", "delete_schedule"))
}


@router.post(
    "",
    status_code=201,
    operation_id="create_schedule",
    responses={
        201: {"description": "Stored; it fires from its next fire time", "links": _LINKS},
        409: {"description": "A schedule of this name exists"},
        422: {"description": "Invalid cron or suite, over a limit, or the cluster cannot place it"},
        429: {"description": "The owner has too many schedules"},
    },
)
def create_schedule(
    body: ScheduleRequest, token: SubmitToken, db: DbDep, limits: LimitsDep, request: Request
) -> ScheduleOut:
    """A schedule owned by the token's owner: each firing submits its suite, checked like a
    submission now and again at each firing."""
    schedule = service.create_schedule(db, limits, body, token)
    request.app.state.scheduler.wake()
    return schedule


@router.get("", operation_id="list_schedules")
def list_schedules(_: ReadToken, db: DbDep) -> list[ScheduleOut]:
    """Every schedule with its next and last fire time and its counters."""
    return db.schedules()


@router.get("/{name}", operation_id="get_schedule")
def get_schedule(name: ScheduleName, _: ReadToken, db: DbDep) -> ScheduleOut:
    return service.get_schedule(db, name)


@router.delete(
    "/{name}",
    operation_id="delete_schedule",
    responses={
        403: {"description": "The token lacks the scope, or the schedule is another owner's"}
    },
)
def delete_schedule(name: ScheduleName, token: SubmitToken, db: DbDep) -> ScheduleOut:
    """No more firings; the runs it queued stay. Only its owner or an admin may."""
    return service.delete_schedule(db, name, token)
