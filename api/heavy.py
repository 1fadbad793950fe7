"""Reads whose cost grows with the store (attribution, sign-off reports, compare) run on a
small pool of their own, at most `max_heavy_reads` at once in a process: one more is 429.

NOTE: off the request thread pool, so a few slow reports cannot hold the threads every other
route (a run's status, a results page) waits for.

Their answers are kept for one version of the store (`CachedStore.version`: the directories
they read and each run's results folder), so the same question asked again before a run,
a step or a baseline is written is answered from memory, without a slot.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi import Response

from fleetval.api.cache import CachedStore, PageCache
from fleetval.api.errors import TooMany
from fleetval.store.dataset import Store

T = TypeVar("T")
MAX_ANSWERS = 64
MAX_ANSWER_BYTES = 64 << 20  # a sign-off report of a large sweep is a few MB


def _size(answer: tuple[bytes, str]) -> int:
    return len(answer[0])


class HeavyReads:
    """The pool, its slots and the answers kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pool = ThreadPoolExecutor(limit, thread_name_prefix="fleetval-heavy")
        self.slots = threading.BoundedSemaphore(limit)
        self.answers: PageCache[tuple[bytes, str]] = PageCache(
            MAX_ANSWERS, MAX_ANSWER_BYTES, size=_size
        )

    async def answer(
        self, store: Store, key: Hashable, fn: Callable[..., Response], *args: Any
    ) -> Response:
        """`fn(*args)`'s response, kept while `store` stays at the version read before `fn`
        runs (none after a write too recent to trust: nothing kept). Only a 200 is kept:
        errors are raised, and a 404 or 409 may not hold once a run is written."""
        version = store.version() if isinstance(store, CachedStore) else None
        if version is not None and (kept := self.answers.lookup(version, key)) is not None:
            return Response(kept[0], media_type=kept[1])
        response = await self.run(fn, *args)
        if version is not None and response.status_code == 200:
            self.answers.keep(version, key, (bytes(response.body), response.media_type or ""))
        return response

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
