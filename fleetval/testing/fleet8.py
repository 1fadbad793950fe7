"""Fleet sweep scenarios on their own simulated cluster: eight one-CPU nodes labelled
node-0..7 (one rank each, gloo) in two racks (`fleetval/rack`: node-0..3 rack-a, node-4..7
rack-b) and a head that takes no rank. Run by
tests/integration/test_sweep_fleet.py in a subprocess, because the session's shared
cluster has another shape; every scenario shares this one. bench/bench_sweep_ray.py runs
its scenarios on a cluster of the same shape.

    python -m fleetval.testing.fleet8 DATA_DIR SCENARIO...

Prints one JSON line per scenario: the command's exit status and output, and the stored
verdict. A watchdog ends everything (cluster included) at the deadline.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Required, TypedDict

import yaml

from fleetval.jsontypes import JsonObject

DEADLINE_S = float(os.environ.get("FLEET8_DEADLINE_S", "1500"))
# Rank actors' start-up deadlines (placement, rendezvous): the suite's 60 s unless set; a
# machine loaded by other work needs more.
START_S = os.environ.get("FLEET8_START_S")
NODES = [f"node-{i}" for i in range(8)]
RACKS = {n: "rack-a" if i < 4 else "rack-b" for i, n in enumerate(NODES)}
HERE = Path(__file__).resolve().parent
# As the tests' simulated nodes: no log monitor (every driver here says log_to_driver=False).
QUIET_NODE = {"include_log_monitor": False}
# A slow node or link: each call 10 ms late, ~8x a healthy call at 64 KiB here. A longer
# delay only lengthens the slow pairs' jobs: a slow trunk's sweep took 90 s at 25 ms, 58 s at
# 10 ms (`bench/bench_fleet8.py` judges every scenario at 5 and 20 ms).
DELAY_MS = 10


class ScenarioJson(TypedDict, total=False):
    """What a scenario prints (one JSON line): the `fleetval sweep` command's exit status and
    output, the stored verdict and each run's ranks as the runs' summaries hold them, the
    sign-off's gate statuses ("" its verdict) and sweep history as its JSON report says them,
    the last run's seconds; and what the scenario planted (`slow` nodes, a slow `link`, the
    `throttled` node and what its throttler said)."""

    scenario: Required[str]
    exit_code: Required[int]
    output: Required[str]
    verdict: Required[JsonObject | None]
    ranks: Required[list[JsonObject | None]]
    run_id: Required[str]
    run_ids: Required[list[str]]
    signoff: Required[dict[str, str]]
    history: Required[list[JsonObject]]
    seconds: Required[float | None]
    slow: list[str]
    link: list[str]
    throttled: str
    throttler: str


def suite(faults: list[JsonObject] | None = None, **sweep: Any) -> JsonObject:
    """The shipped `sweep` suite with faults, and sweep settings for an 8-node fleet."""
    from fleetval.suite import load_suite

    spec = load_suite("sweep").model_dump(mode="json", exclude_none=True)
    # NOTE: eight ranks share two cores here, so a pair's speed at a bandwidth-bound size
    # depends on how its two ranks happen to be scheduled (healthy pairs of one round spread
    # 5x at 1 MiB). At 64 KiB a call is mostly wake-ups, not CPU: healthy pairs spread about
    # 2x (see DELAY_MS for what a fault costs). 240 calls make each of a job's four timed
    # runs (`fleet.score`) take more CPU time than a throttle's running window (2 ms).
    one_size = {"sizes": {"min": "64KiB", "max": "64KiB", "factor": 2}, "iters": 240}
    spec["steps"] = [s | one_size if s["check"] == "bandwidth" else s for s in spec["steps"]]
    spec["faults"] = faults or []
    # NOTE: the shipped suite's tolerance and noise handling: the fabric model measures the
    # noise of this loaded box from its residuals (healthy pairs spread about 2x) and judges
    # within what that noise allows (`max_tolerance`); the faults are ~8x.
    spec["sweep"] |= sweep
    if START_S:
        spec["timeouts"] = spec.get("timeouts", {}) | dict.fromkeys(
            ("placement_s", "rendezvous_s"), float(START_S)
        )
    return spec


def sweep(cluster: Any, data: Path, name: str, spec: JsonObject, *args: str) -> ScenarioJson:
    from typer.testing import CliRunner

    from fleetval.cli import app
    from fleetval.reports import build_signoff, render
    from fleetval.store.dataset import Store

    data.mkdir(parents=True, exist_ok=True)
    path = data / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    before = {r.run_id for r in Store(data).runs()}
    res = CliRunner().invoke(
        app, ["sweep", str(path), "--data", str(data), "--address", cluster.address, *args]
    )
    runs = [r for r in Store(data).runs() if r.run_id not in before]  # several: --repeat
    run = Store(data).latest_run()
    report = json.loads(render(build_signoff(Store(data), run.run_id), "json"))
    return ScenarioJson(
        scenario=name,
        exit_code=res.exit_code,
        output=res.output,
        verdict=run.summary.get("sweep"),
        ranks=[r.summary.get("ranks") for r in runs],
        run_id=run.run_id,
        run_ids=[r.run_id for r in runs],
        signoff={g["gate"]: g["status"] for g in report["gates"]} | {"": report["verdict"]},
        history=report["sweep"]["history"]["runs"],
        seconds=(run.finished_at - run.started_at).total_seconds() if run.finished_at else None,
    )


def clean(cluster: Any, data: Path) -> ScenarioJson:
    """Two clean sweeps back to back, on one set of warm ranks (`--repeat`)."""
    return sweep(cluster, data, "clean", suite(), "--repeat", "2")


def two_slow(cluster: Any, data: Path) -> ScenarioJson:
    # NOTE: the two slow nodes on different pairs of tonight's first matching (planned from
    # the store's history, as the sweep will): each slow pair then holds one slow node and
    # one good one, which re-pairing must tell apart.
    first = _first_pairs(data)
    slow = sorted([first[0][0], first[1][0]])
    faults = [{"kind": "delay", "node": n, "ms": DELAY_MS} for n in slow]
    out = sweep(
        cluster, data, "two_slow", suite(faults, max_drain_share=0.25), "--drain-format", "slurm"
    )
    return out | {"slow": slow}


def _first_pairs(data: Path) -> list[tuple[str, str]]:
    """The pairs tonight's sweep measures first: the links least measured before."""
    from fleetval.fleet.coverage import Fabric
    from fleetval.fleet.history import stored_links, sweep_runs
    from fleetval.fleet.planner import first_pairs
    from fleetval.fleet.settings import SweepSettings
    from fleetval.fleet.topology import Topology
    from fleetval.store.dataset import Store

    seen = stored_links(sweep_runs(Store(data), len(NODES) - 1))
    racks = Topology({n: {"rack": r} for n, r in RACKS.items()})
    return first_pairs(NODES, SweepSettings(), Fabric(racks, seen))


def slow_link(cluster: Any, data: Path) -> ScenarioJson:
    # NOTE: a pair across the racks of tonight's first matching, so this one sweep measures
    # it; of two nodes no stored sweep drained where the matching has one. A pair of another
    # matching was not measured tonight at all (a later sweep's), and where two drained nodes
    # end every crossing of tonight's matching, a drained end it is: named alike, as the fit
    # gives a node its change since a past sweep (`model.PAST`).
    drained = _drained(data)
    cross = [p for p in _first_pairs(data) if RACKS[p[0]] != RACKS[p[1]]]
    a, b = min(cross, key=lambda p: bool(set(p) & drained))  # the first such
    # NOTE: 12 rounds, not the shipped 8: where a loaded box reads 36% noise, the link's ends
    # take most of 8 rounds to be proven good, and only then is the link measured again
    # (a test run under two other test workers ended with it estimated slow, exit 5)
    fault = {"kind": "delay", "node": a, "peer": b, "ms": DELAY_MS}
    out = sweep(cluster, data, "slow_link", suite([fault], max_rounds=12))
    return out | {"link": [a, b]}


def _drained(data: Path) -> set[str]:
    """Nodes any stored sweep drained."""
    from fleetval.fleet.history import sweep_runs
    from fleetval.store.dataset import Store

    runs = sweep_runs(Store(data), 64)
    return {n["node"] for r in runs for n in r.summary["sweep"]["nodes"] if n["state"] == "drain"}


def throttled(cluster: Any, data: Path) -> ScenarioJson:
    """node-4's rank processes stopped 38 ms of every 40 ms by a process fleetval knows nothing of."""
    import ray

    node = "node-4"
    (node_id,) = [n["NodeID"] for n in ray.nodes() if n["Labels"].get("fleetval/node") == node]
    throttler = subprocess.Popen(
        [sys.executable, str(HERE / "throttle.py"), node_id, "38", "40"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out = sweep(cluster, data, "throttled", suite())
    finally:
        throttler.send_signal(signal.SIGTERM)
        said, _ = throttler.communicate(timeout=60)
    return out | {"throttled": node, "throttler": said.strip().replace(node_id, node)}


def slow_trunk(cluster: Any, data: Path) -> ScenarioJson:
    """Every job across the two racks slow (a `between` fault), every job inside fast."""
    fault = {"kind": "delay", "between": ["rack-a", "rack-b"], "ms": DELAY_MS}
    # NOTE: on the shared store: after the other scenarios' sweeps the least-measured links
    # all cross the racks, so this is the matching the planner must give a control inside
    # each rack (`planner.first_pairs`), or the slow crossings have nothing to be held against.
    return sweep(cluster, data, "slow_trunk", suite([fault]))


SCENARIOS = {f.__name__: f for f in (clean, two_slow, slow_link, throttled, slow_trunk)}


@contextmanager
def simulated_fleet8(deadline_s: float, on_deadline: Callable[[], None]) -> Iterator[Any]:
    """The eight nodes and the head started, this process connected; yields the cluster. At
    `deadline_s` a watchdog calls `on_deadline` (to say so), stops the cluster and ends the
    process (exit 3); at the end this process disconnects and the cluster stops."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "labels": {"fleetval/node": "head"}, **QUIET_NODE},
    )

    def watchdog() -> None:
        on_deadline()
        cluster.shutdown()
        os._exit(3)

    timer = threading.Timer(deadline_s, watchdog)
    timer.daemon = True
    timer.start()
    try:
        for n in NODES:
            labels = {"fleetval/node": n, "fleetval/rack": RACKS[n]}
            cluster.add_node(num_cpus=1, labels=labels, **QUIET_NODE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        yield cluster
    finally:
        timer.cancel()
        ray.shutdown()
        cluster.shutdown()


def main(data: Path, names: list[str]) -> None:
    from fleetval.run.sweep import keep_warm

    def said() -> None:
        print(json.dumps({"error": f"deadline of {DEADLINE_S:g}s passed"}), flush=True)

    # NOTE: every scenario's sweep on the same warm ranks (`keep_warm`), as a nightly loop
    with simulated_fleet8(DEADLINE_S, said) as cluster, keep_warm():
        for name in names:
            print(json.dumps(SCENARIOS[name](cluster, data)), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["COLUMNS"] = "250"
    main(Path(sys.argv[1]), sys.argv[2:])
