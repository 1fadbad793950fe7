"""late_ranks_in_step on synthetic blocking collectives: seeded noise that varies run to run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fleetval.checks import synchronizing_metrics
from fleetval.checks.straggler.rank import score, stragglers
from fleetval.detect.bisection import isolate
from fleetval.detect.lateness import late_ranks_in_step
from fleetval.store.schema import Row


def collective_samples(
    rng: np.random.Generator,
    world: int,
    iters: int,
    *,
    base_us: float,
    jitter_us: float,
    delay_us: dict[int, float] | None = None,
) -> np.ndarray:
    """Own time per rank and iteration of a blocking collective: everyone leaves together.

    Arrival jitter is heavy-tailed (lognormal), the collective itself varies per iteration
    for everyone, and ranks leave a little apart (exit skew).
    """
    delay = np.zeros(world)
    for r, d in (delay_us or {}).items():
        delay[r] = d
    arrive = rng.lognormal(0.0, 1.0, (world, iters)) * jitter_us + delay[:, None]
    duration = base_us * (1 + 0.2 * rng.random(iters))
    leave = arrive.max(axis=0) + duration + rng.normal(0, jitter_us / 4, (world, iters)).clip(0)
    return leave - arrive


def rows_of(
    samples: list[np.ndarray], nodes: list[str], *, sizes: list[int] | None = None
) -> list[Row]:
    """Bandwidth-style rows: one per rank and size."""
    sizes = sizes or [8 * 4**i for i in range(len(samples))]
    return [
        Row(job=0, step="bw", check="bandwidth", collective="all_reduce", op="sum",
            dtype="float32", size_bytes=size, rank=r, node=nodes[r], device_id=f"GPU-{r}",
            world_size=len(nodes), samples_us=tuple(m[r]))
        for m, size in zip(samples, sizes, strict=True)
        for r in range(len(nodes))
    ]  # fmt: skip


def sweep(rng, world, *, delay_us=None, base_us=30.0, jitter_us=2.0, sizes=6, iters=10):
    return [
        collective_samples(
            rng, world, iters, base_us=base_us * 2**i, jitter_us=jitter_us, delay_us=delay_us
        )
        for i in range(sizes)
    ]


FOUR_ON_TWO = ["node-a", "node-a", "node-b", "node-b"]
EIGHT_ON_TWO = ["node-a"] * 4 + ["node-b"] * 4


@pytest.mark.parametrize("seed", range(40))
def test_clean_runs_name_nobody(seed):
    rng = np.random.default_rng(seed)
    assert late_ranks_in_step(rows_of(sweep(rng, 4), FOUR_ON_TWO)) == []
    assert late_ranks_in_step(rows_of(sweep(rng, 8, jitter_us=500.0), EIGHT_ON_TWO)) == []


@pytest.mark.parametrize("seed", range(10))
def test_a_30ms_delay_on_one_rank_of_four_is_named_with_node_and_device(seed):
    rng = np.random.default_rng(seed)
    rows = rows_of(sweep(rng, 4, delay_us={2: 30_000}, jitter_us=300.0), FOUR_ON_TWO)
    (late,) = late_ranks_in_step(rows)
    assert (late.rank, late.node, late.device_id) == (2, "node-b", "GPU-2")
    assert 29_000 < late.lateness_us < 31_000
    assert (
        f"late by {late.lateness_us / 1000:.1f} ms" in late.detail
        and "node-b hosts ranks 2,3, late: 2" in late.detail
    )
    assert "node late" not in late.detail  # node-b's other rank was on time


@pytest.mark.parametrize("seed", range(10))
def test_a_slow_node_hosting_half_the_ranks_is_named(seed):
    rng = np.random.default_rng(seed)
    slow = {r: 5_000.0 for r in range(4, 8)}
    rows = rows_of(sweep(rng, 8, delay_us=slow, jitter_us=300.0), EIGHT_ON_TWO)
    late = late_ranks_in_step(rows)
    assert sorted(lr.rank for lr in late) == [4, 5, 6, 7]
    assert all(
        lr.node == "node-b" and "node-b hosts ranks 4,5,6,7: node late" in lr.detail for lr in late
    )


@pytest.mark.parametrize("seed", range(10))
def test_a_delay_small_in_absolute_terms_but_large_against_the_noise_is_found(seed):
    # A GPU all_reduce: 30 µs, 1 µs of jitter; a rank 15 µs late every time.
    rng = np.random.default_rng(seed)
    rows = rows_of(sweep(rng, 8, delay_us={5: 15.0}, jitter_us=1.0), EIGHT_ON_TWO)
    assert [lr.rank for lr in late_ranks_in_step(rows)] == [5]


def test_the_same_delay_within_the_noise_is_not_claimed():
    rng = np.random.default_rng(7)
    rows = rows_of(sweep(rng, 4, delay_us={1: 15.0}, jitter_us=400.0), FOUR_ON_TWO)
    assert late_ranks_in_step(rows) == []


def test_stored_records_and_rows_without_samples_or_peers_are_handled():
    rng = np.random.default_rng(3)
    rows = rows_of(sweep(rng, 4, delay_us={0: 10_000}, jitter_us=100.0), FOUR_ON_TWO)
    culprit = Row(job=0, step="bw", check="bandwidth", rank=1, node="node-a", status="fail")
    rooted = Row(job=0, step="bw", check="bandwidth", collective="broadcast", rank=1,
                 node="node-a", samples_us=(1.0, 1.0, 1.0))  # fmt: skip
    records = [r.to_record() for r in [*rows, culprit, rooted]]
    assert [lr.rank for lr in late_ranks_in_step(records)] == [0]
    assert late_ranks_in_step([]) == []
    assert late_ranks_in_step(rows[:1]) == []  # one rank has no peers to be late against


def test_ddp_step_rows_count_and_compute_only_rows_do_not():
    rng = np.random.default_rng(5)
    m = collective_samples(rng, 4, 20, base_us=2000.0, jitter_us=50.0, delay_us={3: 3000.0})
    step = [Row(job=0, step="ddp", check="ddp_scaling", metric="step_time_ms", rank=r,
                node=FOUR_ON_TWO[r], samples_us=tuple(m[r])) for r in range(4)]  # fmt: skip
    compute = [Row(**{**s.__dict__, "metric": "compute_time_ms"}) for s in step]
    declared = synchronizing_metrics()  # the ddp_scaling plug-in declares step_time_ms
    assert [lr.rank for lr in late_ranks_in_step(step, metrics=declared)] == [3]
    assert late_ranks_in_step(compute, metrics=declared) == []


def test_straggler_check_scoring_is_the_same_judgement():
    rng = np.random.default_rng(1)
    clean = collective_samples(rng, 4, 40, base_us=100.0, jitter_us=20.0).tolist()
    assert stragglers(score(clean), 3.0) == []
    late = collective_samples(rng, 4, 40, base_us=100.0, jitter_us=20.0, delay_us={2: 20_000})
    (slow,) = stragglers(score(late.tolist()), 3.0)
    assert slow.rank == 2 and slow.last_fraction == 1.0 and 19.5 < slow.lateness_ms < 20.5
    assert stragglers(score(late.tolist()), 3.0, min_lateness_ms=25.0) == []


# -- bisection over sub-groups ---------------------------------------------------------------


def group_time(slow: dict[int, float], rng: np.random.Generator):
    """A group's score (1/time): a throttled member stalls the whole group's collective."""

    def measure(group: tuple[int, ...]) -> float:
        t = 100.0 * max(slow.get(m, 1.0) for m in group)
        return 1e6 / (t * (1 + rng.uniform(-0.1, 0.1)))

    return measure


@pytest.mark.parametrize("world", [4, 8, 16])
def test_bisection_names_one_throttled_rank_in_log_rounds(world):
    for bad in range(world):
        found = isolate(list(range(world)), group_time({bad: 2.0}, np.random.default_rng(bad)), 0.3)
        assert found.flagged == [bad]
        assert found.rounds == int(np.log2(world))
        assert len(found.evidence()) == found.rounds


def test_bisection_flags_every_rank_of_a_slow_node():
    found = isolate(
        list(range(8)), group_time({r: 3.0 for r in (4, 5, 6, 7)}, np.random.default_rng(0)), 0.3
    )
    assert found.flagged == [4, 5, 6, 7] and "equally slow" in found.note
    found = isolate(list(range(4)), group_time({2: 3.0, 3: 3.0}, np.random.default_rng(0)), 0.3)
    assert found.flagged == [2, 3]


def test_bisection_of_a_healthy_group_flags_nobody_in_one_round():
    found = isolate(list(range(8)), group_time({}, np.random.default_rng(0)), 0.3)
    assert found.flagged == [] and found.rounds == 1


def test_one_measurement_cannot_outvote_the_others():
    # Rank 1 is held up during one size only (a burst of load): not a late rank.
    rng = np.random.default_rng(11)
    measurements = sweep(rng, 4, jitter_us=50.0)
    measurements[2] = collective_samples(
        rng, 4, 10, base_us=120.0, jitter_us=50.0, delay_us={1: 20_000}
    )
    assert late_ranks_in_step(rows_of(measurements, FOUR_ON_TWO)) == []


@pytest.mark.parametrize("sizes", [2, 3])
def test_one_burst_cannot_name_a_rank_in_a_step_of_few_sizes(sizes):
    # A step of 2-3 sizes (a nightly's 64-256 KiB): one size's burst on rank 0 once counted
    # 10 / 3 noise units, over the threshold alone. A delay on every size still counts.
    rng = np.random.default_rng(3)
    measurements = sweep(rng, 2, jitter_us=50.0, sizes=sizes)
    measurements[0] = collective_samples(
        rng, 2, 10, base_us=30.0, jitter_us=50.0, delay_us={0: 20_000}
    )
    assert late_ranks_in_step(rows_of(measurements, ["head"] * 2)) == []
    late = sweep(rng, 2, jitter_us=50.0, sizes=sizes, delay_us={0: 20_000})
    assert [lr.rank for lr in late_ranks_in_step(rows_of(late, ["head"] * 2))] == [0]


def test_one_measurement_is_all_the_evidence_a_step_of_one_size_has():
    rng = np.random.default_rng(4)
    late = sweep(rng, 4, jitter_us=50.0, sizes=1, delay_us={3: 20_000})
    assert [lr.rank for lr in late_ranks_in_step(rows_of(late, FOUR_ON_TWO))] == [3]


def test_bisection_measures_a_round_side_by_side_and_needs_a_measure():
    rounds: list[list[tuple[int, ...]]] = []
    score = group_time({6: 3.0}, np.random.default_rng(2))

    def together(groups):
        rounds.append(groups)
        return [score(g) for g in groups]

    found = isolate(list(range(8)), None, 0.3, together=together, confirm=True)
    assert found.flagged == [6]
    assert rounds[:2] == [[(0, 1, 2, 3), (4, 5, 6, 7)]] * 2  # measured, then confirmed
    with pytest.raises(ValueError, match="measure"):
        isolate(list(range(8)), None)


def test_arrival_skew_small_against_the_whole_call_is_not_lateness():
    """Two ranks each delayed 20 ms a call (the work between collectives), rank 0 arriving
    ~180 us after rank 1 each time: against the collective's own 100 us and 2 us of jitter
    that is lateness, against the 20 ms call it is scheduling jitter (a loaded box named rank
    0 late at 3.6x so). The rows' time per call sets the noise's floor; a rank late by a
    share of the whole call that the floor does not cover is still named."""
    rng = np.random.default_rng(7)

    def late_in_20ms_calls(delay_us: float) -> tuple[list[int], list[int]]:
        """Ranks named late against the collective alone, and against 20 ms calls."""
        m = collective_samples(rng, 2, 20, base_us=100.0, jitter_us=2.0, delay_us={0: delay_us})
        rows = rows_of([m], ["node-a", "node-b"])
        calls = [dataclasses.replace(r, time_us_median=20_000.0 + float(np.median(r.samples_us)))
                 for r in rows]  # fmt: skip
        return [lr.rank for lr in late_ranks_in_step(rows)], [
            lr.rank for lr in late_ranks_in_step(calls)
        ]

    assert late_in_20ms_calls(180.0) == ([0], [])
    assert late_in_20ms_calls(4_000.0)[1] == [0]
