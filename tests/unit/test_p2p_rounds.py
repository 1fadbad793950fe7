"""The p2p check's pair schedule: rounds of disjoint pairs that cover what the pattern asks."""

from __future__ import annotations

import itertools

import pytest

from fleetval.checks.p2p import pair_rounds


@pytest.mark.parametrize("world", [2, 3, 4, 5, 8, 9, 16])
def test_all_pattern_covers_every_pair_once_in_disjoint_rounds(world: int) -> None:
    rounds = pair_rounds(world, "all")
    seen = [p for rd in rounds for p in rd]
    assert sorted(seen) == list(itertools.combinations(range(world), 2))
    for rd in rounds:
        ranks = [r for p in rd for r in p]
        assert len(ranks) == len(set(ranks))  # a rank is in at most one pair per round
    assert len(rounds) == (world - 1 if world % 2 == 0 else world)


@pytest.mark.parametrize("world", [2, 3, 4, 7, 8])
def test_ring_pattern_pairs_each_rank_with_its_neighbours_in_at_most_three_rounds(
    world: int,
) -> None:
    rounds = pair_rounds(world, "ring")
    seen = {p for rd in rounds for p in rd}
    assert seen == {tuple(sorted((r, (r + 1) % world))) for r in range(world)}
    assert len(rounds) <= 3
    for rd in rounds:
        ranks = [r for p in rd for r in p]
        assert len(ranks) == len(set(ranks))


def test_one_rank_has_no_pairs() -> None:
    assert pair_rounds(1, "all") == [] and pair_rounds(1, "ring") == []
