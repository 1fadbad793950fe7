"""A run's progress as server-sent events, until the run ends (or the caller's token stops
being valid: it is checked again at every poll, so a revoked token stops streaming)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool

from fleetval.api import service
from fleetval.api.auth import authenticate, bearer
from fleetval.api.db import ServiceDB, Submission, Token
from fleetval.api.db.events import EventJson
from fleetval.api.deps import DbDep, ReadToken, StoreDep
from fleetval.api.errors import TooMany
from fleetval.api.limits import Limits
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


class _Slot:
    """One open stream; held by its generator, so a stream that never started still frees
    its slot when it is collected."""

    def __init__(self, token_id: str) -> None:
        self.token_id = token_id


class StreamSlots:
    """Open event streams of one process, capped per token and in all: each polls the
    database on the shared thread pool."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._open: weakref.WeakSet[_Slot] = weakref.WeakSet()
        self._lock = threading.Lock()

    def acquire(self, token: Token) -> _Slot:
        """A slot for one more stream of `token`, or TooMany naming the limit."""
        with self._lock:
            live = list(self._open)
            mine = sum(1 for s in live if s.token_id == token.id)
            if mine >= self.limits.max_streams_per_token:
                raise TooMany(
                    f"token {token.id} has {mine} event streams open; this service allows "
                    f"{self.limits.max_streams_per_token} (max_streams_per_token)",
                    retry_after_s=5,
                )
            if len(live) >= self.limits.max_streams:
                raise TooMany(
                    f"{len(live)} event streams are open; this service allows "
                    f"{self.limits.max_streams} (max_streams)",
                    retry_after_s=5,
                )
            slot = _Slot(token.id)
            self._open.add(slot)
            return slot

    def release(self, slot: _Slot) -> None:
        with self._lock:
            self._open.discard(slot)

    def count(self) -> int:
        with self._lock:
            return len(self._open)


def _sse(event: EventJson) -> str:
    return f"id: {event.get('seq', 0)}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"


def _poll(
    db: ServiceDB, run_id: str, after: int, credentials: HTTPAuthorizationCredentials | None
) -> tuple[list[EventJson], Submission | None, str]:
    """One look, in one thread-pool hop: the new events, the submission, and why the
    caller may not read any more ("" while its token is valid)."""
    try:
        authenticate(db, credentials)
    except HTTPException as err:
        return [], None, str(err.detail)
    return db.events(run_id, after), db.get(run_id), ""


async def _stream(
    db: ServiceDB, run_id: str, after: int, request: Request, slots: StreamSlots, slot: _Slot
) -> AsyncIterator[str]:
    """The stream, holding its slot until it ends (the run's end, a disconnect, a token
    no longer valid)."""
    try:
        async for chunk in _follow(db, run_id, after, request):
            yield chunk
    finally:
        slots.release(slot)


async def _follow(db: ServiceDB, run_id: str, after: int, request: Request) -> AsyncIterator[str]:
    """Polls the database off the event loop (a thread each time), so a slow disk never
    stalls other requests."""
    quiet_since = time.monotonic()
    credentials = bearer(request)
    while True:
        events, sub, refused = await run_in_threadpool(_poll, db, run_id, after, credentials)
        if refused:  # NOTE: a comment, not an event: the run has not ended
            yield f": stream closed: {refused}\n\n"
            return
        for event in events:
            yield _sse(event)
            after = event["seq"]
            if event["kind"] == EventKind.RUN_END:
                return
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
        429: {"description": "Too many event streams open for this token or this process"},
    },
)
async def events(
    run_id: str,
    request: Request,
    token: ReadToken,
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
    slots: StreamSlots = request.app.state.streams
    slot = slots.acquire(token)  # 429 when this token or the process has too many open
    return StreamingResponse(
        _stream(db, run_id, after, request, slots, slot),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
