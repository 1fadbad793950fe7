"""Exact expected values, busbw factors and wrong-element attribution, without a process group."""

from __future__ import annotations

import pytest
import torch

from fleetval.checks.bandwidth.params import sweep_sizes
from fleetval.checks.bandwidth.rank import busbw_factor, percentile
from fleetval.checks.collectives.rank import (
    Case,
    combinations,
    elements_for,
    pattern,
    verdict_fields,
)
from fleetval.vocab import Collective, DType, ReduceOp


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        (Collective.ALL_REDUCE, 8, 2 * 7 / 8),
        (Collective.ALL_GATHER, 8, 7 / 8),
        (Collective.REDUCE_SCATTER, 4, 3 / 4),
        (Collective.ALL_TO_ALL, 2, 1 / 2),
        (Collective.BROADCAST, 8, 1.0),
        (Collective.REDUCE, 8, 1.0),
        (Collective.SEND_RECV, 8, 1.0),
    ],
)
def test_busbw_factors_are_nccl_tests(collective, n, factor):
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_sizes_like_nccl_tests():
    assert sweep_sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert sweep_sizes(8, 100, 4) == [8, 32]
    assert percentile([5.0, 1.0, 3.0], 0.99) == 5.0


def test_pattern_needs_the_world_size_to_reduce():
    assert torch.equal(pattern(0, 1, 5, None), pattern(0, 1, 5, None, world=4))
    assert not torch.equal(pattern(0, 1, 64, None), pattern(0, 2, 64, None))
    with pytest.raises(ValueError, match="world size"):
        pattern(0, 1, 5, ReduceOp.SUM)
    assert pattern(0, 1, 5, ReduceOp.SUM, world=4096).max() <= 4


def test_counts_align_with_the_world():
    assert elements_for(Collective.ALL_GATHER, 1000, DType.FLOAT32, 3) == 249
    assert elements_for(Collective.ALL_REDUCE, 1000, DType.FLOAT32, 3) == 250
    assert elements_for(Collective.ALL_TO_ALL, 2, DType.FLOAT32, 4) == 4


def test_wrong_elements_are_attributed_to_their_source():
    expected = torch.arange(12)
    got = expected.clone().float()
    got[4:6] += 1  # chunk 1 of 3: from rank 1
    got[11] = float("nan")  # chunk 2: from rank 2
    case = Case(lambda: None, lambda: None, got, got, lambda t: expected[t], lambda t: t // 4)
    assert case.wrong(DType.FLOAT32, None) == (3, {"1": 2, "2": 1})
    fields = verdict_fields(2, {"1": 2}, 12)
    assert fields["status"] == "fail" and "from rank 1: 2" in fields["message"]


def test_avg_uses_a_dtype_tolerance_others_are_exact():
    expected = torch.tensor([1.0, 2.0, 4.0, 5.0], dtype=torch.float64) / 3
    got = expected.to(torch.bfloat16)
    got[3] = float("nan")
    case = Case(lambda: None, lambda: None, got, got, lambda t: expected[t])
    assert case.wrong(DType.BFLOAT16, ReduceOp.AVG) == (1, {})  # only the NaN
    assert case.wrong(DType.BFLOAT16, ReduceOp.SUM)[0] == 4


def test_combinations_skip_ops_for_non_reducing_collectives():
    combos = combinations(
        [Collective.ALL_REDUCE, Collective.BROADCAST, Collective.BARRIER],
        [ReduceOp.SUM, ReduceOp.MAX],
        [DType.INT32],
    )
    assert combos == [
        (Collective.ALL_REDUCE, ReduceOp.SUM, DType.INT32),
        (Collective.ALL_REDUCE, ReduceOp.MAX, DType.INT32),
        (Collective.BROADCAST, None, DType.INT32),
        (Collective.BARRIER, None, DType.FLOAT32),
    ]
