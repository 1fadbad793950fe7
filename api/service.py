"""What the routes do, as plain functions over the database, the store and the library."""

from __future__ import annotations

from fleetval.api.db import QueueStatus, ServiceDB, Submission, Token
from fleetval.api.executor import Executor
from fleetval.api.models import Progress, RunList, RunOut, SubmitRequest
from fleetval.store.dataset import RunRecord, Store, StoreError, new_run_id
from fleetval.suite import Suite, SuiteError, load_suite, parse_suite, shipped_suites


class NotFound(LookupError):
    """An unknown run or baseline (404)."""


class Conflict(RuntimeError):
    """The request contradicts the resource's state, e.g. cancelling a finished run (409)."""


def resolve_suite(spec: str | dict) -> Suite:
    """A shipped suite by name, or an inline one. Never a path: a client must not make the
    server read its files; inline suites have no keys that name files, commands or hosts."""
    if isinstance(spec, str):
        known = shipped_suites()
        if spec not in known:
            raise SuiteError(
                spec, [f"(suite): no shipped suite {spec!r}; shipped: {', '.join(known)}"]
            )
        return load_suite(spec)
    return parse_suite(spec, "inline suite")


def submit(
    db: ServiceDB, executor: Executor, req: SubmitRequest, token: Token
) -> tuple[Submission, bool]:
    """Validate and queue (committed on return); a repeated submission_id gives its run back."""
    if req.submission_id is not None:
        sub = db.find_submission(req.submission_id)
        if sub is not None:
            return sub, False
    suite = resolve_suite(req.suite)
    sub, created = db.add(
        run_id=new_run_id(),
        submission_id=req.submission_id,
        suite=suite.name,
        suite_json=suite.to_json(),
        labels=req.labels,
        submitter=token.name,
        retries=req.retries,
    )
    if created:
        executor.wake()
    return sub, created


def run_out(db: ServiceDB, sub: Submission) -> RunOut:
    return RunOut(
        run_id=sub.run_id,
        suite=sub.suite,
        status=sub.status,
        message=sub.message,
        labels=sub.labels,
        submitter=sub.submitter,
        submission_id=sub.submission_id,
        attempt=sub.attempt,
        retries=sub.retries,
        retry_of=sub.retry_of,
        retried_as=sub.retried_as,
        submitted_at=sub.submitted_at,
        started_at=sub.started_at,
        finished_at=sub.finished_at,
        queue_position=db.queue_position(sub),
        progress=Progress(**sub.progress) if sub.progress else None,
        steps=sub.steps,
    )


def record_out(rec: RunRecord) -> RunOut:
    """A run made outside the service (`fleetval run`), from the store."""
    return RunOut(
        run_id=rec.run_id,
        suite=rec.suite,
        status=rec.status,
        message=rec.message,
        labels=rec.labels,
        submitter=rec.submitter,
        started_at=rec.started_at.isoformat(),
        finished_at=rec.finished_at.isoformat() if rec.finished_at else None,
        steps=rec.summary.get("steps", []),
    )


def stored_run(store: Store, run_id: str) -> RunRecord:
    try:
        return store.run(run_id)
    except StoreError as err:
        raise NotFound(f"no run {run_id!r}") from err


def get_run(db: ServiceDB, store: Store, run_id: str) -> RunOut:
    sub = db.get(run_id)
    if sub is not None:
        return run_out(db, sub)
    return record_out(stored_run(store, run_id))


def require_run(db: ServiceDB, store: Store, run_id: str) -> None:
    if db.get(run_id) is None:
        stored_run(store, run_id)


def list_runs(
    db: ServiceDB,
    store: Store,
    *,
    status: str | None,
    suite: str | None,
    labels: dict[str, str],
    limit: int,
    cursor: str | None,
) -> RunList:
    """Newest first; `cursor` is the last run id of the previous page."""
    runs = {s.run_id: run_out(db, s) for s in db.submissions()}
    for rec in store.runs():
        runs.setdefault(rec.run_id, record_out(rec))
    picked = [
        r
        for _, r in sorted(runs.items(), reverse=True)
        if (cursor is None or r.run_id < cursor)
        and (status is None or r.status == status)
        and (suite is None or r.suite == suite)
        and all(r.labels.get(k) == v for k, v in labels.items())
    ]
    page = picked[:limit]
    more = len(picked) > limit
    return RunList(runs=page, next_cursor=page[-1].run_id if more and page else None)


def cancel(db: ServiceDB, store: Store, run_id: str) -> RunOut:
    """Queued: cancelled now. Running: the executor kills its actors and removes its group."""
    sub = db.get(run_id)
    if sub is None:
        rec = stored_run(store, run_id)
        raise Conflict(f"run {run_id} has finished ({rec.status}); nothing to cancel")
    if db.cancel_queued(run_id):
        message = "cancelled before it started"
        db.record_event(
            run_id, {"kind": "run_end", "status": QueueStatus.CANCELLED.value, "message": message}
        )
    else:
        sub = db.get(run_id) or sub  # NOTE: re-read: the executor may have just claimed it
        if sub.status != QueueStatus.RUNNING:
            raise Conflict(f"run {run_id} has finished ({sub.status}); nothing to cancel")
        db.request_cancel(run_id)
    return run_out(db, db.get(run_id) or sub)
