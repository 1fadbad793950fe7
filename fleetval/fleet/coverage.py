"""Which links tonight's sweep measures: the least recently measured, from sweep history.

A perfect matching measures n/2 of the n(n-1)/2 links. The round-robin ("circle") schedule
splits all links of n nodes into n-1 perfect matchings (one more node, a bye, when n is
odd), each link in exactly one. Each sweep takes the matching whose links were measured
least (never-measured links first, then the one whose stalest link is oldest), so
back-to-back or nightly sweeps cover every link within n-1 sweeps, whatever the seed.

NOTE: nodes are ordered by a hash of their name, not by name: names follow racks, and the
circle schedule over rack-ordered nodes would keep most pairs inside a few racks. A hash
order spreads each matching over many pairs of racks and stays the same as nodes come and go.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetval.fleet.effects import Obs, pair
from fleetval.fleet.topology import NO_TOPOLOGY, Topology

Pair = tuple[str, str]


@dataclass(frozen=True)
class LinkSeen:
    """A link in the stored sweeps: the newest sweep that measured it, and what it said."""

    when: int  # the sweep's place in the history (0: oldest)
    run_id: str
    verdict: str  # fast, slow, unclear, failed
    gbps: float | None


def _order(nodes: Sequence[str]) -> list[str]:
    return sorted(nodes, key=lambda n: (hashlib.blake2b(n.encode(), digest_size=8).digest(), n))


def circle(nodes: Sequence[str]) -> tuple[list[str], int]:
    """The schedule's node order (a bye appended when odd, as "") and its matchings' count."""
    order = _order(nodes)
    if len(order) % 2:
        order.append("")
    return order, max(1, len(order) - 1)


def matching_of(i: int, j: int, m: int) -> int:
    """Which of the m matchings holds the link between positions i < j (j == m: the fixed one).

    Matching r pairs (r, m) and (r+k, r-k) mod m for k = 1..m//2: their positions sum to 2r.
    """
    if j == m:
        return i
    return (i + j) * ((m + 1) // 2) % m


def matching(order: list[str], r: int) -> list[Pair]:
    m = len(order) - 1
    out = [(order[r], order[m])]
    out += [(order[(r + k) % m], order[(r - k) % m]) for k in range(1, m // 2 + 1)]
    return [pair(x, y) for x, y in out if x and y]


def least_measured(
    nodes: Sequence[str], seen: Mapping[Pair, LinkSeen], seed: int = 0
) -> list[Pair]:
    """The matching whose links were measured least: most never-measured links, then the
    stalest link (the oldest of its links' newest measurements); ties go to the lowest index
    after rotating by `seed`.

    NOTE: keyed by its stalest link, not its freshest: crossings and controls measure a link
    or two of other matchings every sweep, and a matching keyed by its freshest link was put
    off while its other links aged (after 10 clean sweeps of 8 nodes, 9 to 10+ more sweeps
    measured every link). Keyed by its stalest, a matching fully measured at sweep t stays
    ahead of every matching measured later, so each comes up within n-1 sweeps."""
    order, m = circle(nodes)
    if len(order) < 2:
        return []
    where = {n: i for i, n in enumerate(order)}
    measured = [0] * m
    stalest = [sys.maxsize] * m
    for (a, b), s in seen.items():
        if a in where and b in where:
            i, j = sorted((where[a], where[b]))
            r = matching_of(i, j, m)
            measured[r] += 1
            stalest[r] = min(stalest[r], s.when)
    best = min(range(m), key=lambda r: (measured[r], stalest[r], (r - seed) % m))
    return matching(order, best)


def covered(nodes: Sequence[str], seen: Mapping[Pair, LinkSeen]) -> tuple[int, int]:
    """(links of these nodes measured in the history, links in all)."""
    names = set(nodes)
    n = len(names)
    return sum(a in names and b in names for a, b in seen), n * (n - 1) // 2


@dataclass(frozen=True)
class Fabric:
    """What a sweep knows of the fabric before it starts: the topology, and the links past
    sweeps measured (`fleetval.fleet.history.link_history`)."""

    topology: Topology = NO_TOPOLOGY
    seen: Mapping[Pair, LinkSeen] = field(default_factory=dict)
    past: tuple[Obs, ...] = ()  # the jobs of the fleet's recent sweeps, for the model


NO_FABRIC = Fabric()
