"""NCCL Flight Recorder dumps: which rank is missing from which collective, by sequence id.

Each rank's recorder lists the collectives it entered (`collective_seq_id` per process
group) and their state. A hung rank's record stops short of its peers': the ranks whose
last sequence id is below the group's highest never entered that collective. Where this
torch build ships its own analyser (`torch.distributed.flight_recorder`), its verdict is
added to ours. Pure except for that optional import.
"""

from __future__ import annotations

import json
import logging
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fleetval.run.outcome import Culprit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Missing:
    """Ranks that never entered collective `seq` of process group `group`."""

    group: str
    seq: int
    collective: str
    ranks: tuple[int, ...]

    def describe(self) -> str:
        who = ", ".join(str(r) for r in self.ranks)
        return f"rank {who} missing from {self.collective} #{self.seq} (group {self.group})"


def load(trace: bytes) -> dict[str, Any]:
    """A dump as torch writes it: pickle (`_dump_nccl_trace`) or JSON (`..._json`)."""
    if trace.lstrip()[:1] == b"{":
        return json.loads(trace)
    return pickle.loads(trace)  # NOTE: our own ranks' dumps, fetched over Ray


def _group(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return str(pg[0])
    return str(entry.get("pg_id", "0"))


def missing(dumps: Mapping[int, Mapping[str, Any]]) -> list[Missing]:
    """Per process group, the ranks whose last collective is behind the group's leader."""
    last: dict[str, dict[int, int]] = {}
    names: dict[tuple[str, int], str] = {}
    for rank, dump in dumps.items():
        for e in dump.get("entries", []):
            seq = e.get("collective_seq_id")
            if not isinstance(seq, int) or seq <= 0:
                continue  # p2p-only entries carry 0 here
            group = _group(e)
            last.setdefault(group, {})
            last[group][rank] = max(last[group].get(rank, 0), seq)
            names.setdefault((group, seq), str(e.get("profiling_name", "collective")))
    out = []
    for group, by_rank in sorted(last.items()):
        lead = max(by_rank.values())
        behind = sorted(r for r in dumps if by_rank.get(r, 0) < lead)
        if behind:
            first = min(by_rank.get(r, 0) for r in behind) + 1
            out.append(
                Missing(group, first, names.get((group, first), "collective"), tuple(behind))
            )
    return out


def torch_verdict(traces: Mapping[int, bytes]) -> list[str]:
    """torch's own analyser over the dumps, where this build has it: its mismatch findings."""
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
        from torch.distributed.flight_recorder.components.loader import read_dir
    except ImportError:
        return []
    try:
        with tempfile.TemporaryDirectory() as folder:
            for rank, trace in traces.items():
                Path(folder, f"fr-rank-{rank}").write_bytes(trace)
            args = JobConfig().parse_args(
                [folder, "--prefix", "fr-rank-", "--allow-incomplete-ranks"]
            )
            details, version = read_dir(args)
            db = build_db(details, args, version)
    except Exception as err:  # evidence only; our own reading stands without it
        log.info("torch's Flight Recorder analyser failed: %s", err)
        return []
    return [
        f"torch analyser: rank {', '.join(map(str, sorted(c.missing_ranks)))} missing from "
        f"{c.collective_name} #{c.collective_seq_id}"
        for c in db.collectives
        if c.missing_ranks
    ]


def confirm(
    culprits: Sequence[Culprit], traces: Mapping[int, bytes], ranks: Sequence[Any]
) -> list[Culprit]:
    """The culprits with the recorder's findings (ours and torch's) added to their detail."""
    if not traces:
        return list(culprits)
    try:
        dumps = {rank: load(t) for rank, t in traces.items()}
    except Exception as err:
        log.info("unreadable Flight Recorder dump: %s", err)
        return list(culprits)
    found = missing(dumps)
    silent = sorted({r.rank for r in ranks} - set(traces))
    notes = [m.describe() for m in found] + torch_verdict(traces)
    if silent:
        notes.append(f"no dump from rank {', '.join(map(str, silent))}")
    if not notes:
        return list(culprits)
    text = "; flight recorder: " + "; ".join(notes)
    return [replace(c, detail=c.detail + text) for c in culprits]
