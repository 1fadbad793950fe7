"""The rank processes of a running job, and faults made to them from outside fleetval
(tests, bench): an operator's SIGSTOP, a throttled process."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress


def rank_pids(count: int = 4, node: str | None = None) -> list[int]:
    """PIDs of the newest `count` live rank actors of the Ray instance this process is
    connected to (this job's, not a dying one's), on the node labelled `node` if given.

    NOTE: asks the connected GCS, not the state API's "auto" address, which picks the
    newest Ray instance on the machine (maybe someone else's) and waits on the dashboard.
    """
    import ray
    from ray._private.state import actors

    alive = [
        a for a in actors(actor_state_name="ALIVE").values() if a["ActorClassName"] == "RankActor"
    ]
    if node is not None:
        ids = {n["NodeID"] for n in ray.nodes() if n["Labels"].get("fleetval/node") == node}
        alive = [a for a in alive if a["Address"]["NodeID"] in ids]
    newest = sorted(alive, key=lambda a: a["StartTime"])[-count:]
    return sorted(a["Pid"] for a in newest)


@contextmanager
def throttled(
    pid_ready: threading.Event, pick: list[int], stop_ms: float, period_ms: float
) -> Iterator[list[int]]:
    """From outside fleetval: once `pid_ready` is set, stop pick[0] for stop_ms every period_ms.

    Yields a one-item list counting the stops made, so a test can tell a throttle that never
    ran from a detector that missed it. It waits for the pid as long as the job takes to
    start: a loaded host can take a minute or more.
    """
    done, stops = threading.Event(), [0]

    def cycle() -> None:
        while not pid_ready.wait(0.1):
            if done.is_set():
                return
        while not done.is_set() and pick:
            try:
                os.kill(pick[0], signal.SIGSTOP)
                stops[0] += 1
                time.sleep(stop_ms / 1000)
            except ProcessLookupError:
                return  # the job ended and its process with it
            finally:
                with suppress(ProcessLookupError):
                    os.kill(pick[0], signal.SIGCONT)
            time.sleep((period_ms - stop_ms) / 1000)

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    try:
        yield stops
    finally:
        done.set()
        pid_ready.set()
        thread.join(timeout=10)


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError), open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def listening(pids: list[int]) -> set[tuple[str, int]]:
    """The (address, port) pairs these processes listen on over TCP, as `ss -ltnp` lists
    them, read from /proc (Linux): each socket's inode, matched to a listening entry."""
    inodes: set[str] = set()
    for pid in pids:
        with suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    found.add(
                        (_address(cols[1].split(":")[0], width), int(cols[1].split(":")[1], 16))
                    )
    return found


def _address(hex_ip: str, width: int) -> str:
    """An IPv4 or IPv6 address as /proc/net/tcp* writes it (32-bit words, host byte order)."""
    raw = b"".join(bytes.fromhex(hex_ip[i : i + 8])[::-1] for i in range(0, len(hex_ip), 8))
    return socket.inet_ntop(socket.AF_INET if width == 4 else socket.AF_INET6, raw)
