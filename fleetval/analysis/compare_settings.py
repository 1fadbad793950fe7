"""The `compare:` section of a suite: thresholds and statistics settings, numbers not code.

```yaml
compare:
  threshold_pct: 5          # default for every metric
  metrics: {busbw_gbps: 3, latency_us: 10}
  latency_cutoff_bytes: 64KiB   # smaller messages are judged on latency, larger on busbw
  fdr: 0.01                 # false-discovery rate across measurements
  history_runs: 30          # earlier runs of the suite that inform each run-to-run spread
```
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, PositiveFloat, ValidationError

from fleetval.vocab import OutputFormat

if TYPE_CHECKING:
    from fleetval.store.records import JsonObject

# The choices compare and trend offer, named here (pyarrow-free) so the CLI lists them
# without importing the comparison:
Per = Literal["node", "sku"]  # match rows per node, or per GPU model (sku)
DEFAULT_PER: Per = "sku"
# What `format_comparison` writes, and the trend renderers:
COMPARE_FORMATS = (OutputFormat.TABLE, OutputFormat.JSON, OutputFormat.MARKDOWN, OutputFormat.JUNIT)
TREND_FORMATS = (OutputFormat.TABLE, OutputFormat.JSON)
# What identifies one measurement (`analysis.runvalues.ID_COLS`; trend's `--select` fields).
IDENTITY_FIELDS = ("check", "collective", "op", "dtype", "size_bytes", "world_size", "metric",
                   "group")  # fmt: skip


class CompareSettings(BaseModel):
    """How a candidate is judged against a baseline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold_pct: PositiveFloat = 5.0  # a change smaller than this is never a regression
    metrics: dict[str, PositiveFloat] = Field(default_factory=dict)  # per-metric thresholds (%)
    latency_cutoff_bytes: ByteSize = ByteSize(64 * 1024)
    # false-discovery rate across identities (Benjamini-Hochberg): on clean data a compare
    # of hundreds of identities fails about fdr / 2 of the time (regressions are one side)
    fdr: float = Field(default=0.01, gt=0, lt=0.5)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)  # level of the reported interval
    # at most this many earlier runs of the candidates' suite (before them, outside the
    # baseline) give each identity's run-to-run variance more df (statistics.history_variance);
    # 0: the baseline and candidate runs alone
    history_runs: int = Field(default=30, ge=0, le=1000)
    outlier_z: PositiveFloat = 3.5  # robust z (median/MAD) beyond which a unit is an outlier
    min_peers: int = Field(default=4, ge=3)  # units needed before outliers are judged
    # a rank arriving this late (percent of the collective's time, median over sizes) is a
    # straggler: the others wait for it
    late_pct: PositiveFloat = 20.0

    def threshold_for(self, metric: str) -> float:
        return self.metrics.get(metric, self.threshold_pct)


def settings_from_suite_json(suite_json: str) -> CompareSettings:
    """The suite's `compare:` section, or the defaults when it has none.

    NOTE: suite_json is the validated suite stored with the run, so an invalid section can
    only come from a store written by another tool; it is bad input, not a crash.
    """
    if not suite_json:
        return CompareSettings()
    data: JsonObject = json.loads(suite_json)
    section = data.get("compare")
    if not section:
        return CompareSettings()
    try:
        return CompareSettings.model_validate(section)
    except ValidationError as err:
        raise ValueError(f"the run's suite has an invalid compare section: {err}") from err
