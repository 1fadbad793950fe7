"""What several bench scripts share, so that bench stands on the product (its helpers for
synthetic stores, simulated fleets, free ports and service processes: `fleetval.testing`)
and this module only, never on tests/. A script run as `python bench/X.py` has bench/ on its
path, so it imports this as `_common`.

A bench that needs `fleetval serve` starts it with `fleetval.testing.serve` (`start_serve`,
or `spawn` and `Serving.wait_ready`); `wait_ready` is that module's, for a bench that
starts the process itself."""

from __future__ import annotations

from fleetval.testing.serve import wait_ready

__all__ = ["wait_ready"]
