"""Where each node sits in the fabric: its rack, leaf switch and NVLink/XGMI domain.

Real fabrics fail per switch, trunk or domain, not only per node or cable. A sweep that
knows the groups crosses every pair of them and can name a slow trunk (jobs across two
groups slow, jobs inside each fast) instead of draining the nodes at its ends. A fleet
without labels has an empty topology and is swept as before.

Sources, all read into the same map (node -> level -> group): Ray node labels
(`fleetval/rack`, `fleetval/switch`, `fleetval/domain` beside `fleetval/node`), or a map
file a suite names (`{node: {rack: r1, switch: leaf-3}}`). The Slurm launch script labels
its nodes from `scontrol show topology` (`Topology.from_scontrol`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

# Coarsest first: a trunk is named at the first level whose groups explain the slow jobs.
LEVELS = ("rack", "switch", "domain")
LABEL_PREFIX = "fleetval/"


class TopologyError(ValueError):
    """A map that names an unknown level or gives a node an empty group."""


@dataclass(frozen=True)
class Topology:
    """node -> {level: group}; nodes or levels missing from it are simply not grouped."""

    groups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def group(self, node: str, level: str) -> str | None:
        return self.groups.get(node, {}).get(level)

    @cached_property
    def levels(self) -> list[str]:
        """The levels some node is labelled with, coarsest first."""
        used = {lv for g in self.groups.values() for lv in g}
        return [lv for lv in LEVELS if lv in used]

    def split(self, a: str, b: str) -> tuple[str, str, str] | None:
        """(level, group of a, group of b) at the coarsest level where the two differ."""
        for level in self.levels:
            ga, gb = self.group(a, level), self.group(b, level)
            if ga is not None and gb is not None and ga != gb:
                return level, ga, gb
        return None

    def same(self, a: str, b: str) -> bool:
        """Both in the same group at every level that labels both (a job inside)."""
        return all(
            self.group(a, lv) == self.group(b, lv)
            for lv in self.levels
            if self.group(a, lv) is not None and self.group(b, lv) is not None
        )

    def members(self, level: str, nodes: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in nodes:
            g = self.group(n, level)
            if g is not None:
                out.setdefault(g, []).append(n)
        return out

    def to_dict(self) -> dict[str, dict[str, str]]:
        return {n: dict(g) for n, g in sorted(self.groups.items())}

    @classmethod
    def from_map(cls, doc: Mapping[str, Mapping[str, object]], where: str = "topology") -> Topology:
        """A map file's content: {node: {level: group}}; bad input names its field path."""
        out: dict[str, dict[str, str]] = {}
        for node, levels in doc.items():
            if not isinstance(levels, Mapping):
                raise TopologyError(f"{where}.{node}: a mapping of level -> group")
            for level, group in levels.items():
                if level not in LEVELS:
                    raise TopologyError(
                        f"{where}.{node}.{level}: not a level ({', '.join(LEVELS)})"
                    )
                if not isinstance(group, str | int) or not str(group):
                    raise TopologyError(f"{where}.{node}.{level}: a non-empty group name")
                out.setdefault(str(node), {})[str(level)] = str(group)
        return cls(out)

    @classmethod
    def from_labels(cls, labels: Mapping[str, Mapping[str, str]]) -> Topology:
        """Ray node labels per node: `fleetval/rack` etc.; unlabelled nodes are ungrouped."""
        out = {
            node: {lv: v for lv in LEVELS if (v := ls.get(LABEL_PREFIX + lv))}
            for node, ls in labels.items()
        }
        return cls({n: g for n, g in out.items() if g})

    @classmethod
    def from_scontrol(cls, text: str) -> Topology:
        """`scontrol show topology` output. topology/tree: a node's `switch` is the Level=0
        switch whose Nodes= hold it, its `rack` the Level=1 switch above (where there are
        two or more: one groups nothing); topology/block: its `domain` is its block (an
        NVLink domain, e.g. one GB200 NVL72 rack). Bad input names its line and field.

        NOTE: a Level=1 switch's Nodes= are every node below it, so a node's Level=1 line
        is its rack without following Switches=. `AggregatedBlock` lines group blocks
        already named, and are skipped.
        """
        tree: dict[int, dict[str, str]] = {}  # level -> node -> switch
        blocks: dict[str, str] = {}
        for i, line in enumerate(text.splitlines(), 1):
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            where = f"scontrol line {i}"
            if "SwitchName" in fields:
                level = fields.get("Level", "")
                if not level.isdigit():
                    raise TopologyError(f"{where}: Level={level!r}: not a switch level")
                for n in expand_hostlist(fields.get("Nodes", ""), f"{where}: Nodes"):
                    tree.setdefault(int(level), {}).setdefault(n, fields["SwitchName"])
            elif "BlockName" in fields:
                for n in expand_hostlist(fields.get("Nodes", ""), f"{where}: Nodes"):
                    blocks.setdefault(n, fields["BlockName"])
        out: dict[str, dict[str, str]] = {}
        racks = tree.get(1, {})
        for lv, by_node in (("switch", tree.get(0, {})), ("rack", racks), ("domain", blocks)):
            if lv != "rack" or len(set(racks.values())) >= 2:
                for n, g in by_node.items():
                    out.setdefault(n, {})[lv] = g
        return cls(out)

    def label_lines(self) -> str:
        """One `<node> fleetval/<level>=<group>,...` line per node (what the Slurm launch
        script passes to `ray start --labels`)."""
        return "".join(
            f"{n} " + ",".join(f"{LABEL_PREFIX}{lv}={g[lv]}" for lv in LEVELS if lv in g) + "\n"
            for n, g in sorted(self.groups.items())
        )

    def merged(self, other: Topology) -> Topology:
        """This map with `other`'s entries over it (a suite's map file over node labels)."""
        out = {n: dict(g) for n, g in self.groups.items()}
        for n, g in other.groups.items():
            out.setdefault(n, {}).update(g)
        return Topology(out)


NO_TOPOLOGY = Topology()

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def expand_hostlist(text: str, where: str = "hostlist") -> list[str]:
    """Slurm's hostlist form: `dev[0-5]`, `node[0001-0008,0013]`, `a,b`, `x[1-2]y[3-4]`
    (zero padding kept from the range's start)."""
    out: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        m = _BRACKET.search(item)
        if m is None:
            out.append(item)
            continue
        for value in _ranges(m.group(1), f"{where} {text!r}"):
            out += expand_hostlist(item[: m.start()] + value + item[m.end() :], where)
    return out


def _ranges(spec: str, where: str) -> list[str]:
    values: list[str] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or not (hi or lo).isdigit() or int(hi or lo) < int(lo):
            raise TopologyError(f"{where}: [{spec}] is not a list of ranges")
        values += [str(v).zfill(len(lo)) for v in range(int(lo), int(hi or lo) + 1)]
    return values
