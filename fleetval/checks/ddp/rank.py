"""DDP on a synthetic MLP: weak-scaling throughput and the health of data-parallel training.

`ddp_scaling` times a DistributedDataParallel training step with a fixed per-rank batch
(weak scaling) and the same step without gradient all-reduce, so each rank reports its
step time, throughput and the share of the step spent communicating. Efficiency needs
the world-size-1 throughput from another job of the same run, so it is derived after the
run by `scaling_efficiency` (pure: reports and tests call it on stored rows).

`ddp_health` trains a few steps and proves the three things data parallelism promises:
every replica holds identical parameters (a hash per rank, gathered to all), the DDP
gradient equals the single-process gradient of the global batch, and the loss is finite
and falls. A `corrupt` fault desynchronises the faulty rank's replica; the hash names it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from fleetval.checks.bandwidth.rank import busbw_factor, timed
from fleetval.checks.base import CheckContext
from fleetval.checks.collectives.rank import TORCH_DTYPE
from fleetval.checks.ddp.params import DdpHealthParams, DdpScalingParams
from fleetval.finding import RowFinding
from fleetval.store.schema import Row
from fleetval.vocab import Collective, DType, FaultKind, ReduceOp, Status

# Relative tolerance of DDP vs single-process gradients, as a fraction of the largest
# reference gradient element: the two sum the same terms in a different order (per-rank
# means, then an all-reduce average), so they agree to a few units of the dtype's epsilon
# times the reduction depth, never exactly. Half types also round every activation.
GRAD_RTOL: dict[DType, float] = {
    DType.FLOAT64: 1e-9,
    DType.FLOAT32: 1e-4,
    DType.BFLOAT16: 5e-2,
    DType.FLOAT16: 1e-2,
}
CORRUPT_SHIFT = 1e-2  # what a `corrupt` rank adds to its first weight: a desynchronised replica
HASH_METRIC = "param_hash_agree"  # every replica holds the same parameters


# -- model and data (deterministic from the seed, identical on every rank) -----------------


def build_mlp(hidden: int, layers: int, *, seed: int, batchnorm: bool = False) -> nn.Sequential:
    """`layers` Linear layers of width `hidden` with ReLU (and BatchNorm) between them."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mods: list[nn.Module] = []
        for _ in range(layers - 1):
            mods.append(nn.Linear(hidden, hidden))
            if batchnorm:
                mods.append(nn.BatchNorm1d(hidden))
            mods.append(nn.ReLU())
        mods.append(nn.Linear(hidden, hidden))
        return nn.Sequential(*mods)


def synthetic_batch(seed: int, samples: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and regression targets of a fixed random teacher, on CPU in float32."""
    gen = torch.Generator().manual_seed(seed + 1)
    teacher = torch.randn(hidden, hidden, generator=gen) / math.sqrt(hidden)
    x = torch.randn(samples, hidden, generator=gen)
    return x, torch.tanh(x @ teacher)


def wrap_ddp(module: nn.Module, ctx: CheckContext) -> DDP:
    """DDP bound to this rank's GPU on cuda; device-less (CPU tensors, gloo) otherwise."""
    if ctx.on_gpu:
        return DDP(module, device_ids=[ctx.device.index or 0])
    return DDP(module)


def grad_numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# -- pure judging functions (unit-tested) ---------------------------------------------------


def param_hash(tensors: Iterable[torch.Tensor]) -> str:
    """sha256 over every tensor's dtype, shape and exact bytes, in order."""
    h = hashlib.sha256()
    for t in tensors:
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        h.update(f"{flat.dtype}{tuple(t.shape)}".encode())
        h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def majority_hash(hashes: Sequence[str]) -> tuple[str, list[int]]:
    """The most common hash and the ranks (indices) that differ from it.

    NOTE: on a tie the hash rank 0 holds wins (else the lowest rank's among the tied):
    DDP copies rank 0's parameters to every rank at construction, so rank 0 is the replica
    the others were meant to equal.
    """
    if not hashes:
        raise ValueError("no hashes to compare")
    counts = Counter(hashes)
    top = max(counts.values())
    tied = [h for h in counts if counts[h] == top]  # first-seen order: by rank
    majority = hashes[0] if hashes[0] in tied else tied[0]
    return majority, [r for r, h in enumerate(hashes) if h != majority]


@dataclass(frozen=True)
class Parity:
    """How far DDP gradients are from the single-process reference."""

    max_abs_err: float
    scale: float  # largest reference gradient element (absolute)
    rtol: float

    @property
    def tolerance(self) -> float:
        return self.rtol * max(self.scale, 1e-12)

    @property
    def ok(self) -> bool:
        return math.isfinite(self.max_abs_err) and self.max_abs_err <= self.tolerance

    def worst(self, other: Parity) -> Parity:
        """The worse of two steps' parities (by error relative to its own tolerance)."""
        mine = self.max_abs_err / self.tolerance if math.isfinite(self.max_abs_err) else math.inf
        theirs = (
            other.max_abs_err / other.tolerance if math.isfinite(other.max_abs_err) else math.inf
        )
        return other if theirs > mine else self


def grad_parity(
    got: Sequence[torch.Tensor | None], want: Sequence[torch.Tensor], rtol: float
) -> Parity:
    """Largest elementwise |got - want| over all parameters, with the reference's scale."""
    if len(got) != len(want):
        raise ValueError(f"{len(got)} gradients to compare with {len(want)} reference ones")
    err, scale = 0.0, 0.0
    for g, w in zip(got, want, strict=True):
        w64 = w.detach().to("cpu", torch.float64)
        g64 = torch.zeros_like(w64) if g is None else g.detach().to("cpu", torch.float64)
        scale = max(scale, float(w64.abs().max()) if w64.numel() else 0.0)
        if g64.numel():
            diff = (g64 - w64).abs().max()
            err = math.inf if not torch.isfinite(diff) else max(err, float(diff))
    return Parity(err, scale, rtol)


def loss_verdict(losses: Sequence[float]) -> tuple[bool, bool]:
    """(every loss finite, the last loss below the first)."""
    finite = all(math.isfinite(v) for v in losses)
    return finite, finite and len(losses) >= 2 and losses[-1] < losses[0]


# -- ddp_scaling ------------------------------------------------------------------------------


def _train_step(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    opt.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    opt.step()


def _compute_only(ddp: DDP, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    """The same step with DDP's gradient all-reduce switched off."""
    with ddp.no_sync():
        _train_step(ddp, opt, x, y)


def comm_share(step_us: float, compute_us: float) -> float:
    """Share of a step spent on communication not hidden behind compute, clamped to [0, 1]."""
    if step_us <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - compute_us / step_us))


def run_ddp_scaling(ctx: CheckContext, p: DdpScalingParams) -> list[Row]:
    """DDP training throughput per rank at this world size, and what communication costs it.

    Rows: step time (samples), compute-only time, throughput, communication share, and the
    busbw of an all_reduce of the gradients' size; efficiency comes from scaling_efficiency.
    """
    dev, tdt, world = ctx.device, TORCH_DTYPE[p.dtype], ctx.rank.world_size
    # Build on CPU from the seed, then move: identical weights on every rank and device.
    model = build_mlp(p.hidden, p.layers, seed=ctx.rank.seed).to(dev, tdt)
    ctx.enter("ddp_init", 0)
    ddp = wrap_ddp(model, ctx)
    opt = torch.optim.SGD(ddp.parameters(), lr=p.lr)
    x, y = synthetic_batch(ctx.rank.seed + ctx.rank.rank, p.batch_per_rank, p.hidden)
    x, y = x.to(dev, tdt), y.to(dev, tdt)

    # DDP steps first (they keep replicas in sync), then the same step without all-reduce.
    step_us = ctx.measure(
        "ddp_step", lambda: _train_step(ddp, opt, x, y), warmup=p.warmup, iters=p.steps
    ).samples_us
    compute_us = ctx.measure(
        "compute_step", lambda: _compute_only(ddp, opt, x, y), warmup=p.warmup, iters=p.steps
    ).samples_us
    numel = grad_numel(model)
    buf = torch.zeros(numel, dtype=tdt, device=dev)  # zeros: sums stay finite in any dtype
    ar_us = ctx.measure(
        Collective.ALL_REDUCE.value, lambda: dist.all_reduce(buf), warmup=2, iters=p.steps
    ).samples_us

    step_med, compute_med = statistics.median(step_us), statistics.median(compute_us)
    ident = {"check": p.check, "dtype": p.dtype.value}
    shape = {"hidden": p.hidden, "layers": p.layers, "batch_per_rank": p.batch_per_rank}
    nbytes = numel * tdt.itemsize
    algbw = nbytes / (statistics.median(ar_us) * 1e-6) / 1e9
    return [
        ctx.row(**ident, metric="step_time_ms", value=step_med / 1e3, unit="ms",
                details=shape, **timed(step_us)),
        ctx.row(**ident, metric="compute_time_ms", value=compute_med / 1e3, unit="ms",
                details={**shape, "what": "forward+backward+optimizer under ddp.no_sync()"},
                **timed(compute_us)),
        ctx.row(**ident, metric="throughput", value=p.batch_per_rank / (step_med * 1e-6),
                unit="samples/s", iters=p.steps, details={**shape, "world_size": world}),
        ctx.row(**ident, metric="comm_share", value=comm_share(step_med, compute_med),
                unit="fraction", iters=p.steps,
                details={"step_us_median": step_med, "compute_us_median": compute_med}),
        ctx.row(**ident, collective=Collective.ALL_REDUCE.value, op=ReduceOp.SUM.value,
                size_bytes=nbytes, algbw_gbps=algbw,
                busbw_gbps=algbw * busbw_factor(Collective.ALL_REDUCE, world),
                details={"what": "all_reduce of a gradient-sized buffer"}, **timed(ar_us)),
    ]  # fmt: skip


# -- ddp_health -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """The global batch every rank builds from the seed, and this rank's shard of it."""

    x: torch.Tensor
    y: torch.Tensor
    world: int
    per_rank: int
    micro: int  # micro-batches per step

    def shard(self, rank: int, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch j of `rank`'s shard."""
        size = self.per_rank // self.micro
        lo = rank * self.per_rank + j * size
        return self.x[lo : lo + size], self.y[lo : lo + size]

    def global_micro(self, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch j of every rank, concatenated in rank order: what DDP averages over."""
        parts = [self.shard(r, j) for r in range(self.world)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def reference_grads(model: nn.Module, batch: _Batch) -> list[torch.Tensor]:
    """Single-process gradients of the global batch, micro-batch by micro-batch like DDP."""
    model.zero_grad(set_to_none=True)
    for j in range(batch.micro):
        x, y = batch.global_micro(j)
        (F.mse_loss(model(x), y) / batch.micro).backward()
    return [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in model.parameters()
    ]


def _ddp_grads(ctx: CheckContext, ddp: DDP, batch: _Batch, step: int) -> torch.Tensor:
    """Accumulate this rank's micro-batches (all but the last under no_sync); its mean loss."""
    total = torch.zeros((), dtype=torch.float32, device=ctx.device)
    for j in range(batch.micro):
        x, y = batch.shard(ctx.rank.rank, j)
        last = j == batch.micro - 1
        ctx.enter("ddp_backward" if last else "ddp_no_sync", step)
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = F.mse_loss(ddp(x), y) / batch.micro
            loss.backward()
        total += loss.detach().float()
    return total


def _global_loss(ctx: CheckContext, local: torch.Tensor, step: int) -> float:
    ctx.enter(Collective.ALL_REDUCE.value, step)
    dist.all_reduce(local)
    return float(local) / ctx.rank.world_size


@dataclass(frozen=True)
class _Trained:
    losses: list[float]
    parity: Parity
    hashes: list[str]


def _train_and_compare(ctx: CheckContext, p: DdpHealthParams) -> _Trained:
    """k DDP steps, each compared with the reference at the same parameters; then hashes."""
    dev, tdt = ctx.device, TORCH_DTYPE[p.dtype]
    seed, world = ctx.rank.seed, ctx.rank.world_size
    module = build_mlp(p.hidden, p.layers, seed=seed, batchnorm=p.sync_batchnorm).to(dev, tdt)
    reference = copy.deepcopy(module)  # plain BatchNorm: single-process statistics of the batch
    if p.sync_batchnorm:
        module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
    ctx.enter("ddp_init", 0)
    ddp = wrap_ddp(module, ctx)
    if ctx.has_fault(FaultKind.CORRUPT):
        _desynchronise(module)
    x, y = synthetic_batch(seed, world * p.batch_per_rank, p.hidden)
    batch = _Batch(x.to(dev, tdt), y.to(dev, tdt), world, p.batch_per_rank, p.no_sync_accumulation)
    opt = torch.optim.SGD(ddp.parameters(), lr=p.lr)
    rtol = p.grad_rtol or GRAD_RTOL[p.dtype]
    losses: list[float] = []
    parity = Parity(0.0, 0.0, rtol)
    for step in range(p.steps):
        # Same parameters as this replica: parity judges the gradient computation alone.
        reference.load_state_dict(module.state_dict())
        want = reference_grads(reference, batch)
        opt.zero_grad(set_to_none=True)
        local = _ddp_grads(ctx, ddp, batch, step)
        parity = parity.worst(grad_parity([q.grad for q in module.parameters()], want, rtol))
        losses.append(_global_loss(ctx, local, step))
        opt.step()
    return _Trained(losses, parity, _gather_hashes(ctx, module))


def _desynchronise(module: nn.Module) -> None:
    """A `corrupt` rank's replica drifts from the others (as after a silent bit flip)."""
    first = next(module.parameters())
    with torch.no_grad():
        first.add_(CORRUPT_SHIFT)


def _gather_hashes(ctx: CheckContext, module: nn.Module) -> list[str]:
    mine = param_hash(module.parameters())
    hashes: list[Any] = [None] * ctx.rank.world_size
    ctx.enter("all_gather_object", 0)
    dist.all_gather_object(hashes, mine)
    return [str(h) for h in hashes]


def _ranks(ranks: Iterable[int]) -> str:
    items = list(ranks)
    return ("rank " if len(items) == 1 else "ranks ") + ", ".join(str(r) for r in items)


def hash_finding(hashes: Sequence[str], rank: int) -> RowFinding:
    """The parameter-hash finding as `rank` sees it.

    Every rank's row fails when any replica differs: the job's model is no longer one
    model. The message names the ranks off the majority; `value` is 1 where this rank
    agrees with the majority.
    """
    majority, off = majority_hash(hashes)
    agree = len(hashes) - len(off)
    details = {"hash": hashes[rank], "majority_hash": majority, "disagreeing_ranks": off}
    if not off:
        msg = f"all {len(hashes)} ranks hold identical parameters"
        return RowFinding(HASH_METRIC, Status.PASS, msg, 1.0, details=details)
    msg = (
        f"parameters differ from the majority on {_ranks(off)} "
        f"({agree} of {len(hashes)} ranks agree; this rank is {'off' if rank in off else 'in'} the majority)"
    )
    value = 0.0 if rank in off else 1.0
    return RowFinding(HASH_METRIC, Status.FAIL, msg, value, details=details)


def _parity_finding(parity: Parity, p: DdpHealthParams) -> RowFinding:
    verdict = "within" if parity.ok else "beyond"
    return RowFinding(
        "grad_parity_max_abs_err",
        Status.PASS if parity.ok else Status.FAIL,
        f"DDP gradients {verdict} tolerance of the single-process gradients of the global "
        f"batch: max |err| {parity.max_abs_err:.3g} vs {parity.tolerance:.3g} "
        f"({parity.rtol:g} x largest gradient {parity.scale:.3g})",
        parity.max_abs_err,
        details={"tolerance": parity.tolerance, "rtol": parity.rtol, "scale": parity.scale,
                 "steps": p.steps, "accumulation": p.no_sync_accumulation},
    )  # fmt: skip


def _loss_findings(losses: list[float]) -> list[RowFinding]:
    finite, falling = loss_verdict(losses)
    bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
    ratio = losses[-1] / losses[0] if finite and losses[0] else None
    return [
        RowFinding(
            "loss_finite",
            Status.PASS if finite else Status.FAIL,
            "" if finite else f"loss not finite at steps {bad}",
            float(len(bad)),
            details={"losses": losses},
        ),
        RowFinding(
            "loss_decreasing",
            Status.PASS if falling else Status.FAIL,
            f"loss {losses[0]:.4g} -> {losses[-1]:.4g} over {len(losses)} steps"
            if finite
            else "loss not finite",
            ratio,
            "ratio",
            details={"losses": losses},
        ),
    ]


def run_ddp_health(ctx: CheckContext, p: DdpHealthParams) -> list[Row]:
    """Replicas stay identical, DDP gradients equal single-process ones and the loss falls."""
    ident = {"check": p.check, "dtype": p.dtype.value}
    variant = {"sync_batchnorm": p.sync_batchnorm, "no_sync_accumulation": p.no_sync_accumulation}
    if p.sync_batchnorm and not ctx.on_gpu:
        why = f"torch.nn.SyncBatchNorm runs on GPU devices only; this rank is on {ctx.device}"
        return [ctx.row(**ident, metric="sync_batchnorm", status=Status.SKIP.value, message=why)]
    trained = _train_and_compare(ctx, p)
    findings = [
        hash_finding(trained.hashes, ctx.rank.rank),
        _parity_finding(trained.parity, p),
        *_loss_findings(trained.losses),
    ]
    # The hash finding comes first: it is the one that names a desynchronised rank.
    return [
        ctx.row(**ident, iters=p.steps, **{**f.fields(), "details": {**variant, **f.details}})
        for f in findings
    ]
