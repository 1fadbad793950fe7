"""Stores with sign-off evidence written row by row: an H100 node's bandwidth, correctness,
straggler and microbench rows, and a planted 30% regression against a baseline.

A recipe of `fleetval.testing.builder`: `write_run` makes a run of these rows and writes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from fleetval.analysis.baselines import Baselines
from fleetval.jsontypes import JsonObject
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row
from fleetval.testing.builder import SyntheticRun, build_store
from fleetval.vocab import RunStatus, Status

H100 = "NVIDIA H100 80GB HBM3"
GiB = 1 << 30
SIZES = [1 * GiB, 4 * GiB, 16 * GiB]


def bw_rows(run_id: str, busbw: float, rng: np.random.Generator, *, slow_rank: int | None = None,
             world: int = 8, node: str = "gpu-1") -> list[Row]:  # fmt: skip
    rows = []
    factor = 2 * (world - 1) / world
    for size in SIZES:
        for rank in range(world):
            bw = busbw * (0.8 if rank == slow_rank else 1.0) * (0.9 + 0.1 * size / SIZES[-1])
            t_us = size / (bw / factor * 1e3)
            samples = tuple(float(t_us * (1 + 0.01 * rng.standard_normal())) for _ in range(20))
            med = float(np.median(samples))
            algbw = size / (med * 1e-6) / 1e9
            rows.append(Row(run_id=run_id, step="bw", check="bandwidth", collective="all_reduce",
                            op="sum", dtype="bfloat16", size_bytes=size, world_size=world,
                            rank=rank, node=node, device=f"cuda:{rank}", device_id=f"GPU-{rank}",
                            iters=20, time_us_median=med, algbw_gbps=algbw,
                            busbw_gbps=algbw * factor, samples_us=samples))  # fmt: skip
    return rows


def correct_rows(run_id: str, *, wrong_rank: int | None = None) -> list[Row]:
    return [
        Row(run_id=run_id, step="correct", check="collectives", collective="all_gather",
            dtype="float32", size_bytes=1 << 20, world_size=8, rank=r, node="gpu-1",
            device_id=f"GPU-{r}", wrong=12 if r == wrong_rank else 0,
            status=Status.FAIL.value if r == wrong_rank else Status.PASS.value,
            message="12 of 262144 elements wrong" if r == wrong_rank else "")
        for r in range(8)
    ]  # fmt: skip


def straggler_rows(run_id: str, *, late: int | None = None) -> list[Row]:
    return [
        Row(run_id=run_id, step="straggler", check="straggler", collective="all_reduce",
            world_size=8, rank=r, node="gpu-1", device_id=f"GPU-{r}",
            metric="straggler_last_fraction", value=1.0 if r == late else 0.1, unit="fraction",
            status=Status.FAIL.value if r == late else Status.PASS.value,
            message=f"straggler: rank {r} on gpu-1 arrives last in 100% of iterations, 30.0 ms behind the median rank" if r == late else "")
        for r in range(8)
    ]  # fmt: skip


def micro_rows(run_id: str, *, tflops: float = 700.0) -> list[Row]:
    exp = {"peak": 989.0, "pass_at": 593.4, "fail_below": 296.7}
    return [
        Row(run_id=run_id, step="microbench", check="microbench", metric="gemm_tflops",
            unit="TFLOP/s", dtype="bfloat16", world_size=8, rank=r, node="gpu-1",
            device_id=f"GPU-{r}", value=tflops if r else 900.0,
            details={"expectation": exp, "device_name": H100})
        for r in range(8)
    ]  # fmt: skip


def write_run(store: Store, run_id: str, rows: list[Row], *, gates: dict | None = None,
              labels: dict[str, str] | None = None, status: str = RunStatus.PASS.value,
              gpu_model: str | None = H100, steps: list[dict] | None = None,
              faults: list[dict] | None = None, nccl: str = "2.21.5") -> str:  # fmt: skip
    nodes = [{"node": "gpu-1", "hostname": "gpu-1", "gpu_model": gpu_model,
              "gpu_count": 8 if gpu_model else 0, "nccl_version": nccl,
              "torch_version": "2.13.0"}]  # fmt: skip
    suite: JsonObject = {"name": "release", "compare": {"threshold_pct": 5}}
    if gates is not None:
        suite["gates"] = gates
    # the runs in the store once this one's results are in (they list it as incomplete)
    count = len({r.run_id for r in store.runs()} | {run_id})
    started = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=count)
    record = Run(run_id=run_id, suite="release", status=status, started_at=started,
                       finished_at=started + timedelta(minutes=5), labels=labels or {},
                       backend="nccl", suite_json=json.dumps(suite), faults=faults or [],
                       summary={"steps": steps or []})  # fmt: skip
    build_store(store, [SyntheticRun(record, {"part-0": rows}, nodes)])
    return run_id


ALL_GATES = {
    "correctness": {},
    "busbw": {},
    "health": {"checks": ["straggler"]},
    "microbench": {},
}


def healthy(run_id: str, rng: np.random.Generator, busbw: float = 470.0) -> list[Row]:
    return [*bw_rows(run_id, busbw, rng), *correct_rows(run_id), *straggler_rows(run_id),
            *micro_rows(run_id)]  # fmt: skip


def planted_regression(path: Path) -> Store:
    """Three baseline runs at 470 GB/s; a candidate 30% slower, with a newer NCCL."""
    store = Store(path)
    rng = np.random.default_rng(7)
    for i in range(3):
        write_run(store, f"base{i}", healthy(f"base{i}", rng), gates=ALL_GATES,
                  labels={"stack": "old"})  # fmt: skip
    write_run(store, "cand", healthy("cand", rng, busbw=330.0), gates=ALL_GATES,
              labels={"stack": "new"}, nccl="2.23.4")  # fmt: skip
    Baselines(store).set("old", where={"stack": "old"})
    return store
