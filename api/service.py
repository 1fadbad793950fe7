"""What the routes do, as plain functions over the database, the store and the library.

Lookups cost the same whatever the history's length: a submission is one indexed read of
the service database, a stored run one read of the store's run index (or its own files),
a page of runs one keyset query on each side, merged. How a run is read and what is kept
between requests: api/cache.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fleetval.api.db import (
    QueueStatus,
    Quota,
    QuotaExceeded,
    Schedule,
    ServiceDB,
    Submission,
    Token,
)
from fleetval.api.errors import Conflict, Forbidden, NotFound, TooMany, Unprocessable
from fleetval.api.executor import CLUSTER_KEY, Executor
from fleetval.api.limits import Limits, check_suite, planned_s
from fleetval.api.models import (
    RunOut,
    ScheduleRequest,
    SubmitRequest,
)
from fleetval.api.schedules import CronError, next_after, stamp, validate
from fleetval.run.plan import ClusterShape, NodeShape, make_plan
from fleetval.store.catalog import RunNotFound
from fleetval.store.dataset import Store, new_run_id
from fleetval.store.records import LISTED, Run, RunFilter
from fleetval.suite import Suite, SuiteError, load_suite, parse_suite, shipped_suites


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
    return parse_suite(spec, "inline suite", strict=True)


def cluster(db: ServiceDB) -> ClusterShape | None:
    """The cluster's shape as the executor last saw it; None before it has connected."""
    nodes = db.meta(CLUSTER_KEY)
    return ClusterShape(tuple(NodeShape(**n) for n in nodes)) if nodes else None


def check_submission(db: ServiceDB, suite: Suite, limits: Limits) -> None:
    """The service's ceilings, then the plan `fleetval run` would make on this cluster:
    a suite that could never run is refused now (422), not failed later."""
    check_suite(suite, limits)
    shape = cluster(db)
    if shape is not None:
        make_plan(suite, shape)  # PlanError: the numbers, as `fleetval run` says them


def _same_owner(sub: Submission, token: Token) -> Submission:
    if not token.owns(sub):
        raise Conflict(
            f"submission_id {sub.submission_id!r} belongs to another owner's run; choose another",
            loc=["body", "submission_id"],
        )
    return sub


# What only the scheduler may set: a firing's submission_id and the labels naming it.
PAGE_DEFAULT, PAGE_MAX = 100, 1000  # runs per page of `GET /v1/runs` (route and hot read)
SCHEDULED_PREFIX = "schedule."
SCHEDULED_LABELS = ("schedule", "fire_time")


def _unreserved(req: SubmitRequest) -> None:
    """A client may not claim a firing's submission_id (the firing would be refused) nor
    label its run as a schedule's."""
    if req.submission_id is not None and req.submission_id.startswith(SCHEDULED_PREFIX):
        raise Unprocessable(
            f"submission ids starting with {SCHEDULED_PREFIX!r} are reserved for schedule firings",
            loc=["body", "submission_id"],
            kind="reserved",
        )
    for key in SCHEDULED_LABELS:
        if key in req.labels:
            raise Unprocessable(
                f"the label {key!r} is reserved: the scheduler sets it on its firings' runs",
                loc=["body", "labels", key],
                kind="reserved",
            )


def submit(
    db: ServiceDB,
    executor: Executor,
    limits: Limits,
    req: SubmitRequest,
    token: Token,
    *,
    scheduled: bool = False,
) -> tuple[Submission, bool]:
    """Validate and queue (committed on return); the owner's repeated submission_id gives
    its run back, another owner's is a conflict. `scheduled`: a schedule's firing, which
    alone may use the reserved submission ids and labels."""
    if not scheduled:
        _unreserved(req)
    suite = resolve_suite(req.suite)  # NOTE: first: an invalid body is 422 even when repeated
    if req.submission_id is not None:
        sub = db.find_submission(req.submission_id)
        if sub is not None:
            return _same_owner(sub, token), False
    check_submission(db, suite, limits)
    quota = Quota(limits.max_active_per_owner, limits.max_planned_s_per_owner)
    try:
        sub, created = db.add(
            run_id=new_run_id(),
            submission_id=req.submission_id,
            suite=suite.name,
            suite_json=suite.to_json(),
            labels=req.labels,
            submitter=token.name,
            retries=req.retries,
            planned_s=planned_s(suite),
            quota=quota,
        )
    except QuotaExceeded as err:
        raise TooMany(str(err)) from err
    if created:
        executor.wake()
        return sub, True
    return _same_owner(sub, token), False


def run_out(db: ServiceDB, sub: Submission) -> RunOut:
    """A submission as RunOut: its fields by name, the two it derives computed."""
    derived = {"queue_position": db.queue_position(sub), "progress": sub.progress or None}
    return RunOut.model_validate({f: getattr(sub, f) for f in _SUBMISSION_FIELDS} | derived)


def _stored_prefix() -> str:
    """The RunOut fields a stored run's listing lacks (the queue's, at their defaults), as
    the start of a JSON object the listing's own fields (`LISTED`) complete."""
    extra = {
        name: field.get_default(call_default_factory=True)
        for name, field in RunOut.model_fields.items()
        if name not in LISTED
    }
    return json.dumps(extra)[:-1] + ","


_STORED_PREFIX = _stored_prefix()
# RunOut's fields a submission has as its own columns; the others SQL derives (below).
_SUBMISSION_FIELDS = [f for f in RunOut.model_fields if f not in ("queue_position", "progress")]
_QUEUED = QueueStatus.QUEUED.value
_SQL = {  # a JSON column spliced in as stored; the queue position an index range (queued only)
    "labels": "json(labels)",
    "steps": "json(steps)",
    "progress": "CASE WHEN progress = '{}' THEN NULL ELSE json(progress) END",
    "queue_position": f"CASE WHEN status = '{_QUEUED}' THEN (SELECT COUNT(*) FROM submissions"
    f" AS q WHERE q.status = '{_QUEUED}' AND q.seq < submissions.seq) END",
}
# A submission as RunOut JSON, made by SQLite in the query that reads it, field by field in
# RunOut's order (so the model, `run_out` and this cannot drift apart).
SUBMISSION_JSON = (
    "json_object("
    + ", ".join(f"'{name}', {_SQL.get(name, name)}" for name in RunOut.model_fields)
    + ") AS out"
)


def stored_json(listing: str) -> str:
    """A stored run as RunOut JSON: its listing (as the run index keeps it) and the defaults."""
    return _STORED_PREFIX + listing[1:]


def stored_run(store: Store, run_id: str) -> Run:
    """A run of the store: from its index row, else its own files (RunNotFound, CorruptFile)."""
    return store.run_index().get(run_id) or store.run(run_id)


def run_json(db: ServiceDB, store: Store, run_id: str) -> str:
    """GET /v1/runs/{id}: two indexed point reads at most, and no model built."""
    row = db.get_row(run_id, SUBMISSION_JSON)
    if row is not None:
        return row["out"]
    listing = store.run_index().listing(run_id)
    if listing is None:  # not indexed (written by an older writer): its files
        listing = json.dumps(store.run(run_id).listing())
    return stored_json(listing)


def require_run(db: ServiceDB, store: Store, run_id: str) -> None:
    """RunNotFound unless the service or the store knows the run."""
    if db.get(run_id) is None:
        stored_run(store, run_id)


def require_runs(store: Store, run_ids: list[str]) -> None:
    """RunNotFound for the first of `run_ids` the store lacks (one query for all)."""
    found = store.find_runs(run_ids)
    for run_id in run_ids:
        if run_id not in found:
            raise RunNotFound(run_id, store.root)


def list_runs(
    db: ServiceDB, store: Store, where: RunFilter, *, limit: int, cursor: str | None
) -> str:
    """RunList JSON, newest first; `cursor` is the last run id of the previous page. A
    submission stands for its run; the store adds runs made outside the service (`fleetval
    run`), their listings served as the run index keeps them."""
    want = limit + 1  # one more than the page: whether there is a next one
    rows = db.page(where, before=cursor, limit=want, select=f"run_id, {SUBMISSION_JSON}")
    subs = {r["run_id"]: r["out"] for r in rows}
    stored = _stored_page(db, store, where, cursor, want, list(subs))
    ids = sorted([*subs, *stored], reverse=True)[:want]
    page = [subs[i] if i in subs else stored_json(stored[i]) for i in ids[:limit]]
    more = len(ids) > limit
    cursor_out = json.dumps(ids[limit - 1] if more and page else None)
    return f'{{"runs": [{", ".join(page)}], "next_cursor": {cursor_out}}}'


def _stored_page(
    db: ServiceDB,
    store: Store,
    where: RunFilter,
    cursor: str | None,
    want: int,
    subs: list[str],
) -> dict[str, str]:
    """Listings of stored runs the service has no submission for, enough to fill the page:
    batches of the index until `want` are found, the index ends, or what is left sorts below
    a full page of submissions anyway (the usual case: one batch)."""
    index, out, before, batch = store.run_index(), {}, cursor, want
    while True:
        got = index.page_listings(where, before=before, limit=batch)
        known = db.known(list(got))
        out |= {run_id: text for run_id, text in got.items() if run_id not in known}
        last = next(reversed(got), None)
        if len(got) < batch or len(out) >= want or last is None:
            return out
        if len(subs) == want and last <= subs[-1]:
            return out
        before, batch = last, batch * 2


def cancel(db: ServiceDB, store: Store, run_id: str, token: Token) -> RunOut:
    """Queued: cancelled now. Running: the executor kills its actors and removes its group.
    Only the run's owner (or an admin) may."""
    sub = db.get(run_id)
    if sub is None:
        rec = stored_run(store, run_id)
        raise Conflict(f"run {run_id} has finished ({rec.status}); nothing to cancel")
    if not token.owns(sub):
        raise Forbidden(
            f"run {run_id} belongs to {sub.submitter!r}; only its owner or an admin may cancel it",
            loc=["path", "run_id"],
        )
    if not db.cancel_queued(run_id):
        sub = db.get(run_id) or sub  # NOTE: re-read: the executor may have just claimed it
        if sub.status != QueueStatus.RUNNING:
            raise Conflict(f"run {run_id} has finished ({sub.status}); nothing to cancel")
        db.request_cancel(run_id)
    return run_out(db, db.get(run_id) or sub)


# -- schedules ---------------------------------------------------------------------------


def create_schedule(db: ServiceDB, limits: Limits, req: ScheduleRequest, token: Token) -> Schedule:
    """Validate the cron and the suite exactly as a submission's (limits, the plan), then
    store the schedule for the token's owner (committed on return)."""
    try:
        validate(req.cron, limits.min_schedule_interval_s)
    except CronError as err:
        raise Unprocessable(str(err), loc=["body", "cron"], kind="invalid_cron") from err
    for key in SCHEDULED_LABELS:
        if key in req.labels:
            raise Unprocessable(
                f"the label {key!r} is reserved: each firing sets it",
                loc=["body", "labels", key],
                kind="reserved",
            )
    check_submission(db, resolve_suite(req.suite), limits)
    try:
        schedule = db.add_schedule(
            name=req.name, cron=req.cron, suite=req.suite, labels=req.labels,
            retries=req.retries, catchup=req.catchup, owner=token.name,
            next_fire=stamp(next_after(req.cron, datetime.now(UTC))),
            max_per_owner=limits.max_schedules_per_owner,
        )  # fmt: skip
    except QuotaExceeded as err:
        raise TooMany(str(err)) from err
    if schedule is None:
        raise Conflict(f"a schedule named {req.name!r} exists", loc=["body", "name"])
    return schedule


def get_schedule(db: ServiceDB, name: str) -> Schedule:
    schedule = db.schedule(name)
    if schedule is None:
        raise NotFound(f"no schedule {name!r}", loc=["path", "name"])
    return schedule


def delete_schedule(db: ServiceDB, name: str, token: Token) -> Schedule:
    """Only its owner or an admin may; runs it queued stay."""
    schedule = get_schedule(db, name)
    if not token.owns_schedule(schedule):
        raise Forbidden(
            f"schedule {name!r} belongs to {schedule.owner!r}; only its owner or an admin may "
            "delete it",
            loc=["path", "name"],
        )
    if not db.delete_schedule(name):
        raise NotFound(f"no schedule {name!r}", loc=["path", "name"])
    return schedule
