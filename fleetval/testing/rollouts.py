"""Simulated nightly history of a fleet under staggered version rollouts (pure, seeded).

Each night every node measures all_reduce busbw on its own (node-local, as a sweep's
single-node jobs do) at a few sizes. The log busbw of a node on a night is

    base(size) + node effect (sd NODE_SD) + night effect (sd NIGHT_SD: the fabric, shared by
    every node that night) + noise (sd NOISE_SD) + the planted loss where RCCL is new

and a few node-nights are missing. Versions roll out in batches, a new random order of the
nodes per component: the driver first, then ROCm, then RCCL (the scenario says how).

Scenarios:
- `planted`: staggered driver, ROCm and RCCL rollouts; RCCL's change costs `loss` at sizes
  >= 64 MiB (and nothing elsewhere).
- `null`: the same rollouts, nothing planted.
- `together`: the driver staggered; ROCm and RCCL changed together on every node on one
  night (the middle one), RCCL's loss planted.
- `bundled`: ROCm and RCCL changed together node by node (same nodes, same nights), RCCL's
  loss planted: a joint effect the data cannot split.

`write_history` is a recipe of `fleetval.testing.builder`. Used by tests/unit/test_attribute*.py
and bench/bench_attribute.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from fleetval.metrics import BUSBW, CORRECT, LATENCY
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import NODES_SCHEMA, Row
from fleetval.testing.builder import SyntheticRun, build_store
from fleetval.vocab import RunStatus, Status

SIZES = tuple(1 << e for e in (20, 22, 24, 26, 28, 30))  # 1 MiB .. 1 GiB
AFFECTED = 64 << 20  # the planted loss is at sizes >= 64 MiB
GPU = "AMD Instinct MI300X"
VERSIONS = {
    "driver_version": ("6.8.5", "6.10.5"),
    "rocm_version": ("6.1.3", "6.2.4"),
    "rccl_version": ("2.18.6", "2.20.5"),
}
NODE_SD, NIGHT_SD, NOISE_SD = 0.02, 0.03, 0.015
SCENARIOS = ("planted", "null", "together", "bundled")
START = datetime(2026, 1, 1, 2, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class History:
    values: (
        pa.Table
    )  # run_id, node, check, collective, op, dtype, size_bytes, world_size, metric, value
    nodes: pa.Table  # NODES_SCHEMA
    nights: dict[str, str]  # run_id -> date
    new_from: dict[str, np.ndarray]  # version column -> per node the first night on the new version


def rollout(rng: np.random.Generator, nodes: int, start: int, span: int) -> np.ndarray:
    """Per node the night it gets the new version: a random order, `span` equal batches."""
    batch = np.repeat(np.arange(span), -(-nodes // span))[:nodes]
    return start + batch[rng.permutation(nodes)]


def schedule(
    rng: np.random.Generator, scenario: str, nodes: int, nights: int
) -> dict[str, np.ndarray]:
    span = max(4, nights // 8)
    at = {c: rollout(rng, nodes, round(nights * f), span)
          for c, f in zip(VERSIONS, (0.12, 0.4, 0.67), strict=True)}  # fmt: skip
    if scenario == "together":
        at["rocm_version"] = at["rccl_version"] = np.full(nodes, nights // 2)
    elif scenario == "bundled":
        at["rccl_version"] = at["rocm_version"]
    return at


def simulate(
    *,
    nodes: int = 16,
    nights: int = 30,
    seed: int = 0,
    scenario: str = "planted",
    loss: float = 0.08,
    sizes: tuple[int, ...] = SIZES,
    missing: float = 0.02,
) -> History:
    """A seeded history; `scenario` one of SCENARIOS."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: {scenario!r} is not one of {', '.join(SCENARIOS)}")
    rng = np.random.default_rng(seed)
    at = schedule(rng, scenario, nodes, nights)
    night_of, node_of = np.divmod(np.arange(nights * nodes), nodes)
    present = rng.random(nights * nodes) >= missing
    night_of, node_of = night_of[present], node_of[present]
    n = len(night_of)
    level = (rng.normal(0, NODE_SD, nodes)[node_of] + rng.normal(0, NIGHT_SD, nights)[night_of])[
        :, None
    ] + rng.normal(0, NOISE_SD, (n, len(sizes)))
    base = np.log(50.0 * np.array(sizes) / (np.array(sizes) + (8 << 20)))
    rccl_new = night_of >= at["rccl_version"][node_of]
    lost = rccl_new[:, None] & (np.array(sizes) >= AFFECTED)[None, :]
    busbw = np.exp(base[None, :] + level + np.log1p(-loss) * lost * (scenario != "null"))
    run_ids = [f"{(START + timedelta(days=t)):%Y%m%d-%H%M%S}-{t:06x}" for t in range(nights)]
    run = np.array(run_ids)[night_of]
    node_names = np.array([f"node-{j:04d}" for j in range(nodes)])
    rows = n * len(sizes)

    def strings(x: np.ndarray | str) -> pa.DictionaryArray:
        """Dictionary-encoded, as the store's run values arrive."""
        return pa.array(np.broadcast_to(np.asarray(x), rows)).dictionary_encode()

    values = pa.table(
        {
            "run_id": strings(np.repeat(run, len(sizes))),
            "node": strings(np.repeat(node_names[node_of], len(sizes))),
            "check": strings("bandwidth"),
            "collective": strings("all_reduce"),
            "op": strings("sum"),
            "dtype": strings("bfloat16"),
            "size_bytes": np.tile(np.array(sizes, np.int64), n),
            "world_size": np.full(rows, 8, np.int32),
            "metric": strings(BUSBW.name),
            "value": busbw.ravel(),
        }
    )
    version = {
        c: np.where(night_of >= at[c][node_of], new, old) for c, (old, new) in VERSIONS.items()
    }
    node_table = pa.table(
        {
            "run_id": run, "node": node_names[node_of], "gpu_model": np.full(n, GPU),
            "gpu_count": np.full(n, 8, np.int32), **version,
            "torch_version": np.full(n, "2.5.1"), "kernel": np.full(n, "5.15.0-119-generic"),
        }
    )  # fmt: skip
    nodes_out = pa.table(
        {
            f.name: node_table[f.name] if f.name in node_table.column_names else pa.nulls(n, f.type)
            for f in NODES_SCHEMA
        }
    ).cast(NODES_SCHEMA)
    return History(
        values=values,
        nodes=nodes_out,
        nights={r: (START + timedelta(days=t)).date().isoformat() for t, r in enumerate(run_ids)},
        new_from=at,
    )


def write_history(h: History, store: Store, *, labels: dict[str, str] | None = None) -> list[str]:
    """Each night one run in the store, through its writer: per node a job of 2 ranks whose
    rows carry the simulated busbw (every iteration at one time, so the stored summary's
    value is exactly it)."""
    by_run = h.values.to_pylist()
    nodes = h.nodes.to_pylist()
    runs = list(h.nights)
    build_store(store, (_night(h, run_id, by_run, nodes, labels) for run_id in runs))
    return runs


def _night(
    h: History, run_id: str, by_run: list[dict], nodes: list[dict], labels: dict[str, str] | None
) -> SyntheticRun:
    recs = [r for r in by_run if r["run_id"] == run_id]
    node_jobs = {n: j for j, n in enumerate(sorted({r["node"] for r in recs}))}
    rows = [row for r in recs for row in _rank_rows(r, node_jobs[r["node"]])]
    started = datetime.fromisoformat(h.nights[run_id]).replace(hour=2, tzinfo=UTC)
    record = Run(
        run_id=run_id, suite="nightly", status=RunStatus.PASS.value, started_at=started,
        finished_at=started + timedelta(minutes=20), labels=labels or {},
        metrics=[BUSBW, LATENCY, CORRECT],
    )  # fmt: skip
    return SyntheticRun(
        record,
        {"bandwidth": rows} if rows else {},
        [{k: v for k, v in n.items() if k != "run_id"} for n in nodes if n["run_id"] == run_id],
    )


def _rank_rows(r: dict, job: int) -> list[Row]:
    time_us = r["size_bytes"] / (r["value"] * 1e3)  # the time at which busbw (factor 1) is value
    return [
        Row(
            run_id=r["run_id"], job=job, step="bandwidth", check="bandwidth",
            collective=r["collective"], op=r["op"], dtype=r["dtype"], size_bytes=r["size_bytes"],
            world_size=2, rank=k, local_rank=k, node=r["node"], device=f"cuda:{k}",
            backend="nccl", iters=3, time_us_median=time_us, time_us_p99=time_us,
            algbw_gbps=r["value"], busbw_gbps=r["value"], status=Status.INFO.value,
            samples_us=(time_us,) * 3,
        )
        for k in range(2)
    ]  # fmt: skip
