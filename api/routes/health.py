"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fleetval.api.deps import DbDep, ExecutorDep, ReadToken
from fleetval.api.models import Health
from fleetval.vocab import QueueStatus

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(db: DbDep, executor: ExecutorDep) -> Health:
    """Liveness (no token): whether this process runs the queue, and the queue depth."""
    return Health(
        executor=executor.active,
        queue_depth=db.counts().get(QueueStatus.QUEUED, 0),
        ray_error=executor.ray_error,
    )


@router.get("/metrics", response_class=Response)
def prometheus(request: Request, _: ReadToken) -> Response:
    """Runs by status, queue depth, step durations, latest busbw, culprits by node."""
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
