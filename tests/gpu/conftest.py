"""GPU tests share one process: the Flight Recorder's buffer size is read once per process, at
its first process group, so it is set before any test forms one."""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
