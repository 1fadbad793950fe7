"""A node whose ranks ran below normal priority (a Ray cluster started without
RAY_worker_niceness=0) is named in a warning; fingerprints without the fact stay quiet."""

from __future__ import annotations

import json
import logging

import pytest

from fleetval.run.job import warn_low_priority


def test_a_node_whose_ranks_ran_at_nice_15_is_named(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetval.run.job"):
        assert warn_low_priority("gpu-017", {"extra": json.dumps({"niceness": 15})})
    (record,) = caplog.records
    assert "node gpu-017: ranks run at nice 15" in record.getMessage()
    assert "RAY_worker_niceness=0" in record.getMessage()


@pytest.mark.parametrize(
    "extra",
    [json.dumps({"niceness": 0}), json.dumps({"error": "no answer"}), None, "not json", "[]"],
)
def test_normal_priority_or_no_evidence_warns_nothing(
    extra: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetval.run.job"):
        assert not warn_low_priority("gpu-017", {"extra": extra})
    assert caplog.records == []
