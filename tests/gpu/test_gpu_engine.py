"""The engine on a real GPU host (run with -m gpu, alone): nccl one rank per GPU, gloo over
CUDA tensors with several ranks sharing one GPU, and Flight Recorder traces on a hang."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fleetval.run.execute import run_suite
from fleetval.store.dataset import Store
from fleetval.suite import load_suite, parse_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU"),
]


def smoke_with(**placement: Any) -> Any:
    data = load_suite("smoke").model_dump(mode="json")
    backend = placement.pop("backend")
    data["placement"].update(placement)
    return parse_suite({**data, "backend": backend})


def test_smoke_on_nccl_one_rank_per_gpu(tmp_path, local_gpu_ray):
    store = Store(tmp_path)
    world = torch.cuda.device_count()
    record = run_suite(smoke_with(backend="nccl", world_sizes=[world], gpus_per_rank=1), store)
    assert record.status == "pass", record.summary
    rows = store.results([record.run_id]).to_pylist()
    assert {r["backend"] for r in rows} == {"nccl"} and {r["device"] for r in rows} == {"cuda:0"}
    assert all(r["device_id"] for r in rows)  # the physical GPU is named
    bw = [r for r in rows if r["check"] == "bandwidth" and r["rank"] == 0]
    print(
        "\n".join(
            f"nccl all_reduce {r['size_bytes']:>9} B  busbw {r['busbw_gbps']:.2f} GB/s" for r in bw
        )
    )


def test_smoke_gloo_over_cuda_four_ranks_on_one_gpu(tmp_path, local_gpu_ray):
    store = Store(tmp_path)
    record = run_suite(smoke_with(backend="gloo", world_sizes=[4], gpus_per_rank=0.25), store)
    assert record.status == "pass", record.summary
    rows = store.results([record.run_id]).to_pylist()
    assert {r["device"] for r in rows} == {"cuda:0"} and {r["backend"] for r in rows} == {"gloo"}


needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)


@needs_two_gpus
def test_nccl_hang_is_named_and_flight_recorder_names_the_missing_rank(tmp_path, local_gpu_ray):
    """The hung rank never enters the collective its peers wait in: the peers' watchdog times
    out (collective_s 10 < the step's 40), the driver names the rank that fell behind, and
    the Flight Recorder dumps (taken from every rank before teardown) say the same by seq id."""
    store = Store(tmp_path)
    world = torch.cuda.device_count()
    spec = parse_suite({
        "name": "gpu-hang", "backend": "nccl",
        "placement": {"world_sizes": [world], "gpus_per_rank": 1},
        "timeouts": {"step_s": 60, "collective_s": 10},
        "steps": [{"check": "bandwidth", "sizes": {"min": 4096, "max": 4096}, "iters": 100, "timeout_s": 40}],
        "faults": [{"kind": "hang", "rank": world - 1}],
    })  # fmt: skip
    record = run_suite(spec, store)
    (step,) = record.summary["steps"]
    assert step["status"] == "fail"
    (culprit,) = step["culprits"]
    assert (culprit["rank"], culprit["reason"]) == (world - 1, "hang"), culprit
    assert f"rank {world - 1} missing from" in culprit["detail"], culprit["detail"]
    artifacts = tmp_path / "artifacts" / record.run_id
    assert list(artifacts.glob("*.flight-recorder")), "no Flight Recorder trace kept"
    assert list(artifacts.glob("job0-*-nccl.*.log")), "no per-node NCCL log kept"


@needs_two_gpus
def test_each_rank_binds_its_own_gpu_and_names_it(tmp_path, local_gpu_ray):
    """Device binding by Ray's visible devices: distinct physical GPUs, each named by UUID,
    and the nodes table records the loaded NCCL's own version."""
    store = Store(tmp_path)
    world = torch.cuda.device_count()
    spec = parse_suite({
        "name": "gpu-bind", "backend": "nccl",
        "placement": {"world_sizes": [world], "gpus_per_rank": 1},
        "steps": [{"check": "collectives", "collectives": ["all_reduce"], "dtypes": ["float32"], "ops": ["sum"]}],
    })  # fmt: skip
    record = run_suite(spec, store)
    assert record.status == "pass", record.summary
    rows = store.results([record.run_id]).to_pylist()
    by_rank = {r["rank"]: r["device_id"] for r in rows}
    uuids = {f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(world)}
    assert len(by_rank) == world and set(by_rank.values()) == uuids  # one GPU each, all named
    (node,) = store.nodes([record.run_id]).to_pylist()
    assert node["nccl_version"] or node["rccl_version"]
    assert '"collective_library": "/' in node["extra"]  # asked the loaded library itself
