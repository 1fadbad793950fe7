"""Statistics on run-level values: pure array functions, no store, no pyarrow.

Inputs are per identity the log run values of each side (baseline 0, candidate 1). The
model is the one a fleet shows: each run of an identity draws its own level (a run-level
random effect: placement, clocks, background load) and iterations scatter around it.
So the evidence about a release is the spread of run values, never the iterations.

- `moments`: per identity and side, the number of runs, the mean and the squared deviations.
- `VariancePrior`: what run-to-run variances a family of identities (one check's metric)
  has: a scaled inverse chi-square prior (d0 degrees of freedom around s0^2), estimated by
  Smyth's moments (limma's `fitFDist`) for each identity from its family's OTHER
  identities. With 5 runs an identity's own variance has 4 degrees of freedom, far too few
  alone at the tail a gate over many identities needs; its family says what variances are
  plausible and how alike they are (d0 = inf when the spread of the others' log variances
  is within two standard errors of what chi-square sampling explains).
- `alike_regimes`: a family (one check) may hold regimes of unlike spread (its latency-bound
  and busbw-bound sizes, one metric each); they share its prior only where their pooled
  variances agree, else each regime has its own.
- `trust`: an identity whose own variance is improbable under its prior leans on it only in
  proportion (limma's robust prior in spirit), so a much noisier one is not drowned.
- `moderated` and `tests`: per identity the difference d of mean log values, the moderated
  variance s~^2 = (d0 s0^2 + d s^2) / (d0 + d) and Student's t (`t_test`) on d0 + d degrees
  of freedom, less for s0's own uncertainty (c = sqrt(1/m + 1/k); with one candidate run,
  k = 1, the prediction interval for one new run from the baseline's spread). When d0
  reaches the others' degrees of freedom the family's pooled variance is used on all its
  df: a family of alike identities gets the t on their pooled variance; one identity alone,
  or a family under MIN_OTHERS + 1, the plain t on its own. p-values are exact in both
  limits (calibration between them: bench/RESULTS.md). All in numpy: scipy.special's
  import alone costs ~0.25 s.
- `history_variance`: an identity's own earlier runs (its nightly history beyond the
  baseline) as more degrees of freedom for its variance: with 5 runs nothing else brings a
  small family near the known-variance bound. Level shifts in the history are cut out first
  (see its docstring); the history's within-segment sum of squares and df are added to the
  identity's own before the family prior is fitted, so with no history nothing changes.
- `verdicts`: THE verdict rule (see its docstring), after Benjamini-Hochberg across identities.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from fleetval.vocab import Verdict

# Degrees of freedom are rounded down and capped here (fewer df: a larger p, so both are
# conservative; t on 1000 df is the normal to 0.7% in z at p = 1e-7) to keep the exact
# finite series of `t_within` short.
MAX_DF = 1000
# Others with a variance an identity's family needs before it borrows from them: with fewer,
# alike and unlike spreads cannot be told apart (3-12 identities of spreads 0.5-4% made
# p <= 0.001 2-3 times too often at 5+1), so a smaller family is judged by the plain t.
MIN_OTHERS = 15
# Regimes of a family share its spread unless their pooled variances differ by more than
# this many standard errors (`alike_regimes`).
REGIME_Z = 3.0
# Below this upper-tail probability of its own variance under its prior an identity leans on
# the prior only in proportion (`trust`).
TRUST_P = 0.3
# A history needs this many runs of an identity before it says anything of its variance.
MIN_HISTORY = 3
# A level shift in a history is a cut where the means of w runs either side differ by
# more than this many standard deviations of that difference (w = 1: one run against the
# next, which also isolates a single odd run; w = 3, 5: shifts too small to show in one
# step); the second pass takes the t's quantile at the same tail. Spurious cuts cost about
# one df each; p stays uniform (tests/unit/test_statistics.py, bench/RESULTS.md).
BREAK_Z = 4.0


def moments(ident: np.ndarray, side: np.ndarray, x: np.ndarray, nid: int) -> tuple[np.ndarray, ...]:
    """[nid, 2] run counts, means and sums of squared deviations of x per identity and side."""
    seg = ident * 2 + side
    n = np.bincount(seg, minlength=2 * nid).astype(float)
    total = np.bincount(seg, weights=x, minlength=2 * nid)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
    ss = np.bincount(seg, weights=(x - mean[seg]) ** 2, minlength=2 * nid)
    return n.reshape(nid, 2), mean.reshape(nid, 2), ss.reshape(nid, 2)


@dataclass(frozen=True)
class VariancePrior:
    """Per identity, the prior its group's OTHER identities give it (leave one out, so an
    identity's own variance never chooses how much it is trusted): degrees of freedom `df`
    (d0; inf when the others' variances are alike, 0 when fewer than MIN_OTHERS have one),
    variance `var` (s0^2), `var_df`, the degrees of freedom s0^2 itself is known to, and
    `others`, how many identities it came from."""

    df: np.ndarray
    var: np.ndarray
    var_df: np.ndarray
    others: np.ndarray

    @classmethod
    def fit(cls, s2: np.ndarray, df: np.ndarray, family: np.ndarray, nfam: int) -> VariancePrior:
        """Smyth's moment estimates (limma `fitFDist`) from each identity's family less itself.

        e = log s^2 - digamma(d/2) + log(d/2) has mean log s0^2 + digamma(d0/2) - log(d0/2)
        and variance trigamma(d/2) + trigamma(d0/2): the excess of the observed variance
        of e over trigamma(d/2) is the prior's part; none left means d0 = inf.
        """
        ok = (df > 0) & np.isfinite(s2) & (s2 > 0)
        d = np.where(ok, df, 2.0)
        e = np.where(ok, np.log(np.where(ok, s2, 1.0)) - digamma(d / 2) + np.log(d / 2), 0.0)
        tri = np.where(ok, trigamma(d / 2), 0.0)

        def others(x: np.ndarray) -> np.ndarray:  # the family's sum less the identity's own
            return np.bincount(family, weights=x, minlength=nfam)[family] - x

        count = others(ok.astype(float))
        with np.errstate(invalid="ignore", divide="ignore"):
            e_mean = others(e) / count
            e_var = (others(e * e) - count * e_mean**2) / (count - 1)
            excess = e_var - others(tri) / count
            # an excess within two standard errors of none (the sample variance of c values
            # of e, whose variance is about tri, has sd tri sqrt(2 / (c - 1))) is no
            # evidence of unlike spreads: the others are alike, d0 = inf
            noise = 2 * others(tri) / count * np.sqrt(2 / (count - 1))
        many = count >= MIN_OTHERS
        finite = many & (excess > noise)
        d0 = np.where(many, np.inf, 0.0)
        d0[finite] = 2 * trigamma_inverse(excess[finite])
        var = np.exp(np.where(many, e_mean, 0.0))
        var[finite] *= np.exp(digamma(d0[finite] / 2) - np.log(d0[finite] / 2))
        var_df = np.zeros(len(s2))  # s0^2 from `count` others: var(log s0^2) = e_var / count
        var_df[many] = 2 * trigamma_inverse(np.maximum(e_var[many], 1e-12) / count[many])
        return cls(d0, var, var_df, count)


def alike_regimes(
    s2: np.ndarray, df: np.ndarray, regime: np.ndarray, family: np.ndarray
) -> np.ndarray:
    """Per identity: whether its regime's OTHER identities share the rest of its family's
    spread: their pooled variances (on log scale, less chi-square's bias) differ by at most
    two standard errors (trigamma(D/2) each). A regime alone in its family, or an identity
    alone in its regime, has nothing to differ from: True.

    Regimes (one check's latency-bound and bandwidth-bound sizes) may be noisier one than the
    other; this is the between-regime test the family's excess test is too weak for: it
    pools all a regime's df, so 12 identities of 4 df tell spreads 1.8x apart.
    """
    ok = (df > 0) & np.isfinite(s2)
    d, ss = np.where(ok, df, 0.0), np.where(ok, s2 * df, 0.0)
    _, reg = np.unique(regime, return_inverse=True)
    _, fam = np.unique(family, return_inverse=True)
    d_reg = np.bincount(reg, weights=d)[reg] - d  # the regime's others
    ss_reg = np.bincount(reg, weights=ss)[reg] - ss
    d_rest = np.bincount(fam, weights=d)[fam] - np.bincount(reg, weights=d)[reg]
    ss_rest = np.bincount(fam, weights=ss)[fam] - np.bincount(reg, weights=ss)[reg]
    both = (d_reg > 0) & (d_rest > 0)
    a, b = np.where(both, d_reg, 2.0), np.where(both, d_rest, 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (
            np.log(ss_reg / a) - digamma(a / 2) + np.log(a / 2)
            - np.log(ss_rest / b) + digamma(b / 2) - np.log(b / 2)
        ) / np.sqrt(trigamma(a / 2) + trigamma(b / 2))  # fmt: skip
    return ~both | (np.abs(np.nan_to_num(z, nan=np.inf)) <= REGIME_Z)


# The polygamma functions below shift x up by SHIFT (psi(x) = psi(x + n) - sum 1/(x + k), and
# likewise for the derivatives), then take the asymptotic series at x + SHIFT >= 10 (< 1e-12).
SHIFT = 10


def _recurrence(x: np.ndarray, power: int) -> np.ndarray:
    """sum of 1 / (x + k)^power (power 1, 2 or 3) for k < SHIFT."""
    out = np.zeros_like(x)
    for k in range(SHIFT):
        inv = 1 / (x + k)
        out += inv if power == 1 else inv * inv if power == 2 else inv * inv * inv
    return out


def digamma(x: np.ndarray) -> np.ndarray:
    """psi(x) for x > 0."""
    x = np.asarray(x, float)
    z = x + SHIFT
    r = 1 / (z * z)
    series = np.log(z) - 0.5 / z - r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r / 240)))
    return series - _recurrence(x, 1)


def trigamma(x: np.ndarray) -> np.ndarray:
    """psi'(x) for x > 0."""
    x = np.asarray(x, float)
    z = x + SHIFT
    r = 1 / (z * z)
    series = 1 / z + r / 2 + r / z * (1 / 6 - r * (1 / 30 - r * (1 / 42 - r / 30)))
    return series + _recurrence(x, 2)


def tetragamma(x: np.ndarray) -> np.ndarray:
    """psi''(x) for x > 0 (negative): trigamma's slope, for Newton's method below."""
    x = np.asarray(x, float)
    z = x + SHIFT
    r = 1 / (z * z)
    series = -r * (1 + 1 / z + r / 2 - r * r * (1 / 6 - r * (1 / 6 - r * 3 / 10)))
    return series - 2 * _recurrence(x, 3)


def trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (y > 0): Newton's method on 1 / trigamma, which is nearly linear
    in x (Smyth 2004), from x = 1/2 + 1/y (1/sqrt(y) where y > 1e7: trigamma ~ 1/x^2 there),
    a few steps past 1e-8 to reach the functions' own precision (80 bisections on log x took
    20 times as long)."""
    y = np.asarray(y, float)
    x = np.where(y > 1e7, 1 / np.sqrt(y), 0.5 + 1 / y)
    todo = np.arange(len(x))
    for _ in range(50):
        if not len(todo):
            break
        xt, yt = x[todo], y[todo]
        tri = trigamma(xt)
        step = tri * (1 - tri / yt) / tetragamma(xt)
        x[todo] = xt + step
        todo = todo[np.abs(step) > 1e-14 * x[todo]]
    return x


def robust_step_sd(x: np.ndarray) -> np.ndarray:
    """Per row of x (values in time order, NaN after each row's last) the run-to-run sd from
    the MAD of successive differences: a level shift moves one difference, so it barely
    moves the median of them (trend uses the same for one series)."""
    d = np.diff(x, axis=1)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row without two values: NaN
        center = np.nanmedian(d, axis=1, keepdims=True)
        return 1.4826 * np.nanmedian(np.abs(d - center), axis=1) / np.sqrt(2)


def history_variance(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per identity (row of x: its earlier log run values, oldest first, NaN-padded at the
    end) the sum of squares and degrees of freedom its history adds to its variance.

    A history holds what the baseline does not: regressions that were fixed, upgrades that
    moved the level. Its plain variance would take every such step as spread (a 20% step
    in 20 runs of 2% sd inflates it ~25 times), and the MAD of successive differences that
    ignores steps has a third of the efficiency, which is the df this is for. So the series
    is cut where its level moves (`BREAK_Z` on means of 1, 3 and 5 runs either side, scaled
    by `robust_step_sd`, then again by the pieces' own spread) and the variance is pooled
    within the pieces: with no step
    found it is the plain variance on n - 1 df, exact for the t; each cut costs one df, and
    a run alone between two cuts (a single odd run) adds nothing.
    """
    n = np.isfinite(x).sum(axis=1)
    sigma = robust_step_sd(x) if x.shape[1] > 1 else np.full(len(x), np.nan)
    usable = (n >= MIN_HISTORY) & (sigma > 0)  # no spread at all: no say about it
    ss, df = _pieces(x, _cuts(x, sigma, np.full(len(x), BREAK_Z)), usable)
    # again, scaled by the spread within those pieces (efficient where the MAD is not) and
    # with the t's quantile on its df for BREAK_Z's normal one: a short history is cut only
    # where a step is plain beyond its uncertain spread, never where the MAD happened low
    within = np.floor(np.maximum(df, 1))
    limit = t_quantile(1 - 2 * _normal_sf(BREAK_Z), within)
    with np.errstate(invalid="ignore", divide="ignore"):
        ss, df = _pieces(x, _cuts(x, np.sqrt(ss / df), limit), usable & (df > 0))
    return ss, df


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _cuts(x: np.ndarray, sigma: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """[rows, width - 1]: where a row's level moves (between runs j and j + 1): the means of
    w runs either side differ by more than `limit` sds of that difference.

    w = 1 cuts wherever it exceeds: a step, or an odd run (a cut either side). The odd runs
    left out, w = 3 and 5 find shifts too small for one run's noise; their statistic rises
    over w runs before a shift and falls after, so they cut at its peak only, and not
    beside a w = 1 cut (the same shift)."""
    rows, width = x.shape
    cuts = np.zeros((rows, max(width - 1, 0)), bool)
    if width < 2:
        return cuts
    with np.errstate(invalid="ignore", divide="ignore"):
        single = (
            np.nan_to_num(np.abs(np.diff(x, axis=1)) / (np.sqrt(2) * sigma[:, None]))
            > limit[:, None]
        )
    edged = np.pad(single, ((0, 0), (1, 1)), constant_values=True)
    kept = np.where(edged[:, :-1] & edged[:, 1:], np.nan, x)  # a run cut off on both sides
    wide = np.zeros_like(cuts, float)
    for w in (3, 5):
        if width < 2 * w:
            continue
        mean = sliding_window_view(kept, w, axis=1).mean(axis=2)  # NaN where a run is out
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.abs(mean[:, w:] - mean[:, : width - 2 * w + 1]) / (
                sigma[:, None] * np.sqrt(2 / w)
            )
        wide[:, w - 1 : width - w] = np.maximum(wide[:, w - 1 : width - w], np.nan_to_num(z))
    pad, near = np.pad(wide, ((0, 0), (1, 1))), np.pad(single, ((0, 0), (1, 1)))
    peak = (wide > limit[:, None]) & (wide >= pad[:, :-2]) & (wide >= pad[:, 2:])
    return single | (peak & ~near[:, :-2] & ~near[:, 2:])


def _pieces(x: np.ndarray, cut: np.ndarray, usable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row the sum of squares within the pieces the cuts leave, and its df."""
    rows, width = x.shape
    piece = np.c_[np.zeros(rows, np.int64), np.cumsum(cut, axis=1)]
    piece = piece + np.arange(rows)[:, None] * width
    ok = np.isfinite(x) & usable[:, None]
    seg, val = piece[ok], x[ok]
    count = np.bincount(seg, minlength=rows * width)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(seg, weights=val, minlength=rows * width) / count
    ss = np.bincount(seg // width, weights=(val - mean[seg]) ** 2, minlength=rows)
    df = np.where(usable, ok.sum(axis=1) - (count > 0).reshape(rows, width).sum(axis=1), 0)
    df = np.maximum(df, 0).astype(float)
    return np.where(df > 0, ss, 0.0), df


@dataclass(frozen=True)
class Tests:
    """Per identity: change (candidate - baseline mean log value), its two-sided p, the
    interval at `confidence`, the run-to-run sd used (moderated), and its degrees of freedom
    `df` = `own_df` (the runs compared) + `history_df` (its earlier runs) + `family_df` (what
    the family's prior was worth, after the uncertainty of its scale), from `family_size`
    other identities (0: none)."""

    diff: np.ndarray
    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sd: np.ndarray
    df: np.ndarray
    own_df: np.ndarray
    history_df: np.ndarray
    family_df: np.ndarray
    family_size: np.ndarray


NO_HISTORY = (np.zeros(0), np.zeros(0))


@dataclass(frozen=True)
class Moderated:
    """Per identity the variance its test uses and its degrees of freedom (rounded down, at
    most MAX_DF; 0: no variance known), its own sample variance (NaN without one), the df of
    its own runs and history, and the df and number of identities its family lent."""

    var: np.ndarray
    df: np.ndarray
    s2: np.ndarray
    own_df: np.ndarray
    family_df: np.ndarray
    family_size: np.ndarray


@dataclass(frozen=True)
class _Level:
    """One grouping's prior per identity and its pooled variance (all the group's df)."""

    prior: VariancePrior
    pooled_var: np.ndarray
    pooled_df: np.ndarray

    @classmethod
    def fit(cls, s2: np.ndarray, own: np.ndarray, group: np.ndarray) -> _Level:
        _, g = np.unique(group, return_inverse=True)
        ng = int(g.max(initial=-1)) + 1
        has = (own > 0) & np.isfinite(s2)
        total = np.bincount(g[has], weights=own[has], minlength=ng)
        with np.errstate(invalid="ignore", divide="ignore"):
            pooled = np.bincount(g[has], weights=(s2 * own)[has], minlength=ng) / total
        return cls(VariancePrior.fit(s2, own, g, ng), pooled[g], total[g])

    def take(self, mask: np.ndarray, other: _Level) -> _Level:
        """This level where mask, the other elsewhere."""
        pick = lambda a, b: np.where(mask, a, b)  # noqa: E731
        p, q = self.prior, other.prior
        prior = VariancePrior(pick(p.df, q.df), pick(p.var, q.var), pick(p.var_df, q.var_df),
                              pick(p.others, q.others))  # fmt: skip
        return _Level(prior, pick(self.pooled_var, other.pooled_var),
                      pick(self.pooled_df, other.pooled_df))  # fmt: skip


def moderated(
    n: np.ndarray,
    ss: np.ndarray,
    family: np.ndarray,
    history: tuple[np.ndarray, np.ndarray] = NO_HISTORY,
    regime: np.ndarray | None = None,
) -> Moderated:
    """Per identity the variance its test uses and where its degrees of freedom come from.

    `history` (`history_variance`: sum of squares and df per identity, or none) is more of
    the identity's own data: its sum of squares and df join those of the runs compared. The
    family prior is then fitted on those variances as before (limma: each identity's
    variance on its own df): one identity's history is what it knows of itself, the family
    what its peers say; both kinds of df add. With no history, the test of before.

    `regime` (default: the family) splits a family where spreads may differ (one check's
    latency and busbw sizes). The whole family lends when its others are alike and the
    identity's regime shares their spread (`alike_regimes`); else the regime's own prior,
    or, for a regime under MIN_OTHERS + 1 that shares the family's spread, the family's
    finite prior; a small regime that does not is judged on its own (the plain t).

    s~^2 = (d0 s0^2 + d s^2) / (d0 + d) on d0 + d df when s0^2 is known; s0^2 estimated
    from the others adds its own uncertainty, weighted by the prior's share B = d0/(d0+d):
    1/df = 1/(d0 + d) + B^2/var_df. When d0 reaches the others' degrees of freedom the
    group's pooled variance is used, on all its degrees of freedom (exact for alike spreads).
    """
    own = np.maximum(n[:, 0] - 1, 0) + np.maximum(n[:, 1] - 1, 0)
    total_ss = ss.sum(axis=1)
    if len(history[0]):
        own, total_ss = own + history[1], total_ss + history[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = np.where(own > 0, total_ss / own, np.nan)
    wide = _Level.fit(s2, own, family)
    level = wide
    if regime is not None:
        narrow = _Level.fit(s2, own, regime)
        shared = alike_regimes(s2, own, regime, family)
        small = narrow.prior.others < MIN_OTHERS
        lend = shared & (np.isinf(wide.prior.df) | (small & (wide.prior.df > 0)))
        level = wide.take(lend, narrow)
    # pooled: the prior is as sure as all the others, so it is their pooled variance on all
    # their df (exact for alike spreads); else the fitted prior, s0^2 known to var_df
    others = level.pooled_df - own
    pooled = (others > 0) & (level.prior.df >= others)
    with np.errstate(invalid="ignore", divide="ignore"):
        others_var = (level.pooled_var * level.pooled_df - own * np.nan_to_num(s2)) / others
    d0 = np.where(pooled, others, level.prior.df)
    s0 = np.where(pooled, others_var, level.prior.var)
    d0 = d0 * trust(s2, own, s0, d0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(d0 > 0, d0 / (d0 + own), 0.0)
        var = (np.where(d0 > 0, d0 * s0, 0.0) + own * np.nan_to_num(s2)) / (d0 + own)
        # pooled: Satterthwaite's df of the weighted sum of two independent variances (the
        # pooled t's d0 + d at full trust, the own d at none); else 1/df = 1/(d0 + d) + B^2/var_df
        df = np.where(
            pooled,
            (d0 + own) ** 2 / (d0 * d0 / others + own),
            1 / (1 / (d0 + own) + np.where(share > 0, share**2 / level.prior.var_df, 0.0)),
        )
    var = np.where(own > 0, var, np.where(d0 > 0, s0, np.nan))
    df = np.floor(np.minimum(np.nan_to_num(df), MAX_DF))
    df = np.where(np.isfinite(var), df, 0.0)
    lent = np.maximum(df - own, 0.0)  # what the family added beyond the identity's own df
    return Moderated(var, df, s2, own, lent, np.where(lent > 0, level.prior.others, 0.0))


def trust(s2: np.ndarray, df: np.ndarray, s0: np.ndarray, d0: np.ndarray) -> np.ndarray:
    """How far an identity may lean on its prior (s0^2 on d0 df), 0..1: 1 unless its own
    variance (s2 on df) is improbably large for it, then the upper-tail probability of
    log s2 against the prior's (normal on Smyth's scale: trigamma(df/2) + trigamma(d0/2))
    over TRUST_P. limma's robust prior does this for the same reason: one much noisier
    identity in an alike family is otherwise judged on the family's spread (drowned), and
    its clean runs fail the gate. An alike identity loses a little power and only where its
    own spread is high (the test stays exact or conservative); with 4 df the prior cannot
    tell a 3x noisier identity whose runs happened close, so some of those stay drowned."""
    ok = (df > 0) & (d0 > 0) & np.isfinite(s2) & (s2 > 0) & (s0 > 0)
    d, k = np.where(ok, df, 2.0), np.where(ok, d0, 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (
            np.log(np.where(ok, s2 / s0, 1.0)) - digamma(d / 2) + np.log(d / 2)
            + digamma(k / 2) - np.log(k / 2)
        ) / np.sqrt(trigamma(d / 2) + trigamma(k / 2))  # fmt: skip
    tail = 0.5 * np.array([math.erfc(x / math.sqrt(2)) for x in z.tolist()])
    return np.where(ok, np.minimum(1.0, tail / TRUST_P), 1.0)


def tests(
    n: np.ndarray,
    mean: np.ndarray,
    ss: np.ndarray,
    family: np.ndarray,
    confidence: float,
    history: tuple[np.ndarray, np.ndarray] = NO_HISTORY,
    regime: np.ndarray | None = None,
) -> Tests:
    """The tests for every identity (see the module's docstring); NaN where a side has no
    run or no variance is known (nothing to test with)."""
    m = moderated(n, ss, family, history, regime)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.sqrt(1 / n[:, 0] + 1 / n[:, 1])
    diff = mean[:, 1] - mean[:, 0]
    testable = (n[:, 0] > 0) & (n[:, 1] > 0) & (m.df >= 1)
    p, half = np.full(len(diff), np.nan), np.full(len(diff), np.nan)
    p[testable], half[testable] = t_test(diff[testable], m.var[testable] * c[testable] ** 2,
                                         m.df[testable], confidence)  # fmt: skip
    sd = np.where(testable, np.sqrt(m.var), np.sqrt(m.s2))
    history_df = history[1] if len(history[0]) else np.zeros(len(diff))
    nan = np.where(testable, 0.0, np.nan)  # nothing is known of an untested identity's df
    return Tests(diff, p, diff - half, diff + half, sd, m.df + nan, m.own_df - history_df + nan,
                 history_df + nan, m.family_df + nan, m.family_size + nan)  # fmt: skip


def t_test(
    diff: np.ndarray, var: np.ndarray, df: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided p of Student's t = diff / sqrt(var) on df (integers >= 1), and the
    interval's half width at `confidence`."""
    se = np.sqrt(var)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(se > 0, np.abs(diff) / se, np.where(diff == 0, 0.0, np.inf))
    df = df.astype(np.int64)
    return 1 - t_within(t, df), t_quantile(confidence, df) * se


def t_quantile(confidence: float, df: np.ndarray) -> np.ndarray:
    """t with P(|T_df| <= t) = confidence, per entry, once per distinct df: closed forms for
    1 and 2 df, else Newton's method from the Cornish-Fisher expansion (A&S 26.7.5), a step
    down at most halving t (the CDF is concave: from below, the steps rise to the root)."""
    uniq, inverse = np.unique(df, return_inverse=True)
    nu = uniq.astype(float)
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    g = [(z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96,
         (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
         (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160]  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):  # no df (nu = 0): NaN at the end
        t = z + sum(gk / nu ** (k + 1) for k, gk in enumerate(g))
        log_norm = np.array([math.lgamma((v + 1) / 2) - math.lgamma(v / 2) if v > 0 else 0.0
                             for v in nu.tolist()])  # fmt: skip
        log_norm -= 0.5 * np.log(nu * np.pi)
    active = np.flatnonzero(nu > 2)
    for _ in range(100):
        if not len(active):
            break
        ta, va = t[active], nu[active]
        density = 2 * np.exp(log_norm[active] - (va + 1) / 2 * np.log1p(ta * ta / va))
        new = np.maximum(ta + (confidence - t_within(ta, uniq[active])) / density, ta / 2)
        t[active] = new
        active = active[np.abs(new - ta) > 1e-11 * new]
    t = np.where(nu == 1, np.tan(np.pi * confidence / 2), t)
    t = np.where(nu == 2, confidence * np.sqrt(2 / (1 - confidence**2)), t)
    return np.where(nu >= 1, t, np.nan)[inverse]  # no df: no quantile


def t_within(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """P(|T| <= t) for Student's T with integer df >= 1 (Abramowitz & Stegun 26.7.3-4: finite
    series in cos(theta), theta = atan(t / sqrt(df))). Run counts make df an integer; numpy
    instead of scipy.special, whose import costs half a command's start."""
    df = df.astype(np.int64)
    theta = np.arctan(np.abs(t) / np.sqrt(df))
    sin, cos = np.sin(theta), np.cos(theta)
    odd = df % 2 == 1
    terms = np.where(odd, (df - 1) // 2, df // 2)  # of the series below, the first term 1
    series, term = np.where(terms > 0, 1.0, 0.0), np.ones(len(df))
    for k in range(1, int(terms.max(initial=0))):
        term = term * np.where(odd, 2 * k / (2 * k + 1), (2 * k - 1) / (2 * k)) * cos * cos
        series += np.where(k < terms, term, 0.0)
    return np.where(odd, 2 / np.pi * (theta + sin * cos * series), sin * series)


def bh_adjust(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values over the finite entries (NaN stays NaN).

    NOTE: the same numbers as scipy.stats.false_discovery_control (a test checks it), in
    numpy: importing scipy.stats costs ~0.4 s, more than the whole comparison it serves.
    """
    q = np.full(len(p), np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if len(ok):
        order = np.argsort(p[ok])
        ranked = p[ok][order] * len(ok) / np.arange(1, len(ok) + 1)
        adjusted = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
        q[ok[order]] = adjusted
    return q


def verdicts(
    better_pct: np.ndarray, q: np.ndarray, threshold_pct: np.ndarray, fdr: float
) -> np.ndarray:
    """THE verdict rule, monotone in the size of the change.

    `better_pct` is the change signed so that positive is better; `q` the BH-adjusted p.
    - |change| < threshold: UNCHANGED, however significant (a change below the threshold
      never matters).
    - change <= -threshold: REGRESSION when q <= fdr, else NOISY (big, but not supported).
    - change >= +threshold: IMPROVEMENT when q <= fdr, else NOISY.
    With the spread fixed, a larger change has a smaller p and a smaller q, so the verdict
    only moves UNCHANGED -> NOISY -> REGRESSION as a drop grows, never back. No q (one run
    per side, so no run-to-run spread): NOISY beyond the threshold, UNCHANGED within.
    """
    sig = np.nan_to_num(q, nan=np.inf) <= fdr
    out = np.full(len(better_pct), Verdict.UNCHANGED.value, dtype=object)
    beyond = np.abs(better_pct) >= threshold_pct
    out[beyond] = Verdict.NOISY.value
    out[beyond & sig & (better_pct < 0)] = Verdict.REGRESSION.value
    out[beyond & sig & (better_pct > 0)] = Verdict.IMPROVEMENT.value
    return out
