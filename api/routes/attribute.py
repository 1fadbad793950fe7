"""Which version change did it: the same JSON as `fleetval attribute --format json`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from fleetval.analysis.attribute import attribute_store
from fleetval.api.deps import LimitsDep, ReadToken, StoreDep
from fleetval.api.errors import Unprocessable
from fleetval.api.models import AttributeRequest
from fleetval.store.dataset import Store

router = APIRouter(prefix="/v1", tags=["attribute"])


@router.post(
    "/attribute",
    operation_id="attribute",
    responses={
        200: {
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "findings, confounded (with canary plans) and notes",
        },
        409: {"description": "No run matches, or nothing per node to attribute"},
    },
)
async def attribute(
    body: AttributeRequest, request: Request, _: ReadToken, store: StoreDep, limits: LimitsDep
) -> Response:
    """Over a window (`since`) or the newest `last` runs: never every run by default, and
    never more than max_attribute_runs (the newest; a note says so)."""
    cap = limits.max_attribute_runs
    if body.since is None and body.last is None:
        raise Unprocessable(
            "give a window (`since`) or a run cap (`last`): attribution reads every matching "
            "run's summaries",
            loc=["body", "since"],
            kind="missing",
        )
    if body.last is not None and body.last > cap:
        raise Unprocessable(
            f"last: {body.last} is over this service's limit max_attribute_runs = {cap}",
            loc=["body", "last"],
            kind="over_limit",
        )
    key = ("attribute", body.model_dump_json(), cap)
    return await request.app.state.heavy.answer(store, key, _attribute, store, body, cap)


def _attribute(store: Store, body: AttributeRequest, cap: int) -> Response:
    result = attribute_store(
        store, where=body.where, since=body.since, metric=body.metric, last=body.last or cap
    )
    return Response(result.to_json(), media_type="application/json")
