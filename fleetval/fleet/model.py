"""One model of the fabric: every timed job explains its log-bandwidth as a level plus effects.

    log(score) = level[sweep, phase, sku] + load[sweep, round]
                 - log(1 + sum over the job's parts of (exp(-effect) - 1))
                 + noise
    parts:       node[n] for each node in the job            (slow in everything it runs)
                 nic[x], nic[y], link[x, y]                   (pair jobs: the network)
                 trunk[level, group(x), group(y)]             (pair jobs across two groups)

A job's slow parts add in time (`_composed`): with one slow part the sum of the effects.

Every job of tonight's sweep and of the fleet's recent sweeps (older ones weighted less,
`HALF_LIFE`) is fitted at once. Faults only ever slow a job, so every effect is at most 0;
most effects are 0, so each carries an L1 penalty of `KAPPA` noise units per unit of size
(a link's `LINK_PRIOR` times that; an effect's change since the past sweeps,
`CHANGE_PRICE` times): one effect that explains many jobs (a trunk under six
slow crossings) is cheaper than many that explain one each, which is how a slowness that a
group pair explains is never counted against a node or a link. The loss is Huber's on the
slow side (a job is disturbed slower, never faster), so one wild job moves nothing far; the
noise is the residuals' robust spread over every job.

An effect is flagged when its penalized likelihood ratio against "no worse than the
tolerance" (`evidence`: the fit redone with the effect held at the threshold, so the other
effects may take its jobs if they can) clears the false-discovery rate over every effect
tested, and it rests on two of tonight's jobs or more (a job can be disturbed once by
anything, and a past sweep's job was fitted beside effects that have changed since); that
evidence is taken without the slowest of its jobs that tonight's transients may have made
(`fleetval.fleet.transients`). A node
is judged healthy where its fastest jobs bound it within the tolerance
(`fleetval.fleet.judge`; where the noise is large, within a wider share that is said).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist

import numpy as np
import scipy.sparse as sp
from scipy.stats import t as student

from fleetval.fleet import transients
from fleetval.fleet.effects import HUBER, Effect, Fit, Key, Obs, pair, trunk_keys
from fleetval.fleet.settings import SweepSettings
from fleetval.fleet.topology import NO_TOPOLOGY, Topology
from fleetval.vocab import SweepPhase

KAPPA = 2.0  # the L1 penalty, noise units per unit of an effect: smaller pulls stay 0
# NOTE: a fleet has n nodes and n(n-1)/2 links, so any one link is less likely bad than any
# one node: two slow pairs of one node are its network's, not two links, unless its other
# pairs say otherwise. Too heavy, and a lone slow link is blamed on its ends' networks.
LINK_PRIOR = 1.2
# NOTE: a fault that began tonight is its effect and its change since the past sweeps (the
# past jobs as they were), so it costs 1 + CHANGE_PRICE of what it costs on a fresh store.
# Above LINK_PRIOR - 1, a node's network seen fine in past sweeps still costs more than a
# link never measured (a lone slow job between two nodes is the link's); at 1 a new fault
# paid twice, and a 5x slow node at 50% noise went unflagged after ten clean sweeps in 3 of
# 6 seeds where a fresh store flagged it in 6.
CHANGE_PRICE = 0.5
LOAD_SD = 1.0  # prior spread of a round's load (log scale): a busy box moves it 20x
FAILED = math.log(0.01)  # a failed job reads as 1% of its level
SIGMA_MIN = 0.005  # the noise is never taken as below 0.5%
SIGMA_PRIOR = 0.05  # the noise assumed before the residuals say otherwise ...
PRIOR_JOBS = 4  # ... counted as this many jobs
# A fleet small enough for exact leverages (dense) and a refit per job that fixes its effects:
# at most this many of tonight's jobs and of all sweeps' jobs
EXACT_TONIGHT, EXACT_ROWS = 256, 4000
PAST = "@past"  # an effect's change since the past sweeps (on their jobs): fitted, not tested
COMPOSE_STEPS = 6  # linearizations of the slow parts' sum in time, at most, per fit ...
COMPOSE_TOL = 0.1  # ... until the last is within this many noise units of it in every job


# NOTE: a block of at most this many cells (jobs x columns) is held dense: a sparse product
# costs ~10 us whatever its size, the descent makes ~40 a pass, and a clean 8-node sweep
# beside ten stored ones makes ~400 passes (~6,000 without `_newton`)
DENSE_CELLS = 1 << 16
# NOTE: at 1,000 a clean 1,024-node sweep at 30% noise (~1,000 effects active) spent 97 s of
# its first 100 in 9,515 dense solves; at 256, 4 s, the 8-node fleets' steps unchanged
NEWTON_COLS = 256  # active columns at most for the descent's exact step (a dense solve) ...
NEWTON_CUTS = 20  # ... and its steps, each cut where an effect reaches 0 or its floor
Matrix = sp.spmatrix | np.ndarray


@dataclass
class _Block:
    """Columns updated together: `most` of them share a row at most (1: exact updates)."""

    kind: str
    idx: np.ndarray
    most: int
    X: Matrix
    XT: Matrix
    XT2: Matrix  # XT's entries squared (a job's weight on an effect may be below 1)


def _block(X: sp.csc_matrix, kind: str, idx: np.ndarray, most: int) -> _Block:
    return _Block(kind, idx, most, *_operands(X[:, idx]))


def _operands(Xb: Matrix) -> tuple[Matrix, Matrix, Matrix]:
    """A block's matrix, its transpose and its transpose's entries squared; dense where
    small (`DENSE_CELLS`)."""
    if Xb.shape[0] * Xb.shape[1] <= DENSE_CELLS:
        A = Xb if isinstance(Xb, np.ndarray) else Xb.toarray()
        AT = np.ascontiguousarray(A.T)
        return A, AT, AT * AT
    XT = Xb.T.tocsr()
    return Xb, XT, _squared(XT)


def _squared(XT: sp.csr_matrix) -> sp.csr_matrix:
    """`XT`'s entries squared: `XT` itself where every weight is 1 (no job has two slow
    parts), which is most blocks of most fits, rebuilt at every pass over the active set."""
    return XT if np.all(XT.data == 1.0) else XT.multiply(XT).tocsr()


@dataclass
class _Shift:
    """Effects and their change since the past sweeps (`base`, `past`: the same key), moved
    together so that the past jobs' fit holds: the effect by c, its change by -c, which moves
    tonight's jobs only. Without it the descent zigzags between the two (the past jobs hold
    both) and needs hundreds of passes."""

    base: np.ndarray
    past: np.ndarray
    most: int
    X: Matrix  # the base columns on tonight's jobs only
    XT: Matrix
    XT2: Matrix  # XT's entries squared


def _shift_of(base: np.ndarray, past: np.ndarray, most: int, Xt: Matrix) -> _Shift:
    return _Shift(base, past, most, *_operands(Xt))


@dataclass
class _Design:
    """The sparse design: rows are jobs, columns levels, loads, then effects.

    `X` is the model linearized where the effects stand (`_composed`): a job's weight on each
    of its effects and an `offset`; `X0` is which effects each job holds (all weights 1:
    the model where no effect is slow)."""

    X: sp.csc_matrix
    Xr: sp.csr_matrix
    y: np.ndarray
    failed: np.ndarray
    w0: np.ndarray  # prior weights (age)
    cols: list[tuple[str, Key]]  # ("level", ...), ("load", ...), then effects
    blocks: list[_Block]
    shifts: list[_Shift] = dataclasses.field(default_factory=list)
    offset: np.ndarray | None = None  # per job (None: 0)
    X0: sp.csc_matrix | None = None  # None: X
    tonight: sp.dia_matrix | None = None  # tonight's jobs (to build the shifts again)
    parts: tuple[np.ndarray, np.ndarray] | None = None  # `_parts(cols)`

    @cached_property
    def effect(self) -> np.ndarray:
        """Per column: an effect (not a level or a load)."""
        return np.array([c[0] not in ("level", "load") for c in self.cols])

    @cached_property
    def dense(self) -> np.ndarray:
        """`X` as an array (`_newton` takes its columns where they are few cells)."""
        return self.X.toarray()

    @cached_property
    def held(self) -> sp.csc_matrix:
        """Which effects each job holds (every weight 1)."""
        return self.X if self.X0 is None else self.X0


def _parts(cols: Sequence[tuple[str, Key]]) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the effect it is part of (its own index; a change since the past sweeps:
    its effect's; a level or a load: -1), and per effect its change's column (-1: none)."""
    index = {c: k for k, c in enumerate(cols)}
    part, change = np.full(len(cols), -1), np.full(len(cols), -1)
    for k, (kind, key) in enumerate(cols):
        if kind.endswith(PAST):
            part[k] = index[(kind[: -len(PAST)], key)]
            change[part[k]] = k
        elif kind not in ("level", "load"):
            part[k] = k
    return part, change


def _design(obs: Sequence[Obs], topology: Topology) -> _Design:
    index: dict[tuple[str, Key], int] = {}
    rows: list[int] = []
    cols: list[int] = []

    names: list[tuple[str, Key]] = []

    def col(kind: str, key: Key) -> int:
        if (kind, key) not in index:
            index[(kind, key)] = len(names)
            names.append((kind, key))
        return index[(kind, key)]

    for i, o in enumerate(obs):  # levels and loads first: their columns lead (`_n_base`)
        rows += [i, i]
        cols += [
            col("level", (str(o.age), o.phase.value, o.sku)),
            col("load", (str(o.age), str(o.round))),
        ]
    cached: dict[tuple[tuple[str, ...], bool], list[int]] = {}

    def effects(nodes: tuple[str, ...], past: bool) -> list[int]:
        """A job's effect columns (its nodes', link's, trunks'), and on a past sweep's job
        their changes since then too: the same for every job of the same nodes."""
        if (nodes, past) not in cached:
            if past:
                js = effects(nodes, False)
                js = js + [col(names[k][0] + PAST, names[k][1]) for k in js]
            else:
                js = [col("node", (n,)) for n in nodes]
                if len(nodes) == 2:
                    x, y = nodes
                    js += [col("nic", (x,)), col("nic", (y,)), col("link", pair(x, y))]
                    js += [col("trunk", t) for t in trunk_keys(x, y, topology)]
            cached[(nodes, past)] = js
        return cached[(nodes, past)]

    for i, o in enumerate(obs):
        # NOTE: one effect per node, link and trunk over every sweep (a link is measured once
        # in many sweeps: pooling is what names it), and on the past sweeps' jobs its change
        # since then (`PAST`, either way, at `CHANGE_PRICE`): a fault that began tonight
        # costs one change, not every past job that saw it fine left unexplained
        js = effects(o.nodes, bool(o.age))
        rows += [i] * len(js)
        cols += js
    n, m = len(obs), len(index)
    X = sp.csc_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, m))
    by_kind: dict[tuple[str, str], list[int]] = {}
    for k, (kind, key) in enumerate(names):  # a trunk's block is its level's
        by_kind.setdefault((kind, key[0] if kind.startswith("trunk") else ""), []).append(k)
    blocks = []
    for kind in (
        "level",
        "load",
        "node",
        "nic",
        "link",
        "node" + PAST,
        "nic" + PAST,
        "link" + PAST,
    ):
        if (kind, "") in by_kind:
            one = kind in ("level", "load", "link", "link" + PAST)
            blocks.append(_block(X, kind, np.array(by_kind[(kind, "")]), 1 if one else 2))
    for level in topology.levels:  # one trunk per row per level: exact updates
        for kind in ("trunk", "trunk" + PAST):
            if (kind, level) in by_kind:
                blocks.append(_block(X, kind, np.array(by_kind[(kind, level)]), 1))
    tonight = sp.diags(np.array([0.0 if o.age else 1.0 for o in obs]))
    shifts = [_shift(X, tonight, index, names, b) for b in blocks if b.kind in _SHIFTED]
    y = np.array([math.log(o.score) if o.score and o.score > 0 else 0.0 for o in obs])
    failed = np.array([o.failed or not (o.score and o.score > 0) for o in obs])
    w0 = np.array([o.weight for o in obs])
    return _Design(
        X, X.tocsr(), y, failed, w0, names, blocks, [x for x in shifts if x],
        tonight=tonight, parts=_parts(names),
    )  # fmt: skip


_SHIFTED = ("node", "nic", "link", "trunk")


def _shift(
    X: sp.csc_matrix,
    tonight: sp.dia_matrix,
    index: Mapping[tuple[str, Key], int],
    names: Sequence[tuple[str, Key]],
    b: _Block,
) -> _Shift | None:
    """The `_Shift` of block `b`'s effects that have a change since the past sweeps."""
    pairs = [(k, index.get((names[k][0] + PAST, names[k][1]))) for k in b.idx]
    base = np.array([k for k, q in pairs if q is not None], dtype=int)
    if not base.size:
        return None
    Xt = (tonight @ X[:, base]).tocsc()
    past = np.array([q for _, q in pairs if q is not None], dtype=int)
    return _shift_of(base, past, b.most, Xt)


def _targets(d: _Design, theta: np.ndarray) -> np.ndarray:
    """Each job's log-bandwidth less the linearized model's offset; a failed job's is its
    level's and its round's load's plus `FAILED`: what its effects must explain.

    NOTE: its round's load too: with its level's alone, a level and a load moved apart
    (the level up, the load down by as much) explained a failed job at the loads' small
    prior (loads of +-67 in a round with a dead node)."""
    y = d.y if d.offset is None else d.y - d.offset
    if not d.failed.any():
        return y
    k = _n_base(d)
    return np.where(d.failed, d.Xr[:, :k] @ theta[:k] + FAILED, y)


def _composed(d: _Design, theta: np.ndarray, tol: float) -> _Design:
    """The design linearized where the effects `theta` stand: a job's slow parts add up in
    time, not in log-bandwidth. A part at effect v takes exp(-v) of a healthy part's time,
    so a job of parts v_k runs at 1 / (1 + sum(exp(-v_k) - 1)) of its level: a slow node
    (21x) across a slow trunk (11x) is 31x, not 231x, as delays that add per call show
    (and a bottleneck, the slowest part alone, is closer to that than to the product). With
    one slow part at most this is the sum of the effects, unchanged.

    Linearized at `theta`: each part's weight is exp(-v_k) / (its job's total), and the
    offset is the rest. `d` itself where its own linearization is within `tol` of the model
    at `theta` in every job (small effects add in time as in log-bandwidth, to second order:
    two parts at 5% differ by 0.25%)."""
    assert d.parts is not None and d.tonight is not None  # a whole design (`_design`)
    X0, (of, changes) = d.held, d.parts
    C = X0.tocoo()
    comp = of[C.col]
    part = comp >= 0
    rows, cols, comp = C.row[part], C.col[part], comp[part]
    change = changes[comp]
    past_row = np.asarray(d.tonight.diagonal() == 0)[rows]
    # NOTE: a part's total on a past job is its effect and its change since; both columns
    # carry the same weight, so each part is counted once (its base column) in the sum
    total = theta[comp] + np.where(past_row & (change >= 0), theta[np.maximum(change, 0)], 0.0)
    per = np.exp(-total)
    own = cols == comp
    n = X0.shape[0]
    total_time = np.maximum(1.0 + np.bincount(rows[own], weights=per[own] - 1.0, minlength=n), 0.05)
    exact = -np.log(total_time)
    now = d.Xr @ np.where(d.effect, theta, 0.0) + (0.0 if d.offset is None else d.offset)
    if np.max(np.abs(exact - now), initial=0.0) < tol:
        return d
    weight = per / total_time[rows]
    offset = exact - np.bincount(rows, weights=weight * theta[cols], minlength=n)
    data = np.ones(C.nnz)
    data[np.nonzero(part)[0]] = weight
    X = sp.csc_matrix((data, (C.row, C.col)), shape=X0.shape)
    blocks = [_block(X, b.kind, b.idx, b.most) for b in d.blocks]
    shifts = [_shift_of(x.base, x.past, x.most, (d.tonight @ X[:, x.base]).tocsc())
              for x in d.shifts]  # fmt: skip
    return dataclasses.replace(
        d, X=X, Xr=X.tocsr(), blocks=blocks, shifts=shifts, offset=offset, X0=X0
    )


def _n_base(d: _Design) -> int:
    """The levels' and loads' columns (they lead)."""
    return int(np.count_nonzero(~d.effect))


def _huber_w(r: np.ndarray, sigma: float) -> np.ndarray:
    """IRLS weights of the one-sided Huber loss (`_loss`)."""
    a = -r / sigma
    return np.where(a <= HUBER, 1.0, HUBER / np.maximum(a, 1e-12))


def _loss(r: np.ndarray, w0: np.ndarray, sigma: float) -> float:
    """Huber's loss on the slow side only: a job can be disturbed slower by anything (its
    pull is bounded), never faster, so a job faster than its level costs in full. Without
    that, a round whose jobs were mostly slow (two crossings of a slow trunk and a slow
    node beside one fast control) was read as a slower round, the fast job its outlier."""
    a = -r / sigma
    rho = np.where(a <= HUBER, 0.5 * a * a, HUBER * a - 0.5 * HUBER * HUBER)
    return float(sigma * sigma * np.sum(w0 * rho))


def _penalties(d: _Design, sigma: float) -> np.ndarray:
    """Per column: the L1 weight (effects), 0 for levels and loads; a link's is
    `LINK_PRIOR` times a node's or a trunk's, a change's `CHANGE_PRICE` times."""
    lam = KAPPA * sigma * np.array([_price(kind) for kind, _ in d.cols])
    lam[~d.effect] = 0.0
    return lam


def _price(kind: str) -> float:
    return CHANGE_PRICE if kind.endswith(PAST) else LINK_PRIOR if kind == "link" else 1.0


def _objective(d: _Design, theta: np.ndarray, sigma: float, lam: np.ndarray) -> float:
    r = _targets(d, theta) - d.Xr @ theta
    loads = np.array([c[0] == "load" for c in d.cols])
    ridge = 0.5 * sigma * sigma / LOAD_SD**2 * float(np.sum(theta[loads] ** 2))
    return _loss(r, d.w0, sigma) + float(np.sum(lam * np.abs(theta))) + ridge


def _descend(
    d: _Design,
    theta: np.ndarray,
    sigma: float,
    *,
    fixed: Mapping[int, float] | None = None,
    floor: Mapping[int, float] | None = None,
    lam: np.ndarray | None = None,
    passes: int = 400,
    tol: float = 1e-4,  # log scale: 0.01%, far inside any noise
) -> np.ndarray:
    """Block coordinate descent (majorize-minimize) of the penalized Huber fit at a given
    noise: Huber weights refreshed each pass, each block updated exactly or by a separable
    bound (a row holds at most `most` of its columns), effects held at most 0.

    Passes over every column alternate with passes over the active ones only (levels, loads
    and the effects not at 0 and not held), each of those followed by an exact step of the
    active columns (`_newton`), until a pass over every column moves nothing: on a large
    fleet almost every effect stays 0, and a pass over them all costs ten of the active
    ones'."""
    theta = theta.copy()
    held = np.zeros(len(theta), dtype=bool)
    for k, v in (fixed or {}).items():
        theta[k] = v
        held[k] = True
    low = np.full(len(theta), -np.inf)
    for k, v in (floor or {}).items():
        low[k] = v
        theta[k] = max(theta[k], v)
    lam = _penalties(d, sigma) if lam is None else lam
    blocks, shifts, full = d.blocks, d.shifts, True
    for _ in range(passes):
        change = _pass(d, theta, sigma, blocks, shifts, held, low, lam)
        if full and change < tol:
            break
        if full or change < tol:  # NOTE: after a full pass the active set is read again
            full = not full
            blocks, shifts = (d.blocks, d.shifts) if full else _active(d, theta, held)
        if not full:
            _newton(d, theta, sigma, held, low, lam)
    return theta


def _newton(
    d: _Design, theta: np.ndarray, sigma: float, held: np.ndarray, low: np.ndarray, lam: np.ndarray
) -> None:
    """The exact steps of the active columns (levels, loads, effects not at 0, not held, not
    at their floor) to the minimum of the pass's bound (Huber weights fixed), each effect's
    sign kept: a step is cut where the first effect reaches 0 or its floor, which stays
    there, and the rest step again. The descent's passes then say whether anything else
    moves (`theta` updated in place).

    NOTE: coordinate passes alone zigzag between columns that explain the same jobs (a
    round's level and load, a node and its links): ~200 passes a descent on a clean 8-node
    sweep beside ten stored ones; the bound is quadratic in the active columns, so a few
    solves reach where those passes go."""
    idx = np.nonzero(~held & (~d.effect | (theta != 0)) & (theta > low))[0]
    if idx.size == 0 or idx.size > NEWTON_COLS:
        return
    n_base = int(np.count_nonzero(~d.effect[idx]))
    idx = np.concatenate([idx[~d.effect[idx]], idx[d.effect[idx]]])  # levels and loads lead
    r = _targets(d, theta) - d.Xr @ theta
    w = d.w0 * _huber_w(r, sigma)
    if d.X.shape[0] * idx.size <= DENSE_CELLS:
        XA = d.dense[:, idx]
        XA[d.failed, :n_base] = 0.0  # a failed job's level and load move none of its residual
        H = XA.T @ (XA * w[:, None])
    else:
        ok = sp.diags(np.where(d.failed, 0.0, 1.0))
        XA = sp.hstack([ok @ d.X[:, idx[:n_base]], d.X[:, idx[n_base:]]]).tocsc()
        H = (XA.T @ XA.multiply(w[:, None])).toarray()
    start = theta[idx]
    b = XA.T @ (w * r)
    prec = np.array([sigma * sigma / LOAD_SD**2 if d.cols[k][0] == "load" else 0.0 for k in idx])
    H[np.diag_indices_from(H)] += prec + 1e-9 * max(1.0, float(np.trace(H)) / len(H))
    b -= prec * start
    eff, floor, pen = d.effect[idx], low[idx], lam[idx]
    now, free = start.copy(), np.ones(idx.size, dtype=bool)
    for _ in range(NEWTON_CUTS):
        grad = H @ (now - start) - b + pen * np.sign(now)
        try:
            step = np.linalg.solve(H[np.ix_(free, free)], -grad[free])
        except np.linalg.LinAlgError:
            break
        old = now[free]
        # the longest step that keeps every effect's sign and floor: t where each would cross
        cross = eff[free] & (old * step < 0)
        t_zero = np.where(cross, -old / np.where(cross, step, 1.0), np.inf)
        under = eff[free] & (old + step < floor[free])
        t_low = np.where(under, (floor[free] - old) / np.where(under, step, 1.0), np.inf)
        t = min(1.0, float(np.minimum(t_zero, t_low).min()))
        new = old + t * step
        new[t_zero <= t] = 0.0
        new[t_low <= t] = floor[free][t_low <= t]
        now[free] = new
        if t >= 1.0:
            break
        free[np.nonzero(free)[0][(t_zero <= t) | (t_low <= t)]] = False
        if not free.any():
            break
    theta[idx] = now


def _active(d: _Design, theta: np.ndarray, held: np.ndarray) -> tuple[list[_Block], list[_Shift]]:
    """The blocks and shifts cut to the columns that may move: levels, loads, effects not
    at 0."""
    moving = ~held & (~d.effect | (theta != 0))
    blocks = []
    for b in d.blocks:
        keep = moving[b.idx]
        if keep.all():
            blocks.append(b)
        elif keep.any():
            blocks.append(_block(d.X, b.kind, b.idx[keep], b.most))
    shifts = []
    for x in d.shifts:
        keep = ~held[x.base] & ~held[x.past] & (moving[x.base] | moving[x.past])
        if keep.any():
            Xt = x.X[:, np.nonzero(keep)[0]]
            shifts.append(_shift_of(x.base[keep], x.past[keep], x.most, Xt))
    return blocks, shifts


def _pass(
    d: _Design,
    theta: np.ndarray,
    sigma: float,
    blocks: Sequence[_Block],
    shifts: Sequence[_Shift],
    held: np.ndarray,
    low: np.ndarray,
    lam: np.ndarray,
) -> float:
    """One pass of `_descend` over `blocks`, `theta` updated in place: the largest move."""
    ok_base = ~d.failed  # a failed job's level and load move none of its residual
    r = _targets(d, theta) - d.Xr @ theta
    w = d.w0 * _huber_w(r, sigma)
    change = 0.0
    for b in blocks:
        kind, idx, most, Xb = b.kind, b.idx, b.most, b.X
        wk = w * ok_base if kind in ("level", "load") else w
        h = b.XT2 @ wk
        g = b.XT @ (wk * r)
        old = theta[idx]
        live = h > 0
        if kind == "level":
            new = np.where(live, old + g / np.where(live, h, 1), old)
        elif kind == "load":
            prec = sigma * sigma / LOAD_SD**2
            new = (g + h * old) / (h + prec)
        elif kind.endswith(PAST):  # a change since a past sweep: either way
            step = most * np.where(live, h, 1)
            z = old + g / step
            new = np.where(live, np.sign(z) * np.maximum(np.abs(z) - lam[idx] / step, 0.0), 0.0)
        else:
            step = most * np.where(live, h, 1)
            new = np.where(live, np.minimum(0.0, old + (g + lam[idx]) / step), 0.0)
            new = np.maximum(new, low[idx])
        new = np.where(held[idx], old, new)
        delta = new - old
        if np.any(delta):
            theta[idx] = new
            r -= Xb @ delta
            if kind in ("level", "load") and d.failed.any():
                r = _targets(d, theta) - d.Xr @ theta
            change = max(change, float(np.max(np.abs(delta))))
    for x in shifts:
        c = _shifted(x, theta, w, r, held, low, lam)
        if np.any(c):
            theta[x.base] += c
            theta[x.past] -= c
            r -= x.X @ c
            change = max(change, float(np.max(np.abs(c))))
    return change


def _shifted(
    x: _Shift,
    theta: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    held: np.ndarray,
    low: np.ndarray,
    lam: np.ndarray,
) -> np.ndarray:
    """Each pair's move c (the effect by c, its change by -c) that minimizes the separable
    bound 0.5 H c^2 - G c + l1 |a + c| + l2 |b - c|, the effect kept within [low, 0]: the
    least of the no move, the two kinks and the two smooth minima (a + c < 0, either sign
    of b - c)."""
    a, b = theta[x.base], theta[x.past]
    h = x.most * (x.XT2 @ w)
    g = x.XT @ (w * r)
    l1, l2 = lam[x.base], lam[x.past]
    live = (h > 0) & ~held[x.base] & ~held[x.past]
    h1 = np.where(live, h, 1.0)
    cands = np.stack([0 * a, -a, b, (g + l1 - l2) / h1, (g + l1 + l2) / h1])
    cands = np.clip(cands, low[x.base] - a, -a)
    cost = 0.5 * h1 * cands**2 - g * cands + l1 * np.abs(a + cands) + l2 * np.abs(b - cands)
    best = cands[np.argmin(cost, axis=0), np.arange(a.size)]
    return np.where(live, best, 0.0)


def _spread(err: np.ndarray, dof: float | None = None) -> float:
    """The errors' robust spread (MAD), over `dof` jobs' worth of them where the fit used up
    the rest, with `SIGMA_PRIOR` counted as `PRIOR_JOBS` jobs beside them."""
    n = float(err.size if dof is None else dof)
    if n <= 0:
        return SIGMA_PRIOR
    var = (1.4826 * float(np.median(np.abs(err)))) ** 2 * err.size / n
    return max(SIGMA_MIN, math.sqrt((n * var + PRIOR_JOBS * SIGMA_PRIOR**2) / (n + PRIOR_JOBS)))


def _leverage(d: _Design, theta: np.ndarray) -> np.ndarray:
    """Each job's leverage (the hat matrix's diagonal) under the fit's active columns:
    levels, loads and the effects not at 0."""
    active = ~d.effect | (theta != 0)
    XA = d.X[:, active].toarray()
    M = XA.T @ (XA * d.w0[:, None])
    M[np.diag_indices_from(M)] += 1e-9 * max(1.0, float(np.trace(M)) / len(M))
    return np.clip(d.w0 * np.einsum("ij,ij->i", XA @ np.linalg.inv(M), XA), 0.0, 1.0)


def _refitted_errors(
    d: _Design, theta: np.ndarray, sigma: float, tonight: np.ndarray
) -> np.ndarray:
    """Tonight's jobs' leave-one-out errors under the refitted (unshrunk) effects: each
    residual scaled by its leverage; a job that alone fixes its effects (leverage near 1)
    predicted by a refit without it, the effects it fixed back at 0."""
    r = _targets(d, theta) - d.Xr @ theta
    lev = _leverage(d, theta)
    err = r / np.sqrt(np.maximum(1 - lev, 1e-12))
    base = ~d.effect
    fixed = {int(k): 0.0 for k in np.nonzero(~base & (theta == 0))[0]}
    start, none = np.where(base, theta, 0.0), np.zeros(len(theta))
    for i in np.nonzero((lev >= 0.9) & tonight & ~d.failed)[0]:
        w0 = d.w0.copy()
        w0[i] = 0.0
        t = _descend(dataclasses.replace(d, w0=w0), start, sigma, fixed=fixed, lam=none, passes=100)
        err[i] = _targets(d, t)[i] - (d.Xr[i] @ t)[0]
    return err[tonight & ~d.failed]


def _shared_errors(d: _Design, theta: np.ndarray, tonight: np.ndarray) -> np.ndarray:
    """On a large fleet: each of tonight's jobs' residual without the effects it holds at
    least half of tonight's weight of (what the others could not have predicted of it);
    one job's leverage on the rest is small there."""
    use = tonight & ~d.failed
    r = (_targets(d, theta) - d.Xr @ theta)[use]
    effect = d.effect & (theta != 0)
    Xt = d.Xr[use][:, effect]
    share = Xt.multiply(1.0 / np.maximum(np.asarray(Xt.sum(axis=0)).ravel(), 1e-12)).tocsr()
    own = share.multiply(share >= 0.5)
    return r + own.astype(bool).astype(float) @ theta[effect]


def fit(obs: Sequence[Obs], settings: SweepSettings, topology: Topology = NO_TOPOLOGY) -> Fit:
    """Fit the model to `obs` (tonight's and past sweeps' jobs) and test every effect."""
    threshold = math.log(1 - settings.tolerance)
    if not obs:
        return Fit(SIGMA_MIN, threshold, {}, {}, {}, [], obs=list(obs))
    d = _design(obs, topology)
    tonight = np.array([o.age == 0 for o in obs])
    theta = _start(d)
    sigma = SIGMA_PRIOR
    for _ in range(8):  # the noise and the fit, each from the other, until they agree
        d, theta = _settled(d, theta, sigma)
        new = _noise(d, theta, sigma, tonight)
        if abs(new - sigma) < 0.02 * sigma:
            sigma = new
            break
        sigma = new
    d, theta = _settled(d, theta, sigma)
    return _tested(d, theta, sigma, threshold, settings, list(obs), tonight)


def _settled(d: _Design, theta: np.ndarray, sigma: float) -> tuple[_Design, np.ndarray]:
    """The fit at a given noise, linearized again where the effects moved (`_composed`,
    Gauss-Newton) until the linearization is within `COMPOSE_TOL` noise units of the model
    in every job, or `COMPOSE_STEPS` times."""
    theta = _descend(d, theta, sigma)
    for _ in range(COMPOSE_STEPS):
        new = _composed(d, theta, COMPOSE_TOL * sigma)
        if new is d:
            break
        d = new
        theta = _descend(d, theta, sigma)
    return d, theta


def _noise(d: _Design, theta: np.ndarray, sigma: float, tonight: np.ndarray) -> float:
    """The noise: the geometric mean of two spreads of tonight's jobs that err on opposite
    sides. The refitted effects' leave-one-out errors read too small where the penalty chose
    effects from the noise itself (a clean 8-node fleet: 6.0%, healthy nodes held by the
    breaker); the penalized fit's residuals over its residual degrees of freedom read too
    large where it shrinks real effects, by an amount that grows with the noise (two slow
    nodes: 314%, nothing flagged). Each alone was tried, and so were the larger of the two,
    the smaller capped at 1.5x, cross-validation (it read 349% on two slow nodes) and the
    fast side of the residuals alone (it collapsed as the refit does).

    NOTE: the past sweeps' errors are left out: fitted loosely where a fault came and went
    (its change since then is priced), they read 69% as a prior for a sweep whose own jobs
    spread 26%."""
    use = tonight & ~d.failed
    r = (_targets(d, theta) - d.Xr @ theta)[use]
    relaxed = _relaxed(d, theta, sigma)
    if use.sum() > EXACT_TONIGHT or d.X.shape[0] > EXACT_ROWS:
        # NOTE: a large fleet: leverages too costly to find exactly, and small (a job among
        # many per effect); the leave-one-out errors by the effects each job holds alone
        return math.sqrt(_spread(_shared_errors(d, relaxed, tonight)) * _spread(r))
    low = _spread(_refitted_errors(d, relaxed, sigma, tonight))
    high = _spread(r, float(np.sum(1 - _leverage(d, theta)[use])))
    return math.sqrt(low * high)


def _relaxed(d: _Design, theta: np.ndarray, sigma: float) -> np.ndarray:
    """The effects the penalty kept, refitted without it (the others held at 0): their
    size unshrunk, for the noise and for what is reported."""
    fixed = {int(k): 0.0 for k in np.nonzero(d.effect & (theta == 0))[0]}
    return _descend(d, theta, sigma, fixed=fixed, lam=np.zeros(len(d.cols)))


def _start(d: _Design) -> np.ndarray:
    """Levels at each group's upper quartile (faults only slow a job), then each round's
    load at the upper quartile of its jobs against that level; every effect 0.

    NOTE: the fit and the noise are found together from here, and a start far from the
    loads settles where the noise took a 20x change of load (a box that got busy between
    two rounds): loads left at 0, the noise read as 240%, nothing judged."""
    theta = np.zeros(len(d.cols))
    for kind in ("level", "load"):
        base = d.Xr @ theta
        for k, c in enumerate(d.cols):
            if c[0] == kind:
                rows = d.X[:, k].nonzero()[0]
                rows = rows[~d.failed[rows]]
                theta[k] = float(np.quantile(d.y[rows] - base[rows], 0.75)) if rows.size else 0.0
    return theta


def _tested(
    d: _Design,
    theta: np.ndarray,
    sigma: float,
    threshold: float,
    settings: SweepSettings,
    obs: list[Obs],
    tonight: np.ndarray,
) -> Fit:
    r = _targets(d, theta) - d.Xr @ theta
    w = d.w0 * _huber_w(r, sigma)
    h = d.X.multiply(d.X).T @ w
    counts = np.diff(d.held.indptr)
    tonight_counts = d.held.T @ tonight.astype(float)
    effects: dict[tuple[str, Key], Effect] = {}
    tests: dict[Key, list[int]] = {}  # one test per node (its two effects), link, trunk
    changes = {key: float(theta[k]) for k, (kind, key) in enumerate(d.cols)
               if kind == "link" + PAST}  # fmt: skip
    for k, (kind, key) in enumerate(d.cols):
        if kind in ("level", "load") or kind.endswith(PAST):
            continue
        se = sigma / math.sqrt(h[k]) if h[k] > 0 else math.inf
        past = float(theta[k]) + (changes.get(key, 0.0) if kind == "link" else 0.0)
        effects[(kind, key)] = Effect(
            kind, key, float(theta[k]), se, int(counts[k]), int(tonight_counts[k]), past=past
        )
        # NOTE: a node's own and network effects are one test: where its alone jobs time
        # nothing the two explain the same jobs, and either makes it a node to drain
        tests.setdefault((kind if kind in ("link", "trunk") else "node", *key), []).append(k)
    candidates = {t: ks for t, ks in tests.items() if min(theta[ks]) < threshold}
    z = {t: evidence(d, theta, sigma, ks, threshold) for t, ks in candidates.items()}
    # NOTE: what is flagged must stand without the jobs transients may have hit
    # (`transients`): two hit jobs of a healthy node, 2-3x slow beside a 7.5% noise,
    # drained it on a fresh store in 9 of 100 sweeps where a fifth of jobs were hit
    own = {t: _own_rows(d, theta, ks, threshold, tonight) for t, ks in candidates.items()}
    aside = _set_aside(d, theta, r, sigma, threshold, candidates, own, tonight, settings.fdr)
    robust = {
        t: evidence(d, theta, sigma, ks, threshold, aside[t]) if aside[t].size else z[t]
        for t, ks in candidates.items()
    }
    # NOTE: the noise is itself estimated, from few jobs on a small fleet (16 jobs of 8
    # nodes read 30% noise as 15%, and a healthy node's three jobs drained it at z 3.4):
    # each z is read against Student's t at the noise's degrees of freedom
    dof = _dof(d, theta, tonight)
    p = {t: float(student.sf(v, dof)) for t, v in robust.items()}
    flagged = _fdr(p, len(tests), settings.fdr)
    q = _qvalues(p, len(tests))
    q_all = _qvalues({t: float(student.sf(v, dof)) for t, v in z.items()}, len(tests))
    for t, ks in candidates.items():
        for k in ks:
            e = effects[d.cols[k]]
            effects[d.cols[k]] = dataclasses.replace(
                e,
                z=z[t],
                p=p[t],
                q=q[t],
                q_all=q_all[t],
                aside=int(aside[t].size),
                flagged=t in flagged and own[t].size >= 2,
            )
    levels = {}
    loads = {}
    for k, (kind, key) in enumerate(d.cols):
        if kind == "level":
            levels[(int(key[0]), SweepPhase(key[1]), key[2])] = float(theta[k])
        elif kind == "load":
            loads[(int(key[0]), int(key[1]))] = float(theta[k])
    k = _n_base(d)
    base = d.Xr[:, :k] @ theta[:k]
    deficits = np.where(d.failed, FAILED, d.y - base)
    return Fit(
        sigma, threshold, effects, levels, loads, [float(x) for x in deficits],
        jobs=int(tonight.sum()), tested=len(tests), obs=obs,
        unexplained=[bool(x) for x in r + _link_part(d, theta) < -_odd(settings, tonight) * sigma],
    )  # fmt: skip


def _own_rows(
    d: _Design, theta: np.ndarray, ks: Sequence[int], threshold: float, tonight: np.ndarray
) -> np.ndarray:
    """Tonight's jobs that the effects `ks` estimated slow rest on.

    NOTE: tonight's only: a crossing of tonight's slow trunk 25% slower than the others, and
    a past job of the same link slow with a node since fixed, each within the noise, flagged
    the link beside the trunk. The slow effects' only: a node's alone job carries nothing of
    its network (flagged on one slow pair job and the alone job)."""
    slow = [k for k in ks if theta[k] < threshold]
    return np.nonzero(np.asarray(d.held[:, slow].sum(axis=1)).ravel().astype(bool) & tonight)[0]


def _set_aside(
    d: _Design,
    theta: np.ndarray,
    r: np.ndarray,
    sigma: float,
    threshold: float,
    tested: Mapping[Key, list[int]],
    own: Mapping[Key, np.ndarray],
    tonight: np.ndarray,
    alpha: float,
) -> dict[Key, np.ndarray]:
    """Per tested effect: the slowest of its jobs (`own`, with what it explains of them)
    that transients may have made (`transients.set_aside`), at the rate and size tonight's
    other jobs show (those slower than their fit past the loss's quadratic zone), or that
    are unlike the rest of its jobs (`transients.unlike`)."""
    cut = HUBER * sigma
    hit = tonight & ~d.failed & (r < -cut)
    jobs = int(tonight.sum())
    out = {}
    for t, rows in own.items():
        others = hit.copy()
        others[rows] = False
        seen = jobs - rows.size
        ks = tested[t]
        slowness = -(r[rows] + d.Xr[rows][:, ks] @ theta[ks])
        order = np.argsort(-slowness, kind="stable")
        h = max(
            transients.set_aside(slowness[order] + threshold, -r[others], seen, cut, alpha),
            transients.unlike(r[rows][order], sigma),
        )
        out[t] = rows[order[:h]]
    return out


def _dof(d: _Design, theta: np.ndarray, tonight: np.ndarray) -> float:
    """The noise's degrees of freedom: tonight's timed jobs less what the fit spent on them
    (their leverages; on a large fleet, the columns they touch), and the prior's jobs."""
    use = tonight & ~d.failed
    if use.sum() > EXACT_TONIGHT or d.X.shape[0] > EXACT_ROWS:
        active = ~d.effect | (theta != 0)
        touched = np.asarray(d.Xr[use][:, active].sum(axis=0)).ravel() > 0
        left = float(use.sum() - touched.sum())
    else:
        left = float(np.sum(1 - _leverage(d, theta)[use]))
    return max(1.0, left) + PRIOR_JOBS


def _odd(settings: SweepSettings, tonight: np.ndarray) -> float:
    """How many noise units below the fit a job must be to be measured again: past the
    loss's quadratic zone, and past what the noise gives the slowest of tonight's jobs at
    the sweep's false-discovery rate (a clean 1,024-node fleet has a few 3-unit jobs)."""
    n = max(1, int(tonight.sum()))
    return max(HUBER, NormalDist().inv_cdf(1 - settings.fdr / n))


def _link_part(d: _Design, theta: np.ndarray) -> np.ndarray:
    """Each job's slowdown the fit gives its link. A job is unexplained by what the fit says
    of everything but its link: a link seen slow once is shrunk by its price, and the nodes
    beside it take some of the job (a 55x job 6.3 noise units below its level left a
    residual of only 2.4 units, its link at z 1.4: never measured again, never named)."""
    link = np.array([c[0] == "link" for c in d.cols])
    return d.Xr[:, link] @ theta[link]


def _fdr(p: Mapping[Key, float], m: int, q: float) -> set[Key]:
    """Benjamini-Hochberg over `m` tests (those not in `p` have p = 1): the rejected."""
    ranked = sorted(p.items(), key=lambda kv: kv[1])
    cut = 0
    for i, (_, pv) in enumerate(ranked, 1):
        if pv <= q * i / max(m, 1):
            cut = i
    return {k for k, _ in ranked[:cut]}


def _qvalues(p: Mapping[Key, float], m: int) -> dict[Key, float]:
    """Each test's Benjamini-Hochberg q-value over `m` tests: the least false-discovery rate
    at which `_fdr` would reject it."""
    ranked = sorted(p.items(), key=lambda kv: kv[1])
    out: dict[Key, float] = {}
    least = 1.0
    for i in range(len(ranked), 0, -1):
        key, pv = ranked[i - 1]
        least = min(least, pv * max(m, 1) / i)
        out[key] = least
    return out


def evidence(
    d: _Design,
    theta: np.ndarray,
    sigma: float,
    ks: Sequence[int],
    threshold: float,
    aside: np.ndarray | None = None,
) -> float:
    """How many noise units the fit prefers the effects `ks` as estimated over all of them
    held no slower than the threshold, the effects around them free to take their jobs:
    sqrt(2 x the penalized loss it costs), over the jobs of `ks` and of every effect
    sharing a job with them; the jobs `aside` weigh nothing."""
    rows1 = np.unique(d.X[:, list(ks)].nonzero()[0])
    near = np.unique(d.Xr[rows1].indices)
    near = near[d.effect[near]]
    rows2 = np.unique(d.X[:, near].nonzero()[0])
    Xr = d.Xr[rows2]
    X = Xr[:, near].tocsc()
    cols = [d.cols[c] for c in near]
    w0 = d.w0[rows2] * ~np.isin(rows2, aside if aside is not None else [])
    sub = _Design(
        X, X.tocsr(), _targets(d, theta)[rows2] - Xr @ theta + X @ theta[near],
        np.zeros(len(rows2), dtype=bool), w0, cols, _sub_blocks(d, X, near),
    )  # fmt: skip
    start = theta[near]
    at = {int(np.nonzero(near == k)[0][0]): threshold for k in ks}
    free = _descend(sub, start, sigma)
    held = _descend(sub, start, sigma, floor=at)
    lam = _penalties(sub, sigma)
    # NOTE: the gap leaves out the tested effects' own changes since the past sweeps: what
    # a fault that began tonight pays for having changed says nothing of tonight's jobs
    tested = {d.cols[k] for k in ks}
    lam[[kind.endswith(PAST) and (kind[: -len(PAST)], key) in tested for kind, key in cols]] = 0
    gap = _objective(sub, held, sigma, lam) - _objective(sub, free, sigma, lam)
    return math.sqrt(max(0.0, 2 * gap)) / sigma


def _sub_blocks(d: _Design, X: sp.csc_matrix, near: np.ndarray) -> list[_Block]:
    where = {int(c): i for i, c in enumerate(near)}
    out = []
    for b in d.blocks:
        mine = np.array([where[int(c)] for c in b.idx if int(c) in where], dtype=int)
        if mine.size:
            out.append(_block(X, b.kind, mine, b.most))
    return out
