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
- `moderated` and `tests`: per identity the difference d of mean log values, the moderated
  variance s~^2 = (d0 s0^2 + d s^2) / (d0 + d) and Student's t (`t_test`) on d0 + d degrees
  of freedom, less for s0's own uncertainty (c = sqrt(1/m + 1/k); with one candidate run,
  k = 1, the prediction interval for one new run from the baseline's spread). When d0
  reaches the others' degrees of freedom the family's pooled variance is used on all its
  df: a family of alike identities gets the t on their pooled variance; one identity alone,
  or a family under MIN_OTHERS + 1, the plain t on its own. p-values are exact in both
  limits (calibration between them: bench/RESULTS.md). All in numpy: scipy.special's
  import alone costs ~0.25 s.
- `verdicts`: THE verdict rule (see its docstring), after Benjamini-Hochberg across identities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetval.vocab import Verdict

# Degrees of freedom are rounded down and capped here (fewer df: a larger p, so both are
# conservative; t on 1000 df is the normal to 0.7% in z at p = 1e-7) to keep the exact
# finite series of `t_within` short.
MAX_DF = 1000
# Others with a variance an identity's family needs before it borrows from them: with fewer,
# alike and unlike spreads cannot be told apart (3-12 identities of spreads 0.5-4% made
# p <= 0.001 2-3 times too often at 5+1), so a smaller family is judged by the plain t.
MIN_OTHERS = 15


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
    """Per identity, the prior its family's OTHER identities give it (leave one out, so an
    identity's own variance never chooses how much it is trusted): degrees of freedom `df`
    (d0; inf when the others' variances are alike, 0 when fewer than MIN_OTHERS have one),
    variance `var` (s0^2), and `var_df`, the degrees of freedom s0^2 itself is known to."""

    df: np.ndarray
    var: np.ndarray
    var_df: np.ndarray

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
        return cls(d0, var, var_df)


def digamma(x: np.ndarray) -> np.ndarray:
    """psi(x) for x > 0: the recurrence up to x >= 10, then the asymptotic series (< 1e-12)."""
    x = np.asarray(x, float).copy()
    out = np.zeros_like(x)
    while (small := x < 10).any():
        out -= np.where(small, 1 / x, 0.0)
        x = np.where(small, x + 1, x)
    r = 1 / (x * x)
    return out + np.log(x) - 0.5 / x - r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r / 240)))


def trigamma(x: np.ndarray) -> np.ndarray:
    """psi'(x) for x > 0, the same way (< 1e-12)."""
    x = np.asarray(x, float).copy()
    out = np.zeros_like(x)
    while (small := x < 10).any():
        out += np.where(small, 1 / (x * x), 0.0)
        x = np.where(small, x + 1, x)
    r = 1 / (x * x)
    return out + 1 / x + r / 2 + r / x * (1 / 6 - r * (1 / 30 - r * (1 / 42 - r / 30)))


def trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (y > 0): bisection on log x (trigamma falls from inf to 0)."""
    lo, hi = np.full(len(y), -30.0), np.full(len(y), 30.0)
    for _ in range(80):
        mid = (lo + hi) / 2
        above = trigamma(np.exp(mid)) > y
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return np.exp((lo + hi) / 2)


@dataclass(frozen=True)
class Tests:
    """Per identity: change (candidate - baseline mean log value), its two-sided p, the
    interval at `confidence`, the run-to-run sd used (moderated) and its degrees of freedom."""

    diff: np.ndarray
    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sd: np.ndarray
    df: np.ndarray


def moderated(n: np.ndarray, ss: np.ndarray, family: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per identity the variance its test uses, its degrees of freedom (rounded down, at most
    MAX_DF; 0: no variance known) and its own sample variance (NaN without one).

    s~^2 = (d0 s0^2 + d s^2) / (d0 + d) on d0 + d df when s0^2 is known; s0^2 estimated
    from the others adds its own uncertainty, weighted by the prior's share B = d0/(d0+d):
    1/df = 1/(d0 + d) + B^2/var_df. When d0 reaches the others' degrees of freedom the
    family's pooled variance is used, on all its degrees of freedom (exact for alike spreads).
    """
    own = np.maximum(n[:, 0] - 1, 0) + np.maximum(n[:, 1] - 1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = np.where(own > 0, ss.sum(axis=1) / own, np.nan)
    _, fam = np.unique(family, return_inverse=True)
    nfam = int(fam.max(initial=-1)) + 1
    prior = VariancePrior.fit(s2, own, fam, nfam)
    has = (own > 0) & np.isfinite(s2)
    total_df = np.bincount(fam[has], weights=own[has], minlength=nfam)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled_var = np.bincount(fam[has], weights=(s2 * own)[has], minlength=nfam) / total_df
        d0 = prior.df
        share = np.where(d0 > 0, d0 / (d0 + own), 0.0)
        shrunk = (np.where(d0 > 0, d0 * prior.var, 0.0) + own * np.nan_to_num(s2)) / (d0 + own)
        borrowed = np.where(share > 0, share**2 / prior.var_df, 0.0)
        shrunk_df = 1 / (1 / (d0 + own) + borrowed)
    pooled = d0 >= total_df[fam] - own  # the prior is as sure as all the others: pool all
    var = np.where(pooled, pooled_var[fam], shrunk)
    df = np.floor(np.minimum(np.where(pooled, total_df[fam], shrunk_df), MAX_DF))
    return var, np.where(np.isfinite(var), np.nan_to_num(df), 0.0), s2


def tests(
    n: np.ndarray, mean: np.ndarray, ss: np.ndarray, family: np.ndarray, confidence: float
) -> Tests:
    """The tests for every identity (see the module's docstring); NaN where a side has no
    run or no variance is known (nothing to test with)."""
    var, df, s2 = moderated(n, ss, family)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.sqrt(1 / n[:, 0] + 1 / n[:, 1])
    diff = mean[:, 1] - mean[:, 0]
    testable = (n[:, 0] > 0) & (n[:, 1] > 0) & (df >= 1)
    p, half = np.full(len(diff), np.nan), np.full(len(diff), np.nan)
    p[testable], half[testable] = t_test(diff[testable], var[testable] * c[testable] ** 2,
                                         df[testable], confidence)  # fmt: skip
    sd = np.where(testable, np.sqrt(var), np.sqrt(s2))
    return Tests(diff, p, diff - half, diff + half, sd, np.where(testable, df, np.nan))


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
    """t with P(|T_df| <= t) = confidence, per entry: bisection once per distinct df."""
    uniq, inverse = np.unique(df, return_inverse=True)
    lo, hi = np.zeros(len(uniq)), np.full(len(uniq), 1.0)
    while (grow := t_within(hi, uniq) < confidence).any():  # bracket the quantile, then halve
        hi = np.where(grow, hi * 2, hi)
    for _ in range(50):
        mid = (lo + hi) / 2
        below = t_within(mid, uniq) < confidence
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return ((lo + hi) / 2)[inverse]


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
