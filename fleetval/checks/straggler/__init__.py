"""Stragglers: which rank arrives last at the collectives, and by how much against the noise
measured in the same step. A failing row is a `straggler` incident in reports; the `health`
gate counts it."""

from __future__ import annotations

from fleetval.checks.spec import CheckPlugin
from fleetval.checks.straggler.params import StragglerParams
from fleetval.metrics import Direction, MetricDecl

PLUGIN = CheckPlugin(
    name="straggler",
    params=StragglerParams,
    doc="Names the rank (and node) that arrives last at collectives; a clean run names nobody.",
    metrics=(
        MetricDecl(
            name="straggler_last_fraction", unit="fraction", direction=Direction.NONE, shared=False
        ),
    ),
    incident="straggler",
)
