"""Benchmark: the most power any gate can have on bench_gate's noise model (an upper bound).

The gate must keep its false alarms (failing on clean data) at or below 1% while one of
M identities may have dropped. Whatever its design, a test of "nothing changed" against
"one identity, any of the M, dropped by d" at level 1% has at most the power of the
Neyman-Pearson test of the two, here given more than any real gate has: the run-to-run
variance known exactly, the direction and size of the drop known, and no need to say
which identity dropped. Its statistic is the likelihood ratio averaged over where the drop
is, log mean_i exp(delta z_i - delta^2 / 2), with delta the drop in standard errors of
the difference of mean log run values. A permutation-symmetric gate's power at any one
identity equals its average over identities, so it cannot beat this figure.

    python bench/bench_power_bound.py                 # bench_gate's model: 200 identities
    python bench/bench_power_bound.py --identities 1  # a gate over one measurement

Run values as bench_gate makes them: a run-level effect (sd 2%) plus the median of 10
iterations with 2.5% noise, so sd sqrt(2%^2 + (1.2533 x 2.5% / sqrt 10)^2) = 2.23%.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.special import logsumexp

DROPS = (0.02, 0.05, 0.07, 0.10, 0.12, 0.14)


def oracle_power(delta: float, identities: int, level: float, sims: int, seed: int) -> float:
    """Power of the Neyman-Pearson test at `level` against a drop of `delta` SE on one identity."""
    rng = np.random.default_rng(seed)

    def stat(z: np.ndarray) -> np.ndarray:
        return logsumexp(delta * z - delta * delta / 2, axis=1)

    crit = np.quantile(stat(rng.standard_normal((sims, identities))), 1 - level)
    z = rng.standard_normal((sims, identities))
    z[:, 0] += delta
    return float(np.mean(stat(z) > crit))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--identities", type=int, default=200)
    ap.add_argument("--run-sd", type=float, default=0.02)
    ap.add_argument("--level", type=float, default=0.01, help="false alarms allowed")
    ap.add_argument("--sims", type=int, default=100_000)
    args = ap.parse_args()
    sd = float(np.hypot(args.run_sd, 0.025 * 1.2533 / np.sqrt(10)))
    print(
        f"{args.identities} identities, run-value sd {sd:.2%}, false alarms <= {args.level:.0%}, "
        f"{args.sims} simulations per cell; power of the most powerful test (an upper bound)\n"
    )
    print("| baseline + candidate runs |" + "".join(f" {d:.0%} drop |" for d in DROPS))
    print("|---|" + "---:|" * len(DROPS))
    for k in (1, 5):
        se = sd * np.sqrt(1 / 5 + 1 / k)
        cells = (
            oracle_power(-np.log1p(-d) / se, args.identities, args.level, args.sims, seed=i)
            for i, d in enumerate(DROPS)
        )
        print(f"| 5 + {k} |" + "".join(f" {p:.1%} |" for p in cells))


if __name__ == "__main__":
    main()
