"""NCCL's own diagnostics, read as evidence beside the Flight Recorder: the RAS client's text
report (`ncclras`) and the Inspector plugin's per-collective JSON.

- RAS (`ncclras`, text): the job summary (nodes, processes, GPUs), each communicator group's
  status and errors, and each MISMATCH block: which ranks launched how many operations of
  which kind, and the outlying ranks with their node. RAS sees counts, not times: a rank
  behind its peers in a count is hung or dead, not merely slow.
- Inspector (`NCCL_INSPECTOR_ENABLE=1`): one JSON object per collective per communicator per
  rank (`header`: communicator id, rank, n_ranks; `metadata`: hostname; `coll_perf`: the
  collective, its sequence number `coll_sn`, `coll_exec_time_us`, bandwidths).

The RAS JSON output (`ncclras -f json`, NCCL 2.28.7+) has no public sample yet
(tests/data/README.md): it is not read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_SUMMARY = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
_GROUP = re.compile(r"^\s*(\d+)\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+([A-Z]+)\s+([A-Z]+)\s*$")
_BLOCK = re.compile(r"^#(\S+) \((\w+)\) (\w+)")
_COUNT = re.compile(r"^\s*(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")
_OP = re.compile(r"different (\w+) operation counts")
_RANK = re.compile(r"^\s*Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)")


@dataclass(frozen=True)
class RasMismatch:
    """A communicator whose ranks launched different numbers of operations."""

    comm: str
    op: str
    counts: tuple[tuple[int, int], ...]  # (ranks, launched up to operation N)
    ranks: tuple[tuple[int, str], ...]  # the ranks RAS lists, with their node

    def describe(self) -> str:
        counts = "; ".join(f"{n} rank(s) at operation {op}" for n, op in self.counts)
        listed = ", ".join(f"rank {r} on {node}" for r, node in self.ranks)
        return f"NCCL RAS: communicator {self.comm}: {self.op} counts differ ({counts}): {listed}"


@dataclass
class RasReport:
    nodes: int | None = None
    processes: int | None = None
    groups: list[tuple[str, str, str]] = field(default_factory=list)  # (group, status, errors)
    mismatches: list[RasMismatch] = field(default_factory=list)

    def notes(self) -> list[str]:
        head = f"NCCL RAS: {self.nodes} node(s), {self.processes} process(es)"
        groups = ", ".join(f"group {g} {s} {e}" for g, s, e in self.groups)
        return [f"{head}; {groups}" if groups else head] + [m.describe() for m in self.mismatches]


def looks_like_ras(text: str) -> bool:
    return "Job summary" in text and "Communicators" in text


@dataclass
class _Block:
    """A communicator block of the RAS report, as read so far."""

    comm: str
    op: str = ""
    counts: list[tuple[int, int]] = field(default_factory=list)
    ranks: list[tuple[int, str]] = field(default_factory=list)

    def mismatch(self) -> RasMismatch:
        return RasMismatch(self.comm, self.op, tuple(self.counts), tuple(self.ranks))


def parse_ras(text: str) -> RasReport:
    """The RAS client's text report."""
    out = RasReport()
    block: _Block | None = None
    mismatched: list[_Block] = []
    for line in text.splitlines():
        if out.nodes is None and (m := _SUMMARY.match(line)):
            out.nodes, out.processes = int(m.group(1)), int(m.group(4))
        elif m := _GROUP.match(line):
            out.groups.append((m.group(1), m.group(2), m.group(3)))
        elif m := _BLOCK.match(line):
            block = _Block(f"#{m.group(1)} ({m.group(2)})")
            if m.group(3) == "MISMATCH":
                mismatched.append(block)
        elif block is not None and (m := _OP.search(line)):
            block.op = m.group(1)
        elif block is not None and (m := _COUNT.match(line)):
            block.counts.append((int(m.group(1)), int(m.group(2))))
        elif block is not None and (m := _RANK.match(line)):
            block.ranks.append((int(m.group(1)), m.group(4)))
    out.mismatches = [b.mismatch() for b in mismatched]
    return out


@dataclass(frozen=True)
class InspectorRecord:
    """One collective of one rank, as the Inspector plugin wrote it."""

    comm: str
    rank: int
    n_ranks: int
    host: str | None
    coll: str
    seq: int
    exec_us: float
    msg_bytes: int | None
    busbw_gbs: float | None


def _objects(text: str) -> list[Any]:
    """Concatenated JSON documents (the plugin appends one object per collective, pretty-
    printed or one a line)."""
    dec = json.JSONDecoder()
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        out.append(doc)


def looks_like_inspector(text: str) -> bool:
    return '"coll_perf"' in text[:4096] and '"header"' in text[:4096]


def parse_inspector(text: str) -> list[InspectorRecord]:
    """Every collective record of an Inspector output file; ValueError when it is not one."""
    try:
        docs = _objects(text)
    except ValueError as err:
        raise ValueError(f"not NCCL Inspector output ({err})") from err
    out = []
    for d in docs:
        h, m, c = d.get("header") or {}, d.get("metadata") or {}, d.get("coll_perf") or {}
        if not (isinstance(h.get("rank"), int) and isinstance(c.get("coll_sn"), int)):
            continue
        out.append(InspectorRecord(
            comm=str(h.get("id", "")), rank=h["rank"], n_ranks=int(h.get("n_ranks") or 0),
            host=m.get("hostname"), coll=str(c.get("coll", "")), seq=c["coll_sn"],
            exec_us=float(c.get("coll_exec_time_us") or 0.0),
            msg_bytes=c.get("coll_msg_size_bytes"), busbw_gbs=c.get("coll_busbw_gbs"),
        ))  # fmt: skip
    return out
