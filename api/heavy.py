"""Reads whose cost grows with the store (attribution, sign-off reports, compare) run on a
small pool of their own, at most `max_heavy_reads` at once in a process: one more is 429.

NOTE: off the request thread pool, so a few slow reports cannot hold the threads every other
route (a run's status, a results page) waits for.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fleetval.api.errors import TooMany

T = TypeVar("T")


class HeavyReads:
    """The pool and its slots."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pool = ThreadPoolExecutor(limit, thread_name_prefix="fleetval-heavy")
        self.slots = threading.BoundedSemaphore(limit)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the pool, or 429 when `limit` are under way."""
        if not self.slots.acquire(blocking=False):
            raise TooMany(
                f"{self.limit} attributions, reports or compares are under way in this process "
                "(max_heavy_reads); retry shortly",
                retry_after_s=5,
            )
        try:
            call = functools.partial(fn, *args, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(self.pool, call)
        finally:
            self.slots.release()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
