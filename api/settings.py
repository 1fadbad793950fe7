"""What one service instance is configured with; `create_app(settings)` takes it.

`fleetval serve` builds it from its options. With several uvicorn workers, each worker
imports the app by name and builds its own from the environment (`Settings()` reads the
`FLEETVAL_*` variables `to_env` wrote): one declaration, read and written the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleetval.api.limits import Limits
from fleetval.store.dataset import default_data_dir

DEFAULT_MAX_BODY = 256 * 1024  # an inline suite is a few KiB; this leaves a wide margin


def _env(name: str) -> AliasChoices:
    """A field set by its own name in code, or by `name` in the environment."""
    return AliasChoices(name.removeprefix("FLEETVAL_").lower(), name)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    data_dir: Path = Field(default_factory=default_data_dir, validation_alias=_env("FLEETVAL_DATA"))
    # Ray: None -> $RAY_ADDRESS, else an embedded local instance
    address: str | None = Field(None, validation_alias=_env("FLEETVAL_RAY_ADDRESS"))
    max_body_bytes: int = Field(DEFAULT_MAX_BODY, validation_alias=_env("FLEETVAL_MAX_BODY"))
    # False: submissions queue but nothing runs here (API replicas, tests)
    run_executor: bool = Field(True, validation_alias=_env("FLEETVAL_EXECUTOR"))
    # False: schedules are kept but fire from other processes only
    run_scheduler: bool = Field(True, validation_alias=_env("FLEETVAL_SCHEDULER"))
    limits: Limits = Field(default_factory=Limits, validation_alias=_env("FLEETVAL_LIMITS"))
    # /docs and /redoc load their scripts from a CDN, on the origin where tokens are pasted:
    # off unless asked (the OpenAPI itself is always at /openapi.json)
    docs: bool = Field(False, validation_alias=_env("FLEETVAL_DOCS"))

    def to_env(self) -> dict[str, str]:
        """The environment a worker's `Settings()` reads these settings back from."""
        fields = type(self).model_fields
        return {
            fields[name].validation_alias.choices[-1]: (  # type: ignore[union-attr]
                value if isinstance(value, str) else json.dumps(value)
            )
            for name, value in self.model_dump(mode="json", exclude_none=True).items()
        }
