"""What each step judged against what, from a fixed store of real smoke runs (no Ray)."""

from __future__ import annotations

import shutil
from pathlib import Path

from fleetval.signoff.judged import judged_steps
from fleetval.store.dataset import Store

DATA = Path(__file__).resolve().parents[1] / "data" / "store"


def test_smoke_run_says_what_it_judged_and_what_it_only_recorded(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "store")
    store = Store(tmp_path / "store")
    record = store.run("20261124-205549-c552d4")  # a clean smoke run on 4 CPU ranks (gloo)
    correctness, bandwidth = judged_steps(store, record)

    assert (correctness.step, correctness.status) == ("correctness", "pass")
    assert correctness.counts.startswith("324 pass, 60 skip; skipped, e.g. ")
    assert correctness.figures == ()  # nothing failed or warned: the counts say it all

    assert (bandwidth.step, bandwidth.status) == ("bandwidth", "pass")
    (figure,) = bandwidth.figures
    # busbw at the largest size (8 B x 4^k <= 4 MiB), at the slowest rank; why nothing judged it
    assert figure.startswith("all_reduce sum float32 2MiB n=4: busbw ")
    assert "(slowest: rank " in figure
    assert figure.endswith("recorded only: no floor for cpu (declare gates.busbw)")
