"""A run's release sign-off report: HTML by default, Markdown or JSON by `Accept`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from fleetval.analysis.baselines import Baselines
from fleetval.api import service
from fleetval.api.deps import ReadToken, StoreDep
from fleetval.api.models import STORE_NAME
from fleetval.reports import REPORTS, render_for_accept
from fleetval.signoff.sweep import SWEEPS_SHOWN
from fleetval.store.dataset import Store

router = APIRouter(prefix="/v1/runs", tags=["reports"])


@router.get(
    "/{run_id}/report",
    responses={
        200: {
            "content": {k.media: {"schema": {"type": k.body}} for k in REPORTS.values()},
            "description": "The sign-off report; gates and their evidence",
        },
        409: {"description": "The baseline resolves to no stored run"},
    },
)
async def report(
    run_id: str,
    request: Request,
    _: ReadToken,
    store: StoreDep,
    baseline: Annotated[
        str | None, Query(pattern=STORE_NAME, description="A baseline's name (as everywhere)")
    ] = None,
    sweeps: Annotated[
        int, Query(ge=1, le=1000, description="A sweep's report: each node over this many sweeps")
    ] = SWEEPS_SHOWN,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """The same report as `fleetval report RUN [--baseline NAME] [--sweeps N] -o FILE`."""
    key = ("report", run_id, baseline, sweeps, accept)
    heavy = request.app.state.heavy
    return await heavy.answer(store, key, _report, store, run_id, baseline, sweeps, accept)


def _report(
    store: Store, run_id: str, baseline: str | None, sweeps: int, accept: str | None
) -> Response:
    service.stored_run(store, run_id)  # unknown -> 404 (RunNotFound)
    if baseline is not None:
        Baselines(store).get(baseline)  # unknown -> 404 with the known names
    body, media_type = render_for_accept(store, run_id, accept, baseline=baseline, sweeps=sweeps)
    return Response(body, media_type=media_type)
