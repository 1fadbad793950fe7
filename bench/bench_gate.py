"""Benchmark: the regression gate's false alarms and power on a hierarchical noise model.

Each trial is a fresh store from `fleetval.testing.bandwidth`: 200 identities (4 collectives x 2 dtypes
x 25 sizes, 8 ranks on 2 nodes), each run of an identity drawing its own level (run-level
sd, default 2%) around which 10 iterations scatter (2.5%). Per trial seed: 5 baseline runs,
then candidates compared through `compare_runs` exactly as `fleetval compare` does:

- clean: 1 and 5 candidate runs from the baseline's own distribution; a false alarm is
  exit status 1 (the gate failing) on clean data;
- a busbw drop of 2, 5, 10, 30% planted on one identity (a bandwidth-bound size, rotating
  with the seed), 1 and 5 candidate runs; found = that identity's verdict is regression.

    python bench/bench_gate.py                       # 200 trials, run sd 2%, threshold 2%
    python bench/bench_gate.py --trials 50 --run-sd 0.04
    python bench/bench_gate.py --run-sd-range 0 0.04 # sd drawn per identity in [0, 4%]
    python bench/bench_gate.py --values              # the same model, run values made here

    python bench/bench_gate.py --identities 1,24,200,2000,10000   # the sweep (below)
    python bench/bench_gate.py --identities 1,24,200,2000,10000 --history 20

--identities sweeps family sizes at --designs (5+1, 5+5, 7+7): per size and design, seeded
repeats of one family of alike identities (log run values normal with sd --value-sd, the
bandwidth recipe's 2.23%) judged by the statistics compare runs (`statistics.moderated`,
`t_test`, `bh_adjust`, `verdicts`; vectorized, repeats are families of one call). It
prints the false alarms on clean data, the power at the drops the known-variance
Neyman-Pearson test finds 50% and 90% of the time, that bound (analytic, beside each
figure) and the best a test can do with the variance unknown (the t on all the family's
degrees of freedom, noncentral t), the share of 10-run-sd drops caught, and the CVS anchor
(460 identities, 7+7, a 6% drop). --history N gives every identity N earlier runs of the
same spread (`statistics.history_variance`, as compare reads them from the store).

--first-compare is issue 29's suite: all_reduce and all_gather at 12 sizes (1 KiB-2 MiB: 6
latency-bound, 6 busbw-bound), 4 ranks, 20 iterations, run sd --run-sd, 5 baseline runs;
per seed, with --history earlier clean runs and with none, clean candidates (5+1, 5+5) and
busbw drops (30% and 10% at 5+1, 5% and 10% at 5+5), run values made here and judged by
`compare.judge`, beside the known-variance bound. --noisy latency (or a collective) makes
those identities --noisy-sd noisy and counts false alarms per part:

    python bench/bench_gate.py --first-compare --history 20 --trials 200 --threshold 2
    python bench/bench_gate.py --first-compare --history 20 --trials 200 --threshold 2 --noisy latency

--mixed: families of 24 with two noise levels (a noisier regime, or noisier identities
within the regimes), `statistics.tests` as compare calls it, --repeats families a cell:

    python bench/bench_gate.py --mixed --repeats 20000

With --values the store is skipped: each run's value per identity is made here exactly as
the store's summaries make it (per iteration the mean over ranks, the median over
iterations, busbw = constant / time) and judged by `compare.judge`, the statistics
`compare_runs` applies after reading the summaries. Thousands of comparisons then take
seconds instead of an hour; the store path is the default.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pyarrow as pa

from fleetval.analysis import statistics as st
from fleetval.analysis.compare import compare_runs, judge
from fleetval.analysis.compare_settings import CompareSettings
from fleetval.metrics import merge
from fleetval.testing.bandwidth import SIZES, FleetModel, GenStore
from fleetval.vocab import Verdict

DROPS = (0.02, 0.05, 0.10, 0.30)
DESIGNS = (1, 5)  # candidate runs; the baseline always has 5


def _busbw_identities(model: FleetModel) -> list[int]:
    return [i for i, (_, _, s) in enumerate(model.identities()) if s >= 1 << 20]


def trial(root: Path, seed: int, model: FleetModel, threshold: float) -> dict[tuple, int]:
    """One seed: {(kind, drop, candidates): 1 if the event happened}."""
    g = GenStore(root, model, seed)
    g.baseline(5)
    out: dict[tuple, int] = {}
    targets = _busbw_identities(model)
    for k in DESIGNS:
        clean = compare_runs(g.store, "base", [g.run() for _ in range(k)], threshold_pct=threshold)
        out[("false_alarm", 0.0, k)] = clean.exit_code()
        for drop in DROPS:
            target = targets[seed % len(targets)]
            runs = [g.run(drop={target: drop}) for _ in range(k)]
            c = compare_runs(g.store, "base", runs, threshold_pct=threshold)
            label = model.identities()[target]
            hit = [r for r in c.results if (r.identity.collective, r.identity.dtype,
                   r.identity.size_bytes) == label]  # fmt: skip
            out[("found", drop, k)] = int(hit[0].verdict == Verdict.REGRESSION)
            others = (
                sum(r.verdict == Verdict.REGRESSION for r in c.results) - out[("found", drop, k)]
            )
            out[("other_regressions", drop, k)] = int(others > 0)
    return out


class ValueTrial:
    """Run values of the bandwidth recipe's model without a store (see --values)."""

    def __init__(self, model: FleetModel, seed: int) -> None:
        self.model, self.rng = model, np.random.default_rng(seed)
        self.idents = model.identities()
        sd = model.run_sd
        n = len(self.idents)
        self.run_sd = self.rng.uniform(sd[0], sd[1], n) if isinstance(sd, tuple) else np.full(n, sd)
        size = np.array([s for _, _, s in self.idents], dtype=float)
        self.base = 8.0 + size / 4e4
        self.busbw = size >= 64 * 1024  # the default latency cutoff
        self.count = 0

    def runs(self, k: int, drop: dict[int, float] | None = None) -> list[tuple[str, np.ndarray]]:
        m, rng, n = self.model, self.rng, len(self.idents)
        world = m.nodes * m.ranks_per_node
        out = []
        for _ in range(k):
            level = np.exp(self.run_sd * rng.standard_normal(n))
            for i, d in (drop or {}).items():
                level[i] /= 1 - d
            shared = 1 + m.iter_sd * rng.standard_normal((n, m.iters))
            jitter = (1 + m.rank_sd * rng.standard_normal((n, world, m.iters))).mean(axis=1)
            t = np.median((self.base * level)[:, None] * shared * jitter, axis=1)
            value = np.where(self.busbw, self.base * 40 / t, t)  # busbw: constant / time
            out.append((f"run-{self.count:06d}", value))  # ids sort as runs start
            self.count += 1
        return out

    def table(self, runs: list[tuple[str, np.ndarray]]) -> pa.Table:
        n = len(self.idents)
        col = lambda xs: pa.array([x for _ in runs for x in xs])  # noqa: E731
        return pa.table({
            "run_id": pa.array([r for r, _ in runs for _ in range(n)]),
            "check": col(["bandwidth"] * n),
            "collective": col([c for c, _, _ in self.idents]),
            "op": col(["sum"] * n),
            "dtype": col([d for _, d, _ in self.idents]),
            "size_bytes": col([s for _, _, s in self.idents]),
            "world_size": col([self.model.nodes * self.model.ranks_per_node] * n),
            "metric": col(["busbw_gbps" if b else "latency_us" for b in self.busbw]),
            "group": col(["MI300X"] * n),
            "unit": col([None] * n).cast(pa.string()),
            "value": pa.array(np.concatenate([v for _, v in runs])),
            "wrong": col([0] * n),
            "failed": col([0] * n),
        })  # fmt: skip


def value_trial(seed: int, model: FleetModel, threshold: float) -> dict[tuple, int]:
    """`trial` on run values made here, judged by compare.judge."""
    vt = ValueTrial(model, seed)
    settings = CompareSettings(threshold_pct=threshold)
    decls = merge([])
    base = vt.runs(5)
    targets = _busbw_identities(model)
    out: dict[tuple, int] = {}

    def verdicts(cands: list[tuple[str, np.ndarray]]) -> list:
        return judge(vt.table(base + cands), [r for r, _ in cands], settings, decls)

    for k in DESIGNS:
        clean = verdicts(vt.runs(k))
        out[("false_alarm", 0.0, k)] = int(any(r.verdict == Verdict.REGRESSION for r in clean))
        for drop in DROPS:
            target = targets[seed % len(targets)]
            results = verdicts(vt.runs(k, {target: drop}))
            label = vt.idents[target]
            hit = [r for r in results if (r.identity.collective, r.identity.dtype,
                   r.identity.size_bytes) == label]  # fmt: skip
            out[("found", drop, k)] = int(hit[0].verdict == Verdict.REGRESSION)
            others = sum(r.verdict == Verdict.REGRESSION for r in results) - out[("found", drop, k)]
            out[("other_regressions", drop, k)] = int(others > 0)
    return out


# -- a first compare at 24 identities (issue 29) ----------------------------------------------

# all_reduce and all_gather at 12 sizes (1 KiB .. 2 MiB: 6 latency-bound, 6 busbw-bound),
# 4 ranks on one node, 20 iterations: the suite of issue 29
SMALL = FleetModel(nodes=1, ranks_per_node=4, iters=20,
                   collectives={"all_reduce": 2.0, "all_gather": 1.0}, dtypes=("float32",),
                   sizes=tuple(1 << e for e in range(10, 22)))  # fmt: skip
CELLS = ((0.30, 1), (0.10, 1), (0.05, 5), (0.10, 5))  # (busbw drop, candidate runs)


def first_compare_trial(
    seed: int, model: FleetModel, threshold: float, history: int, run_sd: np.ndarray,
    noisy: np.ndarray,
) -> dict[tuple, int]:  # fmt: skip
    """One seed of the small suite: `history` earlier clean runs (0: a first compare), 5
    baseline runs, clean candidates (a false alarm: any regression, also per part: the
    `noisy` identities and the rest) and one busbw drop per cell, judged by compare.judge."""
    vt = ValueTrial(model, seed)
    vt.run_sd = run_sd
    settings, decls = CompareSettings(threshold_pct=threshold), merge([])
    past, base = vt.runs(history), vt.runs(5)

    def regressions(cands: list[tuple[str, np.ndarray]]) -> dict[tuple, bool]:
        results = judge(vt.table(past + base + cands), [r for r, _ in cands], settings, decls,
                        [r for r, _ in past])  # fmt: skip
        return {(r.identity.collective, r.identity.dtype, r.identity.size_bytes):
                r.verdict == Verdict.REGRESSION for r in results}  # fmt: skip

    out: dict[tuple, int] = {}
    for k in (1, 5):
        flagged = regressions(vt.runs(k))
        hit = np.array([flagged[ident] for ident in vt.idents])
        out[("false_alarm", k)] = int(hit.any())
        out[("false_alarm_noisy", k)] = int(hit[noisy].any())
        out[("false_alarm_quiet", k)] = int(hit[~noisy].any())
    targets = [i for i in _busbw_identities(model) if not noisy[i]]
    for drop, k in CELLS:
        target = targets[seed % len(targets)]
        out[("found", drop, k)] = int(regressions(vt.runs(k, {target: drop}))[vt.idents[target]])
    return out


def first_compare(args: argparse.Namespace) -> None:
    """The table of issue 29: found and false alarms with `--history` earlier runs and none."""
    model = SMALL
    idents = model.identities()
    world = model.nodes * model.ranks_per_node
    noisy = np.zeros(len(idents), bool)
    if args.noisy == "latency":
        noisy = np.array([s < CompareSettings().latency_cutoff_bytes for _, _, s in idents])
    elif args.noisy:
        noisy = np.array([c == args.noisy for c, _, _ in idents])
    run_sd = np.where(noisy, args.noisy_sd, args.run_sd)
    value_sd = np.hypot(args.run_sd, model.iter_sd * 1.2533 / np.sqrt(model.iters))
    alpha, n, size = args.fdr / 2, args.trials, len(idents)
    totals: dict[tuple, dict[tuple, int]] = {}
    start = time.perf_counter()
    for history in (args.history, 0):
        tot = totals.setdefault(history, {})
        for seed in range(args.seed, args.seed + n):
            for key, v in first_compare_trial(seed, model, args.threshold, history, run_sd,
                                              noisy).items():  # fmt: skip
                tot[key] = tot.get(key, 0) + v
    print(f"{size} identities (all_reduce, all_gather x 12 sizes 1 KiB-2 MiB, float32), {world} "
          f"ranks, {model.iters} iterations; run sd {args.run_sd:.1%}"
          + (f", {args.noisy} identities {args.noisy_sd:.1%}" if args.noisy else "")
          + f", iteration sd {model.iter_sd:.1%}; 5 baseline runs; threshold {args.threshold}%, "
          f"fdr {args.fdr}; {n} trials a cell (seeds {args.seed}..{args.seed + n - 1}); "
          f"run values judged by compare.judge; {time.perf_counter() - start:.0f} s\n")  # fmt: skip
    h = args.history
    print(
        f"| planted busbw drop at one identity | design | known-variance bound | with {h} "
        "earlier clean runs | with none |"
    )
    print("|---|---|---:|---:|---:|")
    for drop, k in CELLS:
        delta = -np.log1p(-drop) / (value_sd * np.sqrt(1 / 5 + 1 / k))
        print(
            f"| {drop:.0%} | 5+{k} | {np_bound(delta, size, alpha):.1%} | "
            f"{totals[h][('found', drop, k)] / n:.1%} | {totals[0][('found', drop, k)] / n:.1%} |"
        )
    parts = [("false_alarm", "any identity")]
    if args.noisy:
        parts += [("false_alarm_noisy", f"the {noisy.sum()} noisy ones"),
                  ("false_alarm_quiet", f"the {(~noisy).sum()} others")]  # fmt: skip
    for key, what in parts:
        for k in (1, 5):
            a, b = totals[h][(key, k)], totals[0][(key, k)]
            print(
                f"| false alarms, clean ({what}) | 5+{k} | budget {alpha:.1%} | "
                f"{a}/{n} = {a / n:.1%} | {b}/{n} = {b / n:.1%} |"
            )


# -- families of two noise levels, at the statistics level ---------------------------------------

_REGIMES = np.tile(np.repeat([0, 1], 6), 2)  # latency-bound, busbw-bound sizes of 2 collectives
MIXED = {  # name: (run-value sd per identity, regime per identity); quiet sd 2.12%
    "alike": (np.full(24, 0.0212), _REGIMES),
    "latency 3x noisier": (np.where(_REGIMES == 0, 0.0636, 0.0212), _REGIMES),
    "latency 2x noisier": (np.where(_REGIMES == 0, 0.0424, 0.0212), _REGIMES),
    "latency 1.5x noisier": (np.where(_REGIMES == 0, 0.0318, 0.0212), _REGIMES),
    "all_gather 3x noisier": (np.r_[np.full(12, 0.0212), np.full(12, 0.0636)], _REGIMES),
    "1 identity 3x noisier": (np.r_[0.0636, np.full(23, 0.0212)], _REGIMES),
    "4 identities 2x noisier": (np.r_[np.full(4, 0.0424), np.full(20, 0.0212)], _REGIMES),
    "4 identities 3x noisier": (np.r_[np.full(4, 0.0636), np.full(20, 0.0212)], _REGIMES),
}


def mixed(args: argparse.Namespace) -> None:
    """Per family of `MIXED` and design: P(p <= 0.001) / 0.001 and false alarms (BH at fdr,
    a regression anywhere in the part) on the noisy and the quiet part, `statistics.tests`
    with the regimes as compare passes them; families are the repeats of one call."""
    print(f"{args.repeats} families of 24 a cell, seed {args.seed}, fdr {args.fdr}, "
          f"TRUST_P {st.TRUST_P}, REGIME_Z {st.REGIME_Z}\n")  # fmt: skip
    print("| family of 24 | design | P(p <= 0.001) / 0.001, noisy part | quiet part "
          "| false alarms, noisy part | quiet part |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|")
    for name, (sd24, regime24) in MIXED.items():
        for m, k in ((5, 1), (5, 5)):
            rng, fams = np.random.default_rng(args.seed), args.repeats
            sd = np.tile(sd24, fams)
            x0, x1 = (rng.standard_normal((len(sd), r)) * sd[:, None] for r in (m, k))
            n = np.tile([float(m), float(k)], (len(sd), 1))
            mean = np.c_[x0.mean(1), x1.mean(1)]
            ss = np.c_[((x0 - mean[:, :1]) ** 2).sum(1), ((x1 - mean[:, 1:]) ** 2).sum(1)]
            family = np.repeat(np.arange(fams), 24)
            t = st.tests(n, mean, ss, family, 0.95, regime=2 * family + np.tile(regime24, fams))
            q = np.concatenate([st.bh_adjust(p) for p in t.p.reshape(fams, 24)])
            flagged = ((q <= args.fdr) & (t.diff < 0)).reshape(fams, 24)
            noisy = sd24 > sd24.min()
            cols = []
            for part in (noisy, ~noisy):
                cols.append(f"{np.mean(t.p.reshape(fams, 24)[:, part] <= 1e-3) / 1e-3:.2f}"
                            if part.any() else "")  # fmt: skip
            for part in (noisy, ~noisy):
                cols.append(f"{flagged[:, part].any(axis=1).mean():.2%}" if part.any() else "")
            print(f"| {name} | {m}+{k} | " + " | ".join(cols) + " |", flush=True)


# -- the sweep over family sizes ---------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One family size and design: the clean families and their moderated variances."""

    size: int
    m: int
    k: int
    repeats: int
    diff: np.ndarray  # [repeats, size] candidate - baseline mean log value
    var: np.ndarray  # [repeats, size] the variance of diff the gate uses
    df: np.ndarray  # [repeats, size]
    p: np.ndarray  # [repeats, size]
    q: np.ndarray  # [repeats, size] BH across each repeat's family

    @classmethod
    def draw(
        cls, size: int, m: int, k: int, repeats: int, sd: float, seed: int, history: int = 0
    ) -> Cell:
        rng = np.random.default_rng(seed)
        x0 = rng.standard_normal((repeats * size, m)) * sd
        x1 = rng.standard_normal((repeats * size, k)) * sd
        n = np.tile([float(m), float(k)], (repeats * size, 1))
        mean = np.c_[x0.mean(1), x1.mean(1)]
        ss = np.c_[((x0 - mean[:, :1]) ** 2).sum(1), ((x1 - mean[:, 1:]) ** 2).sum(1)]
        past = st.NO_HISTORY
        if history:
            past = st.history_variance(rng.standard_normal((repeats * size, history)) * sd)
        mod = st.moderated(n, ss, np.repeat(np.arange(repeats), size), past)
        diff = mean[:, 1] - mean[:, 0]
        var, df = mod.var * (1 / m + 1 / k), mod.df
        p, _ = st.t_test(diff, var, df, 0.95)
        shape = (repeats, size)
        q = np.stack([st.bh_adjust(row) for row in p.reshape(shape)])
        return cls(size, m, k, repeats, diff.reshape(shape), var.reshape(shape),
                   df.reshape(shape), p.reshape(shape), q)  # fmt: skip

    def false_alarms(self, threshold: float, fdr: float) -> float:
        v = st.verdicts(np.expm1(self.diff.ravel()) * 100, self.q.ravel(),
                        np.full(self.diff.size, threshold), fdr)  # fmt: skip
        return float((v.reshape(self.diff.shape) == Verdict.REGRESSION.value).any(axis=1).mean())

    def found(self, drop: float, threshold: float, fdr: float) -> float:
        """Share of repeats where identity 0, its candidate runs dropped by `drop` (a
        fraction), is a regression; the rest of its family as drawn."""
        diff = self.diff[:, 0] + np.log1p(-drop)
        p0, _ = st.t_test(diff, self.var[:, 0], self.df[:, 0], 0.95)
        q0 = np.empty(self.repeats)
        for r in range(self.repeats):  # BH with identity 0's p replaced
            q0[r] = st.bh_adjust(np.r_[p0[r], self.p_others[r]])[0]
        v = st.verdicts(np.expm1(diff) * 100, q0, np.full(self.repeats, threshold), fdr)
        return float(np.mean(v == Verdict.REGRESSION.value))

    @cached_property
    def p_others(self) -> np.ndarray:
        """[repeats, size - 1] the other identities' p (BH is redone with identity 0's)."""
        return self.p[:, 1:]


def np_bound(delta_se: float, size: int, alpha: float) -> float:
    """Power of the known-variance one-sided test at per-identity level 1 - (1 - alpha)^(1/M)
    (alpha spread evenly over M independent identities) against a drop of delta_se SEs."""
    crit = NormalDist().inv_cdf((1 - alpha) ** (1 / size))
    return NormalDist().cdf(delta_se - crit)


def t_bound(delta_se: float, size: int, own_df: int, alpha: float) -> float:
    """The same with the variance unknown: the t on all the family's degrees of freedom
    (the most any test can do for one identity alone: the invariant t is minimax)."""
    from scipy import stats

    df = size * own_df
    crit = stats.t.ppf((1 - alpha) ** (1 / size), df)
    return float(stats.nct.sf(crit, df, delta_se))


def drop_at(bound: float, size: int, se: float, alpha: float) -> float:
    """The drop (a fraction) the known-variance test finds with power `bound`."""
    crit = NormalDist().inv_cdf((1 - alpha) ** (1 / size))
    return float(-np.expm1(-(crit + NormalDist().inv_cdf(bound)) * se))


def sweep(args: argparse.Namespace) -> None:
    sizes = [int(x) for x in args.identities.split(",")]
    designs = [tuple(int(y) for y in d.split("+")) for d in args.designs.split(",")]
    alpha, sd, thr, fdr = args.fdr / 2, args.value_sd, args.threshold, args.fdr
    print(f"run-value sd {sd:.2%} (alike identities), threshold {thr}%, fdr {fdr} (regressions "
          f"one side: false-alarm budget {alpha:.1%}), bound = known-variance one-sided test "
          f"at level 1-(1-{alpha})^(1/M) per identity; {args.history} earlier runs per "
          f"identity; seed {args.seed}\n")  # fmt: skip
    print(
        "| identities | runs | repeats | false alarms | drop (bound 50%) | found | bound "
        "| t bound | drop (bound 90%) | found | bound | t bound | 10-sd drop caught | s |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        for m, k in designs:
            start = time.perf_counter()
            repeats = max(args.min_repeats, min(args.repeats, args.budget // size))
            cell = Cell.draw(size, m, k, repeats, sd, args.seed + size + 100 * k, args.history)
            own_df = m + k - 2 + max(args.history - 1, 0)
            se = sd * np.sqrt(1 / m + 1 / k)
            cols = [f"{size:,}", f"{m}+{k}", f"{repeats:,}",
                    f"{cell.false_alarms(thr, fdr):.2%}"]  # fmt: skip
            for b in (0.5, 0.9):
                d = drop_at(b, size, se, alpha)
                delta = -np.log1p(-d) / se
                cols += [f"{d:.1%}", f"{cell.found(d, thr, fdr):.1%}",
                         f"{np_bound(delta, size, alpha):.1%}",
                         f"{t_bound(delta, size, own_df, alpha):.1%}"]  # fmt: skip
            ten = -np.expm1(-10 * sd)
            caught = cell.found(ten, thr, fdr)
            cols += [f"{caught * repeats:.0f}/{repeats}", f"{time.perf_counter() - start:.0f}"]
            print("| " + " | ".join(cols) + " |", flush=True)
    print("\nCVS anchor: 460 identities, 7+7 runs, a 6% drop on one large message\n")
    print("| run-value sd | repeats | false alarms | 6% drop found | bound | t bound |")
    print("|---:|---:|---:|---:|---:|---:|")
    for anchor_sd in (np.hypot(0.015, 0.025 * 1.2533 / np.sqrt(10)), sd):
        repeats = max(args.min_repeats, min(args.repeats, args.budget // 460))
        cell = Cell.draw(460, 7, 7, repeats, anchor_sd, args.seed + 460, args.history)
        delta = -np.log1p(-0.06) / (anchor_sd * np.sqrt(2 / 7))
        print(f"| {anchor_sd:.2%} | {repeats} | {cell.false_alarms(thr, fdr):.2%} | "
              f"{cell.found(0.06, thr, fdr):.1%} | {np_bound(delta, 460, alpha):.1%} | "
              f"{t_bound(delta, 460, 12 + max(args.history - 1, 0), alpha):.1%} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--identities", help="family sizes to sweep, e.g. 1,24,200,2000,10000")
    ap.add_argument("--designs", default="5+1,5+5,7+7", help="baseline+candidate runs")
    ap.add_argument(
        "--value-sd", type=float, default=float(np.hypot(0.02, 0.025 * 1.2533 / np.sqrt(10)))
    )
    ap.add_argument("--repeats", type=int, default=4000, help="sweep: repeats per cell at most")
    ap.add_argument("--budget", type=int, default=400_000, help="sweep: repeats x identities")
    ap.add_argument("--min-repeats", type=int, default=40)
    ap.add_argument("--history", type=int, default=0, help="sweep: earlier runs per identity")
    ap.add_argument("--fdr", type=float, default=CompareSettings().fdr)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--run-sd", type=float, default=0.02)
    ap.add_argument("--run-sd-range", type=float, nargs=2, default=None)
    ap.add_argument("--threshold", type=float, default=2.0, help="percent (compare --threshold)")
    ap.add_argument("--values", action="store_true", help="judge run values made here (fast)")
    ap.add_argument("--drops", type=float, nargs="+", default=list(DROPS), help="fractions")
    ap.add_argument(
        "--first-compare",
        action="store_true",
        help="issue 29's suite of 24 identities: with --history earlier runs and none",
    )
    ap.add_argument("--noisy", help="first compare: 'latency' or a collective at --noisy-sd")
    ap.add_argument("--noisy-sd", type=float, default=0.06)
    ap.add_argument(
        "--mixed",
        action="store_true",
        help="families of two noise levels: p calibration and false alarms per part",
    )
    args = ap.parse_args()
    if args.mixed:
        mixed(args)
        return
    if args.first_compare:
        first_compare(args)
        return
    if args.identities:
        sweep(args)
        return
    globals()["DROPS"] = tuple(args.drops)
    os.fsync = lambda fd: None  # durability is not under test: thousands of small files
    sd = tuple(args.run_sd_range) if args.run_sd_range else args.run_sd
    model = FleetModel(run_sd=sd)
    totals: dict[tuple, int] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.trials):
            root = Path(tmp) / str(seed)
            if args.values:
                outcome = value_trial(seed, model, args.threshold)
            else:
                outcome = trial(root, seed, model, args.threshold)
                shutil.rmtree(root)
            for key, v in outcome.items():
                totals[key] = totals.get(key, 0) + v
    n = args.trials
    print(
        f"{len(model.identities())} identities, {model.nodes * model.ranks_per_node} ranks on "
        f"{model.nodes} nodes, run sd {sd}, iteration sd {model.iter_sd}, {model.iters} iterations, "
        f"threshold {args.threshold}%, {n} seeded trials, {time.perf_counter() - start:.0f} s, "
        f"{'run values judged by compare.judge' if args.values else 'through the store, compare_runs'}"
    )
    print("\n| baseline + candidate runs | false alarms (clean, exit 1) |"
          + "".join(f" {d:.0%} drop found |" for d in DROPS)
          + " other identity flagged (any drop trial) |")  # fmt: skip
    print("|---|---:|" + "---:|" * len(DROPS) + "---:|")
    for k in DESIGNS:
        fa = totals[("false_alarm", 0.0, k)]
        cells = "".join(f" {totals[('found', d, k)] / n:.1%} |" for d in DROPS)
        other = sum(totals[("other_regressions", d, k)] for d in DROPS)
        print(f"| 5 + {k} | {fa}/{n} = {fa / n:.1%} |{cells} {other}/{n * len(DROPS)} |")
    print(f"\nsizes {SIZES[0]} B .. {SIZES[-1] >> 30} GiB; planted drops on sizes >= 1 MiB (busbw)")


if __name__ == "__main__":
    main()
