"""Statistics on run-level values: pure array functions, no store, no pyarrow.

Inputs are per identity the log run values of each side (baseline 0, candidate 1). The
model is the one a fleet shows: each run of an identity draws its own level (a run-level
random effect: placement, clocks, background load) and iterations scatter around it.
So the evidence about a release is the spread of run values, never the iterations.

- `moments`: per identity and side, the number of runs, the mean and the squared deviations.
- `VariancePrior`: what run-to-run variances a family of identities (one check's busbw, say)
  has, fitted to all of them as a grid of variances with weights (a nonparametric
  empirical-Bayes prior, EM on the scaled chi-square likelihood). With 5 runs an identity's
  own variance has 4 degrees of freedom, far too few to trust alone at the tail a gate over
  hundreds of identities needs; its family says what variances are plausible. A grid, not a
  parametric (inverse chi-square) prior, so a family whose spreads differ a lot still
  bounds an identity's variance by what the family shows, instead of a heavy tail.
- `tests`: per identity, the difference d of mean log values and its two-sided p from the
  posterior predictive given the identity's own variance estimate (w_k its posterior
  weights): p = 2 sum_k w_k Phi(-|d| / (sigma_k c)), c = sqrt(1/m + 1/k). With one
  candidate run (k = 1) that is the prediction interval for one new run from the
  baseline's run-to-run spread. Families too small for a prior fall back to Student's t on
  the identity's own variance (all in numpy: scipy.special's import alone costs ~0.25 s).
- `verdicts`: THE verdict rule (see its docstring), after Benjamini-Hochberg across identities.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from fleetval.vocab import Verdict

MIN_FAMILY = 20  # identities with a variance of their own before a family's prior is fitted
GRID = 40  # variances in the prior's grid
FIT_SAMPLE = 4000  # identities the prior is fitted on (a 1-D distribution: plenty)
EM_STEPS = 500


_ERFC = (  # Chebyshev fit of erfc (Numerical Recipes' erfcc): relative error < 1.2e-7
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip


def ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF in numpy, to a relative 1.2e-7 in both tails (a test checks it
    against scipy.special.ndtr): enough for p-values, and no 0.25 s scipy import."""
    z = np.abs(x) / np.sqrt(2)
    t = 1 / (1 + z / 2)
    poly = np.zeros_like(t)
    for c in _ERFC[::-1]:
        poly = poly * t + c
    with np.errstate(under="ignore"):
        half_erfc = t * np.exp(poly - z * z) / 2  # Phi(-|x|)
    return np.where(x < 0, half_erfc, 1 - half_erfc)


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
    """A family's run-to-run variances: `grid` (variances) with prior `weights`."""

    grid: np.ndarray
    weights: np.ndarray

    @classmethod
    def fit(cls, s2: np.ndarray, df: np.ndarray) -> VariancePrior | None:
        """The grid prior maximising the marginal likelihood of the sample variances (EM).

        None when fewer than MIN_FAMILY identities have a variance of their own.
        """
        ok = np.flatnonzero((df > 0) & np.isfinite(s2) & (s2 > 0))
        if len(ok) < MIN_FAMILY:
            return None
        if len(ok) > FIT_SAMPLE:  # evenly spaced, so the fit is deterministic
            ok = ok[np.linspace(0, len(ok) - 1, FIT_SAMPLE).astype(int)]
        lo, hi = np.log(s2[ok].min()) - 1.0, np.log(s2[ok].max()) + 1.0
        grid = np.exp(np.linspace(lo, hi, GRID))
        lik = _likelihood(s2[ok], df[ok], grid)
        w = np.full(GRID, 1 / GRID)
        for _ in range(EM_STEPS):  # EM for mixture weights: w_k <- mean_i posterior_ik
            step = w * (lik.T @ (1 / (lik @ w))) / len(ok)
            done = np.abs(step - w).max() < 1e-7
            w = step
            if done:
                break
        keep = w > 1e-6 * w.max()  # the fit is sparse: a few atoms carry the weight
        return cls(grid[keep], w[keep] / w[keep].sum())

    def posterior(self, s2: np.ndarray, df: np.ndarray) -> np.ndarray:
        """[n, len(grid)] posterior weights of each variance given an identity's own estimate
        (the prior itself where it has none)."""
        own = df > 0
        s2 = np.where(own, np.maximum(np.nan_to_num(s2), self.grid[0] * 1e-6), self.grid[0])
        lik = np.where(own[:, None], _likelihood(s2, np.where(own, df, 1.0), self.grid), 1.0)
        post = lik * self.weights
        return post / post.sum(axis=1, keepdims=True)


def _likelihood(s2: np.ndarray, df: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """[n, K] likelihood of s2 ~ grid_k chi2_df / df, up to a factor per row."""
    ll = -(df[:, None] / 2) * (np.log(grid)[None, :] + s2[:, None] / grid[None, :])
    return np.exp(ll - ll.max(axis=1, keepdims=True))


@dataclass(frozen=True)
class Tests:
    """Per identity: change (candidate - baseline mean log value), its two-sided p, the
    interval at `confidence`, and the run-to-run sd used."""

    diff: np.ndarray
    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sd: np.ndarray


def tests(
    n: np.ndarray, mean: np.ndarray, ss: np.ndarray, family: np.ndarray, confidence: float
) -> Tests:
    """The tests for every identity (see the module's docstring); NaN where a side has no
    run or no variance is known (nothing to test with)."""
    df = np.maximum(n[:, 0] - 1, 0) + np.maximum(n[:, 1] - 1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = np.where(df > 0, ss.sum(axis=1) / df, np.nan)
        c = np.sqrt(1 / n[:, 0] + 1 / n[:, 1])
    diff = mean[:, 1] - mean[:, 0]
    p, half, sd = np.full(len(diff), np.nan), np.full(len(diff), np.nan), np.sqrt(s2)
    testable = (n[:, 0] > 0) & (n[:, 1] > 0)
    for f in np.unique(family):
        sel = family == f
        prior = VariancePrior.fit(s2[sel], df[sel])
        idx = np.flatnonzero(sel & testable)
        if prior is None:
            idx = idx[df[idx] > 0]
            p[idx], half[idx] = _student(diff[idx], s2[idx] * c[idx] ** 2, df[idx], confidence)
            continue
        w = prior.posterior(s2[idx], df[idx])
        scale = np.sqrt(prior.grid)[None, :] * c[idx, None]
        p[idx] = 2 * (w * ndtr(-np.abs(diff[idx, None]) / scale)).sum(axis=1)
        half[idx] = _mixture_quantile(w, scale, 0.5 + confidence / 2)
        sd[idx] = np.sqrt((w * prior.grid).sum(axis=1))
    return Tests(diff, p, diff - half, diff + half, sd)


def _student(
    diff: np.ndarray, var: np.ndarray, df: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided p and the interval's half width from the identity's own variance only."""
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(var)
        t = np.where(se > 0, np.abs(diff) / se, np.where(diff == 0, 0.0, np.inf))
    lo, hi = np.zeros(len(df)), np.full(len(df), 1.0)
    while (grow := t_within(hi, df) < confidence).any():  # bracket the quantile, then halve
        hi = np.where(grow, hi * 2, hi)
    for _ in range(50):
        mid = (lo + hi) / 2
        below = t_within(mid, df) < confidence
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 1 - t_within(t, df), (lo + hi) / 2 * se


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


def _mixture_quantile(w: np.ndarray, scale: np.ndarray, level: float) -> np.ndarray:
    """x with sum_k w_k Phi(x / scale_k) = level, per row: Newton's method from the normal
    with the mixture's variance (the CDF is smooth and increasing; a few steps suffice)."""
    x = NormalDist().inv_cdf(level) * np.sqrt((w * scale**2).sum(axis=1))
    for _ in range(6):
        u = x[:, None] / scale
        cdf = (w * ndtr(u)).sum(axis=1)
        pdf = (w * np.exp(-u * u / 2) / scale).sum(axis=1) / np.sqrt(2 * np.pi)
        x = np.maximum(x - (cdf - level) / pdf, x / 2)
    return x


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
