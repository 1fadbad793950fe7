"""The planner turns a suite and a cluster shape into jobs, or says why it cannot (with numbers)."""

from __future__ import annotations

import pytest

from fleetval.run.plan import ClusterShape, NodeShape, PlanError, make_plan
from fleetval.suite import parse_suite
from fleetval.vocab import Strategy

CPU_ONLY = ClusterShape((NodeShape("laptop", cpus=2, gpus=0),))
TWO_GPU_NODES = ClusterShape((NodeShape("n0", cpus=16, gpus=8), NodeShape("n1", cpus=16, gpus=8)))


def suite(**over: object):
    return parse_suite({"name": "t", "steps": [{"check": "collectives"}], **over})


def test_cpu_cluster_gets_gloo_and_cpu_ranks():
    (job,) = make_plan(suite(placement={"world_sizes": [2]}), CPU_ONLY).jobs
    assert (job.backend, job.gpus_per_rank, job.bundle()) == ("gloo", 0.0, {"CPU": 1.0})


def test_gpu_cluster_gets_nccl_and_one_gpu_per_rank():
    plan = make_plan(suite(placement={"world_sizes": [8, 16]}), TWO_GPU_NODES)
    assert [j.world_size for j in plan.jobs] == [8, 16]
    assert {j.backend for j in plan.jobs} == {"nccl"}
    assert plan.jobs[0].bundle() == {"CPU": 1.0, "GPU": 1.0}


def test_fractional_gpus_fall_back_to_gloo():
    (job,) = make_plan(
        suite(placement={"world_sizes": [4], "gpus_per_rank": 0.25}), TWO_GPU_NODES
    ).jobs
    assert job.backend == "gloo"


def test_world_size_larger_than_the_cluster():
    with pytest.raises(PlanError) as err:
        make_plan(suite(placement={"world_sizes": [32]}), TWO_GPU_NODES)
    assert str(err.value) == (
        "placement.world_sizes: world size 32 needs 32 bundles of 1 CPU + 1 GPU; "
        "the cluster has 16 GPUs and 32 CPUs on 2 node(s)"
    )


def test_strict_strategies():
    with pytest.raises(
        PlanError, match=r"STRICT_PACK needs 9 bundles .* on one node; the largest node takes 8"
    ):
        make_plan(suite(placement={"world_sizes": [9], "strategy": "STRICT_PACK"}), TWO_GPU_NODES)
    with pytest.raises(PlanError, match="STRICT_SPREAD needs 3 nodes; 2 can take a rank"):
        make_plan(suite(placement={"world_sizes": [3], "strategy": "STRICT_SPREAD"}), TWO_GPU_NODES)
    (job,) = make_plan(
        suite(placement={"world_sizes": [2], "strategy": "STRICT_SPREAD"}), TWO_GPU_NODES
    ).jobs
    assert job.strategy == Strategy.STRICT_SPREAD


def test_nccl_forced_without_gpus():
    with pytest.raises(PlanError, match="nccl needs ranks that hold GPUs"):
        make_plan(suite(backend="nccl"), CPU_ONLY)
    with pytest.raises(PlanError, match="the cluster has 0 GPUs"):
        make_plan(suite(backend="nccl", placement={"gpus_per_rank": 1}), CPU_ONLY)
    with pytest.raises(PlanError, match="one rank per GPU"):
        make_plan(suite(backend="nccl", placement={"gpus_per_rank": 0.5}), TWO_GPU_NODES)


def test_gloo_forced_on_gpu_cluster_uses_cpu_ranks():
    (job,) = make_plan(suite(backend="gloo"), TWO_GPU_NODES).jobs
    assert (job.backend, job.gpus_per_rank) == ("gloo", 0.0)


def test_node_restriction():
    (job,) = make_plan(suite(placement={"nodes": ["n1"], "world_sizes": [8]}), TWO_GPU_NODES).jobs
    assert job.label_selector() == {"fleetval/node": "in(n1)"}
    with pytest.raises(PlanError, match="needs 9 bundles"):
        make_plan(suite(placement={"nodes": ["n1"], "world_sizes": [9]}), TWO_GPU_NODES)
    with pytest.raises(PlanError, match="no node named n7; the cluster has n0, n1"):
        make_plan(suite(placement={"nodes": ["n7"]}), TWO_GPU_NODES)


def test_world_size_all_is_every_placeable_bundle():
    (job,) = make_plan(suite(placement={"world_sizes": ["all"]}), TWO_GPU_NODES).jobs
    assert (job.world_size, job.backend) == (16, "nccl")
    spread = make_plan(
        suite(placement={"world_sizes": ["all"], "strategy": "STRICT_SPREAD"}), TWO_GPU_NODES
    )
    assert spread.jobs[0].world_size == 2
    packed = make_plan(
        suite(placement={"world_sizes": ["all"], "strategy": "STRICT_PACK"}), TWO_GPU_NODES
    )
    assert packed.jobs[0].world_size == 8
    (cpu,) = make_plan(suite(placement={"world_sizes": ["all"]}), CPU_ONLY).jobs
    assert (cpu.world_size, cpu.backend) == (2, "gloo")
    with pytest.raises(PlanError, match="`all` places no rank"):
        make_plan(suite(placement={"world_sizes": ["all"], "cpus_per_rank": 4}), CPU_ONLY)


def test_more_than_one_gpu_per_rank_is_refused_for_nccl():
    with pytest.raises(
        PlanError, match=r"placement\.gpus_per_rank: nccl runs exactly one rank per GPU; it is 2"
    ):
        make_plan(suite(backend="nccl", placement={"gpus_per_rank": 2}), TWO_GPU_NODES)
    with pytest.raises(PlanError, match="2 GPUs per rank; a rank drives one device"):
        make_plan(suite(placement={"gpus_per_rank": 2}), TWO_GPU_NODES)  # auto would pick nccl
