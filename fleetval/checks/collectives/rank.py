"""Exact-result collectives: buffers whose every expected element is known (nccl-tests style).

Element i of rank r's input is a small integer derived from (seed, r, i), chosen so that
every partial result of the reduction is exactly representable in every dtype, whatever
order or tree the backend reduces in, at any world size (proven to 4096 ranks by
tests/unit/test_patterns.py). Element i is *led* by rank (i + seed) mod world; only the
`SPAN` ranks from its leader on contribute anything but the identity:

- sum / avg: those ranks send 1..4, all others 0, so every partial sum is an integer
  <= 16 (bfloat16 is exact only to 256);
- product: those ranks send +-1 or +-2, all others 1, so every partial product is
  +-2**k with k <= 4;
- max / min: the leader sends 9..16 (max) or 1..8 (min), every other rank a value on
  the other side, so the extreme is unique and a wrong one is traced to its leader.

The expected result of every element has a closed form, and inputs and expectations are
made a chunk at a time, so verifying costs O(message) memory, never O(world x message).
Any differing element is a real error (zero tolerance); only `avg` has a tolerance, the
worst-case rounding of its few non-zero terms. Where the source of an element is known
(gather, all_to_all, broadcast, the send/recv ring, a max or min) wrong elements are
counted per source rank, which names a corrupting rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import torch
import torch.distributed as dist

from fleetval.checks.base import CheckContext
from fleetval.checks.collectives.params import CollectivesParams
from fleetval.store.schema import Row
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
ROOT = 0
SPAN = 4  # ranks per element that send more than the identity of a sum or product
CHUNK = 1 << 16  # elements made or verified at once on CPU: temporaries of 512 KiB stay in cache
GPU_CHUNK_MAX = 1 << 26  # on a GPU: a 16 GiB bf16 buffer in 128 chunks, not 131,072 (a sync each)
CHUNK_BYTES_PER_ELEMENT = 64  # temporaries per element made or verified (int64/float64, masks)

# torch >= 2.12 renamed the tensor-in/tensor-out variants; keep working on older builds.
_all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)

Of = Callable[[torch.Tensor], torch.Tensor]  # element indices (int64) -> one value per index
_M32 = 0xFFFFFFFF


def avg_rtol(dtype: DType) -> float:
    """Worst-case relative error of `avg`: SPAN additions, the scaling by 1/world and its
    rounding, each off by at most the unit roundoff (eps / 2); +1 on any input is 6x more."""
    return (SPAN + 2) * torch.finfo(TORCH_DTYPE[dtype]).eps / 2


def _hash(seed: int, idx: torch.Tensor, rank: torch.Tensor | int | None = None) -> torch.Tensor:
    """32 well-mixed bits of (seed, idx[, rank]), elementwise (idx and rank broadcast).

    Every bit of the 64-bit index counts (both halves enter, each times an odd constant), so
    no pattern repeats within a buffer of any size; indices below 2**31 hash as they always
    have. int64 arithmetic kept below 2**63, so it is the same on every device; in place where
    it can be, since making and verifying a large message is mostly this function."""
    x = (idx & _M32) * 0x27D4EB2F  # < 2**62
    x.add_(((idx >> 32) & _M32) * 0x2F0F3A5D).bitwise_and_(_M32)  # 0 below 2**32: sums mod 2**32
    if rank is not None:
        x = x + (torch.as_tensor(rank) & _M32) * 0x165667B1
    x.add_(seed * 0x9E3779B1 & _M32).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 15).mul_(0x2C1B3C6D).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 12).mul_(0x297A2D39).bitwise_and_(_M32)
    return x.bitwise_xor_(x >> 15)


# Which bits of an element's hash pick what (2 bits per place for sums and products).
_SUM_BITS, _PRODUCT_BITS, _EXTREME_BITS, _OTHERS_BITS = 0, 2 * SPAN, 4 * SPAN, 4 * SPAN + 3


def _term(h: torch.Tensor, op: ReduceOp, place: torch.Tensor | int) -> torch.Tensor:
    """The value the rank at `place` (< SPAN) in an element's order sends for a sum or product."""
    if op == ReduceOp.PRODUCT:
        g = h >> (_PRODUCT_BITS + 2 * place)
        return (1 + ((g >> 1) & 1)) * (1 - 2 * (g & 1))  # +-1 or +-2
    return 1 + ((h >> (_SUM_BITS + 2 * place)) & 3)


def _extreme(h: torch.Tensor, op: ReduceOp) -> torch.Tensor:
    """The leader's value of a max (9..16) or min (1..8): beyond every other rank's."""
    return (9 if op == ReduceOp.MAX else 1) + ((h >> _EXTREME_BITS) & 7)


def lead(seed: int, idx: torch.Tensor, world: int) -> torch.Tensor:
    """The rank leading each element: the one holding the extreme of a max or min."""
    return torch.remainder(idx + seed % world, world)


def values(
    seed: int, rank: int | torch.Tensor, idx: torch.Tensor, op: ReduceOp | None, world: int
) -> torch.Tensor:
    """Rank `rank`'s clean input at element indices `idx`, int64 (rank and idx broadcast).

    op None (data moved, not reduced): 1..64, different for every (rank, index)."""
    if op is None:
        return 1 + (_hash(seed, idx, rank) & 63)
    h = _hash(seed, idx)
    place = torch.remainder(rank - seed % world - idx, world)  # 0 for the element's leader
    if op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
        identity = 1 if op == ReduceOp.PRODUCT else 0
        return torch.where(place < SPAN, _term(h, op, place.clamp(max=SPAN - 1)), identity)
    # Every other rank sends a value on the far side of the leader's: 1..8 for max, 9..16 for min.
    others = (9 if op == ReduceOp.MIN else 1) + (((h >> _OTHERS_BITS) + place) & 7)
    return torch.where(place == 0, _extreme(h, op), others)


def reduced(seed: int, idx: torch.Tensor, op: ReduceOp, world: int) -> torch.Tensor:
    """The exact reduction over all `world` ranks at `idx`, in closed form: O(len(idx)) time
    and memory whatever the world size (int64; float64 for avg)."""
    h = _hash(seed, idx)
    if op in (ReduceOp.MAX, ReduceOp.MIN):
        return _extreme(h, op)
    out = _term(h, op, 0)
    for place in range(1, min(SPAN, world)):
        if op == ReduceOp.PRODUCT:
            out.mul_(_term(h, op, place))
        else:
            out.add_(_term(h, op, place))
    return out.to(torch.float64) / world if op == ReduceOp.AVG else out


def pattern(
    seed: int, rank: int, n: int, op: ReduceOp | None, world: int | None = None
) -> torch.Tensor:
    """Rank `rank`'s clean input, elements 0..n-1 (int64); reductions need the world size."""
    if op is not None and world is None:
        raise ValueError(f"the {op.value} pattern depends on the world size; pass world=")
    return values(seed, rank, torch.arange(n), op, world or 1)


def chunk_elements(device_type: str, free_bytes: int | None = None) -> int:
    """Elements made or verified at once: on CPU what keeps temporaries in cache; on a GPU a
    power of two whose temporaries take at most an eighth of the free memory, up to
    GPU_CHUNK_MAX (large kernels, few host syncs when counting wrong elements)."""
    if device_type != "cuda":
        return CHUNK
    fit = GPU_CHUNK_MAX if free_bytes is None else free_bytes // 8 // CHUNK_BYTES_PER_ELEMENT
    return max(CHUNK, min(GPU_CHUNK_MAX, 1 << max(fit.bit_length() - 1, 0)))


def _chunk_for(device: torch.device) -> int:
    if device.type != "cuda":
        return CHUNK
    return chunk_elements("cuda", torch.cuda.mem_get_info(device)[0])


def _chunks(n: int, size: int = CHUNK) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, size):
        yield lo, min(lo + size, n)


def _fill(out: torch.Tensor, of: Of, plus: int = 0) -> torch.Tensor:
    """Write of(index) + plus into `out` a chunk at a time, in out's dtype and device."""
    for lo, hi in _chunks(out.numel(), _chunk_for(out.device)):
        out[lo:hi] = of(torch.arange(lo, hi, device=out.device)) + plus
    return out


@dataclass(frozen=True)
class Case:
    """One collective ready to launch repeatedly, then verify against its exact result."""

    launch: Callable[[], object]
    reset: Callable[[], object]
    sent: torch.Tensor  # what this rank contributes
    output: torch.Tensor
    expect: Of | None  # output index -> exact value; None: nothing to check on this rank
    source: Of | None = None  # output index -> the rank the element's value came from

    def wrong(self, dtype: DType, op: ReduceOp | None) -> tuple[int, dict[str, int]]:
        """Count elements differing from the exact result, in total and per source rank."""
        if self.expect is None:
            return 0, {}
        rtol = avg_rtol(dtype) if op == ReduceOp.AVG else 0.0
        out = self.output.detach().reshape(-1)
        total, by_source = 0, torch.zeros(0, dtype=torch.int64)
        for lo, hi in _chunks(out.numel(), _chunk_for(out.device)):
            idx = torch.arange(lo, hi, device=out.device)
            got = out[lo:hi].to(torch.float64)
            want = self.expect(idx).to(torch.float64)
            # Written so that NaN counts as wrong.
            bad = ~((got - want).abs() <= rtol * want.abs()) if rtol else got != want
            n_bad = int(bad.sum())
            total += n_bad
            if n_bad and self.source is not None:
                by_source = _add(by_source, torch.bincount(self.source(idx[bad])).cpu())
        return total, {str(k): int(c) for k, c in enumerate(by_source.tolist()) if c}


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Sum of two count vectors of different lengths."""
    if len(a) < len(b):
        a, b = b, a
    a[: len(b)] += b
    return a


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
    _release_cached(ctx.device)
    if collective == Collective.BARRIER:  # nothing to verify: the call completing is the check
        empty = torch.zeros(0)
        return Case(dist.barrier, lambda: None, empty, empty, None)
    n = ctx.rank.world_size
    length = count  # per-rank input: one chunk for all_gather, whole chunks for the others
    if collective == Collective.ALL_GATHER:
        length = count // n
    elif collective in (Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL):
        length = count - count % n
    inp = _input(ctx, op, TORCH_DTYPE[dtype], length)
    if collective in REDUCING:
        assert op is not None, "combinations() gives every reducing collective an op"
        return _reducing(ctx, collective, op, inp)
    return _moving(ctx, collective, inp)


def _release_cached(device: torch.device) -> None:
    """Give the allocator's cached blocks back before a case's buffers are made.

    NOTE: a block freed by a smaller case cannot hold a larger one, so a 1-16 GiB sweep kept
    1+2+4+8 GiB cached beside the 16 GiB case: 68.8 GiB peak on an H200 (bench/RESULTS.md).
    Ranks sharing a GPU cannot use each other's cache at all."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _input(ctx: CheckContext, op: ReduceOp | None, dtype: torch.dtype, length: int) -> torch.Tensor:
    """This rank's input on its device, made a chunk at a time; +1 on a `corrupt` rank."""
    r, n, seed = ctx.rank.rank, ctx.rank.world_size, ctx.rank.seed
    corrupt = 1 if ctx.has_fault(FaultKind.CORRUPT) else 0
    buf = torch.empty(length, dtype=dtype, device=ctx.device)
    return _fill(buf, lambda idx: values(seed, r, idx, op, n), corrupt)


def _reducing(ctx: CheckContext, collective: Collective, op: ReduceOp, inp: torch.Tensor) -> Case:
    """all_reduce, reduce or reduce_scatter of `inp`, expected in closed form."""
    r, n, seed = ctx.rank.rank, ctx.rank.world_size, ctx.rank.seed
    torch_op = TORCH_OP[op]
    # This rank's output is the reduced buffer from `offset` on (its shard, for reduce_scatter).
    offset = r * (inp.numel() // n) if collective == Collective.REDUCE_SCATTER else 0

    def want(t: torch.Tensor) -> torch.Tensor:
        return reduced(seed, offset + t, op, n)

    def leader(t: torch.Tensor) -> torch.Tensor:
        return lead(seed, offset + t, n)

    source = leader if op in (ReduceOp.MAX, ReduceOp.MIN) else None
    if collective == Collective.REDUCE_SCATTER:
        out = torch.zeros(inp.numel() // n, dtype=inp.dtype, device=inp.device)
        return Case(lambda: _reduce_scatter(out, inp, torch_op), out.zero_, inp, out, want, source)
    sent = inp.clone()  # all_reduce and reduce work in place: keep what to reset to
    if collective == Collective.ALL_REDUCE:
        return Case(
            lambda: dist.all_reduce(inp, torch_op), lambda: inp.copy_(sent), sent, inp, want, source
        )
    return Case(
        lambda: dist.reduce(inp, ROOT, torch_op),
        lambda: inp.copy_(sent),
        sent,
        inp,
        want if r == ROOT else None,
        source,
    )


def _moving(ctx: CheckContext, collective: Collective, inp: torch.Tensor) -> Case:
    """broadcast, all_gather, all_to_all or the send/recv ring: every output element is a
    known element of a known rank's input."""
    r, n, seed = ctx.rank.rank, ctx.rank.world_size, ctx.rank.seed

    def expect(src: Of, at: Of) -> Of:
        """Output element t is element at(t) of rank src(t)'s input."""
        return lambda t: values(seed, src(t), at(t), None, n)

    def rank_only(rank: int) -> Of:
        return lambda t: torch.full_like(t, rank)

    def same(t: torch.Tensor) -> torch.Tensor:
        return t

    if collective == Collective.BROADCAST:
        buf = inp if r == ROOT else torch.zeros_like(inp)
        sent = buf.clone()
        root = rank_only(ROOT)
        return Case(
            lambda: dist.broadcast(buf, ROOT),
            lambda: buf.copy_(sent),
            sent,
            buf,
            expect(root, same),
            root,
        )
    if collective == Collective.SEND_RECV:
        prev = rank_only((r - 1) % n)
        return _ring(ctx, inp, expect(prev, same), prev)
    chunk = inp.numel() if collective == Collective.ALL_GATHER else inp.numel() // n

    def by_chunk(t: torch.Tensor) -> torch.Tensor:
        return t // chunk

    if collective == Collective.ALL_GATHER:
        out = torch.zeros(chunk * n, dtype=inp.dtype, device=inp.device)
        want = expect(by_chunk, lambda t: t % chunk)
        return Case(lambda: _all_gather(out, inp), out.zero_, inp, out, want, by_chunk)
    out = torch.zeros_like(inp)  # all_to_all: chunk j of rank k's input goes to rank j
    want = expect(by_chunk, lambda t: r * chunk + t % chunk)
    return Case(lambda: dist.all_to_all_single(out, inp), out.zero_, inp, out, want, by_chunk)


def host_staged(backend: str, device: torch.device) -> bool:
    """Whether send/recv goes through host memory here.

    NOTE: gloo stages CUDA tensors through the host for its collectives, but its send/recv
    hands the tensor's device pointer to its TCP pair, which then reads GPU memory as host
    memory (a failure whose transport error names no rank)."""
    return backend == "gloo" and device.type == "cuda"


Peered = list[tuple[torch.Tensor, int]]  # (buffer, peer rank)


def exchange(sends: Peered, recvs: Peered, *, staged: bool) -> None:
    """Post the sends, then the receives, in one batch (no deadlock on nccl) and wait for all;
    `staged`: through host copies, the received ones copied back to the device after."""
    if staged:
        host_recvs = [(torch.empty(t.shape, dtype=t.dtype), peer) for t, peer in recvs]
        sends = [(t.detach().to("cpu", copy=True), peer) for t, peer in sends]
        recvs, device_recvs = host_recvs, recvs
    ops = [dist.P2POp(dist.isend, t, peer) for t, peer in sends]
    ops += [dist.P2POp(dist.irecv, t, peer) for t, peer in recvs]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    if staged:
        for (dev, _), (host, _) in zip(device_recvs, recvs, strict=True):
            dev.copy_(host)


def _ring(ctx: CheckContext, inp: torch.Tensor, want: Of, prev: Of) -> Case:
    """Send to rank+1 and receive from rank-1 in one batch (no deadlock on nccl)."""
    r, n = ctx.rank.rank, ctx.rank.world_size
    out = torch.zeros_like(inp)
    staged = host_staged(ctx.rank.backend, inp.device)

    def launch() -> None:
        if n == 1:
            out.copy_(inp)
            return
        exchange([(inp, (r + 1) % n)], [(out, (r - 1) % n)], staged=staged)

    return Case(launch, out.zero_, inp, out, want, prev)


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
) -> Iterator[tuple[Identity, Collective, ReduceOp | None, DType]]:
    """Each combination this backend can run, with its row identity; the others are
    appended to `rows` as SKIP rows that say why."""
    for collective, op, dtype in combinations(collectives, ops, dtypes):
        ident = Identity(
            check=check,
            collective=collective.value,
            op=op.value if op else None,
            dtype=dtype.value,
        )
        why = unsupported(ctx.rank.backend, collective, op, dtype)
        if why:
            rows.append(ctx.row(**ident, status=Status.SKIP.value, message=why))
        else:
            yield ident, collective, op, dtype


class Identity(TypedDict):
    """The row identity of one collective case."""

    check: str
    collective: str
    op: str | None
    dtype: str


class Verified(TypedDict):
    """A row's verdict on a verified buffer (or on a timed one: status and message only)."""

    wrong: NotRequired[int]
    status: str
    message: str
    details: NotRequired[dict[str, dict[str, int]]]  # wrong_by_source: source rank -> elements


def verdict_fields(wrong: int, by_source: dict[str, int], total: int) -> Verified:
    """status / message / details of a verified buffer."""
    if not wrong:
        return Verified(wrong=0, status=Status.PASS.value, message="")
    msg = f"{wrong} of {total} elements wrong"
    if by_source:
        worst = max(by_source, key=lambda k: by_source[k])
        msg += f"; from rank {worst}: {by_source[worst]}"
    return Verified(
        wrong=wrong,
        status=Status.FAIL.value,
        message=msg,
        details={"wrong_by_source": by_source},
    )


def run_collectives(ctx: CheckContext, p: CollectivesParams) -> list[Row]:
    """Every listed collective returns exactly the expected elements on every rank."""
    rows: list[Row] = []
    for ident, collective, op, dtype in runnable(
        ctx, p.check, p.collectives, p.ops, p.dtypes, rows
    ):
        count = elements_for(collective, int(p.size), dtype, ctx.rank.world_size)
        case = None  # NOTE: the previous case's buffers go before this one's are made
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
