"""The moderated t (fleetval/analysis/statistics.py): its special functions, the family's
prior, and the p-values the gate rests on, at every family size.

Rates over thousands of repeats are in bench/bench_gate.py --identities (figures in
bench/RESULTS.md); here enough seeded repeats to fail when the model breaks.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetval.analysis import statistics as st
from fleetval.vocab import Verdict


def _history(rng: np.random.Generator, sd: np.ndarray, runs: int) -> tuple[np.ndarray, ...]:
    """history_variance of `runs` earlier log run values per identity (none: no history)."""
    if not runs:
        return st.NO_HISTORY
    return st.history_variance(rng.standard_normal((len(sd), runs)) * sd[:, None])


def _family(
    rng: np.random.Generator, sd: np.ndarray, m: int, k: int, shift: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """moments() of log run values: m baseline and k candidate runs per identity."""
    x0 = rng.standard_normal((len(sd), m)) * sd[:, None]
    x1 = rng.standard_normal((len(sd), k)) * sd[:, None] + (0 if shift is None else shift[:, None])
    n = np.c_[np.full(len(sd), float(m)), np.full(len(sd), float(k))]
    mean = np.c_[x0.mean(1), x1.mean(1)]
    ss = np.c_[((x0 - mean[:, :1]) ** 2).sum(1), ((x1 - mean[:, 1:]) ** 2).sum(1)]
    return n, mean, ss


def test_digamma_trigamma_and_its_inverse_match_scipy() -> None:
    from scipy import special

    x = np.r_[np.linspace(0.05, 10, 500), np.geomspace(10, 1e6, 50)]
    assert np.abs(st.digamma(x) - special.digamma(x)).max() < 1e-9
    assert np.abs(st.trigamma(x) / special.polygamma(1, x) - 1).max() < 1e-9
    assert np.abs(st.tetragamma(x) / special.polygamma(2, x) - 1).max() < 1e-9
    y = np.geomspace(1e-12, 1e12, 500)  # Newton's start covers every scale
    assert np.allclose(st.trigamma(st.trigamma_inverse(y)), y, rtol=1e-12)
    assert np.allclose(st.trigamma(st.trigamma_inverse(st.trigamma(x))), st.trigamma(x), rtol=1e-9)


def test_students_t_matches_scipy() -> None:
    from scipy import special

    t = np.tile(np.r_[np.linspace(0, 12, 300), 1e3], 60)
    df = np.repeat(np.arange(1, 61), 301)
    assert np.abs(st.t_within(t, df) - (1 - 2 * special.stdtr(df, -t))).max() < 1e-12
    big = np.array([200, 1000])
    assert np.allclose(st.t_quantile(0.999, big), special.stdtrit(big, 0.9995), rtol=1e-9)


def test_an_alike_family_gives_an_infinite_prior_df_and_its_spread() -> None:
    rng = np.random.default_rng(0)
    s2 = 0.02**2 * rng.chisquare(4, 2000) / 4
    prior = st.VariancePrior.fit(s2, np.full(2000, 4.0), np.zeros(2000, int), 1)
    assert (prior.df == np.inf).all()
    assert np.allclose(prior.var, 0.02**2, rtol=0.05)


def test_the_prior_recovers_a_known_inverse_chi_square() -> None:
    """Variances drawn from s0^2 d0 / chi2_d0 (d0 = 8, s0 = 2%), seen with 4 df each."""
    rng = np.random.default_rng(1)
    sigma2 = 0.02**2 * 8 / rng.chisquare(8, 20_000)
    s2 = sigma2 * rng.chisquare(4, 20_000) / 4
    prior = st.VariancePrior.fit(s2, np.full(20_000, 4.0), np.zeros(20_000, int), 1)
    assert np.median(prior.df) == pytest.approx(8, rel=0.2)
    assert np.median(prior.var) == pytest.approx(4e-4, rel=0.1)
    assert np.median(prior.var_df) > 10_000  # s0^2 from 20,000 others is known well


def test_the_prior_leaves_the_identity_out() -> None:
    """An identity's own variance never sets how far it is trusted: the others' do."""
    s2 = np.r_[np.full(19, 4e-4), 1e-6]
    prior = st.VariancePrior.fit(s2, np.full(20, 4.0), np.zeros(20, int), 1)
    assert prior.df[-1] == np.inf
    assert np.isfinite(prior.df[:-1]).all()  # the odd one makes the others' family unlike


def test_a_family_under_min_others_is_judged_by_the_plain_t() -> None:
    s2 = np.full(st.MIN_OTHERS, 4e-4)
    prior = st.VariancePrior.fit(s2, np.full(len(s2), 4.0), np.zeros(len(s2), int), 1)
    assert (prior.df == 0).all()


def test_one_identity_is_the_plain_t() -> None:
    """No family to borrow from: Student's t on its own variance, as scipy has it."""
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(2)
    x0, x1 = rng.normal(0, 0.02, (3, 5)), rng.normal(0.03, 0.02, (3, 5))
    n = np.full((3, 2), 5.0)
    mean = np.c_[x0.mean(1), x1.mean(1)]
    ss = np.c_[((x0 - mean[:, :1]) ** 2).sum(1), ((x1 - mean[:, 1:]) ** 2).sum(1)]
    t = st.tests(n, mean, ss, np.arange(3), 0.95)  # three families of one
    ref = ttest_ind(x1, x0, axis=1)
    assert np.allclose(t.p, ref.pvalue) and (t.df == 8).all()
    ci = ref.confidence_interval(0.95)
    assert np.allclose(t.lo, ci.low) and np.allclose(t.hi, ci.high)


def test_an_alike_family_pools_all_its_degrees_of_freedom() -> None:
    """24 identities of one spread at 5+1: each is judged on the family's pooled variance
    with 24 x 4 = 96 df, not on its own 4 (the seed-19 case of issue 19 was that 4)."""
    from scipy import stats

    rng = np.random.default_rng(3)
    n, mean, _ = _family(rng, np.full(24, 0.02), 5, 1)
    ss = np.c_[np.full(24, 4 * 0.02**2), np.zeros(24)]  # alike to the last digit
    t = st.tests(n, mean, ss, np.zeros(24, int), 0.95)
    se = 0.02 * np.sqrt(1 / 5 + 1)
    diff = mean[:, 1] - mean[:, 0]
    assert (t.df == 96).all() and np.allclose(t.sd, 0.02)
    assert np.allclose(t.p, 2 * stats.t.sf(np.abs(diff) / se, 96), rtol=1e-9)


def test_an_unlike_family_shrinks_toward_its_prior_with_finite_df() -> None:
    rng = np.random.default_rng(4)
    sd = 0.02 * np.sqrt(6 / rng.chisquare(6, 400))
    n, mean, ss = _family(rng, sd, 5, 5)
    t = st.tests(n, mean, ss, np.zeros(400, int), 0.95)
    own = np.sqrt(ss.sum(1) / 8)
    assert (t.df >= 8).all() and (t.df < 40).all()  # 8: own spread improbable for the prior
    assert np.mean(t.df > 8) > 0.9
    lo, hi = np.minimum(own, t.sd), np.maximum(own, t.sd)
    assert ((t.sd >= lo) & (t.sd <= hi)).all() and np.std(np.log(t.sd)) < np.std(np.log(own))


@pytest.mark.parametrize("size", [1, 3, 24, 300])
@pytest.mark.parametrize("design", [(5, 1), (5, 5), (7, 7)])
@pytest.mark.parametrize("spread", ["alike", "unlike"])
def test_p_values_are_uniform_on_clean_data(
    size: int, design: tuple[int, int], spread: str
) -> None:
    """The gate's false alarms rest on this: P(p <= a) ~ a on clean data, tail included,
    at every family size; and the 95% interval covers no change 95% of the time."""
    rng = np.random.default_rng(size * 100 + design[1])
    families = max(1, 60_000 // size)
    ident = families * size
    sd = np.full(ident, 0.02) if spread == "alike" else rng.uniform(0.005, 0.04, ident)
    n, mean, ss = _family(rng, sd, *design)
    t = st.tests(n, mean, ss, np.repeat(np.arange(families), size), 0.95)
    for a in (0.1, 0.01, 0.001):
        assert np.mean(t.p <= a) == pytest.approx(a, rel=0.4)
    assert np.mean((t.lo <= 0) & (t.hi >= 0)) == pytest.approx(0.95, abs=0.01)


@pytest.mark.parametrize("size", [1, 24])
@pytest.mark.parametrize("design", [(5, 1), (7, 7)])
@pytest.mark.parametrize("runs", [4, 20])
def test_p_values_are_uniform_with_a_history(size: int, design: tuple[int, int], runs: int) -> None:
    """The history's df join the identity's own: the t stays exact (cuts where the level
    seems to move cost df, not calibration)."""
    rng = np.random.default_rng(size * 7 + runs)
    families = max(1, 40_000 // size)
    sd = np.full(families * size, 0.02)
    n, mean, ss = _family(rng, sd, *design)
    t = st.tests(n, mean, ss, np.repeat(np.arange(families), size), 0.95, _history(rng, sd, runs))
    for a in (0.1, 0.01, 0.001):
        assert np.mean(t.p <= a) == pytest.approx(a, rel=0.4)
    assert np.mean(t.history_df == runs - 1) > 0.85  # a cut now and then costs a df


def test_a_history_without_a_step_is_the_pooled_t() -> None:
    """20 earlier runs and 5+1: Student's t on 4 + 19 df, as scipy has it for all 26 runs."""
    from scipy import stats

    rng = np.random.default_rng(8)
    h, x0, x1 = rng.normal(0, 0.02, 20), rng.normal(0, 0.02, 5), rng.normal(0.05, 0.02, 1)
    hist = st.history_variance(h[None, :])
    assert hist[1][0] == 19
    n, mean = np.array([[5.0, 1.0]]), np.array([[x0.mean(), x1.mean()]])
    ss = np.array([[((x0 - x0.mean()) ** 2).sum(), 0.0]])
    t = st.tests(n, mean, ss, np.zeros(1, int), 0.95, hist)
    pooled = (((h - h.mean()) ** 2).sum() + ss.sum()) / 23
    z = abs(x1[0] - x0.mean()) / np.sqrt(pooled * (1 / 5 + 1))
    assert t.df[0] == 23 and t.p[0] == pytest.approx(2 * stats.t.sf(z, 23), rel=1e-9)


@pytest.mark.parametrize(
    ("what", "lo", "hi", "step"),
    [("a 20% regression, fixed 5 runs later", 8, 13, 0.8), ("a 20% step", 10, 20, 0.8),
     ("one odd run, 30% low", 7, 8, 0.7)],
)  # fmt: skip
def test_a_level_shift_in_the_history_is_cut_out(what: str, lo: int, hi: int, step: float) -> None:
    """The plain variance of such a history is 14-27 times the run-to-run one; cut at the
    shifts, the pooled variance is the run-to-run one on the df left."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4000, 20)) * 0.02
    x[:, lo:hi] += np.log(step)
    ss, df = st.history_variance(x)
    ratio = ss / df / 0.02**2
    assert x.var(axis=1, ddof=1).mean() / 0.02**2 > 10
    assert 0.9 < ratio.mean() < 1.1 and np.quantile(ratio, 0.99) < 2.5, what
    assert np.median(df) == 20 - 1 - (2 if hi - lo < 10 else 1)


def test_a_history_too_short_or_flat_adds_nothing() -> None:
    x = np.array([[0.01, 0.02, np.nan, np.nan], [0.0, 0.0, 0.0, 0.0], [0.01, -0.02, 0.0, 0.03]])
    ss, df = st.history_variance(x)
    assert list(df) == [0, 0, 3] and ss[0] == ss[1] == 0


def _found(
    size: int, design: tuple[int, int], drop_sd: float, repeats: int, history: int = 0
) -> np.ndarray:
    """Per repeat: a family of `size` alike identities (sd 2%), its first dropped by
    drop_sd run sds; was it a regression after BH at 0.01? (Repeats are families of one
    call, BH is per repeat.)"""
    rng = np.random.default_rng(size + design[1])
    shift = np.zeros((repeats, size))
    shift[:, 0] = -drop_sd * 0.02
    sd = np.full(repeats * size, 0.02)
    n, mean, ss = _family(rng, sd, *design, shift.ravel())
    hist = _history(rng, sd, history)
    t = st.tests(n, mean, ss, np.repeat(np.arange(repeats), size), 0.95, hist)
    q = np.concatenate([st.bh_adjust(p) for p in t.p.reshape(repeats, size)])
    v = st.verdicts(np.expm1(t.diff) * 100, q, np.full(len(q), 2.0), 0.01)
    return v.reshape(repeats, size)[:, 0] == Verdict.REGRESSION.value


@pytest.mark.parametrize("size", [1, 24, 2000])
def test_a_drop_of_10_run_sds_is_always_caught(size: int) -> None:
    """At 7+7 runs, whatever the family's size (at 5+1 one identity alone misses ~0.3%:
    its 4-df variance can be 4x too large; bench/RESULTS.md)."""
    assert _found(size, (7, 7), 10.0, 40 if size > 100 else 400).all()


def test_with_a_history_one_identity_at_5_plus_1_always_catches_10_run_sds() -> None:
    """Without one its 4-df variance misses ~0.8% (bench/RESULTS.md); 20 earlier runs: never."""
    assert _found(1, (5, 1), 10.0, 4000, history=20).all()


def test_with_a_history_one_identity_is_near_the_known_variance_bound() -> None:
    """5+1 runs and 20 earlier: at the drops the known-variance test finds 50% and 90% of
    the time (one-sided 0.5%), the gate within 10 points (without history: 16% and 40%)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    for bound in (0.5, 0.9):
        drop_sd = (z(1 - 0.005) + z(bound)) * np.sqrt(1 / 5 + 1)
        assert _found(1, (5, 1), drop_sd, 4000, history=20).mean() >= bound - 0.10


def test_power_at_24_identities_is_near_the_known_variance_bound() -> None:
    """5+5 runs, a drop the known-variance test finds 80% of the time at the same budget
    (one-sided 0.5% over 24 identities): the gate within 10 points of it."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    crit = z(1 - (1 - (1 - 0.005) ** (1 / 24)))
    drop_sd = (crit + z(0.8)) * np.sqrt(1 / 5 + 1 / 5)
    assert _found(24, (5, 5), drop_sd, 1000).mean() >= 0.70


def test_verdict_rule_is_monotone_in_the_size_of_the_change() -> None:
    """With the spread fixed, a growing drop moves unchanged -> noisy -> regression, never back."""
    drops = np.linspace(0, 0.3, 301)
    diff = np.log1p(-drops)
    p, _ = st.t_test(diff, np.full(301, 0.02**2), np.full(301, 8), 0.95)
    q = st.bh_adjust(np.r_[p, np.full(199, 0.5)])[: len(p)]  # among 200 identities
    v = st.verdicts(-drops * 100, q, np.full(len(drops), 5.0), 0.01)
    order = {Verdict.UNCHANGED.value: 0, Verdict.NOISY.value: 1, Verdict.REGRESSION.value: 2}
    ranks = [order[x] for x in v]
    assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[-1] == 2
    assert set(v[drops < 0.05]) == {Verdict.UNCHANGED.value}  # below the threshold: never


def test_a_change_below_the_threshold_is_never_a_regression_however_significant() -> None:
    v = st.verdicts(
        np.array([-2.6, -9.0, -9.0]), np.array([1e-9, 1e-9, 0.2]), np.full(3, 5.0), 0.01
    )
    assert list(v) == ["unchanged", "regression", "noisy"]


def test_bh_matches_scipy() -> None:
    from scipy.stats import false_discovery_control

    p = np.random.default_rng(0).random(300) ** 3
    p[[3, 77]] = np.nan
    q = st.bh_adjust(p)
    ok = np.isfinite(p)
    assert np.allclose(q[ok], false_discovery_control(p[ok])) and np.isnan(q[~ok]).all()


def test_no_variance_no_test() -> None:
    """One run per side everywhere: no spread to judge by, so no p (compare says noisy)."""
    n = np.ones((5, 2))
    t = st.tests(n, np.zeros((5, 2)), np.zeros((5, 2)), np.zeros(5, int), 0.95)
    assert np.isnan(t.p).all() and np.isnan(t.lo).all()


# -- issue 29: a family of regimes, the prior's degrees of freedom ------------------------------

# 24 identities as one check measures them: 6 latency-bound and 6 busbw-bound sizes of two
# collectives, the two regimes of one family
_REGIMES = np.tile(np.repeat([0, 1], 6), 2)


def _regime_family(
    sd: np.ndarray, design: tuple[int, int], families: int, seed: int
) -> tuple[st.Tests, np.ndarray]:
    """tests() of `families` seeded families of len(sd) identities, regimes `_REGIMES`."""
    rng = np.random.default_rng(seed)
    size = len(sd)
    n, mean, ss = _family(rng, np.tile(sd, families), *design)
    family = np.repeat(np.arange(families), size)
    t = st.tests(n, mean, ss, family, 0.95, regime=2 * family + np.tile(_REGIMES, families))
    return t, np.tile(sd > sd.min(), families)


def test_a_homogeneous_family_of_two_regimes_lends_all_its_df() -> None:
    """Latency and busbw sizes alike (issue 29's suite at 5+1): each identity leans on the
    other 23 with their 92 df (not its own regime's 11, nor the plain t's 4), and stays exact."""
    t, _ = _regime_family(np.full(24, 0.02), (5, 1), 2000, 10)
    assert np.median(t.df) == 96 and np.median(t.family_df) == 92
    assert np.mean(t.family_size == 23) > 0.95 and (t.own_df == 4).all()
    assert np.mean(t.df) > 70  # an identity whose own spread is high trusts the others less
    for a in (0.01, 0.001):
        assert np.mean(t.p <= a) == pytest.approx(a, rel=0.3)


@pytest.mark.parametrize("design", [(5, 1), (5, 5)])
def test_a_noisier_regime_is_not_drowned_by_the_family(design: tuple[int, int]) -> None:
    """Latency sizes 3x noisier than busbw sizes: no identity borrows across regimes (each
    regime of 12 is small, so the plain t), and each part's p is uniform."""
    sd = np.where(_REGIMES == 0, 0.06, 0.02)
    t, noisy = _regime_family(sd, design, 4000, 11)
    assert (t.family_size <= 11).all() and np.mean(t.family_df == 0) > 0.99
    for part in (noisy, ~noisy):
        for a in (0.01, 0.001):
            assert np.mean(t.p[part] <= a) == pytest.approx(a, rel=0.4)


def test_a_much_noisier_identity_leans_on_its_family_only_as_far_as_plausible() -> None:
    """One identity 3x noisier than 23 alike ones, within a regime: its own variance is
    improbable under the family's prior, so it is judged on about its own df: P(p <= 0.01)
    ~2.4% (fully pooled ~25%; the runs of a few lie close by chance). The alike ones borrow,
    less than all (the odd one makes their family's spreads look unlike: a finite d0)."""
    sd = np.r_[0.06, np.full(23, 0.02)]
    t, noisy = _regime_family(sd, (5, 5), 4000, 12)
    assert np.median(t.family_df[noisy]) == 0 and np.median(t.family_df[~noisy]) > 4
    assert np.mean(t.p[noisy] <= 0.01) < 0.03 and np.mean(t.p[~noisy] <= 0.01) < 0.012


def test_trust_is_one_unless_the_own_variance_is_improbably_large() -> None:
    s0, d0 = np.full(4, 4e-4), np.full(4, 92.0)
    w = st.trust(np.array([4e-4, 2e-4, 36e-4, 4e-4]), np.array([4.0, 4, 4, 0]), s0, d0)
    assert w[0] == w[1] == w[3] == 1 and w[2] < 0.01
