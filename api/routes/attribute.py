"""Which version change did it: the same JSON as `fleetval attribute --format json`."""

from __future__ import annotations

from fastapi import APIRouter, Response

from fleetval.analysis.attribute import attribute_store
from fleetval.api.deps import ReadToken, StoreDep
from fleetval.api.models import AttributeRequest

router = APIRouter(prefix="/v1", tags=["attribute"])


@router.post(
    "/attribute",
    responses={
        200: {
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "findings, confounded (with canary plans) and notes",
        },
        409: {"description": "No run matches, or nothing per node to attribute"},
    },
)
def attribute(body: AttributeRequest, _: ReadToken, store: StoreDep) -> Response:
    result = attribute_store(
        store,
        where=body.where,
        since=body.since,
        metric=body.metric,
    )
    return Response(result.to_json(), media_type="application/json")
