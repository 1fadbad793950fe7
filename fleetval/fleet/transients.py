"""The noise's heavy tail: how many of an effect's slow jobs transients may have made.

A shared box slows a job now and then (another tenant, a thermal blip, a page cache
flush) far past the core noise every job has: 2-5x, where the core noise is 5-10%. A
robust loss bounds what one such job pulls, but two of a node's jobs that transients hit
are still 10-20 noise units slow each, and together they carried a drain. How often that
happens, and how large a transient is, differ from fleet to fleet and night to night; so
both are read from tonight's jobs: a job slower than its fit by more than the loss's
quadratic zone (`HUBER` noise units: the core noise gives one in ~700 jobs that) was hit,
and its slowness past the fit is the transient's size. A transient's size is taken as
exponential, with a prior for a fleet whose few jobs show none.

An effect is tested under the null that it is no slower than the tolerance and its slow
jobs are transients: its own slow jobs count among the hits. Its evidence must then stand
without its `set_aside` slowest jobs: as many as transients of the rate and size read make,
with a chance of at least `alpha`, at least as slow as they are. A job far past any
transient's size (a 20x link) is not set aside; two 2-3x jobs beside a fleet whose
transients are that large are. Nor does it rest on its slowest jobs that are `unlike` the
rest of its own: a fault slows each of its jobs alike, up to the core noise, and a job
slower than the others by more than that is a transient's on top of whatever it is.
"""

from __future__ import annotations

import math

import numpy as np

from fleetval.fleet.effects import HUBER

# The prior: transients hit RATE_PRIOR of jobs, counted as RATE_JOBS jobs (a fresh 8-node
# fleet times 16 jobs a sweep), and slow a job by SIZE_PRIOR (log scale, mean), counted as
# SIZE_JOBS transients
RATE_PRIOR, RATE_JOBS = 0.05, 20.0
SIZE_PRIOR, SIZE_JOBS = 0.3, 8.0


def set_aside(excess: np.ndarray, hits: np.ndarray, seen: int, cut: float, alpha: float) -> int:
    """How many of an effect's jobs (`excess`: each one's slowness past the tolerance,
    slowest first) transients may have made: the most k such that k of them hit by
    transients at least as large as the k slowest has a chance of `alpha` or more, at the
    rate and size read from `hits` (the sizes of the transients among `seen` other jobs)
    and from its own jobs slower than `cut` (under the null, transients too)."""
    own = excess[excess > cut]
    sizes = np.concatenate([hits, own])
    rate = (RATE_PRIOR * RATE_JOBS + sizes.size) / (RATE_JOBS + seen + excess.size)
    size = (SIZE_PRIOR * SIZE_JOBS + float(np.sum(sizes))) / (SIZE_JOBS + sizes.size)
    chance = 1.0
    for k in range(1, excess.size + 1):
        chance *= rate * math.exp(-max(0.0, float(excess[k - 1])) / size)
        if math.comb(excess.size, k) * chance < alpha:
            return k - 1
    return excess.size


def unlike(residuals: np.ndarray, sigma: float) -> int:
    """How many of an effect's slowest jobs (`residuals`: each one's fit less the job, the
    slowest first) are each slower than the mean of those after it by more than the core
    noise allows (`HUBER` noise units, for one job against the mean of m)."""
    k = 0
    while k < residuals.size - 1:
        rest = residuals[k + 1 :]
        if residuals[k] >= float(np.mean(rest)) - HUBER * sigma * math.sqrt(1 + 1 / rest.size):
            break
        k += 1
    return k
