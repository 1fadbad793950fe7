"""A run's progress as server-sent events, until the run ends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from fleetval.api import service
from fleetval.api.db import ServiceDB
from fleetval.api.deps import DbDep, ReadToken, StoreDep
from fleetval.vocab import EventKind

router = APIRouter(prefix="/v1/runs", tags=["runs"])

# One event as a client parses it: its id (the sequence number), its kind, its JSON data.
SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"enum": [k.value for k in EventKind]},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}
POLL_S = 0.2
KEEPALIVE_S = 15.0


def _sse(event: dict[str, Any]) -> str:
    return f"id: {event.get('seq', 0)}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"


async def _stream(db: ServiceDB, run_id: str, after: int, request: Request) -> AsyncIterator[str]:
    """Polls the database off the event loop (a thread each time), so a slow disk never
    stalls other requests."""
    quiet_since = time.monotonic()
    while True:
        events = await run_in_threadpool(db.events, run_id, after)
        for event in events:
            yield _sse(event)
            after = event["seq"]
            if event["kind"] == EventKind.RUN_END:
                return
        sub = await run_in_threadpool(db.get, run_id)
        if sub is None or (sub.finished and not events):
            # NOTE: a run that ended without an end event (cancelled while queued before
            # events existed, or recovered): say how it ended, once.
            status, message = (sub.status, sub.message) if sub else ("", "")
            yield _sse(
                {"kind": EventKind.RUN_END, "status": status, "message": message, "seq": after}
            )
            return
        if events:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield ": keep-alive\n\n"
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)


@router.get(
    "/{run_id}/events",
    operation_id="get_events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": SSE_EVENT}},
            "description": " / ".join(EventKind),
        },
    },
)
async def events(
    run_id: str,
    request: Request,
    _: ReadToken,
    db: DbDep,
    store: StoreDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """Progress as server-sent events; reconnect with Last-Event-ID to resume."""
    if await run_in_threadpool(db.get, run_id) is None:
        # made by `fleetval run`: it has ended
        rec = await run_in_threadpool(service.stored_run, store, run_id)
        end = {"kind": EventKind.RUN_END, "status": rec.status, "message": rec.message, "seq": 1}
        return StreamingResponse(iter([_sse(end)]), media_type="text/event-stream")
    digits = last_event_id and last_event_id.isdigit() and len(last_event_id) < 12
    after = int(last_event_id) if digits else 0
    return StreamingResponse(
        _stream(db, run_id, after, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
