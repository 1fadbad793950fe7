"""NCCL Flight Recorder dumps: which rank is missing from which collective, by sequence id.

Each rank's recorder lists the collectives it entered (`collective_seq_id` per process
group) and their state. A hung rank's record stops short of its peers': the ranks whose
last sequence id is below the group's highest never entered that collective. Where this
torch build ships its own analyser (`torch.distributed.flight_recorder`), its verdict is
added to ours. Pure except for that optional import.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import redirect_stdout
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
    dump = json.loads(trace) if trace.lstrip()[:1] == b"{" else pickle.loads(trace)
    dump.setdefault("entries", [])  # NOTE: torch's JSON leaves the key out when none recorded
    return dump  # NOTE: pickles only from our own ranks, fetched over Ray


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


def last_record(trace: bytes | None) -> int:
    """The highest record id in a dump (-1 for none): the mark a job's entries come after."""
    if not trace:
        return -1
    try:
        entries = load(trace).get("entries") or []
    except Exception:  # NOTE: an unreadable buffer marks nothing: every later entry is kept
        return -1
    return max((e.get("record_id", -1) for e in entries), default=-1)


def since(trace: bytes, mark: int) -> bytes:
    """The dump with only the entries recorded after `mark`, pickled again.

    NOTE: the recorder's buffer is per process and torch has no call to empty it: a pooled
    rank's dump holds earlier jobs' entries under the same group name and sequence ids."""
    dump = load(trace)
    dump["entries"] = [e for e in dump.get("entries") or [] if e.get("record_id", 0) > mark]
    return pickle.dumps(dump)


def with_groups(dump: Mapping[str, Any], world: Sequence[int]) -> dict[str, Any]:
    """The dump with a `pg_config` entry for every group its entries name, where it has none.

    NOTE: gloo records entries but leaves `pg_config` empty, and torch's analyser looks each
    entry's group up there; a group it lacks is taken to span the job's ranks (fleetval's
    checks run on the default group)."""
    config = dict(dump.get("pg_config") or {})
    for e in dump.get("entries") or []:
        pg = e.get("process_group")
        if isinstance(pg, list | tuple) and pg and str(pg[0]) not in config:
            desc = str(pg[1]) if len(pg) > 1 else ""
            config[str(pg[0])] = {"name": str(pg[0]), "desc": desc, "ranks": str(list(world))}
    config.pop("", None)  # gloo's placeholder
    return {**dump, "pg_config": config}


def torch_verdict(
    dumps: Mapping[int, Mapping[str, Any]], world: Sequence[int] | None = None
) -> list[str]:
    """torch's own analyser over the dumps (it reads pickles only: each dump is pickled for it),
    its mismatch findings; one line saying why where it could not run."""
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
        from torch.distributed.flight_recorder.components.loader import read_dir
    except ImportError as err:
        return [f"torch's analyser not run: this torch lacks it ({err})"]
    try:
        ranks = sorted(world if world is not None else dumps)
        # NOTE: the analyser prints its report; the culprit's detail carries what it found
        with tempfile.TemporaryDirectory() as folder, redirect_stdout(io.StringIO()):
            for rank, dump in dumps.items():
                Path(folder, f"fr-rank-{rank}").write_bytes(pickle.dumps(with_groups(dump, ranks)))
            args = JobConfig().parse_args(
                [folder, "--prefix", "fr-rank-", "--allow-incomplete-ranks"]
            )
            details, version = read_dir(args)
            db = build_db(details, args, version)
    except Exception as err:  # evidence only; our own reading stands without it
        log.info("torch's Flight Recorder analyser failed: %s", err)
        return [f"torch's analyser failed: {type(err).__name__}: {err}"]
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
    world = sorted({r.rank for r in ranks} | set(traces))
    silent = sorted({r.rank for r in ranks} - set(traces))
    notes = [m.describe() for m in found] + torch_verdict(dumps, world)
    if silent:
        notes.append(f"no dump from rank {', '.join(map(str, silent))}")
    if not notes:
        return list(culprits)
    text = "; flight recorder: " + "; ".join(notes)
    return [replace(c, detail=c.detail + text) for c in culprits]
