"""A job's only rank, in this process: its context and a one-rank process group on loopback,
as a rank actor would have them (the checks' rank functions run on it unchanged)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fleetval.checks.base import CheckContext, Heartbeat, RankContext


def lone_rank(backend: str, device: str, *, run_id: str, node: str) -> RankContext:
    """Rank 0 of 1 on `node`."""
    return RankContext(run_id=run_id, job=0, rank=0, world_size=1, local_rank=0,
                       local_world_size=1, node=node, node_rank=0, backend=backend,
                       device=device, device_id=None, seed=0)  # fmt: skip


@contextmanager
def one_rank_group(rank: RankContext, step: str, **init: Any) -> Iterator[CheckContext]:
    """`rank`'s process group (its backend, world size 1; `init`: more of
    `init_process_group`'s arguments) and its context in `step`; the group destroyed after."""
    import torch.distributed as dist

    # Port 0: the OS binds a free port in the same call (one found free first can be taken).
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
    dist.init_process_group(rank.backend, store=store, rank=0, world_size=1, **init)
    try:
        yield CheckContext(rank, step, (), Heartbeat())
    finally:
        dist.destroy_process_group()
