"""What several bench scripts share, so that bench stands on the product and this module
only, never on tests/. A script run as `python bench/X.py` has bench/ on its path, so it
imports this as `_common`."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx

# A slow node or link on the simulated fleet: each call this many ms late, 20x or more a
# healthy call at 64 KiB there.
DELAY_MS = 25


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it; a server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(
    url: str,
    proc: subprocess.Popen,
    ready: Callable[[httpx.Response], bool],
    timeout_s: float,
) -> None:
    """Poll URL/healthz until an answer satisfies `ready`; a server that ends or never
    gets there ends the bench (killed, so that nothing outlives it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if ready(httpx.get(f"{url}/healthz", timeout=5)):
                return
        except (httpx.HTTPError, ValueError):  # not listening yet; a body not yet JSON
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"{url}: the service was not ready in {timeout_s:g} s")


def sweep_suite(faults: list[dict[str, Any]] | None = None, **sweep: Any) -> dict[str, Any]:
    """The shipped `sweep` suite for the simulated fleet (`fleetval.run.localfleet`), with
    `faults` and sweep settings. FLEET8_START_S, if set, is the ranks' start-up deadline
    (placement, rendezvous): a machine loaded by other work needs more than the suite's."""
    from fleetval.suite import load_suite

    spec = load_suite("sweep").model_dump(mode="json", exclude_none=True)
    # NOTE: one-CPU nodes share a few cores, so a pair's speed at a bandwidth-bound size
    # depends on how its ranks happen to be scheduled. At 64 KiB a call is mostly wake-ups,
    # not CPU: healthy pairs spread about 2x, a DELAY_MS fault is 20x.
    one_size = {"sizes": {"min": "64KiB", "max": "64KiB", "factor": 2}, "iters": 240}
    spec["steps"] = [s | one_size if s["check"] == "bandwidth" else s for s in spec["steps"]]
    spec["faults"] = faults or []
    spec["sweep"] |= sweep
    if start_s := os.environ.get("FLEET8_START_S"):
        deadlines = dict.fromkeys(("placement_s", "rendezvous_s"), float(start_s))
        spec["timeouts"] = spec.get("timeouts", {}) | deadlines
    return spec
