"""A throttle made outside fleetval: stop every rank process on one node for STOP_MS of
each PERIOD_MS (SIGSTOP / SIGCONT), as a noisy neighbour or a throttled CPU would.

    python tests/integration/throttle.py RAY_ADDRESS NODE STOP_MS PERIOD_MS

It finds the node's rank actors through Ray's actor table (new jobs start new actors, so
it looks again every second), runs until SIGTERM, and leaves every process running.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rayprocs import rank_pids


def main(address: str, node: str, stop_ms: float, period_ms: float) -> None:
    import ray

    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    pids: list[int] = []

    def refresh() -> None:
        while not done.wait(1.0):
            with suppress(Exception):  # the actor table is evidence; a miss is retried
                pids[:] = rank_pids(count=64, node=node)

    threading.Thread(target=refresh, daemon=True).start()
    stops = 0
    while not done.is_set():
        stopped = list(pids)
        for pid in stopped:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stops += bool(stopped)
        time.sleep(stop_ms / 1000)
        for pid in stopped:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        time.sleep((period_ms - stop_ms) / 1000)
    print(f"throttled {node}: {stops} stops", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
