"""Fleet sweeps, the pure part: settings, the round planner, the judge, the per-node verdict
with its circuit breaker, drain lists, history across sweeps and a simulated fleet.

No torch, no ray: the engine (`fleetval.run.sweep`) measures the jobs a round plans; every
decision about what to run next and what it means is made here, so it is unit-tested and
benchmarked on a simulated fleet of 1,024 nodes (`bench/bench_sweep.py`).
"""
