"""The rank processes of a running job, for faults made from outside fleetval (tests, bench)."""

from __future__ import annotations


def rank_pids(count: int = 4) -> list[int]:
    """PIDs of the newest `count` live rank actors of the Ray instance this process is
    connected to (this job's, not a dying one's).

    NOTE: asks the connected GCS, not the state API's "auto" address, which picks the
    newest Ray instance on the machine: maybe someone else's.
    """
    from ray._private.state import actors

    alive = [
        a for a in actors(actor_state_name="ALIVE").values() if a["ActorClassName"] == "RankActor"
    ]
    newest = sorted(alive, key=lambda a: a["StartTime"])[-count:]
    return sorted(a["Pid"] for a in newest)
