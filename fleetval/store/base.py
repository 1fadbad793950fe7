"""What every store module shares, pyarrow-free: the store's errors, the environment
columns and the modes of what it creates. The first module of the store: it imports none of
the others, so `schema`, `parquet` and `catalog` import it and never each other in a cycle."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# What a node runs and is: the columns of the nodes table that a baseline filter or an
# environment diff speaks of (fleetval.store.schema and .catalog re-export them).
ENV_COLUMNS = (
    "gpu_model", "driver_version", "cuda_version", "rocm_version", "hip_version",
    "nccl_version", "rccl_version", "torch_version", "ray_version", "python_version",
    "kernel", "cpu_model", "hostname",
)  # fmt: skip


# What fleetval creates in a data directory is its owner's alone: the service database holds
# token hashes, inline suites and labels, the store what a site may not want read by all.
# NOTE: explicit modes, not a umask: the store is written by `fleetval run` as well as the
# service, and a umask set here would reach every file and process the caller makes.
DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dir(path: Path) -> Path:
    """`path` and whichever of its parents are missing, each created 0700 (`mkdir -p` gives
    the parents 0777 less the umask); a folder that exists keeps its mode."""
    if not path.is_dir():
        if path.parent != path:
            make_private_dir(path.parent)
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile by another writer; a file there still raises
            if not path.is_dir():
                raise
    return path


def create_private_file(path: Path) -> Path:
    """`path` created empty and 0600 when missing (its folder as `make_private_dir`), so a
    SQLite database made there is 0600 from its first byte and SQLite gives its `-wal`,
    `-shm` and journal the same mode. A file that exists keeps its mode and content."""
    make_private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE))
    return path


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
