"""Fleet outliers of one run, no baseline needed: late ranks and slow devices.

- Collectives: a late rank waits least. In a blocking collective every rank leaves
  together, so a rank that arrives late measures the SHORTEST own time, and the ranks that
  waited for it the longest; judging ranks by their own time points the wrong way. So
  each rank is judged by its lateness as it experiences it: at iteration i,
  (max over ranks of t_i - own t_i) / max t_i, the share of the collective the others
  spent waiting for it; median over iterations, then over the sizes and dtypes of a
  collective. A rank is late when that share is at least `late_pct` and a robust outlier
  among its peers. Each rank's share is computed when its rows are written
  (`reduction.rank_lateness`), so judging a run reads a few rows per rank, not the samples.
- Per-device metrics (declared not `shared`, with a direction): each device against the
  devices of the same GPU model measuring the same thing; worse by more than `outlier_z`
  robust deviations and by more than the metric's threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetval.analysis.compare_settings import CompareSettings
from fleetval.analysis.runvalues import Identity
from fleetval.arrays import arrow, group_rows, np_col, plain, segment_median
from fleetval.metrics import Direction, MetricDecl, infer


@dataclass(frozen=True, kw_only=True)
class Outlier:
    """A rank (late in collectives) or a GPU (per-device metric) far worse than its peers."""

    run_id: str
    identity: Identity  # group is the GPU model: peers share it
    unit: str  # "rank 2 (node-a)" or node/device
    value: float  # late: percent of the collective's time the others waited for it
    peer_median: float
    deviation_pct: float  # worse-signed: negative is worse
    robust_z: float
    peers: int
    kind: str = "device"  # late_rank | device
    rank: int | None = None
    node: str = ""


def _robust(values: np.ndarray, seg: np.ndarray, nseg: int) -> tuple[np.ndarray, ...]:
    """Per row: its segment's median, MAD and size."""
    med, n = segment_median(values, seg, nseg)
    mad, _ = segment_median(np.abs(values - med[seg]), seg, nseg)
    return med[seg], mad[seg], n[seg]


def late_rank_outliers(
    run_id: str, lateness: pa.Table, sku_of: dict[str, str], settings: CompareSettings
) -> list[Outlier]:
    """Ranks the others wait for (see the module docstring), from the run's rank lateness
    (`reduction.rank_lateness`, stored with each results part: `Store.lateness`)."""
    if not len(lateness):
        return []
    per_rank = np_col(lateness["lateness_pct"]).astype(float)
    pseg, pfirst = group_rows(lateness, ["check", "collective", "world_size"])
    peer, mad, npeers = _robust(per_rank, pseg, len(pfirst))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = 0.6745 * (per_rank - peer) / np.where(mad > 0, mad, np.nan)
    z = np.where((mad == 0) & (per_rank > peer), np.inf, z)
    flag = (
        (per_rank >= settings.late_pct) & (z > settings.outlier_z) & (npeers >= settings.min_peers)
    )
    out = []
    for i in np.flatnonzero(flag):
        k = plain(lateness.slice(i, 1)).to_pylist()[0]
        ident = Identity(
            check=k["check"], collective=k["collective"], op=None, dtype=None, size_bytes=None,
            world_size=k["world_size"], metric="lateness_pct", group=sku_of.get(k["node"], "unknown"),
        )  # fmt: skip
        out.append(
            Outlier(
                run_id=run_id, identity=ident, unit=f"rank {k['rank']} ({k['node']})",
                value=float(per_rank[i]), peer_median=float(peer[i]),
                deviation_pct=-float(per_rank[i] - peer[i]), robust_z=-float(z[i]),
                peers=int(npeers[i]), kind="late_rank", rank=int(k["rank"]), node=k["node"],
            )
        )  # fmt: skip
    return out


def slow_devices(
    run_id: str,
    table: pa.Table,
    sku_of: dict[str, str],
    decls: dict[str, MetricDecl],
    settings: CompareSettings,
) -> list[Outlier]:
    """Devices far worse than the devices of the same GPU model (per-device metrics only)."""
    metric = pc.cast(table["metric"], pa.string())
    if metric.null_count == len(metric):
        return []
    pairs = pa.table({"m": metric, "u": pc.cast(table["unit"], pa.string())})
    _, first = group_rows(pairs, ["m", "u"])
    kinds = {(r["m"], r["u"]) for r in pairs.take(arrow(first)).to_pylist() if r["m"]}
    decls = {m: decls.get(m) or infer(m, u) for m, u in sorted(kinds, key=str)} | {
        m: d for m, d in decls.items() if m not in {k for k, _ in kinds}
    }
    judged = [m for m, d in decls.items() if not d.shared and d.direction != Direction.NONE]
    value = np_col(table["value"]).astype(float)
    in_judged = np_col(pc.is_in(metric, value_set=arrow(judged, pa.string())), null=0) > 0
    keep = np.isfinite(value) & in_judged
    if not keep.any():
        return []
    t, value = table.filter(arrow(keep)), value[keep]
    nodes = pc.cast(t["node"], pa.string())
    sku = arrow([sku_of.get(n, "unknown") for n in nodes.to_pylist()], pa.string())
    t = t.append_column("_sku", sku)
    cols = ["check", "metric", "dtype", "size_bytes", "world_size", "_sku"]
    seg, first = group_rows(t, cols)
    peer, mad, npeers = _robust(value, seg, len(first))
    names = pc.cast(t["metric"], pa.string()).to_pylist()
    sign = np.array([1.0 if decls[m].direction == Direction.HIGHER else -1.0 for m in names])
    thr = np.array([settings.threshold_for(m) for m in names])
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = sign * (value / peer - 1) * 100
        z = sign * 0.6745 * (value - peer) / np.where(mad > 0, mad, np.nan)
    z = np.where((mad == 0) & (dev < 0), -np.inf, z)
    flag = (npeers >= settings.min_peers) & (z < -settings.outlier_z) & (dev < -thr)
    out = []
    for i in np.flatnonzero(flag):
        k = plain(t.slice(i, 1)).to_pylist()[0]
        ident = Identity(
            check=k["check"], collective=None, op=None, dtype=k["dtype"],
            size_bytes=k["size_bytes"], world_size=k["world_size"], metric=k["metric"],
            group=k["_sku"],
        )  # fmt: skip
        out.append(
            Outlier(
                run_id=run_id, identity=ident,
                unit=f"{k['node']}/{k['device_id'] or 'rank ' + str(k['rank'])}",
                value=float(value[i]), peer_median=float(peer[i]), deviation_pct=float(dev[i]),
                robust_z=float(z[i]), peers=int(npeers[i]), kind="device", rank=int(k["rank"]),
                node=k["node"],
            )
        )  # fmt: skip
    return out
