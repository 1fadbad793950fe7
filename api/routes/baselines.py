"""Named baselines: list, get, set (PUT), delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from fleetval.analysis.baselines import Baseline, Baselines
from fleetval.api.deps import AdminToken, ReadToken, StoreDep
from fleetval.api.models import STORE_NAME, BaselineOut, BaselineRequest, BaselineRuns

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


@router.get("")
def list_baselines(_: ReadToken, store: StoreDep) -> list[BaselineOut]:
    return [_out(b) for b in Baselines(store).list()]


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
    name: BaselineName, body: BaselineRequest, _: AdminToken, store: StoreDep, response: Response
) -> BaselineOut:
    """Create (201) or replace (200): explicit runs, or filters; it must resolve to a run now."""
    baselines = Baselines(store)
    existed = name in baselines.names()
    if isinstance(body, BaselineRuns):
        resolved = baselines.set(name, run_ids=body.runs, description=body.description)
    else:
        resolved = baselines.set(
            name, where=body.where, last=body.last, description=body.description
        )
    if existed:
        response.status_code = 200
    return _out(resolved.baseline, resolved.run_ids)


@router.delete("/{name}")
def delete_baseline(name: BaselineName, _: AdminToken, store: StoreDep) -> dict[str, str]:
    Baselines(store).delete(name)
    return {"deleted": name}
