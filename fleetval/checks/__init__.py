"""The one registry of checks: one line per check plug-in (`fleetval/checks/<name>/`).

Adding a check: a package with `params.py` (its parameter model, torch-free), `rank.py`
(the `run` every rank runs) and `__init__.py` (its `CheckPlugin`: params, metrics, gate,
incidents, presentation), then one line here. The suite, planner, executor, compare, sign-off and `show` pick it up unchanged.
Importing this module imports no torch: a check's rank module loads when it runs.
"""

from collections.abc import Iterable

from fleetval.checks import bandwidth, collectives, ddp, health, isolate, microbench, p2p, straggler
from fleetval.checks.spec import CheckPlugin, Gate
from fleetval.metrics import MetricDecl

CHECKS: dict[str, CheckPlugin] = {
    p.name: p
    for p in (
        collectives.PLUGIN,
        bandwidth.PLUGIN,
        health.PLUGIN,
        ddp.SCALING,
        ddp.HEALTH,
        microbench.PLUGIN,
        straggler.PLUGIN,
        isolate.PLUGIN,
        p2p.PLUGIN,
    )
}


def declared_metrics(check_names: Iterable[str]) -> list[MetricDecl]:
    """The metric declarations of the named checks, each once, in registry order."""
    wanted = set(check_names)
    out: dict[str, MetricDecl] = {}
    for name, check in CHECKS.items():
        if name in wanted:
            for m in check.metrics:
                out.setdefault(m.name, m)
    return list(out.values())


def check_gates() -> list[Gate]:
    """The sign-off gates the checks declare (the sign-off adds its own: completed, sweep, regression)."""
    return [c.gate for c in CHECKS.values() if c.gate is not None]


def synchronizing_metrics() -> frozenset[str]:
    """Metrics whose measurement ends in a collective: the lateness scorer may judge them."""
    return frozenset().union(*(c.synchronizing for c in CHECKS.values()))
