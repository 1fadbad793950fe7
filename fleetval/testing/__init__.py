"""Public helpers for building synthetic stores and simulated fleets, as `numpy.testing` or
`ray.cluster_utils` are: the tests and the benchmarks stand on them; no other part of
fleetval imports this package.

- `builder`: the one store builder (`SyntheticRun`, `build_store`, `Layout`), whose recipes
  are `bandwidth` (`GenStore`: seeded bandwidth runs with a hierarchical noise model),
  `signoff` (sign-off evidence row by row, a planted regression), `rollouts` (a nightly
  history under staggered version rollouts), `sweeps` (fleet sweeps stored without Ray) and
  `foreign` (a store in the documented layout written by another tool);
- `rayprocs`: a running job's rank processes, and faults made to them from outside
  (SIGSTOP, a throttle); `throttle`, the same as a script an operator would run;
- `fleet8`: fleet sweep scenarios on a simulated 8-node Ray fleet in two racks;
- `net`: a free loopback port for a server;
- `serve`: `fleetval serve` (or another server command) on a free loopback port, ready once
  /healthz answers as awaited, stopped cleanly.

Nothing here is imported by this module: torch and ray load only where a helper needs them.
"""
