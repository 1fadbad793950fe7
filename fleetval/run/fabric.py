"""What a sweep knows of the fabric: each node's rack, switch and domain from its Ray labels
(`fleetval/rack`, `fleetval/switch`, `fleetval/domain`) and the suite's map, and the links
earlier sweeps in the store measured (`fleetval.fleet.coverage`) with their jobs, which the
fabric model fits beside tonight's (`fleetval.fleet.model`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import ray
import yaml

from fleetval.fleet.coverage import Fabric
from fleetval.fleet.history import stored_jobs, stored_links, sweep_runs
from fleetval.fleet.topology import Topology, TopologyError
from fleetval.run.plan import NODE_LABEL, PlanError
from fleetval.store.catalog import Catalog
from fleetval.suite import Suite

HISTORY_CAP = 512  # sweeps read back for coverage: n-1 cover every link of n nodes


def node_labels() -> dict[str, dict[str, str]]:
    """Every live Ray node's labels, by the node's name (its `fleetval/node`, else host)."""
    out = {}
    for n in ray.nodes():
        if n.get("Alive"):
            labels = n.get("Labels") or {}
            out[labels.get(NODE_LABEL) or n.get("NodeManagerHostname", "?")] = dict(labels)
    return out


def suite_topology(suite: Suite) -> Topology:
    """The suite's map: `sweep.topology` inline, over it `sweep.topology_file` (YAML/JSON)."""
    topo = Topology.from_map(suite.sweep.topology, "sweep.topology")
    path = suite.sweep.topology_file
    if path is None:
        return topo
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise PlanError(f"sweep.topology_file: cannot read {path!r}: {err}") from err
    if not isinstance(doc, Mapping):
        raise PlanError(f"sweep.topology_file: {path!r} holds no mapping of node -> levels")
    try:
        return topo.merged(Topology.from_map(doc, f"sweep.topology_file({path})"))
    except TopologyError as err:
        raise PlanError(str(err)) from err


def topology(suite: Suite) -> Topology:
    """Node labels, with the suite's map over them (a map corrects or fills the labels)."""
    return Topology.from_labels(node_labels()).merged(suite_topology(suite))


def sweep_fabric(suite: Suite, catalog: Catalog, nodes: int) -> Fabric:
    past = sweep_runs(catalog, min(max(nodes - 1, 1), HISTORY_CAP))
    return Fabric(topology(suite), stored_links(past), stored_jobs(past))


def node_groups(suite: Suite) -> dict[str, frozenset[str]]:
    """Per node, every group it is in (any level): what a `between` fault matches."""
    return {n: frozenset(g.values()) for n, g in topology(suite).groups.items()}
