"""The store as the service reads it: the whole-store listings (every run, every node row)
kept between requests until the store changes.

A baseline given by filters, compare and the report resolve against every run and every
node of the store; read from the files on each request, that is one file per run per
request. The listings are kept, keyed by the store's generation: the modification times of
the directories a write changes (a run's record, nodes or results appear by a rename into
them). A generation younger than `RACY_S` is never kept: a write in the same clock tick
would not change it (git's "racy" index entries).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetval.store.dataset import Store
from fleetval.store.records import Run

TABLES = ("runs", "results", "nodes")  # the directories whose entries the listings reflect
# What an attribution, a report or a compare reads besides: a step's summaries, lateness and
# GPU counters, and the baselines
ANSWERS = (*TABLES, "summaries", "lateness", "gpus", "baselines")
RACY_S = 1.0


class CachedStore(Store):
    """A `Store` whose `runs()` and `node_rows()` (all nodes) are read once per generation."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[tuple[int, ...], list[Any]]] = {}

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
        return self._cached("runs", super().runs)

    def node_rows(self, run_ids: list[str] | None = None) -> list[dict[str, Any]]:
        if run_ids is not None:
            return super().node_rows(run_ids)
        return self._cached("nodes", super().node_rows)

    def _cached(self, key: str, read: Callable[[], list[Any]]) -> list[Any]:
        generation = self.generation()
        with self._lock:
            kept = self._kept.get(key)
        if generation is not None and kept is not None and kept[0] == generation:
            return list(kept[1])
        rows = read()
        if generation is not None:
            with self._lock:
                self._kept[key] = (generation, rows)
        return list(rows)


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
