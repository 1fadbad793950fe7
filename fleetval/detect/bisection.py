"""Bisection over groups to isolate what is slow: ranks inside a job, nodes across jobs.

Pure: `measure(group)` runs the group's collectives (a sub-group of ranks in the
`isolate` check, a STRICT_SPREAD job of nodes in `fleetval sweep`) and returns its score,
higher is better, or None when the group failed. A slow link or a throttled process stalls
everyone inside a collective, so arrival order cannot name it; timing each half alone can.

Each round splits the suspects into two equal halves and measures each. A half worse
than the other by more than the threshold holds the culprit; the faster half is cleared
and becomes the pool of known-good members that pad a lone suspect into a pair. When
both halves are equally slow against a group already cleared, the slowness is spread
over both (a slow node hosting several ranks): all of them are flagged. With an odd
number of suspects one sits the round out and is tested at the end against a known-good
partner. "Both slow" is only said after the two halves are measured again beside a
group of cleared members of the same size: every verdict compares groups measured at
the same time, never a figure from minutes before. One slow member among N is found in about log2(N) rounds of two groups;
2-3 members are tested as all pairs instead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import combinations
from typing import TypeVar

Member = Hashable  # a node name or a rank
V = TypeVar("V")
Measure = Callable[[tuple[Member, ...]], float | None]
MeasureTogether = Callable[[list[tuple[Member, ...]]], list[float | None]]


@dataclass(frozen=True)
class Trial:
    """One measured group: the evidence of a round."""

    round: int
    group: tuple[Member, ...]
    score: float | None  # None: the group's collectives failed


@dataclass
class Isolation:
    """What a bisection found: the slow members (empty when healthy) and the trials that show it."""

    flagged: list[Member] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    rounds: int = 0
    note: str = ""

    def evidence(self) -> list[str]:
        """One line per round: each group's score, so a reader can redo the verdict."""
        by_round: dict[int, list[Trial]] = {}
        for t in self.trials:
            by_round.setdefault(t.round, []).append(t)
        return [
            f"round {r}: "
            + " vs ".join(f"[{', '.join(map(str, t.group))}] {_fmt(t.score)}" for t in ts)
            for r, ts in sorted(by_round.items())
        ]


def _fmt(score: float | None) -> str:
    return "failed" if score is None else f"{score:.4g}"


def worse(a: float | None, b: float | None, threshold: float) -> bool:
    """a is worse than b beyond the threshold (a failed group is worse than any score)."""
    if a is None:
        return b is not None
    return b is not None and a < b * (1 - threshold)


def isolate(
    members: Sequence[Member],
    measure: Measure | None,
    threshold: float = 0.2,
    *,
    together: MeasureTogether | None = None,
    confirm: bool = False,
) -> Isolation:
    """Bisection for the slow member(s); see the module docstring.

    `together` measures the groups of a round side by side (interleaved, so a load that
    comes and goes hits both alike); without it each group is measured alone. With
    `confirm`, every round is measured twice and only a verdict two measurements in a row
    agree on is kept, "nothing slow" included; when the two disagree the round is measured
    afresh, once.
    """
    if together is None and measure is None:
        raise ValueError("isolate needs `measure` or `together`")
    run = together or (lambda groups: [measure(g) for g in groups])  # type: ignore[misc]
    result = Isolation()
    if len(members) < 4:
        return _pairwise(list(members), run, threshold, result)
    suspects, good, aside = list(members), [], []

    def trial(groups: list[list[Member]]) -> list[float | None]:
        scores = run([tuple(g) for g in groups])
        result.trials += [
            Trial(result.rounds, tuple(g), s) for g, s in zip(groups, scores, strict=True)
        ]
        return scores

    def judge(a: list[Member], b: list[Member]) -> str:
        """Which half is slow: "a", "b", "both" (against cleared members) or "none"."""
        sa, sb = trial([a, b])
        if worse(sa, sb, threshold):
            return "a"
        if worse(sb, sa, threshold):
            return "b"
        ref = good[: len(a)]
        if len(ref) < len(a):
            return "none"
        # Equal halves: both slow, or both fine? Measure them again beside cleared members.
        sa, sb, sr = trial([a, b, ref])
        both = worse(sa, sr, threshold) and worse(sb, sr, threshold)
        return "both" if both else "none"

    def pair_slow(pair: list[Member], ref: list[Member]) -> bool:
        return worse(*trial([pair, ref]), threshold)

    while len(suspects) > 1:
        if len(suspects) % 2:
            aside.append(suspects.pop())
        half = len(suspects) // 2
        a, b = suspects[:half], suspects[half:]
        if half == 1:  # a lone member needs a partner; only cleared ones will do
            if not good:
                aside.extend(suspects)
                suspects = []
                break
            a, b = a + good[:1], b + good[:1]
        result.rounds += 1
        verdict = judge(a, b)
        if confirm:
            verdict = _seen_twice(verdict, partial(judge, a, b), "none")
        if verdict == "a":
            good += [n for n in b if n not in good]
            suspects = [n for n in a if n not in good]
        elif verdict == "b":
            good += [n for n in a if n not in good]
            suspects = [n for n in b if n not in good]
        elif verdict == "both":
            result.note = "both halves equally slow: the slowness is shared by all of them"
            break  # every remaining suspect is slow (e.g. a slow node hosting several ranks)
        else:
            good += [n for n in a + b if n not in good]
            suspects = []
    result.flagged = suspects
    for member in aside:
        if len(good) < 2:
            result.note = f"no cleared members to pair {member} with"
            continue
        result.rounds += 1
        pair, ref = [member, good[0]], good[1:3] if len(good) > 2 else good[:2]
        slow = pair_slow(pair, ref)
        if confirm:
            slow = _seen_twice(slow, partial(pair_slow, pair, ref), False)
        if slow:
            result.flagged.append(member)
    return result


def _seen_twice(first: V, again: Callable[[], V], nothing: V) -> V:
    """A verdict two measurements in a row agree on: `first` if the next one agrees; if
    not, the round is measured afresh, once, and two new measurements must agree. One
    disturbed measurement cannot hide a culprit, and a verdict still needs two in a row."""
    if again() == first:
        return first
    fresh = again()
    return fresh if fresh != nothing and again() == fresh else nothing


def _pairwise(
    members: list[Member], run: MeasureTogether, threshold: float, result: Isolation
) -> Isolation:
    """Small sets: every pair; a member in every slow pair (and no fast one) is flagged."""
    if len(members) < 2:
        result.note = "isolation needs at least 2 members"
        return result
    result.rounds = 1
    pairs = list(combinations(members, 2))
    result.trials = [Trial(1, p, s) for p, s in zip(pairs, run(pairs), strict=True)]
    best = max((t.score for t in result.trials if t.score is not None), default=None)
    slow = [t.group for t in result.trials if worse(t.score, best, threshold)]
    fast = {n for t in result.trials if t.group not in slow for n in t.group}
    if slow:
        common = set.intersection(*(set(g) for g in slow)) - fast
        result.flagged = sorted(common) or sorted({n for g in slow for n in g} - fast)
    if len(members) == 2 and slow:
        result.note = "two members: the slow pair cannot be split further"
    return result
