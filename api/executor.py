"""The one executor: takes queued submissions in order and runs each with `run_suite`.

One thread per data directory, across processes: it holds an exclusive lock on
`executor.lock` while it works, so with several uvicorn workers one executes and the
others stand by (and take over if it dies). The Ray connection is made once and kept
between runs, and so are warm rank actors (`fleetval.run.pool`): a run whose job shape the
previous run had takes its actors, reset and health-pinged, instead of starting new ones.
Progress goes to the database as it happens, so every worker serves it.

The thread is supervised (`Supervised`): an exception outside a run's own handling (a database fault, a
submission that cannot be read, a SystemExit raised into the thread to kill it) is logged, the run it had claimed ends as `error` with the
reason, and the loop starts again after a back-off; `/healthz` answers 503 (degraded) until
a claim succeeds again.
"""

from __future__ import annotations

import fcntl
import json
import logging
import statistics
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fleetval.api.db import QueueStatus, ServiceDB, Submission
from fleetval.api.supervised import Supervised
from fleetval.run.life import RunLife, StopReason  # NOTE: torch- and ray-free, as the app is
from fleetval.store.base import create_private_file
from fleetval.store.dataset import Store, StoreError, new_run_id
from fleetval.store.records import Run
from fleetval.suite import parse_suite
from fleetval.vocab import EventKind, RunStatus

if TYPE_CHECKING:
    from fleetval.run.execute import Event
    from fleetval.run.pool import RankPool

log = logging.getLogger(__name__)

LOCK_NAME = "executor.lock"
IDLE_POLL_S = 1.0  # the queue is also woken directly by a submission in this process
CANCEL_POLL_S = 0.2  # a cancel request from any worker reaches the run this fast
# Size classes of /metrics' busbw gauge: latency-bound, middle, bandwidth-bound.
SIZE_CLASSES = ((64 * 1024, "small"), (16 * 1024 * 1024, "medium"))
# The embedded Ray instance is started once, before any suite is known: with enough logical
# CPUs for the shipped suites' world sizes (ranks mostly wait on I/O; see execute.connect).
EMBEDDED_MIN_CPUS = 8
INTERRUPTED_MESSAGE = "the service stopped while this run was executing; finished steps are kept"
PROGRESS_EVERY_S = 1.0  # step_progress events are stored at most this often (coalesced)
RAY_UNREACHABLE = "Ray not reachable"  # /healthz's reason without a read token: no address
CLUSTER_KEY = "cluster"  # the service DB's meta key for the shape the executor sees


def size_class(size_bytes: int) -> str:
    for limit, name in SIZE_CLASSES:
        if size_bytes < limit:
            return name
    return "large"


class _Tracker:
    """Turns the engine's events into stored progress, verdicts so far and SSE events."""

    def __init__(self, db: ServiceDB, run_id: str) -> None:
        self.db, self.run_id = db, run_id
        self.steps: list[dict[str, Any]] = []
        self.culprits: list[dict[str, Any]] = []
        self._last_progress = -PROGRESS_EVERY_S

    def on_event(self, e: Event) -> None:
        if e.kind == EventKind.STEP_PROGRESS:  # NOTE: coalesced: the engine reports every 0.5 s
            if time.monotonic() - self._last_progress < PROGRESS_EVERY_S:
                return
            self._last_progress = time.monotonic()
        percent = round(100.0 * e.index / e.total, 1) if e.total else 0.0
        data: dict[str, Any] = {
            "kind": e.kind,
            "job": e.job,
            "step": e.step,
            "index": e.index,
            "total": e.total,
            "percent": percent,
            "detail": e.detail,
        }
        if e.outcome is not None:
            outcome = asdict(e.outcome)
            data["outcome"] = outcome
            self.steps.append(outcome)
            self.culprits += outcome["culprits"]
        progress = {k: data[k] for k in ("job", "step", "index", "total", "percent", "detail")}
        progress["culprits"] = self.culprits
        self.db.record_event(
            self.run_id,
            data,
            progress=progress,
            steps=self.steps if e.outcome is not None else None,
        )


class Executor(Supervised):
    """Runs the queue of one data directory through the library, one run at a time."""

    what = "executor"
    pool: RankPool  # warm rank actors between runs: made by the thread, closed when it ends

    def __init__(self, db: ServiceDB, store: Store, address: str | None) -> None:
        super().__init__()
        self.db, self.store, self.address = db, store, address
        self.active = False  # this process holds the executor lock
        self.ray_error = ""
        self._claimed: str | None = None  # the run the loop is on
        self._life: RunLife | None = None  # the running run's life: what stops it

    def degraded(self, *, detail: bool = True) -> str:
        """Why this process cannot run the queue now ("" when it can, or stands by); without
        `detail`, not Ray's own words (they name its address, and paths)."""
        if self.active and self.ray_error and not super().degraded():
            return f"{RAY_UNREACHABLE}: {self.ray_error}" if detail else RAY_UNREACHABLE
        return super().degraded(detail=detail)

    def start(self) -> None:
        # NOTE: when the lock is free now, recover before the app serves its first request,
        # so a restarted service never shows a run its predecessor died in as `running`.
        lock = self._try_lock()
        if lock is not None:
            self.active = True
            self.recover()
        self._start_thread(lambda: self._main(lock))

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the running run (its actors torn down) and wait for the thread."""
        life = self._life
        self._stopping.set()  # NOTE: first: the run's end is then read as the service's stop
        if life is not None:
            life.request_stop(StopReason.SERVICE)
        super().stop(timeout_s)

    # -- the thread ----------------------------------------------------------------------

    def _main(self, lock: Any) -> None:
        if lock is None:  # a standby worker: wait for the active one to go
            lock = self._acquire_lock()
            if lock is None:
                return
            self.active = True
            self.recover()
        try:
            # NOTE: Ray loads here, in the thread that holds the lock, not with the app: an API
            # replica (`--no-executor`) and a standby worker never import it (RESULTS.md).
            from fleetval.run.cluster import disconnect
            from fleetval.run.pool import RankPool

            self.pool = RankPool()
            try:
                self._connect()
                self._supervise()
            finally:
                self.pool.close()
                disconnect()  # an embedded Ray's processes stop with the service
        finally:  # NOTE: also when Ray fails to import: a held lock would strand the queue
            self.active = False
            lock.close()  # releases the lock for a standby worker

    def _loop(self) -> None:
        while not self._stopping.is_set():
            run_id = self.db.claim_next()
            self._healthy()  # the database answers again
            if run_id is None:
                self.pool.expire()
                self._sleep(IDLE_POLL_S)
                continue
            self._claimed = run_id
            sub = self.db.get(run_id)
            if sub is None:
                raise RuntimeError(f"run {run_id} vanished after it was claimed")
            self._publish_cluster()
            try:
                self._execute(sub)
            except Exception as err:  # NOTE: one run's failure ends that run only
                log.exception("executor: run %s", sub.run_id)
                self._fail_claimed(f"{type(err).__name__}: {err}")
            self._claimed = None

    def _crashed(self, reason: str) -> None:
        self._fail_claimed(f"the executor crashed: {reason}")

    def _fail_claimed(self, message: str) -> None:
        """The claimed run ends as `error` with the reason (once; never raises)."""
        run_id, self._claimed = self._claimed, None
        if run_id is None:
            return
        status = QueueStatus.ERROR.value
        try:
            self.db.record_event(
                run_id,
                {"kind": EventKind.RUN_END, "status": status, "message": message},
                finish=(status, message),
            )
        except Exception:
            log.exception("executor: could not mark run %s as error", run_id)

    def _try_lock(self) -> Any:
        """The executor lock's open file if this process got it, else None (never waits)."""
        f = create_private_file(self.store.root / LOCK_NAME).open("a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            f.close()
            return None

    def _acquire_lock(self) -> Any:
        while not self._stopping.is_set():
            lock = self._try_lock()
            if lock is not None:
                return lock
            self._stopping.wait(IDLE_POLL_S)
        return None

    def _connect(self) -> None:
        """Start (or join) Ray now, so the first submission does not pay for it."""
        from fleetval.run.execute import connect

        try:
            connect(self.address, min_cpus=EMBEDDED_MIN_CPUS)
        except Exception as err:  # every run will say why it could not start
            self.ray_error = str(err)
            log.error("Ray not reachable: %s", err)
            return
        self._publish_cluster()

    def _publish_cluster(self) -> None:
        """The cluster's shape as the planner sees it, for the plan check at submit (every
        worker reads it from the database)."""
        from fleetval.run.execute import cluster_shape

        try:
            shape = cluster_shape()
        except Exception as err:  # NOTE: a lost connection: the run itself will say so
            log.warning("cluster shape unavailable: %s", err)
            return
        self.db.set_meta(CLUSTER_KEY, [asdict(n) for n in shape.nodes])

    def _execute(self, sub: Submission) -> None:
        from fleetval.run.execute import run_suite

        tracker = _Tracker(self.db, sub.run_id)
        self.db.record_event(sub.run_id, {"kind": EventKind.RUN_START, "attempt": sub.attempt})
        life, done = RunLife(), threading.Event()
        self._life = life
        watcher = threading.Thread(
            target=self._watch_cancel, args=(sub.run_id, life, done), daemon=True
        )
        watcher.start()
        try:
            run_suite(
                parse_suite(json.loads(sub.suite_json), sub.suite),
                self.store,
                address=self.address,
                labels=sub.labels,
                submitter=sub.submitter,
                on_event=tracker.on_event,
                run_id=sub.run_id,
                life=life,
                pool=self.pool,
            )
        except Exception as err:  # the run's life says how it ended (refused, or failed)
            if not isinstance(err, ValueError):
                log.exception("run %s", sub.run_id)
            if not life.ended:  # the suite could not be read: the engine never had it
                life.fail(err)
        finally:
            done.set()
            self._life = None
        outcome = life.outcome
        assert outcome is not None  # the engine ends its run's life on every path
        if outcome.reason == StopReason.SERVICE and outcome.status == RunStatus.CANCELLED:
            recorded = outcome.record is not None  # the engine wrote its record
            self._interrupt(sub, "the service was stopped during the run", recorded=recorded)
            return
        self._publish_busbw(sub.run_id)
        status, message = outcome.status.value, outcome.message
        self.db.record_event(
            sub.run_id,
            {"kind": EventKind.RUN_END, "status": status, "message": message},
            steps=tracker.steps,
            finish=(status, message),
        )

    def _watch_cancel(self, run_id: str, life: RunLife, done: threading.Event) -> None:
        """A cancel asked of the run through the service (any worker) stops it, and so does
        the service stopping: through its life, with the reason."""
        while not done.wait(CANCEL_POLL_S):
            if self._stopping.is_set():
                life.request_stop(StopReason.SERVICE)
                return
            if self.db.cancel_requested(run_id):
                life.request_stop(StopReason.REQUEST)
                return

    def _publish_busbw(self, run_id: str) -> None:
        """The run's median bus bandwidth per collective, size class and node, for /metrics."""
        cols = ["collective", "size_bytes", "node", "busbw_gbps"]
        try:
            rows = self.store.results([run_id], columns=cols).to_pylist()
        except (OSError, StoreError):
            return
        groups: dict[tuple[str, str, str], list[float]] = {}
        for r in rows:
            if r["busbw_gbps"] is None or r["collective"] is None or r["size_bytes"] is None:
                continue
            key = (r["collective"], size_class(r["size_bytes"]), r["node"])
            groups.setdefault(key, []).append(r["busbw_gbps"])
        if groups:
            self.db.set_busbw(
                run_id, [(*k, statistics.median(v)) for k, v in sorted(groups.items())]
            )

    # -- recovery ------------------------------------------------------------------------

    def recover(self) -> None:
        """Runs left `running` by a service that died: interrupted, and requeued if asked."""
        for sub in self.db.running():
            self._interrupt(sub, INTERRUPTED_MESSAGE)

    def _interrupt(self, sub: Submission, message: str, *, recorded: bool = False) -> None:
        """Mark a run cut off by the service's end, and requeue it if its submitter asked.
        `recorded`: the engine wrote its run record already (a graceful stop)."""
        stored = None if recorded else self._stored_status(sub.run_id)
        if stored is not None:  # it ended and was recorded just before the service died
            self.db.record_event(
                sub.run_id,
                {"kind": EventKind.RUN_END, "status": stored, "message": ""},
                finish=(stored, ""),
            )
            return
        retry_id = new_run_id() if sub.attempt <= sub.retries else None
        if retry_id is not None:
            message += f"; requeued as {retry_id} (attempt {sub.attempt + 1})"
        if not recorded:
            self._write_interrupted(sub, message)
        # NOTE: one transaction: a recovery that dies here leaves the run `running`, to be
        # recovered again; the retry and the run's end are committed together or not at all.
        self.db.interrupt(sub, message, retry_id=retry_id)

    def _stored_status(self, run_id: str) -> str | None:
        try:
            status = self.store.run(run_id).status
        except StoreError:
            return None
        # NOTE: "interrupted" is this service's own record (a recovery that died before its
        # commit): not an end the engine recorded, so the run is recovered again.
        return None if status in (RunStatus.INCOMPLETE, QueueStatus.INTERRUPTED) else status

    def _write_interrupted(self, sub: Submission, message: str) -> None:
        """A run record in the store, so every reader sees the run as interrupted (kept when
        an earlier recovery wrote it)."""
        if (self.store.root / "runs" / f"{sub.run_id}.parquet").exists():
            return
        started = datetime.fromisoformat(sub.started_at or sub.submitted_at)
        suite = json.loads(sub.suite_json)
        self.store.write_schema_note()
        self.store.write_run(
            Run(
                run_id=sub.run_id,
                suite=sub.suite,
                status=QueueStatus.INTERRUPTED.value,
                started_at=started,
                finished_at=datetime.now(UTC),
                labels=sub.labels,
                submitter=sub.submitter,
                faults=suite.get("faults", []),
                suite_json=sub.suite_json,
                summary={"steps": sub.steps},
                message=message,
            )
        )
