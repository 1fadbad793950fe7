"""Faults made from OUTSIDE fleetval: a rank's process stopped (SIGSTOP) or killed (SIGKILL)
mid-step, as an operator or a broken node would. Exactly that process must be named, with
the right reason, within the step's deadline plus a stated grace, and nothing may leak.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from typing import Any

import pytest

from fleetval.run.execute import run_suite
from fleetval.store.dataset import Store
from fleetval.suite import parse_suite
from fleetval.testing.rayprocs import rank_pids

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]

# After the step deadline (or the peers' collective timeout): the peers' error grace (5 s),
# the final heartbeat probe (5 s) and a loaded 2-core machine's slack.
GRACE_S = 15.0


def long_bandwidth_suite(step_s: float, collective_s: float) -> Any:
    """A bandwidth step that only a fault ends; a step deadline shorter than the collective
    timeout is set on the step itself (the suite's timeouts must keep collective_s < step_s)."""
    timeouts = {"step_s": max(step_s, collective_s * 2), "collective_s": collective_s}
    return parse_suite(
        {
            "name": "external",
            "placement": {"world_sizes": [4], "gpus_per_rank": 0},
            "timeouts": timeouts,
            "steps": [
                {
                    "name": "bw",
                    "timeout_s": step_s,
                    "check": "bandwidth",
                    "sizes": {"min": 4096, "max": 4096},
                    "warmup": 0,
                    "iters": 1_000_000,  # far longer than the deadline: only a fault ends it
                }
            ],
        }
    )


def run_with_signal(tmp_path, spec: Any, sig: signal.Signals) -> tuple[Any, int, float]:
    """Run `spec`; once its ranks report progress in the step, send `sig` to one rank process.
    (record, pid, signalled at)"""
    hit: dict[str, Any] = {}
    progressing = threading.Event()

    def strike() -> None:
        pids = rank_pids()
        assert len(pids) == 4, pids
        hit["pid"], hit["at"] = pids[2], time.monotonic()
        os.kill(hit["pid"], sig)

    def on_event(e: Any) -> None:
        if e.kind == "step_progress" and not progressing.is_set():
            progressing.set()
            threading.Thread(target=strike, daemon=True).start()

    record = run_suite(spec, Store(tmp_path), on_event=on_event)
    return record, hit["pid"], hit["at"]


def assert_gone(pid: int, timeout_s: float = 15.0) -> None:
    """The stopped or killed process no longer exists (teardown killed it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"rank process {pid} outlived its job")


@pytest.mark.parametrize(
    ("step_s", "collective_s"),
    [(30, 8), (8, 60)],
    ids=["peers-time-out-first", "step-deadline-first"],
)
def test_stopped_rank_is_named_hang_whatever_the_timeouts(tmp_path, step_s, collective_s):
    record, pid, at = run_with_signal(
        tmp_path, long_bandwidth_suite(step_s, collective_s), signal.SIGSTOP
    )
    named_after = time.monotonic() - at
    (step,) = record.summary["steps"]
    assert step["status"] == "fail", step
    assert [(c["pid"], c["reason"]) for c in step["culprits"]] == [(pid, "hang")], step
    assert "stopped answering" in step["culprits"][0]["detail"]
    assert named_after < min(step_s, collective_s) + GRACE_S
    assert_gone(pid)


def test_killed_rank_is_named_crash(tmp_path):
    record, pid, at = run_with_signal(tmp_path, long_bandwidth_suite(30, 20), signal.SIGKILL)
    (step,) = record.summary["steps"]
    assert step["status"] == "fail", step
    assert [(c["pid"], c["reason"]) for c in step["culprits"]] == [(pid, "crash")], step
    assert time.monotonic() - at < GRACE_S  # peers see the lost connection at once


def test_a_clean_step_that_outlasts_its_deadline_blames_no_rank(tmp_path):
    """The same step with nothing stopped: every rank still progresses when step_s runs out,
    so the outcome is a deadline finding with progress and the step_s that would fit, and no
    rank is named `hang`. (The SIGSTOP test above, in the same step, names exactly one.)"""
    store = Store(tmp_path)
    started = time.monotonic()
    record = run_suite(long_bandwidth_suite(step_s=8, collective_s=60), store)
    (step,) = record.summary["steps"]
    assert record.status == "fail" and step["status"] == "fail", step
    assert not step["culprits"] and step["deadline"] is True, step
    message = step["message"]
    assert message.startswith("deadline: step_s=8 s ran out while every rank progressed: "), step
    # iteration i of n (warmup 0 + 1,000,000 iters of one size) at r it/s; step_s ~ X s fits
    done, planned = re.search(
        r"iteration (\d+) of (\d+) \(all_reduce\) at [\d.e+]+ it/s", message
    ).groups()
    assert planned == "1000000" and 0 < int(done) < 1_000_000, message
    fits = float(re.search(r"step_s ≈ (\d+) s would have fit", message).group(1))
    assert fits > 8, message
    assert time.monotonic() - started < 8 + GRACE_S + 30  # placement and start-up included
    assert not [
        r for r in store.results([record.run_id]).to_pylist() if r["metric"] == "step_outcome"
    ]
