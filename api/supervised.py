"""A service thread that must not die: the executor and the scheduler are both one.

Its loop (`_loop`) runs until the service stops; when it raises, the error is logged and
counted, `_crashed` lets the subclass clean up (the executor ends its claimed run as
`error`), and the loop starts again after a back-off that doubles up to a ceiling. Until
the loop gets through a pass again (`_healthy`), `degraded()` says why, and `/healthz`
answers 503.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

BACKOFF_S = (1.0, 30.0)  # after a crash of the loop: first wait, doubling up to the second


class Supervised:
    """A supervised daemon thread named `fleetval-<what>`."""

    what = "thread"  # "executor", "scheduler": in thread names, logs and degraded()

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.failing = ""  # why the loop crashed last, until a pass succeeds again
        self.crashes = 0

    def _start_thread(self, target: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=target, name=f"fleetval-{self.what}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def degraded(self, *, detail: bool = True) -> str:
        """Why the thread cannot do its work now ("" when it can, or was never started);
        without `detail`, not the exception's text (it may name addresses and paths)."""
        if self._thread is None or self._stopping.is_set():
            return ""
        if not self._thread.is_alive():
            return f"the {self.what} thread is not running"
        if self.failing:
            why = f": {self.failing}" if detail else ""
            return f"the {self.what} crashed ({self.crashes}x) and is restarting{why}"
        return ""

    def _healthy(self) -> None:
        self.failing = ""

    def _sleep(self, seconds: float) -> None:
        """Until woken, stopped, or `seconds` pass."""
        self._wake.wait(seconds)
        self._wake.clear()

    def _supervise(self) -> None:
        """Run the loop; when it raises, log it and start it again after a back-off."""
        backoff = BACKOFF_S[0]
        while not self._stopping.is_set():
            try:
                self._loop()
            # NOTE: whatever broke (even a SystemExit raised into the thread), the work goes on
            except BaseException as err:
                if self._stopping.is_set() and not isinstance(err, Exception):
                    raise
                log.exception("%s crashed; restarting in %.0f s", self.what, backoff)
                self.crashes += 1
                self.failing = f"{type(err).__name__}: {err}"
                self._crashed(self.failing)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])
            else:
                return

    def _loop(self) -> None:
        raise NotImplementedError

    def _crashed(self, reason: str) -> None:
        """What a crash leaves to clean up (nothing by default)."""
