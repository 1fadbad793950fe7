"""`create_app(settings)`: the FastAPI app over one data directory."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleetval.analysis.baselines import UnknownBaseline
from fleetval.api import metrics
from fleetval.api.db import ServiceDB
from fleetval.api.executor import Executor
from fleetval.api.routes import ROUTERS
from fleetval.api.service import Conflict, NotFound
from fleetval.api.settings import Settings
from fleetval.store.dataset import Store
from fleetval.suite import SuiteError


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
            await _error(400, "Content-Length is not a number")(scope, receive, send)
            return
        if int(length) > self.max_bytes:
            await self._too_large()(scope, receive, send)
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

    def _too_large(self) -> ASGIApp:
        return _error(413, f"request body larger than {self.max_bytes} bytes")


def _error(status: int, detail: object) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _suite_detail(err: SuiteError) -> list[dict]:
    """Suite problems in FastAPI's shape: a location under body.suite and a message."""
    out = []
    for problem in err.problems:
        path, _, msg = problem.partition(": ")
        loc = ["body", "suite", *[p for p in path.split(".") if p != "(suite)"]]
        out.append({"loc": loc, "msg": msg, "type": "invalid_suite"})
    return out


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity, but Python's parser accepts them in a request body:
    echo them back as strings, or rendering the 422 would fail."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _install_errors(app: FastAPI) -> None:
    """Library errors are the client's: 404, 409 or 422 with the reason, never a 500."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, _finite(jsonable_encoder(err.errors())))

    @app.exception_handler(SuiteError)
    async def _suite(_: Request, err: SuiteError) -> JSONResponse:
        return _error(422, _suite_detail(err))

    @app.exception_handler(NotFound)
    @app.exception_handler(UnknownBaseline)
    async def _missing(_: Request, err: Exception) -> JSONResponse:
        return _error(404, str(err.args[0]) if err.args else "not found")

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, err: Conflict) -> JSONResponse:
        return _error(409, str(err))

    @app.exception_handler(ValueError)
    async def _bad(_: Request, err: ValueError) -> JSONResponse:
        return _error(422, str(err))


def create_app(settings: Settings) -> FastAPI:
    db = ServiceDB(settings.data_dir)
    store = Store(settings.data_dir)
    executor = Executor(db, store, settings.address)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.run_executor:
            executor.start()
        yield
        await asyncio.to_thread(executor.stop)
        db.close()

    app = FastAPI(
        title="fleetval",
        summary="Validate GPU fleets: submit suites, follow runs, fetch results, compare.",
        version="1",
        lifespan=lifespan,
    )
    app.state.settings, app.state.db, app.state.store = settings, db, store
    app.state.executor = executor
    app.state.metrics = metrics.registry(db)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    _install_errors(app)
    for router in ROUTERS:
        app.include_router(router)
    return app


def app_from_env() -> FastAPI:
    """For `uvicorn --factory` with several workers (each imports the app by name)."""
    return create_app(Settings.from_env())
