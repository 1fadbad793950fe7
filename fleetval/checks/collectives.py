"""Exact-result collectives: buffers whose every expected element is known (nccl-tests style).

Input element i of rank r is a small integer derived from (seed, r, i), exactly
representable in every dtype, so sums, maxima and products are exact and any differing
element is a real error (zero tolerance); only `avg` needs a dtype-aware tolerance.
Where the source of an element is known (gather, all_to_all, broadcast, the send/recv
ring) wrong elements are counted per source rank, which names a corrupting rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from pydantic import ByteSize, Field, field_validator

from fleetval.checks.base import CheckContext, StepSpec
from fleetval.results import Row
from fleetval.vocab import Collective, DType, FaultKind, ReduceOp, Status

TORCH_DTYPE: dict[DType, torch.dtype] = {
    DType.FLOAT32: torch.float32,
    DType.FLOAT16: torch.float16,
    DType.BFLOAT16: torch.bfloat16,
    DType.FLOAT64: torch.float64,
    DType.INT32: torch.int32,
    DType.INT64: torch.int64,
}
TORCH_OP: dict[ReduceOp, Any] = {
    ReduceOp.SUM: dist.ReduceOp.SUM,
    ReduceOp.AVG: dist.ReduceOp.AVG,
    ReduceOp.MAX: dist.ReduceOp.MAX,
    ReduceOp.MIN: dist.ReduceOp.MIN,
    ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT,
}
REDUCING = {Collective.ALL_REDUCE, Collective.REDUCE, Collective.REDUCE_SCATTER}
# Relative tolerance for `avg`, whose result is not an integer.
AVG_RTOL: dict[DType, float] = {
    DType.FLOAT64: 1e-12,
    DType.FLOAT32: 1e-6,
    DType.FLOAT16: 1e-3,
    DType.BFLOAT16: 8e-3,
}
ROOT = 0

# torch >= 2.12 renamed the tensor-in/tensor-out variants; keep working on older builds.
_all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


def pattern(seed: int, rank: int, n: int, op: ReduceOp | None) -> torch.Tensor:
    """Rank `rank`'s clean input: int64 values 1..8 (1..2 for product, so 2**world stays exact)."""
    i = torch.arange(n, dtype=torch.int64)
    if op == ReduceOp.PRODUCT:
        return 1 + (seed + rank + i) % 2
    # 3*rank makes every rank's value distinct per element for world <= 8, so max/min
    # have a unique owner and a corrupted owner always shows.
    return 1 + (seed + 3 * rank + i) % 8


def reduce_exact(parts: list[torch.Tensor], op: ReduceOp) -> torch.Tensor:
    """The exact reduction of int64 parts, float64 for avg."""
    stacked = torch.stack(parts)
    if op == ReduceOp.SUM:
        return stacked.sum(0)
    if op == ReduceOp.AVG:
        return stacked.to(torch.float64).mean(0)
    if op == ReduceOp.MAX:
        return stacked.amax(0)
    if op == ReduceOp.MIN:
        return stacked.amin(0)
    return stacked.prod(0)


@dataclass
class Case:
    """One collective ready to launch repeatedly, then verify against its exact result."""

    launch: Callable[[], None]
    reset: Callable[[], None]
    output: torch.Tensor
    expected: torch.Tensor | None  # None: nothing to check on this rank (reduce off-root, barrier)
    sources: int = 1  # number of equal chunks of `output`, each from one source rank
    source_of_chunk: Callable[[int], int] = lambda j: j

    def wrong(self, dtype: DType, op: ReduceOp | None) -> tuple[int, dict[str, int]]:
        """Count elements differing from the exact result, in total and per source rank."""
        if self.expected is None:
            return 0, {}
        got = self.output.detach().to("cpu", torch.float64)
        want = self.expected.to(torch.float64)
        if op == ReduceOp.AVG:
            bad = (got - want).abs() > AVG_RTOL[dtype] * want.abs()
        else:
            bad = got != want
        total = int(bad.sum())
        if total == 0 or self.sources == 1:
            return total, {}
        per_chunk = bad.reshape(self.sources, -1).sum(1).tolist()
        return total, {str(self.source_of_chunk(j)): int(c) for j, c in enumerate(per_chunk) if c}


def elements_for(collective: Collective, size_bytes: int, dtype: DType, world: int) -> int:
    """Elements in the nccl-tests `size` buffer, rounded down to a multiple of the world size."""
    n = max(1, size_bytes // TORCH_DTYPE[dtype].itemsize)
    if collective in {Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL}:
        n = max(world, n - n % world)
    return n


def prepare(
    ctx: CheckContext, collective: Collective, op: ReduceOp | None, dtype: DType, count: int
) -> Case:
    """Buffers, the launch function and the exact expected output of one collective."""
    r, n, seed = ctx.rank.rank, ctx.rank.world_size, ctx.rank.seed
    tdt, dev = TORCH_DTYPE[dtype], ctx.device
    corrupt = 1 if ctx.has_fault(FaultKind.CORRUPT) else 0

    def clean(rank: int, length: int) -> torch.Tensor:
        return pattern(seed, rank, length, op)

    def mine(length: int) -> torch.Tensor:
        return (clean(r, length) + corrupt).to(dev, tdt)

    torch_op = TORCH_OP[op] if op is not None else None

    if collective == Collective.ALL_REDUCE:
        buf = mine(count)
        src = buf.clone()
        exp = reduce_exact([clean(k, count) for k in range(n)], op)
        return Case(lambda: dist.all_reduce(buf, torch_op), lambda: buf.copy_(src), buf, exp)
    if collective == Collective.REDUCE:
        buf = mine(count)
        src = buf.clone()
        exp = reduce_exact([clean(k, count) for k in range(n)], op) if r == ROOT else None
        return Case(lambda: dist.reduce(buf, ROOT, torch_op), lambda: buf.copy_(src), buf, exp)
    if collective == Collective.BROADCAST:
        buf = mine(count) if r == ROOT else torch.zeros(count, dtype=tdt, device=dev)
        src = buf.clone()
        exp = clean(ROOT, count)
        return Case(
            lambda: dist.broadcast(buf, ROOT), lambda: buf.copy_(src), buf, exp, 1, lambda j: ROOT
        )
    if collective == Collective.ALL_GATHER:
        chunk = count // n
        inp, out = mine(chunk), torch.zeros(chunk * n, dtype=tdt, device=dev)
        exp = torch.cat([clean(k, chunk) for k in range(n)])
        return Case(lambda: _all_gather(out, inp), lambda: out.zero_(), out, exp, n)
    if collective == Collective.REDUCE_SCATTER:
        chunk = count // n
        inp, out = mine(chunk * n), torch.zeros(chunk, dtype=tdt, device=dev)
        full = reduce_exact([clean(k, chunk * n) for k in range(n)], op)
        exp = full[r * chunk : (r + 1) * chunk]
        return Case(lambda: _reduce_scatter(out, inp, torch_op), lambda: out.zero_(), out, exp)
    if collective == Collective.ALL_TO_ALL:
        chunk = count // n
        inp, out = mine(chunk * n), torch.zeros(chunk * n, dtype=tdt, device=dev)
        exp = torch.cat([clean(k, chunk * n)[r * chunk : (r + 1) * chunk] for k in range(n)])
        return Case(lambda: dist.all_to_all_single(out, inp), lambda: out.zero_(), out, exp, n)
    if collective == Collective.SEND_RECV:
        return _ring(ctx, mine(count), clean((r - 1) % n, count))
    # Barrier: nothing to verify, the call completing is the check.
    return Case(dist.barrier, lambda: None, torch.zeros(0), None)


def _ring(ctx: CheckContext, inp: torch.Tensor, expected: torch.Tensor) -> Case:
    """Send to rank+1 and receive from rank-1 in one batch (no deadlock on nccl)."""
    r, n = ctx.rank.rank, ctx.rank.world_size
    out = torch.zeros_like(inp)
    prev = (r - 1) % n

    def launch() -> None:
        if n == 1:
            out.copy_(inp)
            return
        ops = [
            dist.P2POp(dist.isend, inp, (r + 1) % n),
            dist.P2POp(dist.irecv, out, prev),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    return Case(launch, lambda: out.zero_(), out, expected, 1, lambda j: prev)


def unsupported(backend: str, collective: Collective, op: ReduceOp | None, dtype: DType) -> str:
    """Why this combination cannot run here, or "" if it can."""
    if op == ReduceOp.AVG and backend == "gloo":
        return "gloo has no avg reduction"
    if op == ReduceOp.AVG and dtype in {DType.INT32, DType.INT64}:
        return "avg is defined for floating-point types only"
    return ""


def combinations(
    collectives: list[Collective], ops: list[ReduceOp], dtypes: list[DType]
) -> list[tuple[Collective, ReduceOp | None, DType]]:
    """Every (collective, op, dtype) to run; op is None for collectives that do not reduce."""
    out: list[tuple[Collective, ReduceOp | None, DType]] = []
    for c in collectives:
        for d in [DType.FLOAT32] if c == Collective.BARRIER else dtypes:
            out.extend((c, o, d) for o in (ops if c in REDUCING else [None]))
    return out


def runnable(
    ctx: CheckContext,
    check: str,
    collectives: list[Collective],
    ops: list[ReduceOp],
    dtypes: list[DType],
    rows: list[Row],
) -> Iterator[tuple[dict[str, Any], Collective, ReduceOp | None, DType]]:
    """Each combination this backend can run, with its row identity; the others are
    appended to `rows` as SKIP rows that say why."""
    for collective, op, dtype in combinations(collectives, ops, dtypes):
        ident = {
            "check": check,
            "collective": collective.value,
            "op": op.value if op else None,
            "dtype": dtype.value,
        }
        why = unsupported(ctx.rank.backend, collective, op, dtype)
        if why:
            rows.append(ctx.row(**ident, status=Status.SKIP.value, message=why))
        else:
            yield ident, collective, op, dtype


def verdict_fields(wrong: int, by_source: dict[str, int], total: int) -> dict[str, Any]:
    """status / message / details of a verified buffer."""
    if not wrong:
        return {"wrong": 0, "status": Status.PASS.value, "message": ""}
    msg = f"{wrong} of {total} elements wrong"
    if by_source:
        worst = max(by_source, key=lambda k: by_source[k])
        msg += f"; from rank {worst}: {by_source[worst]}"
    return {
        "wrong": wrong,
        "status": Status.FAIL.value,
        "message": msg,
        "details": {"wrong_by_source": by_source},
    }


ALL_COLLECTIVES = list(Collective)
REDUCE_OPS = list(ReduceOp)
CORRECTNESS_DTYPES = [DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16, DType.INT32, DType.INT64]


class CollectivesParams(StepSpec):
    """Correctness of every collective, op and dtype at one buffer size."""

    check: Literal["collectives"]
    collectives: list[Collective] = Field(
        default_factory=lambda: list(ALL_COLLECTIVES), min_length=1
    )
    ops: list[ReduceOp] = Field(default_factory=lambda: list(REDUCE_OPS), min_length=1)
    dtypes: list[DType] = Field(default_factory=lambda: list(CORRECTNESS_DTYPES), min_length=1)
    size: ByteSize = ByteSize(64 * 1024)
    repeats: int = Field(default=2, ge=1, le=1000)  # each verified: catches a flaky rank

    @field_validator("size")
    @classmethod
    def _positive(cls, v: ByteSize) -> ByteSize:
        if v <= 0:
            raise ValueError("size must be at least 1 byte")
        return v


def run_collectives(ctx: CheckContext, p: CollectivesParams) -> list[Row]:
    """Every listed collective returns exactly the expected elements on every rank."""
    rows: list[Row] = []
    for ident, collective, op, dtype in runnable(
        ctx, p.check, p.collectives, p.ops, p.dtypes, rows
    ):
        count = elements_for(collective, int(p.size), dtype, ctx.rank.world_size)
        case = prepare(ctx, collective, op, dtype, count)
        wrong, by_source, samples = 0, {}, []
        for i in range(p.repeats):
            case.reset()
            ctx.enter(collective.value, i)
            samples.append(ctx.time_us(case.launch))
            w, s = case.wrong(dtype, op)
            wrong += w
            for k, v in s.items():
                by_source[k] = by_source.get(k, 0) + v
        total = case.output.numel() * p.repeats
        rows.append(
            ctx.row(
                **ident,
                size_bytes=count * TORCH_DTYPE[dtype].itemsize,
                iters=p.repeats,
                samples_us=tuple(samples),
                **verdict_fields(wrong, by_source, total),
            )
        )
    return rows
