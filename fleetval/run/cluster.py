"""The cluster connection: reach (or start) Ray, and read the cluster's shape for the planner."""

from __future__ import annotations

import logging
import os
import socket

import ray

from fleetval.run.plan import NODE_LABEL, ClusterShape, NodeShape


class ClusterUnreachable(ValueError):
    """The Ray address given cannot be reached (bad input: nothing ran)."""


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on an address nobody listens on: ray.init would retry for minutes."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return  # "auto" or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ClusterUnreachable(f"--address {address}: no Ray cluster reachable ({err})") from err


def connect(address: str | None, min_cpus: float = 0) -> None:
    """Join `address` (or $RAY_ADDRESS); with neither, start an embedded local instance."""
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        check_reachable(address)
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        return
    # NOTE: logical CPUs may exceed physical cores: validation ranks mostly wait on I/O.
    cpus = max(os.cpu_count() or 1, int(min_cpus + 0.999))
    ray.init(
        address="local",  # a fresh instance, even when a test cluster left its address file
        num_cpus=cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )


def cluster_shape() -> ClusterShape:
    """Every live node's name and total CPUs/GPUs, sorted by name."""
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        labels = n.get("Labels") or {}
        nodes.append(
            NodeShape(
                name=labels.get(NODE_LABEL) or n.get("NodeManagerHostname", "?"),
                cpus=res.get("CPU", 0.0),
                gpus=res.get("GPU", 0.0),
            )
        )
    return ClusterShape(tuple(sorted(nodes, key=lambda s: s.name)))
