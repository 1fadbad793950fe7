"""Named baselines: list, get, set (PUT), delete."""

from __future__ import annotations

from fastapi import APIRouter, Response

from fleetval.analysis.baselines import Baseline, Baselines
from fleetval.api.deps import AdminToken, ReadToken, StoreDep
from fleetval.api.models import BaselineOut, BaselineRequest

router = APIRouter(prefix="/v1/baselines", tags=["baselines"])
_ERRORS = {404: {"description": "No such baseline"}, 422: {"description": "Invalid name or body"}}


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


@router.get("")
def list_baselines(_: ReadToken, store: StoreDep) -> list[BaselineOut]:
    return [_out(b) for b in Baselines(store).list()]


@router.get("/{name}", responses=_ERRORS)
def get_baseline(name: str, _: ReadToken, store: StoreDep) -> BaselineOut:
    """A baseline and the runs it stands for now."""
    resolved = Baselines(store).resolve(name)
    return _out(resolved.baseline, resolved.run_ids)


@router.put(
    "/{name}",
    responses={200: {"model": BaselineOut, "description": "Replaced"}, **_ERRORS},
    status_code=201,
)
def set_baseline(
    name: str, body: BaselineRequest, _: AdminToken, store: StoreDep, response: Response
) -> BaselineOut:
    """Create (201) or replace (200); it must resolve to at least one run."""
    baselines = Baselines(store)
    existed = name in baselines.names()
    resolved = baselines.set(
        name, run_ids=body.runs, where=body.where, last=body.last, description=body.description
    )
    if existed:
        response.status_code = 200
    return _out(resolved.baseline, resolved.run_ids)


@router.delete("/{name}", responses=_ERRORS)
def delete_baseline(name: str, _: AdminToken, store: StoreDep) -> dict[str, str]:
    baselines = Baselines(store)
    baselines.delete(name)
    return {"deleted": name}
