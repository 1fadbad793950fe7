"""The one registry of checks. Adding a check: a module with a params model and a run
function, and one line here; the suite, planner and executor pick it up unchanged."""

from fleetval.checks.bandwidth import BandwidthParams, run_bandwidth
from fleetval.checks.base import Check
from fleetval.checks.collectives import CollectivesParams, run_collectives
from fleetval.checks.ddp import DdpHealthParams, DdpScalingParams, run_ddp_health, run_ddp_scaling
from fleetval.checks.health import HealthParams, run_health
from fleetval.checks.isolate import IsolateParams, run_isolate
from fleetval.checks.microbench import MicrobenchParams, run_microbench
from fleetval.checks.straggler import StragglerParams, run_straggler

CHECKS: dict[str, Check] = {
    "collectives": Check(CollectivesParams, run_collectives),
    "bandwidth": Check(BandwidthParams, run_bandwidth),
    "health": Check(HealthParams, run_health),
    "ddp_scaling": Check(DdpScalingParams, run_ddp_scaling),
    "ddp_health": Check(DdpHealthParams, run_ddp_health),
    "microbench": Check(MicrobenchParams, run_microbench),
    "straggler": Check(StragglerParams, run_straggler),
    "isolate": Check(IsolateParams, run_isolate),
}
