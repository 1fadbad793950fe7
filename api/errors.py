"""One error shape on every route: RFC 9457 problem details, `application/problem+json`.

    {"type": "about:blank", "title": "Not Found", "status": 404,
     "detail": "no run 'x'", "errors": [{"loc": ["path", "run_id"], "msg": "...", "type": "not_found"}]}

`detail` is always one sentence; `errors` names the fields (FastAPI's `loc`, `msg`, `type`),
empty when no field is to blame. Library errors map here in one place; routes raise them
and never check first. The OpenAPI is completed here too: every operation lists every
status it can answer with, each problem under `application/problem+json`.
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import Any, TypedDict

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from fleetval.analysis.baselines import UnknownBaseline
from fleetval.jsontypes import JsonObject
from fleetval.run.plan import PlanError
from fleetval.store.catalog import CorruptFile, RunNotFound, StoreError
from fleetval.suite import SuiteError

PROBLEM = "application/problem+json"
log = logging.getLogger(__name__)


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class FieldErrorJson(TypedDict):
    """A `FieldError` as a problem's body carries it (built as JSON, never parsed here)."""

    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, with the fields to blame."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] = Field(default_factory=list)


class ApiError(Exception):
    """An error a route raises; its status and the fields to blame."""

    status = 400

    def __init__(self, detail: str, *, loc: list[str | int] | None = None, kind: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors: list[FieldErrorJson] = (
            [FieldErrorJson(loc=loc, msg=detail, type=kind or self.kind())] if loc else []
        )
        self.headers: dict[str, str] = {}

    @classmethod
    def kind(cls) -> str:
        return HTTPStatus(cls.status).phrase.lower().replace(" ", "_")


class NotFound(ApiError):
    status = 404


class Forbidden(ApiError):
    status = 403


class Conflict(ApiError):
    """The request contradicts the resource's state, e.g. cancelling a finished run."""

    status = 409


class Unprocessable(ApiError):
    status = 422


class TooMany(ApiError):
    status = 429

    def __init__(self, detail: str, *, retry_after_s: int = 30) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(retry_after_s)}


def problem(
    status: int,
    detail: str,
    errors: list[FieldErrorJson] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "errors": errors or [],
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


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


def _field_errors(err: RequestValidationError) -> list[FieldErrorJson]:
    return [
        {"loc": list(e.get("loc", [])), "msg": str(e.get("msg", "")), "type": str(e.get("type"))}
        for e in _finite(jsonable_encoder(err.errors()))
    ]


def suite_errors(err: SuiteError, kind: str = "invalid_suite") -> list[FieldErrorJson]:
    """Suite problems located under body.suite."""
    out: list[FieldErrorJson] = []
    for line in err.problems:
        path, _, msg = line.partition(": ")
        loc = ["body", "suite", *[p for p in path.split(".") if p != "(suite)"]]
        out.append({"loc": loc, "msg": msg, "type": kind})
    return out


METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")  # what a route here may serve


def _allowed(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves at this request's path."""
    # NOTE: asked of the routes by matching, not read from their `methods`: an included
    # router is one route with none (FastAPI >= 0.16x wraps each in an `_IncludedRouter`)
    return [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in app.router.routes
        )
    ]


def public(detail: str, request: Request) -> str:
    """A library message as a client may read it: the data directory is the server's own
    business (a path on it says where tokens and inline suites are kept)."""
    roots = {str(request.app.state.settings.data_dir), str(request.app.state.store.root)}
    for root in sorted(roots, key=len, reverse=True):
        detail = detail.replace(root, "the store")
    return detail


def _summary(errors: list[FieldErrorJson]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)


def install(app: FastAPI) -> None:
    """Every error the app can answer with, as a problem."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, err: ApiError) -> JSONResponse:
        return problem(err.status, err.detail, err.errors, err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        headers = dict(err.headers or {})
        if err.status_code == 405:  # NOTE: Starlette names only the first route's methods
            headers["Allow"] = ", ".join(_allowed(app, request))
        return problem(err.status_code, str(err.detail), None, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        errors = _field_errors(err)
        return problem(422, _summary(errors) or "invalid request", errors)

    @app.exception_handler(SuiteError)
    async def _suite(_: Request, err: SuiteError) -> JSONResponse:
        errors = suite_errors(err, getattr(err, "kind", "invalid_suite"))
        return problem(422, _summary(errors), errors)

    @app.exception_handler(PlanError)
    async def _plan(_: Request, err: PlanError) -> JSONResponse:
        field, _, msg = str(err).partition(": ")
        errors = [{"loc": ["body", "suite", *field.split(".")], "msg": msg, "type": "unplaceable"}]
        return problem(422, f"the cluster cannot place this suite: {err}", errors)

    @app.exception_handler(RunNotFound)
    async def _no_run(_: Request, err: RunNotFound) -> JSONResponse:
        detail = f"no run {err.run_id!r}"
        return problem(
            404, detail, [{"loc": ["path", "run_id"], "msg": detail, "type": "not_found"}]
        )

    @app.exception_handler(UnknownBaseline)
    async def _no_baseline(_: Request, err: UnknownBaseline) -> JSONResponse:
        return problem(404, str(err.args[0]) if err.args else "no such baseline")

    @app.exception_handler(CorruptFile)
    async def _corrupt(request: Request, err: CorruptFile) -> JSONResponse:
        # NOTE: the server's own data is at fault, never the request: 5xx, naming the file
        return problem(500, f"stored data cannot be read: {public(str(err), request)}")

    @app.exception_handler(StoreError)
    async def _store(request: Request, err: StoreError) -> JSONResponse:
        return problem(422, public(str(err), request))

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception) -> JSONResponse:
        # NOTE: a fault of ours, in the one shape; Starlette logs the traceback after this
        # answers. Never the exception's text: it may hold paths or data of the server.
        log.error("%s %s: %s: %s", request.method, request.url.path, type(err).__name__, err)
        return problem(
            500, f"internal error ({type(err).__name__}); the server log has the details"
        )


# -- the OpenAPI ------------------------------------------------------------------------

_DESCRIPTIONS = {
    400: "The body cannot be read (not UTF-8 / not JSON text)",
    401: "No token, an unknown, revoked or expired one",
    403: "The token lacks the scope, or the run is another owner's",
    404: "No such run or resource",
    409: "Conflicts with the resource's state",
    413: "Body too large",
    422: "Invalid request: `errors` names the fields",
    429: "Over a limit on work under way (the owner's submissions, reads at once): "
    "Retry-After says when to try again",
}


def complete_openapi(app: FastAPI, extra: dict[tuple[str, str], tuple[int, ...]]) -> JsonObject:
    """FastAPI's OpenAPI with every status each operation returns, problems as problem+json.

    Each operation gets 422 (every one validates something: a header, a path); 401 and 403
    where it needs a token; 404 where it names a resource in its path; 413 where it takes a
    body; `extra` adds what only some routes answer (409, 429)."""
    from fastapi.openapi.utils import get_openapi

    spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["FieldError"] = FieldError.model_json_schema()
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas["Problem"].pop("$defs", None)
    ref = {"schema": {"$ref": "#/components/schemas/Problem"}}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            statuses = {422, *extra.get((method.upper(), path), ())}
            if op.get("security"):
                statuses |= {401, 403}
            if "{" in path:
                statuses.add(404)
            if "requestBody" in op:
                statuses |= {400, 413}
            responses = op["responses"]
            for status in statuses:
                entry = responses.setdefault(str(status), {})
                entry.setdefault("description", _DESCRIPTIONS[status])
                entry["content"] = {PROBLEM: ref}
            for status, entry in responses.items():
                if status.startswith(("4", "5")):
                    entry["content"] = {PROBLEM: ref}
    return spec
