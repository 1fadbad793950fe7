"""Compare runs with a baseline: the same JSON as `fleetval compare --format json`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from fleetval.analysis.baselines import Baselines
from fleetval.analysis.compare import compare_runs
from fleetval.analysis.compare_format import to_json
from fleetval.api import service
from fleetval.api.deps import ReadToken, StoreDep
from fleetval.api.models import CompareRequest
from fleetval.store.dataset import Store

router = APIRouter(prefix="/v1", tags=["compare"])


@router.post(
    "/compare",
    responses={
        200: {
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "Verdicts; exit_code as the CLI's",
        },
        404: {"description": "No such baseline or run"},
        409: {"description": "Nothing to compare with the runs stored now"},
    },
)
async def compare(
    body: CompareRequest, request: Request, _: ReadToken, store: StoreDep
) -> Response:
    key = ("compare", body.model_dump_json())
    return await request.app.state.heavy.answer(store, key, _compare, body, store)


def _compare(body: CompareRequest, store: Store) -> Response:
    Baselines(store).get(body.baseline)  # unknown -> 404 with the known names
    service.require_runs(store, body.runs)  # every id in one query; unknown -> 404
    comparison = compare_runs(
        store,
        body.baseline,
        body.runs,
        per=body.per,
        threshold_pct=body.threshold_pct,
        history=body.history,
    )
    return Response(to_json(comparison), media_type="application/json")
