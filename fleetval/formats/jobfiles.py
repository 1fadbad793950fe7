"""A training job's artefacts, each file read as what it is: a Flight Recorder dump (pickle or
JSON), NCCL RAS or Inspector output, a per-rank step log, or none of these (named, never
fatal). Files arrive as (name, bytes), so paths on disk and uploads read the same; a name's
folder names the host where the dumps lie in more than one folder (as gathered from nodes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fleetval.formats import frdump, nccldiag, steplog
from fleetval.formats.frdump import RankTrace
from fleetval.formats.steplog import StepLine

LOOKED_FOR = (
    "PyTorch Flight Recorder dumps (pickle or JSON, as TORCH_FR_DUMP_TEMP_FILE or "
    "_dump_fr_trace write them) and step logs (lines with a step number and a time or a "
    "duration: torchrun [rankN]: prefixes, torchtitan, Megatron-LM, key=value, JSON lines)"
)


@dataclass
class JobFiles:
    """What a job's files hold, and the files that held none of it (with the reason)."""

    traces: list[RankTrace] = field(default_factory=list)
    steps: list[StepLine] = field(default_factory=list)
    diagnostics: list[Any] = field(default_factory=list)  # RasReport or [InspectorRecord]
    not_read: list[str] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return bool(self.traces or self.steps or self.diagnostics)


def read_job_files(files: Sequence[tuple[str, bytes]]) -> JobFiles:
    """Each file as what it is (see the module docstring)."""
    out = JobFiles()
    dumps: list[tuple[PurePosixPath, bytes]] = []
    for name, raw in files:
        path = PurePosixPath(name)
        head = raw[:4096]
        if frdump.looks_like_dump(head):
            dumps.append((path, raw))
            continue
        text = raw.decode(errors="replace") if b"\x00" not in head else ""
        if nccldiag.looks_like_ras(text):
            out.diagnostics.append(nccldiag.parse_ras(text))
            continue
        if nccldiag.looks_like_inspector(text):
            try:
                out.diagnostics.append(nccldiag.parse_inspector(text))
            except ValueError as err:
                out.not_read.append(f"{name} ({err})")
            continue
        found = steplog.parse(text, file_rank=steplog.file_rank(path)) if text else []
        if found:
            out.steps += found
        else:
            out.not_read.append(name)
    # NOTE: dumps spread over folders are a folder per host (as gathered from nodes)
    per_host = len({p.parent for p, _ in dumps}) > 1
    for path, raw in dumps:
        try:
            doc = frdump.load(raw)
            trace = frdump.parse(doc, rank=frdump.rank_of(path), source=str(path),
                                 host=path.parent.name if per_host else None)  # fmt: skip
        except Exception as err:  # NOTE: a file that is no dump is named with why, never fatal
            out.not_read.append(f"{path} (not a readable Flight Recorder dump: {err})")
            continue
        out.traces.append(trace)
    return out
