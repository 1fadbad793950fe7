"""Detectors: pure algorithms that name what is slow (late arrival, sub-group bisection).

No ray, no torch: the checks run them inside rank actors, the executor and the fleet sweep
on the driver, the tests and benchmarks on synthetic data."""
