"""The service's app in this process (no executor, no scheduler, no Ray), with a token per
holder: what the REST tests over a TestClient start from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from fleetval.api import Settings, create_app
from fleetval.api.db import Scope


@contextmanager
def app_client(
    data: Path, **holders: Scope
) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    """A TestClient over the app on `data`, and each holder's Authorization header: a token of
    its scope, named after it."""
    app = create_app(Settings(data_dir=data, run_executor=False, run_scheduler=False))
    tokens = {name: app.state.db.create_token(scope, name) for name, scope in holders.items()}
    with TestClient(app) as client:
        yield client, {name: {"Authorization": f"Bearer {t}"} for name, t in tokens.items()}
