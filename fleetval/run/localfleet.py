"""A fleet to try `fleetval sweep` on one machine: a simulated multi-node Ray cluster
(`ray.cluster_utils.Cluster`) of one-CPU nodes labelled `fleetval/node` (node-0, node-1, ...)
and `fleetval/rack` (rack-a, rack-b, ...), and a head that takes no rank. CPU and gloo: the
same sweep, planner and verdict a GPU fleet gets, on jobs of a few milliseconds each.

    fleetval sweep sweep --local-fleet 8
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterator
from contextlib import contextmanager

LOCAL_FLEET_MAX = 16  # one-CPU nodes sharing this machine's cores: more only queues
QUIET = {"include_log_monitor": False}  # every driver here says log_to_driver=False


def racks_of(nodes: int) -> list[str]:
    """Each node's rack: two racks up to 8 nodes, then one per 4 (rack-a, rack-b, ...)."""
    per = -(-nodes // 2) if nodes <= 8 else 4
    return [f"rack-{string.ascii_lowercase[i // per]}" for i in range(nodes)]


@contextmanager
def simulated_fleet(nodes: int) -> Iterator[str]:
    """Start the simulated fleet, connect this process to it, yield its address; at the end
    disconnect and stop every node (its processes with it)."""
    import ray
    from ray.cluster_utils import Cluster

    if not 2 <= nodes <= LOCAL_FLEET_MAX:
        raise ValueError(f"--local-fleet: 2 to {LOCAL_FLEET_MAX} nodes, not {nodes}")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "labels": {"fleetval/node": "head"}, **QUIET},
    )
    try:
        for i, rack in enumerate(racks_of(nodes)):
            labels = {"fleetval/node": f"node-{i}", "fleetval/rack": rack}
            cluster.add_node(num_cpus=1, labels=labels, **QUIET)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()
