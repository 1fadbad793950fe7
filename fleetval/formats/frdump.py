"""PyTorch Flight Recorder dumps read from files: when each rank reached each collective.

torch writes one dump per rank (`TORCH_FR_DUMP_TEMP_FILE` + rank, or what
`torch._C._distributed_c10d._dump_fr_trace()` / `_dump_fr_trace_json()` return), as a
pickle or as JSON. Each entry is one collective a rank entered: its process group, its
sequence id in that group (`collective_seq_id`), its name, `time_created_ns` (when the rank
called it: its arrival) and, where the backend records them (NCCL with
`TORCH_NCCL_ENABLE_TIMING=1`), when it started and completed on the device.

The dump names no rank: the rank is the number that ends the file name, as torch writes it;
where the dumps lie in one directory per host, the directory is the host.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_RANK = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle|bin))?$")


@dataclass(frozen=True)
class RankTrace:
    """One rank's Flight Recorder dump: its collectives in the order it entered them."""

    rank: int
    source: str
    group: tuple[str, ...]  # per entry: the process group's id
    seq: np.ndarray  # per entry: collective_seq_id in its group
    name: tuple[str, ...]  # per entry: profiling_name ("gloo:all_reduce", "nccl:all_reduce")
    created_ns: np.ndarray  # per entry: when the rank called it (float64, wall clock)
    started_ns: np.ndarray  # NaN where the backend does not record it (gloo)
    completed_ns: np.ndarray  # NaN where the backend does not record it (gloo)
    group_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # from pg_config
    host: str | None = None
    version: str = ""

    @property
    def entries(self) -> int:
        return len(self.seq)


class _DataOnly(pickle.Unpickler):
    """A dump holds dicts, lists, tuples, strings and numbers only: no class is loaded, so a
    file that is not a dump cannot run code when it is read."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"not a Flight Recorder dump (it names {module}.{name})")


def looks_like_dump(head: bytes) -> bool:
    """A pickle (protocol 2+) or a JSON object that names Flight Recorder keys."""
    if head[:1] == b"\x80":
        return True
    text = head.lstrip()[:1] == b"{"
    return text and (b'"entries"' in head or b'"pg_config"' in head or b'"version"' in head)


def load(raw: bytes) -> dict[str, Any]:
    """A dump's document, pickle or JSON, as torch writes it."""
    doc = json.loads(raw) if raw.lstrip()[:1] == b"{" else _DataOnly(io.BytesIO(raw)).load()
    if not isinstance(doc, dict) or ("entries" not in doc and "pg_config" not in doc):
        raise ValueError("not a Flight Recorder dump (no 'entries' or 'pg_config')")
    return doc


def rank_of(path: Path) -> int:
    """The rank that ends the file name (`nccl_trace_rank_3`, `fr-3.json`)."""
    m = _RANK.search(path.name)
    if not m:
        raise ValueError(f"{path}: a Flight Recorder dump whose name does not end in its rank")
    return int(m.group(1))


def _group(e: dict[str, Any]) -> str:
    pg = e.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return str(pg[0])
    return str(e.get("pg_id", "0"))


def _ns(v: Any) -> float:
    # NOTE: JSON dumps write 0 for "not recorded", pickles None.
    return float(v) if isinstance(v, int | float) and v > 0 else np.nan


def _group_ranks(doc: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """pg_config names each group by its name; entries by its id: keep both spellings."""
    out: dict[str, tuple[int, ...]] = {}
    for key, cfg in (doc.get("pg_config") or {}).items():
        ranks = cfg.get("ranks") if isinstance(cfg, dict) else None
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except ValueError:
                continue
        if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
            out[str(key)] = tuple(ranks)
    return out


def parse(doc: dict[str, Any], *, rank: int, source: str, host: str | None = None) -> RankTrace:
    """One rank's trace from a loaded dump: collectives only (p2p entries carry no
    collective sequence id)."""
    rows = [
        e
        for e in doc.get("entries") or []
        if isinstance(e.get("collective_seq_id"), int)
        and e["collective_seq_id"] > 0
        and not e.get("is_p2p")
    ]
    return RankTrace(
        rank=rank,
        source=source,
        group=tuple(_group(e) for e in rows),
        seq=np.array([e["collective_seq_id"] for e in rows], dtype=np.int64),
        name=tuple(str(e.get("profiling_name") or "collective") for e in rows),
        created_ns=np.array([_ns(e.get("time_created_ns")) for e in rows], dtype=np.float64),
        started_ns=np.array(
            [_ns(e.get("time_discovered_started_ns")) for e in rows], dtype=np.float64
        ),
        completed_ns=np.array(
            [_ns(e.get("time_discovered_completed_ns")) for e in rows], dtype=np.float64
        ),
        group_ranks=_group_ranks(doc),
        host=host,
        version=str(doc.get("version", "")),
    )


def read(path: Path, host: str | None = None) -> RankTrace:
    """One dump file; ValueError when it is not one."""
    try:
        doc = load(path.read_bytes())
    except (pickle.UnpicklingError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable Flight Recorder dump ({err})") from err
    return parse(doc, rank=rank_of(path), source=str(path), host=host)
