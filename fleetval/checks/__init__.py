"""The one registry of checks. Adding a check: a module with a params model and a run
function, its metric declarations, and one entry here; the suite, planner, executor and
compare pick it up unchanged."""

from collections.abc import Iterable

from fleetval.checks.bandwidth import BandwidthParams, run_bandwidth
from fleetval.checks.base import Check
from fleetval.checks.collectives import CollectivesParams, run_collectives
from fleetval.checks.ddp import DdpHealthParams, DdpScalingParams, run_ddp_health, run_ddp_scaling
from fleetval.checks.health import HealthParams, run_health
from fleetval.checks.isolate import IsolateParams, run_isolate
from fleetval.checks.microbench import MicrobenchParams, run_microbench
from fleetval.checks.straggler import StragglerParams, run_straggler
from fleetval.metrics import BUSBW, CORRECT, LATENCY, Direction, MetricDecl

_UP, _DOWN, _NONE = Direction.HIGHER, Direction.LOWER, Direction.NONE


def _m(name: str, unit: str, direction: Direction, *, shared: bool) -> MetricDecl:
    return MetricDecl(name=name, unit=unit, direction=direction, shared=shared)


CHECKS: dict[str, Check] = {
    "collectives": Check(CollectivesParams, run_collectives, (CORRECT,)),
    "bandwidth": Check(BandwidthParams, run_bandwidth, (BUSBW, LATENCY, CORRECT)),
    "health": Check(HealthParams, run_health, ()),  # findings: judged by status only
    "ddp_scaling": Check(
        DdpScalingParams,
        run_ddp_scaling,
        (  # one training step measured by every rank together: shared
            _m("step_time_ms", "ms", _DOWN, shared=True),
            _m("compute_time_ms", "ms", _DOWN, shared=True),
            _m("throughput", "samples/s", _UP, shared=True),
            _m("comm_share", "", _DOWN, shared=True),
        ),
    ),
    "ddp_health": Check(DdpHealthParams, run_ddp_health, ()),
    "microbench": Check(
        MicrobenchParams,
        run_microbench,
        (  # every rank measures its own GPU: independent devices
            _m("gemm_tflops", "TFLOP/s", _UP, shared=False),
            _m("memory_bw_gbps", "GB/s", _UP, shared=False),
            _m("h2d_gbps", "GB/s", _UP, shared=False),
            _m("d2h_gbps", "GB/s", _UP, shared=False),
        ),
    ),
    "straggler": Check(
        StragglerParams,
        run_straggler,
        (_m("straggler_last_fraction", "fraction", _NONE, shared=False),),
    ),
    "isolate": Check(
        IsolateParams,
        run_isolate,
        (  # each sub-group's time, timed alone: a verdict per rank, not a fleet figure
            _m("isolate_group_time_us", "us", _DOWN, shared=True),
            _m("isolated", "", _NONE, shared=False),
        ),
    ),
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
