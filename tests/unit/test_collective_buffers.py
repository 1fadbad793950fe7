"""Large buffers and gloo's send/recv on CUDA tensors, shown on CPU tensors: chunk sizing per
device, the 64-bit fill, one case's buffers alive at a time, and host staging."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from fleetval.checks.bandwidth import rank as bw_rank
from fleetval.checks.bandwidth.params import BandwidthParams
from fleetval.checks.base import CheckContext
from fleetval.checks.collectives import rank as coll
from fleetval.checks.collectives.params import CollectivesParams
from tests.helpers.lone_rank import lone_rank, one_rank_group

GIB = 1 << 30
M32 = 0xFFFFFFFF


def reference_hash(seed: int, i: int) -> int:
    """The fill's hash in Python integers (no overflow possible): what every device must give."""
    x = ((i & M32) * 0x27D4EB2F + ((i >> 32) & M32) * 0x2F0F3A5D) & M32
    x = (x + (seed * 0x9E3779B1 & M32)) & M32
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & M32
    x ^= x >> 12
    x = (x * 0x297A2D39) & M32
    return x ^ (x >> 15)


# ---- chunk sizing -----------------------------------------------------------------------------


def test_cpu_chunks_stay_cache_sized():
    assert coll.chunk_elements("cpu") == coll.CHUNK == 1 << 16


def test_gpu_chunks_make_a_16_gib_buffer_a_few_hundred_kernels_not_131072():
    chunk = coll.chunk_elements("cuda", 78 * GIB)  # an H100's free memory
    assert chunk == 1 << 26
    bf16_16gib = 16 * GIB // 2
    assert bf16_16gib // chunk == 128
    assert bf16_16gib // coll.CHUNK == 131072  # the CPU size's count, one host sync each


def test_gpu_chunks_keep_their_temporaries_within_an_eighth_of_free_memory():
    chunk = coll.chunk_elements("cuda", 1 * GIB)
    assert chunk == 1 << 21 and chunk * coll.CHUNK_BYTES_PER_ELEMENT <= GIB // 8
    assert coll.chunk_elements("cuda", 1 << 20) == coll.CHUNK  # never below the CPU size


# ---- the 64-bit fill --------------------------------------------------------------------------


@pytest.mark.parametrize("base", [0, 2**31 - 8, 2**32 - 8, 2**40 + 3, 2**62])
def test_the_hash_matches_its_integer_definition_at_any_index(base):
    idx = torch.arange(base, base + 16, dtype=torch.int64)
    got = coll._hash(7, idx).tolist()
    assert got == [reference_hash(7, i) for i in range(base, base + 16)]


def test_no_pattern_repeats_past_2_to_the_31_elements():
    idx = torch.arange(0, 4096, dtype=torch.int64) * 9973
    for period in (2**31, 2**32, 2**33):
        assert bool((coll._hash(3, idx) != coll._hash(3, idx + period)).all()), period
    # what a rank sends (1..64) at element i and i + 2**31 is no longer the same buffer twice
    near, far = coll.values(3, 1, idx, None, 4), coll.values(3, 1, idx + 2**31, None, 4)
    assert float((near == far).double().mean()) < 0.05


# ---- one case alive at a time -------------------------------------------------------------------


@pytest.fixture
def gloo_ctx() -> Iterator[CheckContext]:
    with one_rank_group(lone_rank("gloo", "cpu", run_id="r", node="n0"), "s") as ctx:
        yield ctx


def spy_prepare(monkeypatch, module) -> list[bool]:
    """Record, at each prepare after the first, whether the check still holds the previous
    case (its `case` variable) while the next one's buffers are made.

    NOTE: the check's own reference is what it controls; a backend's work object may hold a
    buffer a moment longer (gloo's, released on its own thread)."""
    real, freed = module.prepare, []

    def prepare(*args, **kwargs):
        caller = sys._getframe(1).f_locals
        if caller.get("rows"):
            freed.append(caller.get("case") is None)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "prepare", prepare)
    return freed


def test_bandwidth_frees_each_sizes_buffers_before_making_the_next(gloo_ctx, monkeypatch):
    freed = spy_prepare(monkeypatch, bw_rank)
    p = BandwidthParams(check="bandwidth", collectives=["all_reduce"], dtypes=["float32"],
                        sizes={"min": 1024, "max": 8192, "factor": 2}, warmup=1, iters=2)  # fmt: skip
    rows = bw_rank.run_bandwidth(gloo_ctx, p)
    assert [r.status for r in rows] == ["pass"] * 4
    assert freed == [True, True, True]


def test_collectives_free_each_cases_buffers_before_making_the_next(gloo_ctx, monkeypatch):
    freed = spy_prepare(monkeypatch, coll)
    p = CollectivesParams(check="collectives", collectives=["all_reduce", "broadcast"],
                          ops=["sum"], dtypes=["float32", "int32"], size=4096, repeats=1)  # fmt: skip
    rows = coll.run_collectives(gloo_ctx, p)
    assert {r.status for r in rows} == {"pass"} and freed == [True, True, True]


# ---- gloo send/recv on CUDA tensors: through the host ---------------------------------------


def test_gloo_send_recv_of_cuda_tensors_goes_through_the_host():
    assert coll.host_staged("gloo", torch.device("cuda:0"))
    assert not coll.host_staged("nccl", torch.device("cuda:0"))
    assert not coll.host_staged("gloo", torch.device("cpu"))


def test_a_staged_exchange_hands_gloo_host_copies_and_copies_the_receive_back(monkeypatch):
    handed: list[torch.Tensor] = []

    class Done:
        def wait(self) -> None:
            pass

    def batch(ops):
        for op in ops:
            handed.append(op.tensor)
            if op.op is dist.irecv:
                op.tensor.fill_(5)  # what the peer sent
        return [Done() for _ in ops]

    monkeypatch.setattr(dist, "batch_isend_irecv", batch)
    monkeypatch.setattr(
        dist, "P2POp", lambda op, tensor, peer: SimpleNamespace(op=op, tensor=tensor)
    )
    send, recv = torch.arange(4.0), torch.zeros(4)
    coll.exchange([(send, 1)], [(recv, 1)], staged=True)
    assert handed[0] is not send and torch.equal(handed[0], send)  # a copy, in host memory
    assert handed[1] is not recv and recv.tolist() == [5.0] * 4  # received, then copied back
