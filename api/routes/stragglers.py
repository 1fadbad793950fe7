"""A training job's stragglers: the same JSON as `fleetval stragglers --json`."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response

from fleetval.api.deps import ReadToken, StoreDep
from fleetval.api.errors import Unprocessable
from fleetval.api.models import StragglersRequest
from fleetval.signoff.stragglers import NothingReadable, job_stragglers
from fleetval.store.dataset import Store

router = APIRouter(prefix="/v1", tags=["stragglers"])


@router.post(
    "/stragglers",
    operation_id="judge_stragglers",
    responses={
        200: {
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "stragglers (ranks named), windows with their late ranks and hosts, "
            "step windows, notes, each named host's sweeps and hardware from this store, "
            "and the files not read",
        },
        422: {"description": "A field the schema refuses, or no file holds anything read"},
    },
)
async def stragglers(
    body: StragglersRequest, request: Request, _: ReadToken, store: StoreDep
) -> Response:
    """Judges the files sent, with what this store says about the named hosts; stores nothing."""
    return await request.app.state.heavy.run(_stragglers, body, store)


def _stragglers(body: StragglersRequest, store: Store) -> Response:
    files = [(f.name, f.content()) for f in body.files]
    try:
        found = job_stragglers(files, store.root)
    except NothingReadable as err:
        raise Unprocessable(str(err), loc=["body", "files"], kind="nothing_readable") from err
    return Response(json.dumps(found.to_dict()), media_type="application/json")
