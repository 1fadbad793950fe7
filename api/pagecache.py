"""Pages of `GET /v1/runs` kept as the bytes `service.list_runs` made, while nothing they
show can have changed.

A page is a function of the query and of two SQLite databases: the service's (submissions,
queued to finished, with their progress) and the store's run index (stored runs). Other
processes write both (another `serve --workers` worker, `fleetval run`), so the pages are
kept for one *version* of the data, read from SQLite before a page is made: each database's
`PRAGMA data_version`, which moves whenever another connection commits (this process's
writer included), and the rows the run index's own connection changed (its syncs). Any move
empties the cache, so a run submitted, finished or deleted shows on the very next request,
as it would without the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

MAX_PAGES = 256
MAX_BYTES = 32 << 20  # a page of PAGE_MAX runs is ~400 KB: 256 of them would be 100 MB

V = TypeVar("V")


class PageCache(Generic[V]):
    """Up to `max_pages` pages and `max_bytes` in all (a page's bytes: `size`), the least
    recently used dropped first, all made at one version of the data. `hits` and `misses`
    count the lookups."""

    def __init__(
        self,
        max_pages: int = MAX_PAGES,
        max_bytes: int = MAX_BYTES,
        size: Callable[[V], int] = len,  # type: ignore[assignment]
    ) -> None:
        self.max_pages, self.max_bytes, self.size = max_pages, max_bytes, size
        self.hits = self.misses = 0
        self._version: Hashable = None
        self._pages: OrderedDict[Hashable, V] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, version: Hashable, query: Hashable, make: Callable[[], V]) -> V:
        """The page for `query`: kept, else made now by `make` (and kept). `version` must be
        read before `make` runs, so a page is never older than the version it is kept for."""
        body = self.lookup(version, query)
        if body is None:
            body = make()
            self.keep(version, query, body)
        return body

    def lookup(self, version: Hashable, query: Hashable) -> V | None:
        """The page kept for `query` at `version`, else None (counted as a miss)."""
        with self._lock:
            if version != self._version:
                self._pages.clear()
                self._version, self._bytes = version, 0
            body = self._pages.get(query)
            if body is not None:
                self._pages.move_to_end(query)
                self.hits += 1
                return body
            self.misses += 1
            return None

    def keep(self, version: Hashable, query: Hashable, body: V) -> None:
        """Keep `body`, made from data read at `version`, unless the data has moved since."""
        with self._lock:
            if version == self._version:  # NOTE: else the data moved while it was made
                self._keep(query, body)

    def _keep(self, query: Hashable, body: V) -> None:
        size = self.size(body)
        if size > self.max_bytes:
            return
        old = self._pages.pop(query, None)  # NOTE: made twice at once, by two threads
        self._bytes += size - (self.size(old) if old is not None else 0)
        self._pages[query] = body
        while len(self._pages) > self.max_pages or self._bytes > self.max_bytes:
            _, dropped = self._pages.popitem(last=False)
            self._bytes -= self.size(dropped)
