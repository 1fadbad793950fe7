"""Each rank's lateness is stored with its results part, and equals what the rows give.

Compare judges late ranks from `Store.lateness` (written by `write_results`), never from
the samples; these tests hold it to a plain recomputation from the run's rows, whatever
mix of stored and missing lateness files the store has.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from fleetval.analysis.compare import fleet_outliers
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import Row
from fleetval.store.summaries import rank_lateness

RUN = "r1"


def _rows(check: str, coll: str, sizes: tuple[int, ...], world: int, late: int, seed: int) -> list:
    """Blocking collectives: everyone but `late` waits ~30 ms for it, in varying amounts."""
    rng = np.random.default_rng(seed)
    rows = []
    for size in sizes:
        op = 50.0 + size / 1e3
        for rank in range(world):
            wait = 0.0 if rank == late else 3e4 * (1 + 0.05 * rng.random())
            t = (op + wait) * (1 + 0.01 * rng.standard_normal(10))
            rows.append(
                Row(run_id=RUN, check=check, collective=coll, op="sum", dtype="float32",
                    size_bytes=size, world_size=world, rank=rank, node=f"node-{rank // 2}",
                    time_us_median=float(np.median(t)), busbw_gbps=1.0, samples_us=tuple(t))
            )  # fmt: skip
    return rows


def _write_run(store: Store) -> None:
    # the same collective (check, collective, world size) in two parts: its lateness is a
    # median over both parts' rows
    small = _rows("collectives", "all_reduce", (8, 64), 4, late=2, seed=0)
    small.append(Row(run_id=RUN, check="collectives", collective="all_reduce", op="sum",
                     dtype="float32", size_bytes=128, world_size=4, rank=0, node="node-0",
                     time_us_median=1.0, status="skip"))  # fmt: skip
    store.write_results(RUN, "job0-small", small)
    store.write_results(RUN, "job0-large", _rows("collectives", "all_reduce", (1 << 20,), 4, 2, 1))
    store.write_results(RUN, "job1-sweep", _rows("bandwidth", "broadcast", (8, 4096), 8, 5, 2))
    values = [Row(run_id=RUN, check="microbench", metric="gemm_tflops", value=700.0 + r, rank=r,
                  node=f"node-{r // 2}") for r in range(4)]  # fmt: skip
    store.write_results(RUN, "job0-micro", values)
    store.write_nodes(RUN, [{"node": f"node-{i}", "gpu_model": "MI300X"} for i in range(4)])
    store.write_run(Run(run_id=RUN, suite="x", status="pass", started_at=datetime.now(UTC)))


def _by_hand(rows: list[dict]) -> dict[tuple, float]:
    """Per (check, collective, world size, rank): the median over its rows of the median over
    iterations of (slowest rank's i-th time - own i-th time) / slowest i-th time, percent."""
    groups = defaultdict(list)
    for r in rows:
        if r["time_us_median"] is not None and r["metric"] is None and r["status"] != "skip":
            key = tuple(r[c] for c in ("check", "collective", "op", "dtype", "size_bytes"))
            groups[(*key, r["world_size"])].append(r)
    shares = defaultdict(list)
    for members in groups.values():
        t = np.array([m["samples_us"] or [m["time_us_median"]] for m in members])
        slowest = t.max(axis=0)
        for m, own in zip(members, t, strict=True):
            share = float(np.median((slowest - own) / slowest) * 100)
            shares[(m["check"], m["collective"], m["world_size"], m["rank"])].append(share)
    return {k: float(np.median(v)) for k, v in shares.items()}


def _stored(store: Store) -> dict[tuple, float]:
    t = store.lateness(RUN).to_pylist()
    return {(r["check"], r["collective"], r["world_size"], r["rank"]): r["lateness_pct"] for r in t}


@pytest.mark.parametrize("removed", [(), ("job0-small",), ("job1-sweep",), ("*",)])
def test_stored_lateness_is_what_the_rows_give(tmp_path: Path, removed: tuple[str, ...]) -> None:
    """Stored, missing (a version-2 store, a crash between writes) or some of each: the same."""
    store = Store(tmp_path)
    _write_run(store)
    assert sorted(p.stem for p in (tmp_path / "lateness" / RUN).glob("*.parquet")) == [
        "job0-large", "job0-micro", "job0-small", "job1-sweep"
    ]  # fmt: skip
    for part in removed:
        for f in (tmp_path / "lateness" / RUN).glob(f"{part}.parquet"):
            f.unlink()
    expected = _by_hand(store.results([RUN]).to_pylist())
    got = _stored(store)
    assert got.keys() == expected.keys() and len(got) == 4 + 8  # value and skip rows left out
    assert all(got[k] == pytest.approx(expected[k], rel=1e-12) for k in expected)
    # the same numbers, in the same order, as the whole run's rows reduced at once
    whole = rank_lateness(store.results([RUN]))
    assert store.lateness(RUN).to_pylist() == whole.to_pylist()
    (coll, bw) = fleet_outliers(store, RUN)
    assert (coll.identity.check, coll.rank, coll.node) == ("collectives", 2, "node-1")
    assert (bw.identity.collective, bw.rank, bw.unit) == ("broadcast", 5, "rank 5 (node-2)")
    assert coll.value == pytest.approx(expected[("collectives", "all_reduce", 4, 2)])


def test_a_run_without_collectives_has_no_lateness(tmp_path: Path) -> None:
    store = Store(tmp_path)
    rows = [Row(run_id=RUN, check="health", metric="gemm_tflops", value=1.0, rank=0, node="n")]
    store.write_results(RUN, "job0-health", rows)
    assert store.lateness(RUN).num_rows == 0
    assert store.lateness("r-none").num_rows == 0  # no results at all
