"""The one registry of checks. Adding a check: a module with a params model and a run
function, and one line here; the suite, planner and executor pick it up unchanged."""

from fleetval.checks.bandwidth import BandwidthParams, run_bandwidth
from fleetval.checks.base import Check
from fleetval.checks.collectives import CollectivesParams, run_collectives
from fleetval.checks.health import HealthParams, run_health

CHECKS: dict[str, Check] = {
    "collectives": Check(CollectivesParams, run_collectives),
    "bandwidth": Check(BandwidthParams, run_bandwidth),
    "health": Check(HealthParams, run_health),
}
