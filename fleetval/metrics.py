"""Metric declarations: what a check's numbers mean, declared by the check that makes them.

Torch-free, so the store-reading side (compare, trend) can read them. The run writer
records the declarations of the checks a run used with the run (`Run.metrics`), and
compare takes every metric's unit and direction from there: a new check's metric has a
direction without touching compare.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import NotRequired, TypedDict


class Direction(StrEnum):
    """Which way is better for a metric."""

    HIGHER = "higher"  # bandwidth, TFLOP/s, throughput
    LOWER = "lower"  # times and latencies
    NONE = "none"  # a finding or a count: judged by its status, never as a change

    @property
    def sign(self) -> int:
        """+1 where higher is better, -1 where lower is, 0 with no direction."""
        return {Direction.HIGHER: 1, Direction.LOWER: -1}.get(self, 0)


class MetricDeclJSON(TypedDict):
    """A declaration as a run records it (`runs.metrics`, JSON)."""

    name: str
    unit: NotRequired[str]
    direction: NotRequired[str]
    shared: NotRequired[bool]


@dataclass(frozen=True, kw_only=True)
class MetricDecl:
    """One metric a check makes.

    `shared`: the ranks' values are one shared measurement (a collective's time, a DDP step
    time), so a run has one value per identity and no rank is compared with its peers;
    otherwise every rank measures its own device (GEMM TFLOP/s) and the devices are peers.
    """

    name: str
    unit: str
    direction: Direction
    shared: bool

    def to_dict(self) -> MetricDeclJSON:
        return MetricDeclJSON(**asdict(self))

    @classmethod
    def from_dict(cls, rec: MetricDeclJSON) -> MetricDecl:
        """As a run records it; the keys but `name` may be absent (older runs)."""
        return cls(
            name=rec["name"],
            unit=rec.get("unit", ""),
            direction=Direction(rec.get("direction", "none")),
            shared=bool(rec.get("shared", False)),
        )


# What compare derives from a collective's timed rows (size-aware: latency below the
# latency cutoff, busbw above). Checks that time collectives declare these.
BUSBW = MetricDecl(name="busbw_gbps", unit="GB/s", direction=Direction.HIGHER, shared=True)
LATENCY = MetricDecl(name="latency_us", unit="us", direction=Direction.LOWER, shared=True)
CORRECT = MetricDecl(name="correct", unit="", direction=Direction.NONE, shared=True)
COLLECTIVE_METRICS = (BUSBW, LATENCY, CORRECT)

_TIME_UNITS = {"ns", "us", "ms", "s"}


def infer(name: str, unit: str | None) -> MetricDecl:
    """For runs stored before declarations existed: rates up, times down, else no direction."""
    u = (unit or "").lower()
    if u.endswith("/s") or u.endswith("flops"):
        direction = Direction.HIGHER
    elif u in _TIME_UNITS:
        direction = Direction.LOWER
    else:
        direction = Direction.NONE
    return MetricDecl(name=name, unit=unit or "", direction=direction, shared=False)


def merge(decls: Iterable[MetricDecl]) -> dict[str, MetricDecl]:
    """Declarations by name; the collective metrics are always known."""
    out = {d.name: d for d in COLLECTIVE_METRICS}
    for d in decls:
        out.setdefault(d.name, d)
    return out
