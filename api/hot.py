"""The hottest read, `GET /v1/runs/{id}`, answered before FastAPI routes it.

CI pollers and dashboards ask for one run thousands of times a second. FastAPI spends
about half of such a request matching nested routers and resolving dependencies, for a
route whose whole work is one token check and one or two indexed point reads. `HotReads`
answers the request it can answer with success, calling the same library functions as the
route (`auth.admit`, `service.run_json`), and passes every other request to the app
unchanged: a missing, revoked or under-scoped token, an unknown or corrupt run, a query
string, another method or path. Every error is therefore the route's own, in the one
problem shape, and the route stays the OpenAPI's documentation of this read.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from fleetval.api import service
from fleetval.api.auth import admit, credentials_of
from fleetval.api.db import Scope as TokenScope
from fleetval.api.db import ServiceDB
from fleetval.store.dataset import Store

PREFIX = "/v1/runs/"


class HotReads:
    """ASGI middleware: 200 for `GET /v1/runs/{id}` when the caller may read and the run
    reads cleanly; anything else goes to the app."""

    def __init__(self, app: ASGIApp, db: ServiceDB, store: Store) -> None:
        self.app, self.db, self.store = app, db, store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        run_id = _run_id(scope)
        body = self._answer(scope, run_id) if run_id else None
        if body is None:
            await self.app(scope, receive, send)
            return
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, scope: Scope, run_id: str) -> bytes | None:
        authorization = _header(scope, b"authorization")
        if authorization is None:
            return None
        try:
            admit(self.db, credentials_of(authorization), TokenScope.READ)
            return service.run_json(self.db, self.store, run_id).encode()
        except Exception:
            # NOTE: the route raises the same error again and answers it as every route does
            return None


def _run_id(scope: Scope) -> str | None:
    """The id of a plain `GET /v1/runs/{id}` (no query string, no sub-path), else None."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
        return None
    path: str = scope["path"]
    if scope.get("root_path") or not path.startswith(PREFIX):
        return None
    run_id = path[len(PREFIX) :]
    return run_id if run_id and "/" not in run_id else None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
