"""What every store module shares, pyarrow-free: the store's errors and the environment
columns. The first module of the store: it imports none of the others, so `schema`,
`parquet` and `catalog` import it and never each other in a cycle."""

from __future__ import annotations

from pathlib import Path

# What a node runs and is: the columns of the nodes table that a baseline filter or an
# environment diff speaks of (fleetval.store.schema and .catalog re-export them).
ENV_COLUMNS = (
    "gpu_model", "driver_version", "cuda_version", "rocm_version", "hip_version",
    "nccl_version", "rccl_version", "torch_version", "ray_version", "python_version",
    "kernel", "cpu_model", "hostname",
)  # fmt: skip


class StoreError(ValueError):
    """Bad input to the store: an unknown run, an unsafe name, a file that exists already."""


class RunNotFound(StoreError, LookupError):
    """No run with this id in the store (the service answers 404)."""

    def __init__(self, run_id: str, root: Path) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r} in {root}; `fleetval runs` lists them")


class CorruptFile(StoreError):
    """A stored file that cannot be read: only the run it belongs to is affected. The CLI
    exits 2 naming it; the service answers 500 (its own data's fault, never the request's)."""

    def __init__(self, path: Path, reason: object) -> None:
        self.path = path
        super().__init__(f"{path} is corrupt: {reason}")
