"""Ctrl-C for a run in the foreground: the first cancels, a second exits at once.

The event is a `StopSwitch` of reason Ctrl-C: passed as a run's cancel event, its life
(`fleetval.run.life`) records the run stopped by Ctrl-C.

NOTE: Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread
happens to be: inside a Ray call, a lock of the progress display, a teardown half done. Raised
there, it can leave a lock held (the next call then waits for ever) or skip the teardown that
kills the ranks. Here the first SIGINT only sets the run's cancel event, which every wait of a
run polls (at most `FailurePolicy.poll_s` apart), so the job is torn down and the run recorded
`cancelled` on the ordinary path. A second SIGINT, or a cancel not done within its grace, exits
the process at once (status 130); Ray removes a dead driver's actors and groups itself.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from fleetval.run.life import StopReason, StopSwitch

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process ended by Ctrl-C


def _say(text: str) -> None:
    # NOTE: os.write, not print: the handler may run while the main thread is inside a write
    # to the same stream, and a buffered stream refuses a reentrant call.
    os.write(2, f"\n{text}\n".encode())


def _exit_now(why: str) -> None:
    _say(why)
    os._exit(EXIT_INTERRUPTED)


@contextmanager
def ctrl_c_cancels(grace_s: float) -> Iterator[threading.Event]:
    """Yield the run's cancel event, set by the first Ctrl-C; see the module docstring.

    Off the main thread (a library caller's worker) signals cannot be handled: the event is
    still yielded, and only the caller sets it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield threading.Event()  # its caller's cancel: a stop by request
        return
    cancel = StopSwitch(StopReason.CTRL_C)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if cancel.is_set():
            _exit_now("second Ctrl-C: exiting now (Ray removes the run's ranks)")
        cancel.set()
        _say(
            "Ctrl-C: cancelling; the ranks are torn down and finished steps kept "
            f"(Ctrl-C again to exit at once; exiting anyway in {grace_s:g}s)"
        )
        timer = threading.Timer(
            grace_s, _exit_now, (f"cancel not done within {grace_s:g}s: exiting now",)
        )
        timer.daemon = True  # NOTE: stays armed after the run: printing must not hang either
        timer.start()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)
