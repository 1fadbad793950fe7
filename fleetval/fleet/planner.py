"""What a sweep measures next: every node alone, a perfect matching of pairs, re-pairs.

Round 1 runs every node alone. Every later round asks the fabric model (`judge.assess`,
`fleetval.fleet.model`) which hypotheses are still open, and every node is in at most one
job per round, so all jobs of a round run side by side:
- nodes whose own effect is estimated slow but not proven are measured alone again (one
  disturbed job drains nobody), beside nodes alone as controls (two; more where the fleet
  can spare them, one per group in turn): each round's load is fitted from the jobs
  measured in it, so it needs jobs that measure no suspect;
- links of two good nodes estimated slow are measured again; where the link crosses two
  topology groups, with another crossing of the same groups and a job inside each, at the
  same time: the model tells a slow link from a slow trunk in that one round; a trunk
  estimated slow is crossed again the same way;
- until some node is proven good, the nodes waiting for a pair get a perfect matching: the
  one whose links past sweeps measured least (`coverage.least_measured`), with jobs
  inside any group that more than half of it would cross out of (`with_controls`), its
  crossings spread over as many pairs of groups as partners can be swapped into
  (`spread_crossings`); after that, each is re-paired with a different proven-good node it
  has not been with, inside its own group first (a job inside crosses no trunk), waiting
  nodes of a group with no proven-good node free with each other, never across a trunk
  estimated slow; two proven-good nodes kept back as the round's control where no other
  job would be one;
- the links of that matching a control or a spread took out of round 2 are measured once
  both ends are proven good (in the rounds crossing takes: crossings take their ends
  last), so a sweep measures all of its matching;
- the proven-good nodes left idle cross the pairs of groups no job of this sweep crossed
  yet (twice in one round where nodes are left), then pair up as controls (inside
  groups first), so every round's load is fitted from jobs measured at the same time and
  every pair of racks (switches, domains) is crossed in every sweep.
Rounds stay flat as the fleet grows: the matching covers every node at once.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence

from fleetval.fleet.coverage import NO_FABRIC, Fabric, Pair, least_measured
from fleetval.fleet.effects import pair
from fleetval.fleet.judge import Assessment, Planned, remeasures
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.topology import Topology
from fleetval.vocab import SweepPhase

CONTROL_JOBS = 8  # controls a round takes where it can spare them (twice this at most)
Crossed = tuple[int, str, str]  # (level's index, group, group): a pair of groups crossed


def first_round(nodes: Sequence[str]) -> list[Planned]:
    return [Planned(1, SweepPhase.ALONE, (n,), "alone") for n in nodes]


def next_round(
    nodes: Sequence[str],
    a: Assessment,
    rnd: int,
    settings: SweepSettings,
    fabric: Fabric = NO_FABRIC,
) -> list[Planned]:
    """The jobs of round `rnd` (empty: nothing left to measure)."""
    # NOTE: the links stored sweeps measured move the draw (which idle node crosses or
    # controls, which waiting node meets which): back-to-back sweeps of one fleet measure
    # other links each time, not the same ones; a fleet with no history plans as before.
    rng = random.Random(settings.seed * 1_000_003 + rnd + 1_000_033 * len(fabric.seen))
    topo = fabric.topology
    jobs = [Planned(rnd, SweepPhase.ALONE, (n,), "alone again") for n in sorted(a.pending_alone)]
    busy = set(a.pending_alone)
    # NOTE: links tonight's jobs estimate slow before links slow only in past sweeps: a node
    # whose past links are rechecked one a round kept its slow link of tonight waiting (a
    # slow link measured slow in round 2 was measured again in round 7, after three of its
    # end's past links)
    for x, y in sorted(a.pending_links) + sorted(a.recheck_links - a.pending_links.keys()):
        if x in busy or y in busy:
            continue
        if len(a.links.get((x, y), ())) >= 2:
            jobs += _ends_apart(x, y, a, busy, rnd, topo)
            continue
        jobs.append(Planned(rnd, SweepPhase.PAIR, (x, y), "confirm link"))
        busy |= {x, y}
        if split := topo.split(x, y):
            jobs += _trunk_check(*split, a, busy, rnd, topo)
    for t in a.trunks.values():
        if not t.confirmed:  # estimated slow, not proven: crossed again beside jobs inside
            jobs += _trunk_check(t.level, t.a, t.b, a, busy, rnd, topo)
    for level, ga, gb in sorted(a.open_trunks):  # its crossings bound it too loosely
        jobs += _trunk_check(level, ga, gb, a, busy, rnd, topo)
    waiting = [n for n in nodes if n in a.pending_pair and n not in busy]
    controls = _alone_controls(waiting, a, busy, rnd, topo)
    jobs += controls
    taken = {j.nodes[0] for j in controls}
    busy |= taken
    waiting = [n for n in waiting if n not in taken]
    if not a.good:  # nobody proven yet: everyone waiting is matched with everyone else
        return jobs + _first_matching(nodes, waiting, a, rng, rnd, settings, fabric)
    refs = sorted(a.good - busy)
    rng.shuffle(refs)
    if waiting and not any(j.phase == SweepPhase.PAIR and not remeasures(j) for j in jobs):
        jobs += _one_control(refs, waiting, a, rnd, topo)
    jobs += _repairs(waiting, refs, a, rnd, topo)
    fresh = [n for n in waiting if n not in a.paired and not any(n in j.nodes for j in jobs)]
    jobs += matching(fresh, a.paired, rng, rnd)
    later = _later(nodes, a, settings, fabric)
    refs.sort(key=lambda n: not any(n in p for p in later))  # crossings take these last
    crossing = _crossings(refs, jobs, a, topo, rnd, fabric.seen, later)
    crossing += _deferred(later, refs, rnd)
    crossing += _odd_again(a, jobs + crossing, rnd)
    if not jobs and not crossing:
        return []
    most = max(2 * CONTROL_JOBS, len(jobs) + len(crossing))
    controls = _controls(refs, jobs + crossing, a, rnd, topo, most, fabric.seen)
    return jobs + crossing + controls


def _ends_apart(
    x: str, y: str, a: Assessment, busy: set[str], rnd: int, topo: Topology
) -> list[Planned]:
    """Each end of a link measured slow twice or more, with a proven-good node it has not
    been with (inside its own group first): what tells a slow link from slow networks at its
    ends. Measuring the link again would not: six slow jobs of one link whose ends had one
    other pair each stayed at z 3.0, the two networks as likely as the link (`busy` is
    updated)."""
    jobs = []
    for n in (x, y):
        fresh = [g for g in sorted(a.good - busy - {x, y}) if g not in a.paired.get(n, ())]
        partner = next((g for g in fresh if topo.same(n, g)), next(iter(fresh), None))
        if partner is not None:
            why = f"re-pair apart from link {x} <-> {y}"
            jobs.append(Planned(rnd, SweepPhase.PAIR, pair(n, partner), why))
            busy |= {n, partner}
    return jobs


def _odd_again(a: Assessment, planned: list[Planned], rnd: int) -> list[Planned]:
    """A pair of good nodes whose job the fit left unexplained, measured again where both
    are free once everything else is planned (a disturbed job must not move crossings)."""
    busy = {n for j in planned for n in j.nodes}
    out = []
    for x, y in sorted(a.odd_links):
        if x not in busy and y not in busy:
            out.append(Planned(rnd, SweepPhase.PAIR, (x, y), "measure again"))
            busy |= {x, y}
    return out


def _alone_controls(
    waiting: list[str], a: Assessment, busy: set[str], rnd: int, topo: Topology
) -> list[Planned]:
    """Nodes measured alone beside the nodes measured alone again: the level those are
    judged against, measured at the same time (a round with none judges them not at all).
    Twice as many as measure the noise where the fleet can spare them, else two (the faster
    of two is the level, judged with the sweep's noise: one control slow by chance does not
    move it); these waiting nodes are paired a round later. Twice: the noise of a round
    is read off the faster half of its controls, and four of 15% noise read as low as 1%
    (a round of 8 drained 9 healthy nodes measured alone again in one sweep of the noisy
    fabric bench).

    NOTE: one from each group in turn (`_spread`), not the first in name order: eight from
    one rack of 16 took half of it out of round 2 and into re-pairs in round 3, and that
    rack then crossed too few others to cross them all within 6 rounds.
    """
    if not a.pending_alone:
        return []
    most = 2 * CONTROL_JOBS if len(waiting) >= 16 * CONTROL_JOBS else 2
    # NOTE: those measured alone least first, waiting nodes before good ones, and good ones
    # only those the waiting's re-pairs and a control pair leave: the same two waiting nodes
    # taken every round were never re-paired (unjudged at the sweep's end; also where five
    # good nodes were too few to lend one, a node slow in one pair left unjudged)
    spare = sorted(a.good - busy)
    spare = spare[: max(0, len(spare) - len(waiting) - 2)]
    alone = {n: len(a.deficits.get(n, {}).get(SweepPhase.ALONE, [])) for n in waiting + spare}
    pool = _spread(waiting, topo) + _spread(spare, topo)
    chosen = sorted(pool, key=alone.__getitem__)[:most]
    return [Planned(rnd, SweepPhase.ALONE, (n,), "alone control") for n in chosen]


def _spread(nodes: list[str], topo: Topology) -> list[str]:
    """`nodes` taking one from each group in turn (unchanged where no group is labelled)."""
    seen: Counter[tuple[str | None, ...]] = Counter()
    rank = {}
    for n in nodes:
        where = tuple(topo.group(n, level) for level in topo.levels)
        rank[n] = seen[where]
        seen[where] += 1
    return sorted(nodes, key=lambda n: rank[n])


def _one_control(
    refs: list[str], waiting: list[str], a: Assessment, rnd: int, topo: Topology
) -> list[Planned]:
    """Two proven-good nodes kept back from re-pairing as the round's control, where no job
    of the round would be one (a round's load is fitted from the jobs in it; re-pairs alone
    could not tell a slower round from slow nodes). From the groups with the
    most good nodes to spare over the nodes waiting there (a node is re-paired inside its
    own group first: across a slow trunk it would look slow), on a link measured fast
    before where there is one, so the control is not itself a fault (`refs` keeps the
    nodes left)."""
    if len(refs) < 3:  # none left to re-pair with: the round has no control, and says so
        return []

    def where(n: str) -> tuple[str | None, ...]:
        return tuple(topo.group(n, level) for level in topo.levels)

    spare = Counter(where(n) for n in refs)
    spare.subtract(where(n) for n in waiting)
    x = max(refs, key=lambda n: spare[where(n)])
    spare[where(x)] -= 1
    fast = {n for p, js in a.links.items() if x in p and any(j.fast for j in js) for n in p}
    slow = _slow_links(a)
    y = max(
        (n for n in refs if n != x),
        key=lambda n: (pair(x, n) not in slow, where(n) == where(x), spare[where(n)], n in fast),
    )
    refs[:] = [n for n in refs if n not in (x, y)]
    return [Planned(rnd, SweepPhase.PAIR, pair(x, y), "control")]


def _repairs(
    waiting: list[str], refs: list[str], a: Assessment, rnd: int, topo: Topology
) -> list[Planned]:
    """Each waiting node with a proven-good node it has not been with: every node that has
    one inside its own group(s) first (a re-pair across a slow trunk would look slow), then
    waiting nodes of one group with each other, then the others across any trunk not
    estimated slow (`refs` keeps the nodes left).

    NOTE: a rack whose other nodes all wait (its one good node drained) behind a slow trunk
    has no proven-good node inside and only slow crossings: its nodes are proven good only
    by a job inside it, with each other."""
    jobs, left = [], list(waiting)
    slow = {frozenset((t.a, t.b)) for t in a.trunks.values()}

    def across_slow(x: str, y: str) -> bool:
        split = topo.split(x, y)
        return split is not None and frozenset(split[1:]) in slow

    for inside in (True, False):
        for n in list(left):
            fresh = [g for g in refs if g not in a.paired.get(n, ())]
            fit = (g for g in fresh if (topo.same(n, g) if inside else not across_slow(n, g)))
            partner = next(fit, None)
            if partner is not None:
                left.remove(n)
                refs.remove(partner)
                why = f"re-pair with proven-good {partner}"
                jobs.append(Planned(rnd, SweepPhase.PAIR, pair(n, partner), why))
        if inside and topo.levels:
            for x in list(left):
                y = next((y for y in left if y != x and topo.same(x, y)
                          and y not in a.paired.get(x, ())), None)  # fmt: skip
                if x in left and y is not None:
                    left.remove(x)
                    left.remove(y)
                    jobs.append(
                        Planned(rnd, SweepPhase.PAIR, pair(x, y), "re-pair inside its group")
                    )
    return jobs


def _trunk_check(
    level: str,
    ga: str,
    gb: str,
    a: Assessment,
    busy: set[str],
    rnd: int,
    topo: Topology,
    *,
    cross: bool = True,
) -> list[Planned]:
    """Beside a slow crossing of groups ga and gb: another crossing by other proven-good
    nodes, and a job inside each group, all at the same time (`busy` is updated)."""
    free = topo.members(level, sorted(a.good - busy))
    mine, theirs = free.get(ga, []), free.get(gb, [])
    jobs = []
    if cross:
        x = next((x for x in mine for y in theirs if y not in a.paired.get(x, ())), None)
        y = next((y for y in theirs if x and y not in a.paired.get(x, ())), None)
        if x and y:
            jobs.append(Planned(rnd, SweepPhase.PAIR, pair(x, y), f"cross {level} {ga}-{gb}"))
            mine.remove(x)
            theirs.remove(y)
    for group, left in ((ga, mine), (gb, theirs)):
        if len(left) >= 2:
            jobs.append(Planned(rnd, SweepPhase.PAIR, pair(*left[:2]), f"inside {level} {group}"))
    busy |= {n for j in jobs for n in j.nodes}
    return jobs


def _later(
    nodes: Sequence[str], a: Assessment, settings: SweepSettings, fabric: Fabric
) -> list[Pair]:
    """The links of tonight's matching that no job has measured yet: those round 2 left
    out (`with_controls` and `spread_crossings` swapped them away), and those of round 2's
    own that a node measured alone again broke (a slow link of it was otherwise not
    measured that sweep: 2 of 30 at 30% noise)."""
    taken = set(least_measured(nodes, fabric.seen, settings.seed))
    taken |= set(first_pairs(nodes, settings, fabric))
    return sorted(p for p in taken if p not in a.links)


def _deferred(later: list[Pair], idle: list[str], rnd: int) -> list[Planned]:
    """The links of `later` where both ends are proven good and idle (`idle` keeps the
    nodes left): each sweep measures its whole matching, so sweeps still cover every link
    within N-1.

    NOTE: their ends are the last the round's crossings take (`next_round`): taken at
    random, only ~1 in 5 of these links had both ends free in the round crossing ended,
    and the sweep ran a round more for them (1,024 nodes in 64 racks, seed 14).
    """
    free = set(idle)
    jobs = []
    for x, y in later:
        if x in free and y in free:
            jobs.append(Planned(rnd, SweepPhase.PAIR, (x, y), "pair (tonight's matching)"))
            free -= {x, y}
    idle[:] = [n for n in idle if n in free]
    return jobs


def _crossings(
    idle: list[str],
    jobs: list[Planned],
    a: Assessment,
    topo: Topology,
    rnd: int,
    seen: Collection[Pair] = (),
    later: Collection[Pair] = (),
) -> list[Planned]:
    """Idle proven-good nodes across the pairs of groups no job of this sweep crossed yet,
    each level in turn (coarsest first); `idle` keeps the nodes left.

    NOTE: first every pair once (`_cross_once`, packed so the groups with the most pairs
    left go first: they set how many rounds crossing takes), then, from the nodes still
    idle, the pairs of this round again by other nodes (`_cross_again`): two slow
    crossings of two groups in one round name a trunk without waiting for the next, so a
    pair first crossed in the last rounds is named in that round. Second crossings leave
    the links of `later` whose ends are both free to `_deferred`: those would otherwise
    keep the sweep going a round or two after the crossing ends.
    """
    busy = {n for j in jobs for n in j.nodes}
    out: list[Planned] = []
    for level in topo.levels:
        pairs = [*a.links, *(j.nodes for j in jobs if len(j.nodes) == 2)]
        crossed = {_groups(topo, level, *p) for p in pairs}
        free = topo.members(level, [n for n in idle if n not in busy])
        groups = sorted(topo.members(level, topo.groups))
        todo = {g: set() for g in groups}
        for i, ga in enumerate(groups):
            for gb in groups[i + 1 :]:
                if (ga, gb) not in crossed:
                    todo[ga].add(gb)
                    todo[gb].add(ga)
        once = _cross_once(todo, free)
        inside = _inside(
            topo,
            level,
            [
                *(p for p, js in a.links.items() if any(j.fast for j in js)),
                *(j.nodes for j in jobs if len(j.nodes) == 2),
            ],
        )
        idle_now = {n for ns in free.values() for n in ns}
        held = {n for p in later if set(p) <= idle_now for n in p}
        unheld = {g: [n for n in ns if n not in held] for g, ns in free.items()}
        again = _cross_again(once, unheld, inside)
        for (ga, gb), spare in [*((p, False) for p in once), *((p, True) for p in again)]:
            xs, ys = ([n for n in free[g] if not spare or n not in held] for g in (ga, gb))
            x, y = _unseen(xs, ys, seen)
            free[ga].remove(x)
            free[gb].remove(y)
            out.append(Planned(rnd, SweepPhase.PAIR, pair(x, y), f"cross {level} {ga}-{gb}"))
            busy |= {x, y}
    idle[:] = [n for n in idle if n not in busy]
    return out


def _cross_once(todo: dict[str, set[str]], free: Mapping[str, list[str]]) -> list[Pair]:
    """Pairs of groups to cross once this round (`todo`: each group's pairs left, emptied
    of those chosen), at most one per free node of each group: the group with the most
    pairs left that still has a partner with a free node, with that partner of most pairs
    left. A group of n nodes crosses at most n others a round; taking the neediest first
    (their partners too) leaves the fewest pairs on any one group for the last rounds,
    where each is crossed twice (measured at 1,024 nodes in 64 racks, seed 11: the pairs
    left after round 5 fell from 239, with an order fixed before the round, to 148).
    """
    room = {g: len(ns) for g, ns in free.items()}
    alive = {g for g in todo if room.get(g) and todo[g]}
    out: list[Pair] = []
    while alive:
        ga = max(alive, key=lambda g: (len(todo[g]), -room[g], g))
        partners = [g for g in todo[ga] if room.get(g)]
        if not partners:
            alive.discard(ga)
            continue
        gb = max(partners, key=lambda g: (len(todo[g]), -room[g], g))
        out.append((min(ga, gb), max(ga, gb)))
        todo[ga].discard(gb)
        todo[gb].discard(ga)
        for g in (ga, gb):
            room[g] -= 1
            if not room[g] or not todo[g]:
                alive.discard(g)
    return out


def _cross_again(once: list[Pair], free: Mapping[str, list[str]], inside: set[str]) -> list[Pair]:
    """The pairs of `once` to cross a second time with the free nodes `once` leaves: those
    of the groups with the least room first, so the most pairs get their second crossing.
    Two nodes of a group with no job inside it (`inside`: fast before, or planned this
    round) are kept for one (`_controls`): a trunk is confirmed only by a fast job inside
    each of its groups, so two slow crossings without one wait a round anyway."""
    room = Counter({g: len(ns) - 2 * (g not in inside) for g, ns in free.items()})
    room.subtract(g for p in once for g in p)
    out: list[Pair] = []
    for ga, gb in sorted(once, key=lambda p: (min(room[p[0]], room[p[1]]), p)):
        if room[ga] > 0 and room[gb] > 0:
            out.append((ga, gb))
            room[ga] -= 1
            room[gb] -= 1
    return out


def _unseen(xs: list[str], ys: list[str], seen: Collection[Pair]) -> tuple[str, str]:
    """A node of `xs` and one of `ys` (taken out of them), on a link no stored sweep
    measured where there is one: back-to-back sweeps cover more links. The last of each
    where none is seen (and with no history)."""
    x, y = next(
        ((x, y) for x in reversed(xs) for y in reversed(ys) if pair(x, y) not in seen),
        (xs[-1], ys[-1]),
    )
    xs.remove(x)
    ys.remove(y)
    return x, y


def _pairs_unseen(nodes: list[str], seen: Collection[Pair]) -> list[tuple[str, str]]:
    """`nodes` in pairs, each with the next one left on a link no stored sweep measured,
    else the next one left (in order, with no history); one left over when odd."""
    left, out = list(nodes), []
    while len(left) >= 2:
        x = left.pop(0)
        y = next((y for y in left if pair(x, y) not in seen), left[0])
        left.remove(y)
        out.append((x, y))
    return out


def _groups(topo: Topology, level: str, x: str, y: str) -> tuple[str, str] | None:
    gx, gy = topo.group(x, level), topo.group(y, level)
    return None if gx is None or gy is None else (min(gx, gy), max(gx, gy))


def _inside(topo: Topology, level: str, pairs: list[Pair]) -> set[str]:
    """The groups (at `level`) with one of `pairs` inside."""
    return {g for x, y in pairs if (g := topo.group(x, level)) and g == topo.group(y, level)}


def _controls(
    idle: list[str],
    jobs: list[Planned],
    a: Assessment,
    rnd: int,
    topo: Topology,
    most: int,
    seen: Collection[Pair] = (),
) -> list[Planned]:
    """Proven-good nodes with nothing to do pair up as controls: the round's own level.
    Inside their own groups where they can, first one in each group crossed this round
    with no fast job inside yet: a fast job inside each group is what tells a slow trunk
    from slow nodes (and confirms one, in the round it is crossed twice); the nodes left
    over pair across.

    NOTE: at most `most` of them (as many as the round's other jobs, and enough to measure
    the noise): every control is another chance of a link slow by chance, to be measured
    again in one more round.
    """
    busy = {n for j in jobs for n in j.nodes}

    def where(n: str) -> tuple[str, ...]:
        return tuple(topo.group(n, lv) or "" for lv in topo.levels)

    fast = {
        where(x)
        for (x, y), js in a.links.items()
        if where(x) == where(y) and any(j.fast for j in js)
    }
    crossed = {where(n) for j in jobs if len({where(n) for n in j.nodes}) == 2 for n in j.nodes}
    by_group: dict[tuple[str, ...], list[str]] = {}
    for n in sorted((g for g in idle if g not in busy), key=where):
        by_group.setdefault(where(n), []).append(n)
    slow = _slow_links(a)  # NOTE: a control on a link known slow is no control
    inside = [
        (g not in crossed or g in fast, i > 0, p)
        for g, ns in by_group.items()
        for i, p in enumerate(_pairs_unseen(ns, seen))
        if pair(*p) not in slow
    ]
    inside.sort(key=lambda t: t[:2])
    paired = {n for *_, p in inside for n in p}
    odd = [n for ns in by_group.values() for n in ns if n not in paired]
    pairs = [*(p for *_, p in inside), *_pair_up(odd, slow)][:most]
    return [Planned(rnd, SweepPhase.PAIR, pair(x, y), "control") for x, y in pairs]


def _slow_links(a: Assessment) -> set[Pair]:
    """Links flagged or estimated slow so far."""
    return {*a.bad_links, *a.pending_links, *a.recheck_links, *a.odd_links}


def _pair_up(nodes: list[str], avoid: Collection[Pair]) -> list[Pair]:
    """`nodes` two by two in order, each with the next one not on a link in `avoid`."""
    left, out = list(nodes), []
    while len(left) >= 2:
        x = left.pop(0)
        y = next((y for y in left if pair(x, y) not in avoid), None)
        if y is not None:
            left.remove(y)
            out.append((x, y))
    return out


def _first_matching(
    nodes: Sequence[str],
    waiting: list[str],
    a: Assessment,
    rng: random.Random,
    rnd: int,
    settings: SweepSettings,
    fabric: Fabric,
) -> list[Planned]:
    """The matching of the whole fleet (`first_pairs`), kept wherever both nodes wait, so a
    node measured alone again does not reshuffle everyone else's partner; the rest among
    themselves."""
    free = set(waiting)
    kept = [
        (x, y)
        for x, y in first_pairs(nodes, settings, fabric)
        if x in free and y in free and y not in a.paired.get(x, ())
    ]
    rest = [n for n in waiting if not any(n in p for p in kept)]
    pairs = kept + [j.nodes for j in matching(rest, a.paired, rng, rnd)]
    # NOTE: nodes measured alone again leave holes in the matching: what is left of it may
    # cross in every pair (two racks of four, two nodes alone: both pairs crossed), and the
    # round then has no job inside a group to hold a slow trunk's crossings against (the
    # fit read them as a slow round, and later rounds inside the racks as fast ones)
    return [Planned(rnd, SweepPhase.PAIR, p, "pair") for p in with_controls(pairs, fabric.topology)]


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
            jobs.append(Planned(rnd, SweepPhase.PAIR, pair(x, y), "pair"))
    return jobs


def first_pairs(
    nodes: Sequence[str], settings: SweepSettings, fabric: Fabric = NO_FABRIC
) -> list[tuple[str, str]]:
    """The links round 2 measures when every node passes alone: of the round-robin
    schedule's matchings, the one past sweeps measured least (`coverage.least_measured`;
    `seed` rotates which one a fleet with no history starts from), with a control inside
    any group that more than half of it crosses out of (`with_controls`), its crossings
    spread over as many pairs of groups as they can be (`spread_crossings`)."""
    pairs = least_measured(nodes, fabric.seen, settings.seed)
    return spread_crossings(with_controls(pairs, fabric.topology), fabric.topology)


def spread_crossings(pairs: Sequence[Pair], topo: Topology) -> list[Pair]:
    """`pairs` with partners swapped, (x, y), (u, v) -> (x, v), (u, y), wherever that
    crosses more distinct pairs of groups (all levels counted): a rack's nodes then meet
    as many other racks as they can in round 2. Pairs inside a group are kept (controls),
    and every swap keeps both new pairs across, so what `with_controls` made stays.

    NOTE: every pair of groups is crossed in every sweep, and a group of n nodes crosses
    at most n others a round. The circle matching over hashed names gives a rack of 16
    only ~14 distinct partner racks of 63 (1,024 nodes in 64 racks); the pairs left for
    rounds 3-6 then outgrow a rack's nodes (3 of 120 slow trunks named after round 6).
    The links a swap breaks are measured later in the sweep (`_deferred`), so back-to-back
    sweeps still cover every link within N-1. Unlabelled: unchanged.
    """
    where = {n: tuple(topo.group(n, lv) for lv in topo.levels) for p in pairs for n in p}

    def keys(x: str, y: str) -> list[Crossed]:
        return [
            (i, min(gx, gy), max(gx, gy))
            for i, (gx, gy) in enumerate(zip(where[x], where[y], strict=True))
            if gx is not None and gy is not None and gx != gy
        ]

    out = list(pairs)
    cross = [i for i, p in enumerate(out) if _outside(topo, *p) and keys(*p)]
    count = Counter(k for i in cross for k in keys(*out[i]))
    for i in cross:
        if all(count[k] == 1 for k in keys(*out[i])):
            continue
        for j in cross:
            if j != i and (swap := _better_swap(out[i], out[j], keys, count, topo)):
                count.subtract(k for p in (out[i], out[j]) for k in keys(*p))
                count.update(k for p in swap for k in keys(*p))
                out[i], out[j] = swap
                break
    return [pair(*p) for p in out]


def _better_swap(
    p: Pair,
    q: Pair,
    keys: Callable[[str, str], list[Crossed]],
    count: Counter[Crossed],
    topo: Topology,
) -> tuple[Pair, Pair] | None:
    """Two pairs for the partners of `p` and `q` swapped, both across, crossing more
    distinct pairs of groups than `p` and `q` do (None: no such swap)."""
    (x, y), (u, v) = p, q
    for a, b in (((x, v), (u, y)), ((x, u), (y, v))):
        if not (_outside(topo, *a) and _outside(topo, *b)):
            continue
        old = keys(*p) + keys(*q)
        new = keys(*a) + keys(*b)
        after = Counter({k: count[k] for k in {*old, *new}})
        after.subtract(old)
        after.update(new)
        if sum(after[k] > 0 for k in after) > sum(count[k] > 0 for k in after):
            return a, b
    return None


def with_controls(pairs: Sequence[Pair], topo: Topology) -> list[Pair]:
    """`pairs` where no group is crossed out of by more than half of them: two pairs
    crossing out of such a group swap partners, (x1, y1), (x2, y2) -> (x1, x2), (y1, y2)
    (the far ends in one group where they can be), until a job inside it makes up the
    difference.

    NOTE: a round is judged against its own level, the faster half of its jobs. A slow
    trunk (or a slow uplink of one rack) slows every job crossing it alike; where those
    are more than half the round, they are the level and nothing is slow (two racks of
    four whose matching crosses in all four pairs). Jobs inside the group are then the
    level, and what confirms the trunk. Below half, the jobs crossing nothing slow set the
    level, a slow crossing is a slow link to measure again, and `_trunk_check` measures
    inside each group beside it: a control inside every group crossed would only delay
    crossings (measured at 1,024 nodes in 64 racks: 54 of 60 trunks named within 6 rounds,
    against 59 of 60). Only pairs inside no group are broken, so a swap never takes a
    control away; the links broken are measured later in the sweep (`_deferred`). A group
    needs two pairs crossing out of it to swap (`max(..., 3)`).
    """
    out = list(pairs)
    for level in topo.levels:
        for g in sorted(topo.members(level, [n for p in out for n in p])):
            while 2 * len(ends := _crossing_out(out, topo, level, g)) > max(len(out), 3):
                (x1, y1), rest = ends[0], ends[1:]
                far = topo.group(y1, level)
                x2, y2 = next((e for e in rest if topo.group(e[1], level) == far), rest[0])
                out = [p for p in out if p not in (pair(x1, y1), pair(x2, y2))]
                out += [pair(x1, x2), pair(y1, y2)]
    return out


def _crossing_out(pairs: list[Pair], topo: Topology, level: str, g: str) -> list[Pair]:
    """The pairs inside no group with one end in `g` (at `level`), that end first."""
    return [
        (x, y) if topo.group(x, level) == g else (y, x)
        for x, y in pairs
        if g in (topo.group(x, level), topo.group(y, level)) and _outside(topo, x, y)
    ]


def _outside(topo: Topology, x: str, y: str) -> bool:
    """In no group together, at any level that labels both."""
    return all(
        gx != gy
        for lv in topo.levels
        if (gx := topo.group(x, lv)) is not None and (gy := topo.group(y, lv)) is not None
    )
