"""What several bench scripts share, so that bench stands on the product (its helpers for
synthetic stores, simulated fleets and free ports: `fleetval.testing`) and this module only,
never on tests/. A script run as `python bench/X.py` has bench/ on its path, so it imports
this as `_common`."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import httpx


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

