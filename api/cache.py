"""The service's one read path for runs, and the one cache on it.

A run is read one way, whoever asks. `GET /v1/runs/{id}` and a page of `GET /v1/runs`
without a filter are answered before routing (`api/hot.py`), every other read of runs by
its route (`api/routes/runs.py`), both with the same functions (`service.run_json`,
`service.list_runs`): a run the service queued is its `submissions` row, made into `RunOut`
JSON by SQLite in the query that reads it; a run only the store holds is its row in the
store's run index (`fleetval.store.runindex`), whose listing was made from the run's one
declaration (`Run`, fleetval/store/records.py) when it was written and is served as it is
stored. Nothing is parsed or built per request. The library (baselines, compare, reports)
reads the store's runs through `CachedStore.runs`, from the same run index.

What is kept between requests is kept one way: a `PageCache` holds answers made from one
*version* of the data, read before the answer is made, and empties itself when a lookup
brings another version, so a change shows on the very next request. The versions:

- a page of runs (`HotReads`): the service database's `data_version` and the run index's
  `version()`; SQLite moves both on every commit, by this process or another one (another
  `serve --workers` worker, `fleetval run`), and the run index's own syncs move its own;
- the store's runs (`CachedStore.runs`): the run index's `version()` and the records its
  syncs found unreadable;
- the store's node rows (`CachedStore.node_rows`): the store's generation, the modification
  times of runs/, results/ and nodes/ (a file appears in them by a rename), never kept
  while younger than `RACY_S` (a write in the same clock tick would not move it: git's
  "racy" index entries);
- an attribution, a report or a compare (api/heavy.py): `CachedStore.version()`, the
  generation of every directory they read and of each run's results folder.

The token of a request is checked on every request, kept answer or not.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

from fleetval.store.dataset import Store
from fleetval.store.records import Run, StoredRow

MAX_PAGES = 256
MAX_BYTES = 32 << 20  # a page of PAGE_MAX runs is ~400 KB: 256 of them would be 100 MB

V = TypeVar("V")


class PageCache(Generic[V]):
    """Answers made at one version of the data: up to `max_pages` of them and `max_bytes` in
    all (an answer's bytes: `size`), the least recently used dropped first. `hits` and
    `misses` count the lookups."""

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


TABLES = ("runs", "results", "nodes")  # the directories whose entries the listings reflect
# What an attribution, a report or a compare reads besides: a step's summaries, lateness and
# GPU counters, and the baselines
ANSWERS = (*TABLES, "summaries", "lateness", "gpus", "baselines")
RACY_S = 1.0


class CachedStore(Store):
    """A `Store` whose `runs()` are kept while the run index stays at one version, and whose
    `node_rows()` (all nodes) are kept for one generation of the store."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self._runs: PageCache[list[Run]] = PageCache(1, sys.maxsize)
        self._nodes: PageCache[list[StoredRow]] = PageCache(1, sys.maxsize)

    def generation(self) -> tuple[int, ...] | None:
        """The store's generation, or None while it is too recent to be trusted."""
        stamps = tuple(_mtime_ns(self.root / t) for t in TABLES)
        if time.time_ns() - max(stamps) < RACY_S * 1e9:
            return None
        return stamps

    def version(self) -> tuple[tuple[int, ...], tuple[tuple[str, int], ...]] | None:
        """The store's version for the answers of attribution, reports and compare: the
        generation of every directory they read, and each run's results folder (a step's
        part lands in it while the run goes on); None while one is too recent to trust."""
        tops = tuple(_mtime_ns(self.root / t) for t in ANSWERS)
        runs = tuple(sorted(_folders(self.root / "results")))
        newest = max([*tops, *(stamp for _, stamp in runs)])
        if time.time_ns() - newest < RACY_S * 1e9:
            return None
        return tops, runs

    def runs(self) -> list[Run]:
        index = self.run_index()  # NOTE: first: it may sync, or say it is building
        # NOTE: a record a sync found unreadable moves no row: it is part of the version
        version = index.version(), tuple(index.unreadable)
        return list(self._runs.get(version, "runs", super().runs))

    def node_rows(self, run_ids: list[str] | None = None) -> list[StoredRow]:
        generation = self.generation() if run_ids is None else None
        if generation is None:
            return super().node_rows(run_ids)
        return list(self._nodes.get(generation, "nodes", super().node_rows))


def _mtime_ns(path: Any) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def _folders(path: Path) -> list[tuple[str, int]]:
    """(name, mtime) of each folder in `path`: one stat each, no more."""
    out = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):  # NOTE: a run deleted meanwhile
                    if entry.is_dir():
                        out.append((entry.name, entry.stat().st_mtime_ns))
    except FileNotFoundError:
        pass
    return out
