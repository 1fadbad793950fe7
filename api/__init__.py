"""The REST service (installed as `fleetval.api`): a thin layer over the library.

`create_app` and `Settings` load on first use, so `fleetval.api.db` (tokens) stays
importable without Ray.
"""

from typing import Any

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from fleetval.api.app import create_app

        return create_app
    if name == "Settings":
        from fleetval.api.settings import Settings

        return Settings
    raise AttributeError(name)
