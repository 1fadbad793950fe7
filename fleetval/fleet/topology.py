"""Where each node sits in the fabric: its rack, leaf switch and NVLink/XGMI domain.

Real fabrics fail per switch, trunk or domain, not only per node or cable. A sweep that
knows the groups crosses every pair of them and can name a slow trunk (jobs across two
groups slow, jobs inside each fast) instead of draining the nodes at its ends. A fleet
without labels has an empty topology and is swept as before.

Sources, all read into the same map (node -> level -> group): Ray node labels
(`fleetval/rack`, `fleetval/switch`, `fleetval/domain` beside `fleetval/node`), or a map
file a suite names (`{node: {rack: r1, switch: leaf-3}}`).
"""

from __future__ import annotations

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

    def merged(self, other: Topology) -> Topology:
        """This map with `other`'s entries over it (a suite's map file over node labels)."""
        out = {n: dict(g) for n, g in self.groups.items()}
        for n, g in other.groups.items():
            out.setdefault(n, {}).update(g)
        return Topology(out)


NO_TOPOLOGY = Topology()
