"""What one service instance is configured with; `create_app(settings)` takes it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fleetval.api.limits import Limits
from fleetval.store.dataset import default_data_dir

DEFAULT_MAX_BODY = 256 * 1024  # an inline suite is a few KiB; this leaves a wide margin


@dataclass(frozen=True, kw_only=True)
class Settings:
    data_dir: Path
    address: str | None = None  # Ray: None -> $RAY_ADDRESS, else an embedded local instance
    max_body_bytes: int = DEFAULT_MAX_BODY
    run_executor: bool = (
        True  # False: submissions queue but nothing runs here (API replicas, tests)
    )
    run_scheduler: bool = True  # False: schedules are kept but fire from other processes only
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_env(cls) -> Settings:
        """For uvicorn workers, which import the app by name: `fleetval serve` sets these."""
        return cls(
            data_dir=default_data_dir(),
            address=os.environ.get("FLEETVAL_RAY_ADDRESS") or None,
            max_body_bytes=int(os.environ.get("FLEETVAL_MAX_BODY", DEFAULT_MAX_BODY)),
            run_executor=os.environ.get("FLEETVAL_EXECUTOR", "1") != "0",
            run_scheduler=os.environ.get("FLEETVAL_SCHEDULER", "1") != "0",
            limits=Limits.from_env(os.environ.get("FLEETVAL_LIMITS")),
        )
