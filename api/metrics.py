"""Prometheus metrics, read from counters the database keeps as runs change (right in every
worker, and one small read per family whatever the history's length)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from fleetval.api.db import STEP_BUCKETS, FireOutcome, QueueStatus, ServiceDB
from fleetval.api.schedules import parse_stamp


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
        yield from self._schedules()

    def _schedules(self) -> Iterator[Metric]:
        """Per schedule: firings by outcome, and the last and next fire time (Unix seconds),
        from the counters each firing updates in its schedule's row."""
        fires = CounterMetricFamily(
            "fleetval_schedule_fires",
            "Looks at a due schedule, by outcome: fired (a run queued), refused, skipped",
            labels=["schedule", "outcome"],
        )
        last = GaugeMetricFamily(
            "fleetval_schedule_last_fire_timestamp_seconds",
            "The fire time of the schedule's last run",
            labels=["schedule"],
        )
        nxt = GaugeMetricFamily(
            "fleetval_schedule_next_fire_timestamp_seconds",
            "The schedule's next fire time",
            labels=["schedule"],
        )
        for s in self.db.schedules():
            for outcome in FireOutcome:
                fires.add_metric([s.name, outcome.value], getattr(s, outcome.value))
            if s.last_fire is not None:
                last.add_metric([s.name], parse_stamp(s.last_fire).timestamp())
            nxt.add_metric([s.name], parse_stamp(s.next_fire).timestamp())
        yield from (fires, last, nxt)

    def _steps(self) -> Iterator[Metric]:
        hist = HistogramMetricFamily(
            "fleetval_step_duration_seconds",
            "Step durations by check and status",
            labels=["check", "status"],
        )
        for key, (counts, total) in sorted(self.db.step_stats().items()):
            buckets = [(str(b), counts.get(str(b), 0)) for b in STEP_BUCKETS]
            hist.add_metric(list(key), [*buckets, ("+Inf", counts.get("+Inf", 0))], total)
        yield hist
        named = CounterMetricFamily(
            "fleetval_culprits",
            "Ranks named as culprits, by node and reason",
            labels=["node", "reason"],
        )
        for key, n in sorted(self.db.culprit_counts().items()):
            named.add_metric(list(key), n)
        yield named


def registry(db: ServiceDB) -> CollectorRegistry:
    """A registry per app (never the global one), so several apps can live in one process."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ServiceCollector(db))
    return reg
