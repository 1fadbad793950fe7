"""Node sets as people read them at fleet size: host lists compressed the way Slurm writes them
(`node-[1-7,9]`), nodes grouped by an identical environment with only what differs shown, and
long listings cut to their first few with "and 1,012 more" (the `--json` outputs keep all)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

SHOWN = 10  # entries of a fleet-sized listing printed before "and N more"
# How a node's environment fields read in a listing
ENV_LABELS = {
    "gpu_model": "GPU", "gpu_count": "GPUs", "driver_version": "driver", "cuda_version": "CUDA",
    "rocm_version": "ROCm", "hip_version": "HIP", "nccl_version": "NCCL", "rccl_version": "RCCL",
    "torch_version": "torch", "ray_version": "Ray", "python_version": "Python",
    "kernel": "kernel", "cpu_model": "CPU",
}  # fmt: skip

_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str], *, limit: int | None = None) -> str:
    """Slurm-style host list: node-1 .. node-7, node-9, gpu-a -> "gpu-a,node-[1-7,9]"; with
    `limit`, at most that many ranges or names, then "and N more"."""
    numbered: dict[tuple[str, int], set[int]] = defaultdict(set)
    plain: set[str] = set()
    for name in names:
        m = _NUMBERED.match(name)
        if m is None:
            plain.add(name)
            continue
        digits = m.group(2)
        # NOTE: zero-padded numbers keep their width ("gpu007"), so they form their own set
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        numbered[(m.group(1), width)].add(int(digits))
    sets = [(name, [(name, 1)]) for name in plain]
    sets += [(prefix, _ranges(prefix, width, sorted(numbers)))
             for (prefix, width), numbers in numbered.items()]  # fmt: skip
    return _cut([part for _, ps in sorted(sets) for part in ps], limit)


def _ranges(prefix: str, width: int, numbers: list[int]) -> list[tuple[str, int]]:
    """(text, how many nodes it names) per run of consecutive numbers; one bracket per prefix."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    if len(numbers) == 1:
        return [(f"{prefix}{numbers[0]:0{width}d}", 1)]
    texts = [f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs]
    sizes = [b - a + 1 for a, b in runs]
    # the bracket opens on the first run and closes on the last, so a cut list still reads
    texts[0] = f"{prefix}[{texts[0]}"
    texts[-1] = f"{texts[-1]}]"
    return list(zip(texts, sizes, strict=True))


def _cut(parts: list[tuple[str, int]], limit: int | None) -> str:
    if limit is None or len(parts) <= limit:
        return ",".join(text for text, _ in parts)
    shown = ",".join(text for text, _ in parts[:limit])
    if "[" in shown.rsplit(",", 1)[-1] or shown.count("[") > shown.count("]"):
        shown += "...]"
    return f"{shown} {more(sum(n for _, n in parts[limit:]), 'nodes')}"


def more(count: int, what: str = "") -> str:
    """ "and 1,012 more", "and 1,012 more nodes", "and 1 more node"."""
    noun = what[:-1] if count == 1 and what.endswith("s") else what
    return f"and {count:,} more" + (f" {noun}" if noun else "")


def head(items: Sequence[Any], shown: int = SHOWN) -> tuple[list[Any], int]:
    """The first `shown` items and how many were left out."""
    return list(items[:shown]), max(0, len(items) - shown)


@dataclass(frozen=True, kw_only=True)
class EnvGroup:
    """Nodes whose environment is identical: the fields where groups differ, and the nodes."""

    nodes: tuple[str, ...]
    values: dict[str, str]  # only the fields that differ between groups

    @property
    def hosts(self) -> str:
        return compress(self.nodes)

    @property
    def hosts_shown(self) -> str:
        """The host list cut to SHOWN ranges, for a listing."""
        return compress(self.nodes, limit=SHOWN)

    def text(self, blank: str = "(none)") -> str:
        return env_text(self.values, blank)


@dataclass(frozen=True, kw_only=True)
class EnvSummary:
    """A fleet's environment: what every node shares, said once, then its groups."""

    nodes: int
    common: dict[str, str]  # field -> the one value of every node (fields no node has: absent)
    groups: tuple[EnvGroup, ...]  # largest first; one group when every node agrees

    @property
    def differs(self) -> tuple[str, ...]:
        return tuple(self.groups[0].values) if self.groups else ()

    @property
    def shown(self) -> tuple[EnvGroup, ...]:
        """The groups a listing shows (the largest SHOWN); none when every node agrees."""
        return self.groups[:SHOWN] if len(self.groups) > 1 else ()

    @property
    def left(self) -> tuple[int, int]:
        """(groups, nodes) a listing leaves out."""
        rest = self.groups[SHOWN:]
        return len(rest), sum(len(g.nodes) for g in rest)

    @property
    def hosts_shown(self) -> str:
        """Every node's name, compressed and cut to SHOWN ranges."""
        return compress((n for g in self.groups for n in g.nodes), limit=SHOWN)

    @property
    def title(self) -> str:
        return f"{self.nodes:,} node" + ("" if self.nodes == 1 else "s")

    def text(self) -> str:
        """ "GPUs 8, GPU AMD Instinct MI300X, driver 6.12.12, ...": what every node shares."""
        return env_text(self.common) or "(nothing recorded)"

    def to_dict(self) -> EnvSummaryJSON:
        return EnvSummaryJSON(
            nodes=self.nodes,
            common=self.common,
            groups=[EnvGroupJSON(nodes=list(g.nodes), hosts=g.hosts, values=g.values)
                    for g in self.groups],
        )  # fmt: skip


class EnvGroupJSON(TypedDict):
    nodes: list[str]
    hosts: str  # compressed
    values: dict[str, str]


class EnvSummaryJSON(TypedDict):
    nodes: int
    common: dict[str, str]
    groups: list[EnvGroupJSON]


def group_env(nodes: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> EnvSummary:
    """Group node records (each with "node") by their values of `fields`; a field whose value
    is the same on every node goes to `common`, the others stay in each group's `values`."""
    text = [{f: _text(n.get(f)) for f in fields} for n in nodes]
    varying = [f for f in fields if len({t[f] for t in text}) > 1]
    common = {f: text[0][f] for f in fields if f not in varying and text and text[0][f]}
    members: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for n, t in zip(nodes, text, strict=True):
        members[tuple(t[f] for f in varying)].append(str(n.get("node")))
    groups = sorted(
        (EnvGroup(nodes=tuple(sorted(names, key=natural)),
                  values=dict(zip(varying, key, strict=True)))
         for key, names in members.items()),
        key=lambda g: (-len(g.nodes), natural(g.nodes[0])),
    )  # fmt: skip
    return EnvSummary(nodes=len(nodes), common=common, groups=tuple(groups))


def env_text(values: Mapping[str, str], blank: str = "") -> str:
    return ", ".join(f"{ENV_LABELS.get(k, k)} {v or blank}".strip() for k, v in values.items())


def natural(name: str) -> tuple[Any, ...]:
    """Sort key: node-2 before node-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _text(value: object) -> str:
    return "" if value is None else str(value)
