"""A seeded store generator with a HIERARCHICAL noise model, as real fleets behave.

Each run of an identity draws its own level (a run-level random effect, lognormal with sd
`run_sd`, per identity: placement, clocks, background load differ between runs), the
collective's iterations scatter around that level (`iter_sd`), and each rank adds a little
jitter of its own. Rows are the bandwidth check's: one per rank per identity, with the
per-iteration samples, written through the store (so summaries are written too).

A recipe of `fleetval.testing.builder`. Used by the compare and start-up tests and by
bench/bench_gate.py, bench/bench_compare.py and bench/bench_startup.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from fleetval.analysis.baselines import Baselines
from fleetval.metrics import BUSBW, CORRECT, LATENCY
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import RESULTS_SCHEMA
from fleetval.testing.builder import SyntheticRun, build_store
from fleetval.vocab import RunStatus, Status

COLLECTIVES = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
DTYPES = ("float32", "bfloat16")
SIZES = tuple(1 << e for e in range(6, 31))  # 64 B .. 1 GiB: 25 sizes -> 200 identities


@dataclass
class FleetModel:
    """The fleet and its noise; `run_sd` is one sd for all identities or (lo, hi) drawn per identity."""

    nodes: int = 2
    ranks_per_node: int = 4
    iters: int = 10
    run_sd: float | tuple[float, float] = 0.02
    iter_sd: float = 0.025
    rank_sd: float = 0.003
    collectives: dict[str, float] = field(default_factory=lambda: dict(COLLECTIVES))
    dtypes: tuple[str, ...] = DTYPES
    sizes: tuple[int, ...] = SIZES

    def identities(self) -> list[tuple[str, str, int]]:
        return [(c, d, s) for c in self.collectives for d in self.dtypes for s in self.sizes]


class GenStore:
    """Writes runs of one fleet into a store; `drop` plants a busbw drop on identities."""

    def __init__(self, root: Path, model: FleetModel, seed: int) -> None:
        self.store = Store(root)
        self.model = model
        self.rng = np.random.default_rng(seed)
        idents = model.identities()
        sd = model.run_sd
        self.run_sd = (
            self.rng.uniform(sd[0], sd[1], len(idents))
            if isinstance(sd, tuple)
            else np.full(len(idents), sd)
        )
        self.count = 0

    def run(
        self,
        *,
        drop: dict[int, float] | None = None,
        env: dict[str, str] | None = None,
        status: str = RunStatus.PASS.value,
        faults: list[dict] | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        """One run; `drop` maps identity index -> fraction of busbw lost (0.05: 5%)."""
        m, rng = self.model, self.rng
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=self.count)
        run_id = f"{started:%Y%m%d-%H%M%S}-{self.count:06x}"
        self.count += 1
        idents = m.identities()
        world = m.nodes * m.ranks_per_node
        ni = len(idents)
        size = np.array([s for _, _, s in idents], dtype=np.int64)
        base = 8.0 + size / 4e4  # microseconds: latency floor + ~40 GB/s
        level = np.exp(self.run_sd * rng.standard_normal(ni))  # the run-level random effect
        for i, d in (drop or {}).items():
            level[i] /= 1 - d
        shared = 1 + m.iter_sd * rng.standard_normal((ni, 1, m.iters))
        jitter = 1 + m.rank_sd * rng.standard_normal((ni, world, m.iters))
        samples = ((base * level)[:, None, None] * shared * jitter).reshape(ni * world, m.iters)
        table = bandwidth_table(run_id, idents, world, m.ranks_per_node, samples)
        fp = {"gpu_model": "MI300X", "rocm_version": "6.1.3", "driver_version": "6.8.5"}
        nodes = [{"node": f"node-{j}", **fp, **(env or {})} for j in range(m.nodes)]
        record = Run(
            run_id=run_id, suite="bandwidth", status=status, started_at=started,
            finished_at=started, labels=labels or {}, faults=faults or [],
            metrics=[BUSBW, LATENCY, CORRECT],
        )  # fmt: skip
        build_store(self.store, [SyntheticRun(record, {"bandwidth": table}, nodes)])
        return run_id

    def baseline(self, runs: int, name: str = "base") -> list[str]:
        ids = [self.run() for _ in range(runs)]
        Baselines(self.store).set(name, run_ids=ids)
        return ids


def bandwidth_table(
    run_id: str, idents: list[tuple[str, str, int]], world: int, per_node: int, samples: np.ndarray
) -> pa.Table:
    """The bandwidth check's rows, built column-wise (Row objects would dominate a bench)."""
    n, iters = samples.shape
    coll = np.repeat([c for c, _, _ in idents], world)
    size = np.repeat(np.array([s for _, _, s in idents], dtype=np.int64), world)
    rank = np.tile(np.arange(world, dtype=np.int32), len(idents))
    med = np.median(samples, axis=1)
    factor = np.array([COLLECTIVES[c] for c in coll]) * (world - 1) / world
    algbw = size / med / 1e3
    cols = {
        "run_id": pa.array([run_id] * n),
        "job": pa.array(np.zeros(n, np.int32)),
        "step": pa.array(["bandwidth"] * n),
        "check": pa.array(["bandwidth"] * n),
        "collective": pa.array(coll),
        "op": pa.array(np.where(np.isin(coll, ["all_reduce", "reduce_scatter"]), "sum", None)),
        "dtype": pa.array(np.repeat([d for _, d, _ in idents], world)),
        "size_bytes": pa.array(size),
        "world_size": pa.array(np.full(n, world, np.int32)),
        "rank": pa.array(rank),
        "local_rank": pa.array(rank % per_node),
        "node": pa.array(np.char.add("node-", (rank // per_node).astype(str))),
        "device": pa.array(np.char.add("cuda:", (rank % per_node).astype(str))),
        "iters": pa.array(np.full(n, iters, np.int32)),
        "time_us_median": pa.array(med),
        "time_us_p99": pa.array(samples.max(axis=1)),
        "algbw_gbps": pa.array(algbw),
        "busbw_gbps": pa.array(algbw * factor),
        "wrong": pa.array(np.zeros(n, np.int64)),
        "status": pa.array([Status.PASS.value] * n),
        "message": pa.array([""] * n),
        "samples_us": pa.ListArray.from_arrays(
            pa.array(np.arange(0, n * iters + 1, iters, dtype=np.int32)), pa.array(samples.ravel())
        ),
        "details": pa.array(["{}"] * n),
    }
    return pa.table({f.name: cols.get(f.name, pa.nulls(n, f.type)) for f in RESULTS_SCHEMA}).cast(
        RESULTS_SCHEMA
    )
