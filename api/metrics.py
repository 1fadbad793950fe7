"""Prometheus metrics, computed from the database at scrape time (right in every worker)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from fleetval.api.db import QueueStatus, ServiceDB

STEP_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


class ServiceCollector(Collector):
    def __init__(self, db: ServiceDB) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        counts = self.db.counts()
        runs = GaugeMetricFamily(
            "fleetval_runs", "Runs known to the service, by status", labels=["status"]
        )
        for status in QueueStatus:
            runs.add_metric([status.value], counts.get(status.value, 0))
        yield runs
        yield GaugeMetricFamily(
            "fleetval_queue_depth",
            "Submissions waiting to run",
            value=counts.get(QueueStatus.QUEUED, 0),
        )
        yield from self._steps()
        busbw = GaugeMetricFamily(
            "fleetval_busbw_gbps",
            "Latest median bus bandwidth (GB/s) by collective, size class and node",
            labels=["collective", "size_class", "node"],
        )
        for collective, size_class, node, gbps in self.db.busbw():
            busbw.add_metric([collective, size_class, node], gbps)
        yield busbw

    def _steps(self) -> Iterator[Metric]:
        durations: dict[tuple[str, str], list[float]] = {}
        culprits: dict[tuple[str, str], int] = {}
        for sub in self.db.submissions():
            for step in sub.steps:
                key = (step["check"], step["status"])
                durations.setdefault(key, []).append(float(step["seconds"]))
                for c in step.get("culprits", []):
                    ckey = (c["node"], c["reason"])
                    culprits[ckey] = culprits.get(ckey, 0) + 1
        hist = HistogramMetricFamily(
            "fleetval_step_duration_seconds",
            "Step durations by check and status",
            labels=["check", "status"],
        )
        for key, values in sorted(durations.items()):
            buckets = [(str(b), sum(v <= b for v in values)) for b in STEP_BUCKETS]
            hist.add_metric(list(key), [*buckets, ("+Inf", len(values))], sum(values))
        yield hist
        named = CounterMetricFamily(
            "fleetval_culprits",
            "Ranks named as culprits, by node and reason",
            labels=["node", "reason"],
        )
        for key, n in sorted(culprits.items()):
            named.add_metric(list(key), n)
        yield named


def registry(db: ServiceDB) -> CollectorRegistry:
    """A registry per app (never the global one), so several apps can live in one process."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ServiceCollector(db))
    return reg
