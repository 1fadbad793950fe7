"""The cluster connection: reach (or start) Ray, and read the cluster's shape for the planner."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import ray
from ray._private import ray_constants

from fleetval.run.plan import NODE_LABEL, ClusterShape, NodeShape
from fleetval.run.ranksettings import RANK_NICENESS

LOOPBACK = "127.0.0.1"
# The embedded instance offers more logical CPUs than the machine has cores (ranks mostly wait
# on I/O: smoke's 4 ranks on 2 cores), but not without end: each rank is a process that takes
# seconds of CPU to start, and 64 ranks on 2 cores did not all start within a placement
# deadline of 60 s. 4 a core holds the shipped suites' largest fixed world size (8) on 2 cores.
EMBEDDED_RANKS_PER_CORE = 4


_embedded = False  # this process started an embedded instance (disconnect stops it)


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
    # NOTE: this process is a driver, stopped by SIGTERM as a service is (or a CI job at its
    # timeout): Ray's crash handler would print a stack trace for it that reads as a crash.
    # The ranks, Ray's workers, keep theirs.
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        return
    cpus = embedded_cpus(min_cpus)
    global _embedded
    with _loopback_node(), _quiet(_TOKEN_LOGGER, _TOKEN_NOTICE):
        _embedded = True
        ray.init(
            address="local",  # a fresh instance, even when a test cluster left its address file
            num_cpus=cpus,
            include_dashboard=False,
            dashboard_host=LOOPBACK,
            logging_level=logging.WARNING,
            log_to_driver=False,
            # NOTE: an increment on the raylet's own niceness (the driver's); each rank then
            # sets the absolute one itself (run.ranksettings), so Ray's start of a worker is
            # quick and a rank runs alike whoever started Ray.
            _system_config={"worker_niceness": RANK_NICENESS},
        )


def disconnect() -> None:
    """Stop the embedded instance this process started, with its processes (a service that
    stops takes them along); a cluster joined, or a Ray its caller started, is left alone."""
    global _embedded
    if _embedded and ray.is_initialized():
        ray.shutdown()
    _embedded = False


# Ray's notice that a local instance keeps token authentication on, as fleetval's embedded
# one does (it listens on loopback only): addressed to whoever starts a cluster, not to
# someone running a check, and printed by every command that starts one.
_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


@contextmanager
def _quiet(logger: str, prefix: str) -> Iterator[None]:
    """Drop `logger`'s records whose message starts with `prefix`, nothing else."""

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(prefix)

    log = logging.getLogger(logger)
    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


def will_embed(address: str | None) -> bool:
    """Whether connect(address) would start an embedded instance."""
    return not (address or os.environ.get("RAY_ADDRESS")) and not ray.is_initialized()


def embedded_cpus(min_cpus: float = 0) -> int:
    """The logical CPUs an embedded instance starts with: `min_cpus` where the machine can
    run that many ranks (EMBEDDED_RANKS_PER_CORE a core), at least one a core."""
    cores = os.cpu_count() or 1
    return max(cores, min(int(min_cpus + 0.999), EMBEDDED_RANKS_PER_CORE * cores))


def embedded_limit(suite_cpus: float) -> str | None:
    """Why the embedded instance cannot hold `suite_cpus` CPUs of ranks, or None when it can."""
    if embedded_cpus(suite_cpus) >= suite_cpus:
        return None
    cores = os.cpu_count() or 1
    return (
        f"the embedded local Ray takes at most {EMBEDDED_RANKS_PER_CORE * cores:g} CPUs of ranks "
        f"({EMBEDDED_RANKS_PER_CORE} a core, {cores} cores here); name a cluster with --address"
    )


@contextmanager
def _loopback_node() -> Iterator[None]:
    """Start the embedded instance as a node on 127.0.0.1: it serves this process alone, so its
    GCS, raylet, object manager, workers and ranks listen on loopback, never on the network.

    NOTE: ray.init turns a `_node_ip_address` of 127.0.0.1 back into the machine's address;
    Ray keeps a node on loopback only where it assumes a laptop (Windows and macOS), by this
    switch, read when the node starts. Once started, the node's address is its own record.
    """
    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


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
                node_id=n.get("NodeID", ""),
            )
        )
    return ClusterShape(tuple(sorted(nodes, key=lambda s: s.name)))
