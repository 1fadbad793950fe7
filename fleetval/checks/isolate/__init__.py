"""Isolation: bisect the job's ranks over sub-groups (`dist.new_group`) until the rank(s)
that slow a collective from inside it are named, in O(log N) rounds of alternating bursts."""

from __future__ import annotations

from fleetval.checks.isolate.params import IsolateParams
from fleetval.checks.spec import CheckPlugin
from fleetval.metrics import Direction, MetricDecl

PLUGIN = CheckPlugin(
    name="isolate",
    params=IsolateParams,
    doc="Names the rank(s) that slow a collective down from inside it, by sub-group bisection.",
    metrics=(  # each sub-group's time, timed alone: a verdict per rank, not a fleet figure
        MetricDecl(name="isolate_group_time_us", unit="us", direction=Direction.LOWER, shared=True),
        MetricDecl(name="isolated", unit="", direction=Direction.NONE, shared=False),
    ),
)
