"""The engine on a real GPU host (run with -m gpu, alone): nccl one rank per GPU, gloo over
CUDA tensors with several ranks sharing one GPU, and Flight Recorder traces on a hang."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from fleetval.execute import run_suite
from fleetval.store import Store
from fleetval.suite import load_suite, parse_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU"),
]


@pytest.fixture(scope="module")
def local_gpu_ray() -> Iterator[None]:
    """An embedded Ray instance that sees this host's GPUs."""
    import ray

    from fleetval.execute import connect

    if ray.is_initialized():
        pytest.skip("Ray is already connected (simulated cluster); run with -m gpu alone")
    connect(None)
    try:
        yield
    finally:
        ray.shutdown()


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


def test_nccl_hang_is_named_and_flight_recorder_kept(tmp_path, local_gpu_ray):
    store = Store(tmp_path)
    world = torch.cuda.device_count()
    spec = parse_suite({
        "name": "gpu-hang", "backend": "nccl",
        "placement": {"world_sizes": [world], "gpus_per_rank": 1},
        "steps": [{"check": "bandwidth", "sizes": {"min": 4096, "max": 4096}, "iters": 100, "timeout_s": 20}],
        "faults": [{"kind": "hang", "rank": world - 1}],
    })  # fmt: skip
    record = run_suite(spec, store)
    (step,) = record.summary["steps"]
    assert step["status"] == "fail" and [c["rank"] for c in step["culprits"]] == [world - 1]
    traces = list((tmp_path / "artifacts" / record.run_id).glob("*.flight-recorder"))
    assert traces, "no Flight Recorder trace kept (torch built without it?)"
