"""GPU tests share one process: the Flight Recorder's buffer size is read once per process, at
its first process group, so it is set before any test forms one."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")


@pytest.fixture(scope="module")
def local_gpu_ray() -> Iterator[None]:
    """An embedded Ray instance that sees this host's GPUs."""
    import ray

    from fleetval.run.execute import connect

    if ray.is_initialized():
        pytest.skip("Ray is already connected (simulated cluster); run with -m gpu alone")
    connect(None)
    try:
        yield
    finally:
        ray.shutdown()
