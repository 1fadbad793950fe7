"""Statistics on run-level values: pure array functions, no store, no pyarrow.

Inputs are per identity the log run values of each side (baseline 0, candidate 1). The
model is the one a fleet shows: each run of an identity draws its own level (a run-level
random effect: placement, clocks, background load) and iterations scatter around it.
So the evidence about a release is the spread of run values, never the iterations.

- `moments`: per identity and side, the number of runs, the mean and the squared deviations.
- `moderated_variance`: the pooled run-to-run variance of each identity, moderated towards
  its family's typical variance (empirical Bayes, as limma does for genes): with 5 runs an
  identity's own variance has 4 degrees of freedom, far too few to trust alone; hundreds of
  identities of the same metric say what a typical one is, and how much they differ.
- `t_tests`: difference of mean log values over its standard error
  s * sqrt(1/m + 1/k). With one candidate run (k = 1) this is exactly the prediction
  interval for one new run from the baseline's run-to-run spread.
- `verdicts`: THE verdict rule (see its docstring), after Benjamini-Hochberg across identities.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from fleetval.vocab import Verdict

MAX_PRIOR_DF = 1e6  # "the family's variances are all alike": the prior is as good as known


def moments(ident: np.ndarray, side: np.ndarray, x: np.ndarray, nid: int) -> tuple[np.ndarray, ...]:
    """[nid, 2] run counts, means and sums of squared deviations of x per identity and side."""
    seg = ident * 2 + side
    n = np.bincount(seg, minlength=2 * nid).astype(float)
    total = np.bincount(seg, weights=x, minlength=2 * nid)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
    ss = np.bincount(seg, weights=(x - mean[seg]) ** 2, minlength=2 * nid)
    return n.reshape(nid, 2), mean.reshape(nid, 2), ss.reshape(nid, 2)


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (Newton's method from y = 0.5 + 1/x, as limma does)."""
    if x > 1e7:
        return 1 / np.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = special.polygamma(1, y)
        dif = tri * (1 - tri / x) / special.polygamma(2, y)
        y += dif
        if -dif / y < 1e-8:
            break
    return float(y)


def fit_prior(s2: np.ndarray, df: np.ndarray) -> tuple[float, float]:
    """Prior variance s0^2 and its degrees of freedom d0 from sample variances (limma fitFDist).

    log s^2 of a scaled chi-square has known mean and variance; the excess variance of the
    observed log s^2 over that is the spread of the true variances: d0 = 2 trigamma^-1(excess).
    No excess: the variances are alike and d0 is (practically) infinite.
    """
    ok = (df > 0) & (s2 > 0) & np.isfinite(s2)
    if ok.sum() < 3:
        return float("nan"), 0.0
    d, z = df[ok], np.log(s2[ok])
    e = z - special.digamma(d / 2) + np.log(d / 2)
    emean = float(e.mean())
    excess = float(((e - emean) ** 2).sum() / (len(e) - 1) - special.polygamma(1, d / 2).mean())
    if excess <= 0:
        return float(np.exp(emean)), MAX_PRIOR_DF
    d0 = min(2 * _trigamma_inverse(excess), MAX_PRIOR_DF)
    return float(np.exp(emean + special.digamma(d0 / 2) - np.log(d0 / 2))), d0


def moderated_variance(
    s2: np.ndarray, df: np.ndarray, family: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior variance (d0 s0^2 + d s^2) / (d0 + d) and its degrees of freedom d0 + d,
    with the prior fitted per family (e.g. one check's busbw). Identities with no degrees
    of freedom of their own get the prior alone; with no prior either, NaN and 0."""
    post, post_df = np.full(len(s2), np.nan), df.astype(float).copy()
    s2 = np.where(df > 0, s2, 0.0)
    for f in np.unique(family):
        sel = family == f
        s0, d0 = fit_prior(s2[sel], df[sel])
        if d0 == 0:
            with np.errstate(invalid="ignore", divide="ignore"):
                post[sel] = np.where(df[sel] > 0, s2[sel], np.nan)
            continue
        post[sel] = (d0 * s0 + df[sel] * s2[sel]) / (d0 + df[sel])
        post_df[sel] = d0 + df[sel]
    return post, post_df


def t_tests(
    n: np.ndarray, mean: np.ndarray, s2: np.ndarray, df: np.ndarray, confidence: float
) -> tuple[np.ndarray, ...]:
    """Per identity: difference of means (candidate - baseline), two-sided p and its interval.

    NaN where a side has no run or no variance is known (nothing to test with).
    """
    diff = mean[:, 1] - mean[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(s2 * (1 / n[:, 0] + 1 / n[:, 1]))
        testable = (n[:, 0] > 0) & (n[:, 1] > 0) & (df > 0) & np.isfinite(se)
        dfs = np.where(testable, df, 1.0)
        t = np.where(se > 0, diff / se, np.where(diff == 0, 0.0, np.inf * np.sign(diff)))
        p = 2 * special.stdtr(dfs, -np.abs(t))
        half = special.stdtrit(dfs, 0.5 + confidence / 2) * se
    nan = np.full(len(diff), np.nan)
    return (
        diff,
        np.where(testable, p, nan),
        np.where(testable, diff - half, nan),
        np.where(testable, diff + half, nan),
    )


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
