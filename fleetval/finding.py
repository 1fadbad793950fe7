"""A finding: one judged fact, the one model every kind of finding shares.

A finding says what was judged (`code`: "row_remap_pending", "visible_devices", a version's
component), how it was judged (`status`, from the one status vocabulary) and why, in words a
person reads (`reason`). Each kind adds only its own part as a subclass: a GPU's hardware
finding its action and evidence (`fleetval.detect.hardware.HwFinding`), a check's finding
that is one result row its value, unit and details (`RowFinding`: the health check's facts,
DDP's replica and loss checks), a version change its effect
(`fleetval.analysis.attribute.VersionFinding`). Frozen dataclasses, so a finding is a value;
`asdict` serialises any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from fleetval.jsontypes import JsonObject
from fleetval.status import flagged
from fleetval.vocab import Status


@dataclass(frozen=True)
class Finding:
    """One judged fact: what, how it was judged, and why."""

    code: str  # what was judged: "row_remap_pending", "xid_79", "visible_devices", "rccl"
    status: Status  # PASS, WARN, FAIL, SKIP, or INFO for what is recorded only
    reason: str  # why, in words a person reads

    @property
    def bad(self) -> bool:
        """WARN or FAIL: something a person acts on or looks at."""
        return flagged(self.status)


class RowFields(TypedDict):
    """A row finding as the columns of its result row."""

    metric: str
    status: str
    message: str
    value: float | None
    unit: str | None
    details: JsonObject


@dataclass(frozen=True)
class RowFinding(Finding):
    """A finding a check reports as one result row (`code` its metric, `reason` its
    message), with the value measured and the details that back it."""

    value: float | None = None
    unit: str | None = None
    details: JsonObject = field(default_factory=dict)  # stored as the row's JSON details

    def fields(self) -> RowFields:
        return RowFields(metric=self.code, status=self.status.value, message=self.reason,
                         value=self.value, unit=self.unit, details=self.details)  # fmt: skip
