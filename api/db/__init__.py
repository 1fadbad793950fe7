"""The service's durable state, in one SQLite file: one module per concern (the queue of
submissions, each run's events, the counters /metrics reads, the schedules, the tokens), and
`ServiceDB`, the one owner of the file's connections, composed of them.

Progress and events live here too (not in memory), so any worker can serve them and they
survive a restart.
"""

from __future__ import annotations

from fleetval.api.db.connection import DB_NAME, now
from fleetval.api.db.counters import STEP_BUCKETS
from fleetval.api.db.events import EventLog
from fleetval.api.db.schedules import FireOutcome, Schedule, ScheduleTable
from fleetval.api.db.submissions import ACTIVE, Quota, QuotaExceeded, Submission
from fleetval.api.db.tokens import (
    SCOPE_RANK,
    TOKEN_ID_CHARS,
    Scope,
    Token,
    TokenState,
    TokenTable,
    hash_token,
)
from fleetval.vocab import QueueStatus  # one vocabulary: a finished one is its run's status

__all__ = [
    "ACTIVE", "DB_NAME", "SCOPE_RANK", "STEP_BUCKETS", "TOKEN_ID_CHARS", "FireOutcome",
    "QueueStatus", "Quota", "QuotaExceeded", "Schedule", "Scope", "ServiceDB", "Submission",
    "Token", "TokenState", "hash_token", "now",
]  # fmt: skip


class ServiceDB(EventLog, ScheduleTable, TokenTable):
    """The queue, the events, the counters, the schedules and the tokens of one data
    directory, over one writing and one reading connection."""
