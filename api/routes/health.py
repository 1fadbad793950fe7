"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fleetval.api.auth import bearer, permits
from fleetval.api.db import Scope
from fleetval.api.deps import DbDep, ExecutorDep, ReadToken
from fleetval.api.executor import RAY_UNREACHABLE
from fleetval.api.models import Health
from fleetval.vocab import QueueStatus

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    responses={
        503: {"model": Health, "description": "Degraded: the executor or the scheduler cannot run"}
    },
)
async def healthz(db: DbDep, executor: ExecutorDep, request: Request) -> Response:
    """Liveness (no token): whether this process runs the queue, and the queue depth; 503
    while the executor cannot run the queue (crashed and restarting, thread gone, no Ray) or
    the scheduler cannot fire schedules. The reason is generic ("Ray not reachable"); with a
    read token it carries the error's text too (Ray's address, paths), as the log does."""
    # NOTE: async: thread-state checks and one count on the reading connection (WAL), cheaper
    # than the thread-pool hop; a probe polled by every load balancer should cost least.
    detail = permits(db, bearer(request), Scope.READ)
    scheduler = request.app.state.scheduler
    reason = executor.degraded(detail=detail) or scheduler.degraded(detail=detail)
    ray_error = executor.ray_error if detail or not executor.ray_error else RAY_UNREACHABLE
    health = Health(
        status="degraded" if reason else "ok",
        executor=executor.active,
        queue_depth=db.counts().get(QueueStatus.QUEUED, 0),
        ray_error=ray_error,
        reason=reason,
        index="ready" if request.app.state.store.index_ready() else "building",
    )
    return JSONResponse(health.model_dump(), status_code=503 if reason else 200)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
def prometheus(request: Request, _: ReadToken) -> Response:
    """Runs by status, queue depth, step durations, latest busbw, culprits by node, schedule
    firings and fire times: counters kept as runs end and schedules fire, so a scrape costs the same whatever the history's length."""
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
