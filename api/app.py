"""`create_app(settings)`: the FastAPI app over one data directory."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleetval.analysis.baselines import BaselineError, UnknownFilterKey
from fleetval.analysis.compare import CompareError
from fleetval.api import errors, metrics
from fleetval.api.cache import CachedStore, PageCache
from fleetval.api.db import ServiceDB
from fleetval.api.errors import problem
from fleetval.api.executor import Executor
from fleetval.api.heavy import HeavyReads
from fleetval.api.hot import HotReads
from fleetval.api.limits import Limits
from fleetval.api.models import suite_components
from fleetval.api.routes import ROUTERS
from fleetval.api.routes.events import StreamSlots
from fleetval.api.scheduler import Scheduler
from fleetval.api.schedules import cron_pattern
from fleetval.api.settings import Settings
from fleetval.jsontypes import JsonObject
from fleetval.store.runindex import IndexBuilding

# Statuses only some operations answer with (the rest are added to every operation that
# can answer them: see errors.complete_openapi).
EXTRA_STATUSES = {
    ("POST", "/v1/runs"): (409, 429),
    ("POST", "/v1/runs/{run_id}/cancel"): (409,),
    ("PUT", "/v1/baselines/{name}"): (409,),
    ("GET", "/v1/baselines/{name}"): (409,),
    ("POST", "/v1/compare"): (409, 429),
    ("POST", "/v1/attribute"): (409, 429),
    ("POST", "/v1/stragglers"): (429,),
    ("GET", "/v1/runs/{run_id}/report"): (409, 429),
    ("GET", "/v1/runs/{run_id}/results"): (429,),
    ("POST", "/v1/schedules"): (409, 429),
}


class BodyTooLarge(HTTPException):
    """Raised while a streamed body is read; FastAPI passes HTTPExceptions through as they are."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body larger than {max_bytes} bytes")


class BodyLimit:
    """413 for a body over the limit, by Content-Length or as it streams in (chunked)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit():
            await problem(400, "Content-Length is not a number")(scope, receive, send)
            return
        if int(length) > self.max_bytes:
            detail = f"request body larger than {self.max_bytes} bytes"
            await problem(413, detail)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)


def _install_errors(app: FastAPI) -> None:
    """Library errors are the client's (404, 409, 422) or the stored data's (500), each a
    problem naming the reason; never a bare 500."""
    errors.install(app)

    @app.exception_handler(BaselineError)
    @app.exception_handler(CompareError)
    async def _unresolved(request: Request, err: Exception) -> Any:
        # NOTE: well-formed, but the runs stored now cannot satisfy it: a conflict with state
        return problem(409, errors.public(str(err), request))

    @app.exception_handler(IndexBuilding)
    async def _building(_: Any, err: Exception) -> Any:
        return problem(503, str(err), headers={"Retry-After": "2"})

    @app.exception_handler(UnknownFilterKey)
    async def _bad_filter(request: Request, err: UnknownFilterKey) -> Any:
        # NOTE: a key nothing in the store has yet: any key is well-formed (the schema admits
        # it, and a label may appear with the next run), so a conflict with the store's state
        # (409), naming the field; 422 would reject a schema-valid request
        detail = errors.public(str(err), request)
        field = {"loc": ["body", "where", err.key], "msg": detail, "type": "unknown_key"}
        return problem(409, detail, [field])


def publish_inputs(spec: JsonObject, limits: Limits) -> JsonObject:
    """The OpenAPI says what this server accepts: the inline suite's schema, and the cron
    expressions its `min_schedule_interval_s` lets through (a seconds field of one value
    where nothing may fire more than once a minute)."""
    schemas = spec["components"]["schemas"]
    suite = suite_components()
    clash = sorted(set(suite) & set(schemas))
    if clash:
        raise RuntimeError(f"suite schemas clash with the API's: {', '.join(clash)}")
    schemas.update(suite)
    cron = schemas["ScheduleRequest"]["properties"]["cron"]
    cron["pattern"] = cron_pattern(seconds_list=limits.min_schedule_interval_s < 60)
    return spec


def create_app(settings: Settings) -> FastAPI:
    db = ServiceDB(settings.data_dir)
    store = CachedStore(settings.data_dir)
    executor = Executor(db, store, settings.address)
    scheduler = Scheduler(db, executor, settings.limits)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # NOTE: the run index is built from the files and kept synced by a thread, so requests
        # never wait on a scan. A small store is ready within the wait; while a large one is
        # built, the service answers: /healthz says so, reads of runs 503 (IndexBuilding)
        await asyncio.to_thread(store.keep_index, 1.0, 2.0)
        if settings.run_executor:
            executor.start()
        if settings.run_scheduler:
            scheduler.start()
        yield
        await asyncio.to_thread(scheduler.stop)
        await asyncio.to_thread(executor.stop)
        await asyncio.to_thread(store.stop_index)
        app.state.heavy.close()
        db.close()

    app = FastAPI(
        title="fleetval",
        summary="Validate GPU fleets: submit suites, follow runs, fetch results, compare.",
        version="1",
        lifespan=lifespan,
        docs_url="/docs" if settings.docs else None,
        redoc_url="/redoc" if settings.docs else None,
    )
    app.state.settings, app.state.db, app.state.store = settings, db, store
    app.state.executor, app.state.scheduler = executor, scheduler
    app.state.metrics = metrics.registry(db)
    app.state.streams = StreamSlots(settings.limits)
    app.state.sample_reads = threading.BoundedSemaphore(settings.limits.max_sample_reads)
    app.state.heavy = HeavyReads(settings.limits.max_heavy_reads)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.state.pages = PageCache()
    # NOTE: outermost: before any routing
    app.add_middleware(HotReads, db=db, store=store, pages=app.state.pages)
    _install_errors(app)
    for router in ROUTERS:
        app.include_router(router)

    def openapi() -> JsonObject:
        if app.openapi_schema is None:
            spec = errors.complete_openapi(app, EXTRA_STATUSES)
            app.openapi_schema = publish_inputs(spec, settings.limits)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def app_from_env() -> FastAPI:
    """For `uvicorn --factory` with several workers (each imports the app by name)."""
    return create_app(Settings())  # the FLEETVAL_* variables `Settings.to_env` wrote
