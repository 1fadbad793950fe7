"""Ranks sharing one GPU (fractional gloo ranks) take turns at the micro-benchmarks (pure)."""

from __future__ import annotations

from fleetval.checks.microbench.rank import turns


def test_ranks_on_one_gpu_take_turns_in_rank_order():
    a, b = ("node-1", "GPU-aaaa"), ("node-1", "GPU-bbbb")
    assert turns([a, a, b, a, a]) == [(0, 4), (1, 4), (0, 1), (2, 4), (3, 4)]


def test_the_same_device_id_on_two_nodes_is_two_devices_and_cpu_ranks_never_wait():
    assert turns([("n1", "cuda:0"), ("n2", "cuda:0"), None, None]) == [(0, 1)] * 4
