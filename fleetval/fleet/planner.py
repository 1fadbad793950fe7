"""What a sweep measures next: every node alone, a perfect matching of pairs, re-pairs.

Round 1 runs every node alone. Every later round is planned from what the jobs so far say
(`judge.assess`), and every node is in at most one job per round, so all jobs of a round
run side by side:
- nodes slow alone once are measured alone again (one disturbed job drains nobody);
- links seen slow once between two good nodes are measured again;
- until some node is proven good, the nodes waiting for a pair get a perfect matching;
  after that, each is re-paired with a different proven-good node it has not been with,
  and the proven-good nodes left idle pair up as controls, so every round is judged
  against jobs measured at the same time.
Rounds stay flat as the fleet grows: the matching covers every node at once.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from fleetval.fleet.judge import Assessment, Planned
from fleetval.fleet.settings import SweepSettings
from fleetval.vocab import SweepPhase


def first_round(nodes: Sequence[str]) -> list[Planned]:
    return [Planned(1, SweepPhase.ALONE, (n,), "alone") for n in nodes]


def next_round(
    nodes: Sequence[str], a: Assessment, rnd: int, settings: SweepSettings
) -> list[Planned]:
    """The jobs of round `rnd` (empty: nothing left to measure)."""
    rng = random.Random(settings.seed * 1_000_003 + rnd)
    jobs = [Planned(rnd, SweepPhase.ALONE, (n,), "alone again") for n in sorted(a.pending_alone)]
    busy = set(a.pending_alone)
    for x, y in sorted(a.pending_links):
        if x not in busy and y not in busy:
            jobs.append(Planned(rnd, SweepPhase.PAIR, (x, y), "confirm link"))
            busy |= {x, y}
    waiting = [n for n in nodes if n in a.pending_pair and n not in busy]
    if not a.good:  # nobody proven yet: everyone waiting is matched with everyone else
        return jobs + _first_matching(nodes, waiting, a, rng, rnd, settings)
    refs = sorted(a.good - busy)
    rng.shuffle(refs)
    fresh = []
    for n in waiting:
        partner = next((g for g in refs if g not in a.paired.get(n, ())), None)
        if partner is None:
            fresh += [] if n in a.paired else [n]  # never paired: may still pair with its like
            continue
        refs.remove(partner)
        jobs.append(
            Planned(rnd, SweepPhase.PAIR, _pair(n, partner), f"re-pair with proven-good {partner}")
        )
    jobs += matching(fresh, a.paired, rng, rnd)
    return jobs + _controls(refs, jobs, rnd) if jobs else []


def _controls(idle: list[str], jobs: list[Planned], rnd: int) -> list[Planned]:
    """Proven-good nodes with nothing to do pair up as controls: the round's own level."""
    busy = {n for j in jobs for n in j.nodes}
    free = [g for g in idle if g not in busy]
    return [
        Planned(rnd, SweepPhase.PAIR, _pair(x, y), "control")
        for x, y in zip(free[::2], free[1::2], strict=False)
    ]


def _first_matching(
    nodes: Sequence[str],
    waiting: list[str],
    a: Assessment,
    rng: random.Random,
    rnd: int,
    settings: SweepSettings,
) -> list[Planned]:
    """The matching of the whole fleet (`first_pairs`), kept wherever both nodes wait, so a
    node measured alone again does not reshuffle everyone else's partner; the rest among
    themselves."""
    free = set(waiting)
    kept = [
        (x, y)
        for x, y in first_pairs(nodes, settings)
        if x in free and y in free and y not in a.paired.get(x, ())
    ]
    rest = [n for n in waiting if not any(n in p for p in kept)]
    jobs = [Planned(rnd, SweepPhase.PAIR, p, "pair") for p in kept]
    return jobs + matching(rest, a.paired, rng, rnd)


def matching(
    nodes: Sequence[str], paired: Mapping[str, set[str]], rng: random.Random, rnd: int
) -> list[Planned]:
    """A perfect matching (one node left over when odd), avoiding pairs already measured."""
    order = list(nodes)
    rng.shuffle(order)
    jobs, used = [], set()
    for i, x in enumerate(order):
        if x in used:
            continue
        y = next((y for y in order[i + 1 :] if y not in used and y not in paired.get(x, ())), None)
        if y is not None:
            used |= {x, y}
            jobs.append(Planned(rnd, SweepPhase.PAIR, _pair(x, y), "pair"))
    return jobs


def _pair(x: str, y: str) -> tuple[str, str]:
    return (x, y) if x < y else (y, x)


def first_pairs(nodes: Sequence[str], settings: SweepSettings) -> list[tuple[str, str]]:
    """The links round 2 measures when every node passes alone: what tonight's sweep covers
    (a link no job crosses cannot be judged; a different `seed` covers others)."""
    rng = random.Random(settings.seed * 1_000_003 + 2)
    return [j.nodes for j in matching(list(nodes), {}, rng, 2)]  # type: ignore[misc]
