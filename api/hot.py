"""The hottest reads, `GET /v1/runs/{id}` and a page of `GET /v1/runs`, answered before
FastAPI routes them: the front of the one read path for runs (api/cache.py says the whole
path and what it keeps).

CI pollers and dashboards ask for one run thousands of times a second. FastAPI spends
about half of such a request matching nested routers and resolving dependencies, for a
route whose whole work is one token check and one or two indexed point reads. `HotReads`
answers the request it can answer with success, calling the same library functions as the
route (`auth.admit`, `service.run_json`, `service.list_runs`), and passes every other
request to the app unchanged: a missing, revoked or under-scoped token, an unknown or
corrupt run, a query string other than a page's `limit` and `cursor` (a filter, a bad or
repeated value), another method or path. Every error is therefore the route's own, in the
one problem shape, and the route stays the OpenAPI's documentation of these reads.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from fleetval.api import service
from fleetval.api.auth import admit, credentials_of
from fleetval.api.cache import PageCache
from fleetval.api.db import Scope as TokenScope
from fleetval.api.db import ServiceDB
from fleetval.store.dataset import Store
from fleetval.store.records import RunFilter

RUNS = "/v1/runs"
PREFIX = RUNS + "/"
NO_FILTER = RunFilter()


class HotReads:
    """ASGI middleware: 200 for `GET /v1/runs/{id}` when the caller may read and the run
    reads cleanly; anything else goes to the app."""

    def __init__(self, app: ASGIApp, db: ServiceDB, store: Store, pages: PageCache) -> None:
        self.app, self.db, self.store, self.pages = app, db, store, pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self._answer(scope) if scope["type"] == "http" and scope["method"] == "GET" else None
        if body is None:
            await self.app(scope, receive, send)
            return
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, scope: Scope) -> bytes | None:
        run_id, page = _run_id(scope), _page(scope)
        authorization = _header(scope, b"authorization")
        if (run_id is None and page is None) or authorization is None:
            return None
        try:
            admit(self.db, credentials_of(authorization), TokenScope.READ)
            if run_id is not None:
                return service.run_json(self.db, self.store, run_id).encode()
            return self._page(*page)  # type: ignore[misc]
        except Exception:
            # NOTE: the route raises the same error again and answers it as every route does
            return None

    def _page(self, limit: int, cursor: str | None) -> bytes:
        """The route's page, kept until what it shows may have changed."""
        index = self.store.run_index()  # NOTE: first: it may sync, or say it is building
        version = (self.db.data_version(), index.version())  # NOTE: read before the page

        def make() -> bytes:
            return service.list_runs(
                self.db, self.store, NO_FILTER, limit=limit, cursor=cursor
            ).encode()

        return self.pages.get(version, (limit, cursor), make)


def _run_id(scope: Scope) -> str | None:
    """The id of a plain `GET /v1/runs/{id}` (no query string, no sub-path), else None."""
    path: str = scope["path"]
    if scope.get("query_string") or scope.get("root_path") or not path.startswith(PREFIX):
        return None
    run_id = path[len(PREFIX) :]
    return run_id if run_id and "/" not in run_id else None


def _page(scope: Scope) -> tuple[int, str | None] | None:
    """(limit, cursor) of `GET /v1/runs` with no filter: `limit` (1..PAGE_MAX) and
    `cursor`, each at most once; else None (the route validates and answers)."""
    if scope["path"] != RUNS or scope.get("root_path"):
        return None
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    if set(query) - {"limit", "cursor"} or any(len(v) != 1 for v in query.values()):
        return None
    limit = query.get("limit", [str(service.PAGE_DEFAULT)])[0]
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= service.PAGE_MAX:
        return None
    return int(limit), query.get("cursor", [None])[0]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
