"""Point-to-point bandwidth: every pair of ranks exchanges buffers with send/recv, pairs of a
round at once (a matching), so a slow link shows up as the pairs it is in, not as the ring."""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from fleetval.checks.bandwidth.rank import percentile
from fleetval.checks.base import CheckContext
from fleetval.checks.collectives.rank import exchange, host_staged
from fleetval.checks.p2p import pair_rounds
from fleetval.checks.p2p.params import P2pParams
from fleetval.store.schema import Row
from fleetval.vocab import Collective, Status

ITEM = 4  # float32: integer-valued, so the received buffer is checked exactly


def _payload(rank: int, count: int) -> torch.Tensor:
    """What `rank` sends: small integers, exact in float32, different for every sender."""
    return (torch.arange(count, dtype=torch.int64) % 251 + 1000 * (rank + 1)).to(torch.float32)


def _pair_row(ctx: CheckContext, p: P2pParams, peer: int, peer_node: str, size: int) -> Row:
    count = max(1, size // ITEM)
    send = _payload(ctx.rank.rank, count).to(ctx.device)
    recv = torch.empty(count, dtype=torch.float32, device=ctx.device)
    staged = host_staged(ctx.rank.backend, ctx.device)  # gloo: time includes the host copies

    def launch() -> None:
        exchange([(send, peer)], [(recv, peer)], staged=staged)

    samples = ctx.measure(
        Collective.SEND_RECV.value, launch, warmup=p.warmup, iters=p.iters
    ).samples_us
    ctx.synchronize()
    wrong = int((recv.cpu() != _payload(peer, count)).sum())
    median = statistics.median(samples)
    gbps = count * ITEM / (median * 1e-6) / 1e9  # one direction's bytes over the exchange time
    return ctx.row(
        check=p.check,
        collective=Collective.SEND_RECV.value,
        dtype="float32",
        size_bytes=count * ITEM,
        iters=p.iters,
        time_us_median=median,
        time_us_p99=percentile(samples, 0.99),
        algbw_gbps=gbps,
        busbw_gbps=gbps,  # nccl-tests' factor for send/recv is 1
        samples_us=tuple(samples),
        wrong=wrong,
        status=Status.FAIL.value if wrong else Status.PASS.value,
        message=f"{wrong} wrong elements from rank {peer}" if wrong else "",
        details={"peer": peer, "peer_node": peer_node, "host_staged": staged},
    )


def run_p2p(ctx: CheckContext, p: P2pParams) -> list[Row]:
    """Every listed pair of ranks moves data both ways at the expected rate, and exactly."""
    world = ctx.rank.world_size
    nodes: list[str] = [""] * world
    dist.all_gather_object(nodes, ctx.rank.node)  # a row names its peer's node: links are pairs
    rows: list[Row] = []
    for pairs in pair_rounds(world, p.pattern):
        peer = next(
            (b if a == ctx.rank.rank else a for a, b in pairs if ctx.rank.rank in (a, b)), None
        )
        if peer is not None:  # NOTE: a rank left out of an odd round waits at the next barrier
            rows += [_pair_row(ctx, p, peer, nodes[peer], s) for s in p.sizes.sizes()]
        dist.barrier()  # rounds apart: a round's pairs run at once, never beside the next
    return rows
