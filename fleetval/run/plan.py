"""Suite + cluster shape -> jobs. Pure: no Ray, no torch, so every rule here is unit-testable."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetval.vocab import Backend, Strategy

if TYPE_CHECKING:  # NOTE: annotations only: the rank actor imports this module for its node
    # label, and the suite's models (every check's parameters) would cost each rank seconds
    from fleetval.checks.spec import StepSpec
    from fleetval.suite import Suite

NODE_LABEL = "fleetval/node"  # a Ray node label naming the node; else its hostname is used
NODE_ID_LABEL = "ray.io/node-id"  # Ray's own label on every node (ray.util.placement_group)


class PlanError(ValueError):
    """The suite cannot be placed on this cluster; the message gives the numbers."""


@dataclass(frozen=True)
class NodeShape:
    """What one Ray node offers (total resources, not what is free right now)."""

    name: str
    cpus: float
    gpus: float
    node_id: str = ""  # Ray's id of the node: what every node is labelled with (`ray.io/node-id`)

    def bundles(self, cpus_per_rank: float, gpus_per_rank: float) -> int:
        """How many rank bundles fit on this node."""
        fit = _fit(self.cpus, cpus_per_rank)
        if gpus_per_rank > 0:
            fit = min(fit, _fit(self.gpus, gpus_per_rank))
        return fit


# NOTE: a fraction as small as 5e-324 is a valid float; it fits "infinitely" many ranks, which
# math.floor cannot hold: more than this many bundles on a node is no different
MAX_BUNDLES = 1 << 30


def _fit(have: float, per_rank: float) -> int:
    return math.floor(min(have / per_rank + 1e-9, MAX_BUNDLES))


@dataclass(frozen=True)
class ClusterShape:
    nodes: tuple[NodeShape, ...]

    @property
    def gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)

    def describe(self) -> str:
        cpus = sum(n.cpus for n in self.nodes)
        return f"{self.gpus:g} GPUs and {cpus:g} CPUs on {len(self.nodes)} node(s)"


@dataclass(frozen=True)
class Job:
    """One placement group and its rank actors, reused across the job's steps."""

    index: int
    world_size: int
    backend: str  # resolved: "nccl" or "gloo"
    gpus_per_rank: float
    cpus_per_rank: float
    strategy: Strategy
    nodes: tuple[str, ...] | None  # node names the job is restricted to
    steps: tuple[StepSpec, ...]  # the suite's steps: each a check's parameter model
    node_ids: tuple[str, ...] = ()  # the same nodes by Ray id, where known

    def bundle(self) -> dict[str, float]:
        b = {"CPU": self.cpus_per_rank}
        if self.gpus_per_rank > 0:
            b["GPU"] = self.gpus_per_rank
        return b

    def label_selector(self) -> dict[str, str] | None:
        """Where the group may go: the nodes by Ray id where known (every Ray node has one,
        `ray start` without fleetval's labels too), else by their `fleetval/node` name."""
        if self.node_ids:
            return {NODE_ID_LABEL: f"in({','.join(self.node_ids)})"}
        return {NODE_LABEL: f"in({','.join(self.nodes)})"} if self.nodes else None


@dataclass(frozen=True)
class Plan:
    suite: Suite
    jobs: tuple[Job, ...]


def resolve_gpus_per_rank(suite: Suite, cluster: ClusterShape) -> float:
    gpr = suite.placement.gpus_per_rank
    if gpr == "auto":
        return 1.0 if cluster.gpus > 0 and suite.backend != Backend.GLOO else 0.0
    return float(gpr)


def resolve_backend(suite: Suite, gpus_per_rank: float) -> str:
    if suite.backend == Backend.NCCL:
        if gpus_per_rank <= 0:
            raise PlanError(
                "backend: nccl needs ranks that hold GPUs; this suite's ranks hold none"
            )
        if gpus_per_rank != 1:
            raise PlanError(
                f"placement.gpus_per_rank: nccl runs exactly one rank per GPU; it is {gpus_per_rank:g}"
                + (
                    " (a rank drives one device; use world size for more GPUs)"
                    if gpus_per_rank > 1
                    else ""
                )
            )
        return "nccl"
    if suite.backend == Backend.GLOO:
        return "gloo"
    if gpus_per_rank > 1:
        raise PlanError(
            f"placement.gpus_per_rank: {gpus_per_rank:g} GPUs per rank; a rank drives one device "
            "(nccl where ranks hold GPUs): ask for more ranks instead"
        )
    return "nccl" if gpus_per_rank == 1 else "gloo"


def check_fits(
    world: int, strategy: Strategy, eligible: list[NodeShape], cpr: float, gpr: float
) -> None:
    """Raise PlanError, with the numbers, when `world` bundles cannot be placed at all."""
    fits = [n.bundles(cpr, gpr) for n in eligible]
    need = f"{world} bundles of {cpr:g} CPU" + (f" + {gpr:g} GPU" if gpr else "")
    have = ClusterShape(tuple(eligible)).describe()
    if strategy == Strategy.STRICT_PACK and max(fits, default=0) < world:
        raise PlanError(
            f"placement.world_sizes: world size {world} with STRICT_PACK needs {need} on one node; "
            f"the largest node takes {max(fits, default=0)} ({have})"
        )
    if strategy == Strategy.STRICT_SPREAD and sum(f > 0 for f in fits) < world:
        raise PlanError(
            f"placement.world_sizes: world size {world} with STRICT_SPREAD needs {world} nodes; "
            f"{sum(f > 0 for f in fits)} can take a rank ({have})"
        )
    if sum(fits) < world:
        raise PlanError(
            f"placement.world_sizes: world size {world} needs {need}; the cluster has {have}"
        )


def resolve_world(
    world: int | str, strategy: Strategy, eligible: list[NodeShape], cpr: float, gpr: float
) -> int:
    """A world size; "all" is every bundle the eligible nodes can take under the strategy."""
    if world != "all":
        return int(world)
    fits = [n.bundles(cpr, gpr) for n in eligible]
    if strategy == Strategy.STRICT_PACK:
        return max(fits, default=0)
    if strategy == Strategy.STRICT_SPREAD:
        return sum(f > 0 for f in fits)
    return sum(fits)


def eligible_nodes(suite: Suite, cluster: ClusterShape) -> list[NodeShape]:
    """The cluster's nodes, or those named by placement.nodes (all of which must exist)."""
    names = suite.placement.nodes
    if not names:
        return list(cluster.nodes)
    known = {n.name for n in cluster.nodes}
    missing = [n for n in names if n not in known]
    if missing:
        raise PlanError(
            f"placement.nodes: no node named {', '.join(missing)}; the cluster has {', '.join(sorted(known))}"
        )
    return [n for n in cluster.nodes if n.name in names]


def _resources(suite: Suite, cluster: ClusterShape) -> tuple[float, str]:
    """GPUs per rank and the backend, checked against what the cluster has."""
    gpr = resolve_gpus_per_rank(suite, cluster)
    if gpr > 0 and cluster.gpus == 0:
        raise PlanError(
            f"placement.gpus_per_rank: {gpr:g} GPU per rank asked; the cluster has {cluster.describe()}"
        )
    return gpr, resolve_backend(suite, gpr)


def make_plan(suite: Suite, cluster: ClusterShape) -> Plan:
    """One job per world size, in the suite's order, each running all steps."""
    p = suite.placement
    eligible = eligible_nodes(suite, cluster)
    gpr, backend = _resources(suite, cluster)
    jobs = []
    for i, asked in enumerate(p.world_sizes):
        world = resolve_world(asked, p.strategy, eligible, p.cpus_per_rank, gpr)
        if world < 1:
            raise PlanError(
                f"placement.world_sizes: `all` places no rank; the cluster has {ClusterShape(tuple(eligible)).describe()}"
            )
        check_fits(world, p.strategy, eligible, p.cpus_per_rank, gpr)
        jobs.append(
            Job(
                index=i,
                world_size=world,
                backend=backend,
                gpus_per_rank=gpr,
                cpus_per_rank=p.cpus_per_rank,
                strategy=p.strategy,
                nodes=tuple(p.nodes) if p.nodes else None,
                steps=tuple(suite.steps),
            )
        )
    return Plan(suite, tuple(jobs))


def node_job(
    suite: Suite, cluster: ClusterShape, nodes: tuple[str, ...], index: int, steps: list[str] | None
) -> Job:
    """A fleet sweep's job: every rank each node of `nodes` can take, and nothing else
    (a label selector keeps the group on them), running `steps` (None: all of them)."""
    gpr, backend = _resources(suite, cluster)
    cpr = suite.placement.cpus_per_rank
    shapes = [n for n in cluster.nodes if n.name in nodes]
    world = sum(n.bundles(cpr, gpr) for n in shapes)
    check_fits(world, Strategy.PACK, shapes, cpr, gpr)
    return Job(
        index=index,
        world_size=world,
        backend=backend,
        gpus_per_rank=gpr,
        cpus_per_rank=cpr,
        strategy=Strategy.STRICT_PACK if len(nodes) == 1 else Strategy.PACK,
        nodes=tuple(sorted(nodes)),
        steps=tuple(s for s in suite.steps if steps is None or s.step_name in steps),
        node_ids=tuple(n.node_id for n in shapes) if all(n.node_id for n in shapes) else (),
    )
