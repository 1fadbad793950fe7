"""Ctrl-C in the foreground (fleetval.run.interrupt), on a real process and real signals: the
first sets the cancel event and the process goes on to finish its cancel; a second exits at
once; a cancel that never finishes is cut at its grace. The run's side (a real `fleetval run`
torn down by its first Ctrl-C) is tests/integration/test_cli.py."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time

import pytest

# A "run" that sees its cancel event and then takes `cleanup_s` to tear down.
RUN = """
import sys, time
from fleetval.run.interrupt import ctrl_c_cancels
grace_s, cleanup_s = float(sys.argv[1]), float(sys.argv[2])
with ctrl_c_cancels(grace_s) as cancel:
    print("running", flush=True)
    while not cancel.wait(0.05):
        pass
    print("cancel seen", flush=True)
    time.sleep(cleanup_s)
print("clean exit", flush=True)
"""


def start(grace_s: float, cleanup_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, str(grace_s), str(cleanup_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(proc, "running")
    return proc


def wait_for(proc: subprocess.Popen[str], line: str, within_s: float = 30.0) -> None:
    """Until the process printed `line` on stdout (killed, and the test failed, if not)."""
    deadline = time.monotonic() + within_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if ready and proc.stdout.readline().strip() == line:
            return
    proc.kill()
    pytest.fail(f"no {line!r} within {within_s:g}s")


def ended(proc: subprocess.Popen[str], within_s: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {within_s:g}s later")
    return proc.returncode, out + err, time.monotonic() - t0


def test_the_first_ctrl_c_cancels_and_lets_the_run_finish_its_cancel():
    proc = start(grace_s=30, cleanup_s=0.5)
    proc.send_signal(signal.SIGINT)
    wait_for(proc, "cancel seen")
    code, text, _ = ended(proc, 20)
    assert code == 0 and "clean exit" in text  # the caller decides the exit status (130)
    assert "Ctrl-C: cancelling" in text


def test_a_second_ctrl_c_exits_at_once():
    proc = start(grace_s=60, cleanup_s=60)  # a cancel that would take a minute
    proc.send_signal(signal.SIGINT)
    wait_for(proc, "cancel seen")
    proc.send_signal(signal.SIGINT)
    code, text, seconds = ended(proc, 20)
    assert code == 130 and "second Ctrl-C: exiting now" in text and "clean exit" not in text
    assert seconds < 3


def test_a_cancel_that_does_not_finish_is_cut_at_its_grace():
    proc = start(grace_s=1, cleanup_s=60)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, text, _ = ended(proc, 20)
    assert code == 130 and "cancel not done within 1s: exiting now" in text
    assert 1 <= time.monotonic() - t0 < 10


def test_off_the_main_thread_nothing_is_installed():
    """A library caller's worker thread gets an event only it sets; SIGINT stays Python's."""
    import threading

    from fleetval.run.interrupt import ctrl_c_cancels

    seen: list[object] = []

    def worker() -> None:
        with ctrl_c_cancels(1.0) as cancel:
            seen.append((cancel.is_set(), signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert seen == [(False, signal.default_int_handler)]
