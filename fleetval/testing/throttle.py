"""A throttle made outside fleetval: stop every rank process on one node for STOP_MS of
each PERIOD_MS (SIGSTOP / SIGCONT), as a noisy neighbour or a throttled CPU would.

    python -m fleetval.testing.throttle RAY_NODE_ID STOP_MS PERIOD_MS

It knows the node by its Ray node id only, and finds that node's rank processes the way an
operator would, in /proc: the `ray::RankActor` children of the raylet started with that
node id. Each sweep round starts new rank processes, so it keeps looking (in a thread of
its own, so the stop/run cycle keeps its period). It runs until SIGTERM and leaves every
process running.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path


def _cmdline(pid: str) -> bytes:
    with suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()]


def raylet(node_id: str) -> str:
    flag = f"--node_id={node_id}".encode()
    found = [p for p in _pids() if b"raylet" in _cmdline(p)[:200] and flag in _cmdline(p)]
    if not found:
        raise SystemExit(f"no raylet with node id {node_id}")
    return found[0]


def rank_processes(parent: str) -> list[int]:
    out = []
    for p in _pids():
        with suppress(OSError, IndexError):
            stat = Path(f"/proc/{p}/stat").read_text()
            ppid = stat.rsplit(")", 1)[1].split()[1]  # the name may hold spaces: after ")"
            if ppid == parent and _cmdline(p).startswith(b"ray::RankActor"):
                out.append(int(p))
    return out


def main(node_id: str, stop_ms: float, period_ms: float) -> None:
    parent = raylet(node_id)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    pids: list[int] = []

    def look() -> None:  # NOTE: apart from the cycle: a /proc scan takes longer than a period
        while not done.is_set():
            pids[:] = rank_processes(parent)
            time.sleep(0.05)

    threading.Thread(target=look, daemon=True).start()
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
    print(f"throttled {node_id}: {stops} stops", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
