"""What a rank process runs with: decided here once, for every way a run is started.

A rank actor is a Ray worker, and a worker inherits the process state of whoever started its
node's raylet: on the embedded default that is the driver, so `fleetval run` from a shell and
`fleetval serve` started by a service manager (a unit's `Nice=` or `CPUAffinity=`, a
container pinned to some cores, a different `OMP_NUM_THREADS`) would hand their ranks
different priorities, CPUs and thread counts, and the same suite would measure differently by
how it was submitted. So the driver decides the settings (`rank_settings`, from the job) and
every rank applies them (`apply`) from its start and again at every job it joins, fresh or
pooled, whatever it inherited;
each node's fingerprint records what its ranks ran with (`extra`: niceness, threads,
cpus_allowed, and the thread variables in env).

Torch- and Ray-free at import: the driver and the service import it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetval.checks.environment import THREAD_VARS

if TYPE_CHECKING:
    from fleetval.run.plan import Job

# NOTE: Ray starts its workers at nice 15 by default, and the ranks are the measurement: at 15
# any normal-priority process on the host comes first. 4 CPU ranks on 2 cores beside 3 busy
# processes took 81.5 s to start, 8.5 s at nice 0 (bench/bench_rank_priority.py). The deploy
# recipes set the same (RAY_worker_niceness=0) so that Ray's own start of a worker is not slow.
RANK_NICENESS = 0


@dataclass(frozen=True)
class RankSettings:
    """A rank's process settings: its niceness (absolute, not an increment) and its intra-op
    threads (torch's, and THREAD_VARS for the libraries that read them). Its CPUs are not a
    setting: a rank may use every CPU of its node (`node_cpus`)."""

    niceness: int
    threads: int


def rank_settings(job: Job) -> RankSettings:
    """The settings every rank of `job` runs with: normal priority, one thread per CPU the
    rank was given (at least one), as Ray's own default for a task's OpenMP threads."""
    return RankSettings(niceness=RANK_NICENESS, threads=max(1, math.floor(job.cpus_per_rank)))


def _threads() -> list[int]:
    """This process's thread ids: niceness and CPU affinity are per thread on Linux."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def node_cpus() -> set[int]:
    """Every CPU this node lets a process use: the machine's CPUs, as the kernel narrows them
    to the container's cpuset (not a set some parent process was pinned to)."""
    return set(range(os.cpu_count() or 1))


def apply(settings: RankSettings) -> None:
    """Put this process (each of its threads) at `settings`, whatever it inherited.

    Priority, CPUs and variables first, then torch: a rank applies them as it starts, so that
    importing torch (most of its start) runs at them, and threads made later inherit them.
    A niceness below the inherited one needs privilege (CAP_SYS_NICE, or RLIMIT_NICE): without
    it the rank keeps what it has, and the fingerprint says so (`warn_low_priority`).
    """
    for tid in _threads():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, settings.niceness)
        except PermissionError:
            pass
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
        try:
            os.sched_setaffinity(tid, node_cpus())
        except (OSError, ValueError):  # ended meanwhile; a cpuset that excludes them all
            continue
    for var in THREAD_VARS:  # NOTE: before torch loads: its OpenMP reads them once, then
        os.environ[var] = str(settings.threads)
    import torch  # NOTE: only in a rank's process

    if torch.get_num_threads() != settings.threads:
        torch.set_num_threads(settings.threads)
