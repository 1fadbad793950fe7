"""A finding: one judged fact, the one model every kind of finding shares.

A finding says what was judged (`code`: "row_remap_pending", "visible_devices", a version's
component), how it was judged (`status`, from the one status vocabulary) and why, in words a
person reads (`reason`). Each kind adds only its own part as a subclass: a GPU's hardware
finding its action and evidence (`fleetval.detect.hardware.HwFinding`), the health check's
its value, unit and details (`fleetval.checks.health.rank.HealthFinding`), a version change
its effect (`fleetval.analysis.attribute.VersionFinding`). Frozen dataclasses, so a finding
is a value; `asdict` serialises any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        return self.status in (Status.WARN, Status.FAIL)
