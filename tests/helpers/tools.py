"""External tools a test needs (docker, kubectl, slurm, a browser)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def tool_missing(reason: str) -> NoReturn:
    """A test's tool is absent: skipped on a developer's machine, a failure in CI, which
    installs every tool (`scripts/setup.sh test`), so that a skip there never hides a test."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
