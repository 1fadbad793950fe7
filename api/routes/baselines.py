"""Named baselines: list, get, set (PUT), delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from fleetval.analysis.baselines import Baseline, Baselines
from fleetval.api.deps import AdminToken, LimitsDep, ReadToken, StoreDep
from fleetval.api.errors import Unprocessable
from fleetval.api.models import STORE_NAME, BaselineOut, BaselineRequest, BaselineRuns
from fleetval.api.routes.results import NEXT_CURSOR
from fleetval.api.service import PAGE_DEFAULT, PAGE_MAX

router = APIRouter(prefix="/v1/baselines", tags=["baselines"])
BaselineName = Annotated[str, Path(pattern=STORE_NAME)]
_UNRESOLVED = {409: {"description": "It resolves to no stored run (unknown run ids, no match)"}}


def _out(b: Baseline, resolved: tuple[str, ...] | None = None) -> BaselineOut:
    return BaselineOut(
        name=b.name,
        runs=list(b.run_ids),
        where=b.where,
        last=b.last,
        description=b.description,
        created_at=b.created_at,
        resolves_to=list(resolved) if resolved is not None else None,
    )


@router.get(
    "",
    responses={
        200: {
            "headers": {
                NEXT_CURSOR: {
                    "description": "More baselines: pass it as `cursor`",
                    "schema": {"type": "string"},
                }
            }
        }
    },
)
def list_baselines(
    _: ReadToken,
    store: StoreDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
    cursor: Annotated[
        str | None,
        Query(pattern=STORE_NAME, description="X-Fleetval-Next-Cursor of the previous page"),
    ] = None,
) -> list[BaselineOut]:
    """Baselines by name, one page: only the page's files are read."""
    baselines = Baselines(store)
    names = [n for n in baselines.names() if cursor is None or n > cursor]
    if len(names) > limit:
        response.headers[NEXT_CURSOR] = names[limit - 1]
    return [_out(baselines.get(n)) for n in names[:limit]]


@router.get("/{name}", responses=_UNRESOLVED)
def get_baseline(name: BaselineName, _: ReadToken, store: StoreDep) -> BaselineOut:
    """A baseline and the runs it stands for now."""
    resolved = Baselines(store).resolve(name)
    return _out(resolved.baseline, resolved.run_ids)


@router.put(
    "/{name}",
    responses={200: {"model": BaselineOut, "description": "Replaced"}, **_UNRESOLVED},
    status_code=201,
)
def set_baseline(
    name: BaselineName,
    body: BaselineRequest,
    _: AdminToken,
    store: StoreDep,
    limits: LimitsDep,
    response: Response,
) -> BaselineOut:
    """Create (201) or replace (200): explicit runs, or filters; it must resolve to a run now.
    Filters resolve to the newest `last` matching runs, at most `max_baseline_runs` (also
    without `last`)."""
    baselines = Baselines(store)
    existed = name in baselines.names()
    if isinstance(body, BaselineRuns):
        resolved = baselines.set(name, run_ids=body.runs, description=body.description)
    else:
        cap = limits.max_baseline_runs
        if body.last is not None and body.last > cap:
            raise Unprocessable(
                f"last: {body.last} is over this service's limit max_baseline_runs = {cap}",
                loc=["body", "last"],
                kind="over_limit",
            )
        resolved = baselines.set(
            name, where=body.where, last=body.last or cap, description=body.description
        )
    if existed:
        response.status_code = 200
    return _out(resolved.baseline, resolved.run_ids)


@router.delete("/{name}")
def delete_baseline(name: BaselineName, _: AdminToken, store: StoreDep) -> dict[str, str]:
    Baselines(store).delete(name)
    return {"deleted": name}
