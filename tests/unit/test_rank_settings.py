"""A rank decides its process settings from its job, not from what it inherited: one function
(`rank_settings`) for every way a run is submitted, applied to every thread of the process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fleetval.run.plan import Job, Strategy
from fleetval.run.ranksettings import RANK_NICENESS, RankSettings, rank_settings


def _job(cpus_per_rank: float) -> Job:
    return Job(
        index=0,
        world_size=4,
        backend="gloo",
        gpus_per_rank=0,
        cpus_per_rank=cpus_per_rank,
        strategy=Strategy.PACK,
        nodes=None,
        steps=(),
    )


@pytest.mark.parametrize(("cpus", "threads"), [(0.25, 1), (1, 1), (1.5, 1), (4, 4)])
def test_a_rank_gets_normal_priority_and_a_thread_per_cpu_it_was_given(
    cpus: float, threads: int
) -> None:
    assert rank_settings(_job(cpus)) == RankSettings(niceness=RANK_NICENESS, threads=threads)


APPLY = """
import json, os, threading, time
import torch
from fleetval.run.ranksettings import RankSettings, apply
before = threading.Thread(target=time.sleep, args=(5,), daemon=True)
before.start()  # a thread the process had already: settings are per thread on Linux
apply(RankSettings(niceness=0, threads=1))
tids = [int(t) for t in os.listdir("/proc/self/task")]
print(json.dumps({
    "nice": sorted({os.getpriority(os.PRIO_PROCESS, t) for t in tids}),
    "cpus": sorted({c for t in tids for c in os.sched_getaffinity(t)}),
    "every_thread_all_cpus": all(os.sched_getaffinity(t) == set(range(os.cpu_count())) for t in tids),
    "threads": torch.get_num_threads(),
    "omp": os.environ["OMP_NUM_THREADS"],
}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a niced process's priority needs root")
def test_apply_undoes_an_inherited_niceness_pinning_and_thread_count() -> None:
    """A process started as a niced, pinned service with OMP_NUM_THREADS=2 starts its ranks:
    after `apply`, every thread is at nice 0 on every CPU, torch at one thread."""

    def as_a_service_manager_starts_it() -> None:
        os.nice(7)
        os.sched_setaffinity(0, {0})

    out = subprocess.run(
        [sys.executable, "-c", APPLY],
        env={**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": os.getcwd()},
        preexec_fn=as_a_service_manager_starts_it,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["nice"] == [0]
    assert got["every_thread_all_cpus"], got
    assert got["threads"] == 1 and got["omp"] == "1"
