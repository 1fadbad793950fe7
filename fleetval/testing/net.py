"""Loopback networking for tests and benchmarks that start real servers."""

from __future__ import annotations

import random
import socket

# Below Linux's ephemeral range (32768-60999), where every outgoing connection of a busy test
# run takes its port, and above Ray's worker ports (10002-19999): a port found free here is not
# taken by someone's connect() in the moment before its server binds it.
_LOW, _HIGH = 20000, 32767


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, outside the ports the OS and Ray hand out on their
    own (a server binds it right after)."""
    for _ in range(200):
        port = random.randint(_LOW, _HIGH)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free TCP port on 127.0.0.1 in {_LOW}-{_HIGH} after 200 tries")
