"""Culprit naming from recorded heartbeats and outcomes (pure: no Ray)."""

from __future__ import annotations

import pickle

import pytest

from fleetval.checks.base import Progress
from fleetval.culprit import Culprit
from fleetval.run import flightrec
from fleetval.run.culprits import RankEvidence, is_symptom, name_culprits, progressed

GLOO_TIMEOUT = (
    "ray.exceptions.RayTaskError(RuntimeError): ray::RankActor.run_step()\n"
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 8000ms for recv operation to complete"
)
GLOO_RESET = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:38812: Connection reset by peer."
)
NCCL_WATCHDOG = (
    "torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE) ran for 20000 milliseconds"
)


def at(seq: int, phase: str = "in", updated_at: float = 1000.0) -> Progress:
    return Progress(
        step="bw",
        collective="all_reduce",
        iteration=seq,
        phase=phase,
        seq=seq,
        updated_at=updated_at,
    )


def ev(rank: int, outcome: str, **kw) -> RankEvidence:
    return RankEvidence(
        rank=rank, node=f"node-{rank // 2}", device_id=f"GPU-{rank}", outcome=outcome, **kw
    )


def names(culprits: list[Culprit]) -> list[tuple[int, str]]:
    return [(c.rank, c.reason) for c in culprits]


@pytest.mark.parametrize("text", [GLOO_TIMEOUT, GLOO_RESET, NCCL_WATCHDOG])
def test_peer_errors_are_symptoms(text):
    assert is_symptom(text)


def test_own_errors_are_not_symptoms():
    assert not is_symptom("ValueError: size must be positive")
    assert not is_symptom("RuntimeError: CUDA error: an illegal memory access was encountered")


def test_stopped_rank_is_named_not_the_peers_that_timed_out():
    """The reported bug: peers' collective timeouts fire first; the silent rank is the culprit."""
    evidence = [
        ev(0, "raised", error=GLOO_TIMEOUT, progress=at(41)),
        ev(1, "raised", error=GLOO_TIMEOUT, progress=at(41)),
        ev(2, "pending", answered=False, progress=at(41), silent_s=12.0),
        ev(3, "raised", error=GLOO_TIMEOUT, progress=at(41)),
    ]
    (c,) = name_culprits(evidence, now=1005.0)
    assert (c.rank, c.reason, c.node, c.device_id) == (2, "hang", "node-1", "GPU-2")
    assert "stopped answering" in c.detail and "12.0s" in c.detail


def test_silent_rank_outranks_peers_killed_by_the_watchdog():
    evidence = [ev(0, "crash", error="actor died"), ev(1, "pending", answered=False)]
    assert names(name_culprits(evidence, now=1005.0)) == [(1, "hang")]


def test_dead_rank_is_a_crash_and_its_peers_lost_connections_are_not_named():
    evidence = [
        ev(0, "raised", error=GLOO_RESET, progress=at(9)),
        ev(1, "crash", error="The actor died unexpectedly"),
        ev(2, "raised", error=GLOO_RESET, progress=at(9)),
    ]
    assert names(name_culprits(evidence, now=1005.0)) == [(1, "crash")]


def test_a_rank_that_raised_on_its_own_stays_an_error():
    evidence = [
        ev(0, "raised", error="ValueError: bad tensor", progress=at(3)),
        ev(1, "raised", error=GLOO_RESET, progress=at(3)),
    ]
    (c,) = name_culprits(evidence, now=1005.0)
    assert (c.rank, c.reason) == (0, "error") and "bad tensor" in c.detail


def test_answering_but_behind_rank_is_the_hang():
    """An injected hang: the rank's heartbeat answers, but it never entered collective 8."""
    evidence = [
        ev(0, "pending", progress=at(8)),
        ev(1, "pending", progress=at(7, updated_at=999.0)),  # blocked before collective 8
        ev(2, "pending", progress=at(8)),
    ]
    (c,) = name_culprits(evidence, now=1005.0)
    assert (c.rank, c.reason) == (1, "hang") and "entered 7 collectives, the others 8" in c.detail


def test_everyone_stuck_at_the_same_place_names_every_unfinished_rank():
    evidence = [ev(0, "pending", progress=at(5)), ev(1, "pending", progress=at(5))]
    assert names(name_culprits(evidence, now=1005.0)) == [(0, "hang"), (1, "hang")]


def test_only_symptoms_and_no_better_evidence_names_the_ranks_that_raised():
    evidence = [ev(0, "raised", error=GLOO_TIMEOUT), ev(1, "raised", error=GLOO_TIMEOUT)]
    assert names(name_culprits(evidence, now=1005.0)) == [(0, "error"), (1, "error")]


def test_all_finished_names_nobody():
    assert (
        name_culprits(
            now=1005.0, evidence=[ev(0, "ok", progress=at(4)), ev(1, "ok", progress=at(4))]
        )
        == []
    )


def fr_dump(last_seq: int, group: str = "0") -> dict:
    entries = [
        {
            "collective_seq_id": s,
            "process_group": (group, "default_pg"),
            "profiling_name": "nccl:all_reduce",
            "state": "completed" if s < last_seq else "started",
        }
        for s in range(1, last_seq + 1)
    ]
    return {"version": "2.10", "pg_config": {}, "entries": entries}


def test_flight_recorder_names_the_rank_missing_from_the_collective():
    dumps = {0: fr_dump(57), 1: fr_dump(57), 2: fr_dump(56), 3: fr_dump(57)}
    (m,) = flightrec.missing(dumps)
    assert (m.group, m.seq, m.collective, m.ranks) == ("0", 57, "nccl:all_reduce", (2,))
    assert m.describe() == "rank 2 missing from nccl:all_reduce #57 (group 0)"


def test_flight_recorder_in_step_finds_nobody_missing():
    assert flightrec.missing({0: fr_dump(5), 1: fr_dump(5)}) == []


def test_flight_recorder_findings_join_the_culprits_detail():
    traces = {r: pickle.dumps(fr_dump(57 if r != 2 else 56)) for r in (0, 1, 3)}
    traces[2] = pickle.dumps(fr_dump(56))
    culprit = Culprit(2, "node-1", "GPU-2", "hang", "stopped answering")

    class Handle:
        def __init__(self, rank: int) -> None:
            self.rank = rank

    (out,) = flightrec.confirm([culprit], traces, [Handle(r) for r in range(5)])
    assert "rank 2 missing from nccl:all_reduce #57" in out.detail
    assert "no dump from rank 4" in out.detail
    assert out.rank == 2 and out.reason == "hang"


def test_a_busy_step_past_its_deadline_does_not_blame_the_rank_one_collective_behind():
    """Every heartbeat still moving: nobody fell behind; every unfinished rank is named."""
    evidence = [
        ev(0, "pending", progress=at(901, updated_at=1004.9)),
        ev(1, "pending", progress=at(900, updated_at=1004.8)),
    ]
    got = name_culprits(evidence, now=1005.0)
    assert names(got) == [(0, "hang"), (1, "hang")]
    assert all("did not finish" in c.detail for c in got)


# -- a deadline that ran out while every rank progressed --------------------------------------


def moving_at(calls: int, *, now: float = 1000.0, age: float = 0.1, rate: float = 100.0,
              planned: int | None = 60_000) -> Progress:  # fmt: skip
    """A heartbeat `age` seconds old, after `calls` calls at `rate` calls/s in this step."""
    updated = now - age
    return Progress(step="bw", collective="all_reduce", iteration=calls, phase="in", seq=calls,
                    updated_at=updated, calls=calls, planned=planned,
                    step_started_at=updated - calls / rate)  # fmt: skip


def test_every_rank_progressing_at_the_deadline_is_a_finding_that_blames_no_rank():
    evidence = [ev(r, "pending", progress=moving_at(11942 - r % 2)) for r in range(4)]
    finding = progressed(evidence, 120.0, now=1000.0)
    assert finding is not None and finding.slow == ()
    assert finding.message == (
        "deadline: step_s=120 s ran out while every rank progressed: iteration 11942 of 60000 "
        "(all_reduce) at 100 it/s; step_s ≈ 720 s would have fit"
    )
    assert finding.fits_s == pytest.approx(720.0)


def test_a_check_that_plans_nothing_still_gets_progress_and_advice():
    evidence = [ev(r, "pending", progress=moving_at(50, planned=None)) for r in range(2)]
    finding = progressed(evidence, 10.0, now=1000.0)
    assert finding is not None and finding.fits_s is None
    assert "iteration 50 (all_reduce) at 100 it/s" in finding.message
    assert finding.message.endswith("does not say how many calls remain: raise step_s")


def test_a_slow_iteration_is_still_progress():
    """A 1 GiB gloo all_reduce takes seconds: a 5 s old heartbeat at 0.2 it/s is moving."""
    evidence = [ev(r, "pending", progress=moving_at(4, age=5.0, rate=0.2)) for r in range(2)]
    assert progressed(evidence, 30.0, now=1000.0) is not None


@pytest.mark.parametrize(
    "broken",
    [
        ev(2, "pending", progress=moving_at(11942), answered=False),  # SIGSTOPped: silent
        ev(2, "pending", progress=moving_at(11000, age=30.0)),  # heartbeat stopped moving
        ev(2, "crash", error="rank process died"),
        ev(2, "raised", error="ValueError: boom"),
        ev(2, "pending"),  # never heard from
    ],
)
def test_a_rank_that_stopped_is_not_a_deadline_finding(broken):
    evidence = [ev(r, "pending", progress=moving_at(11942)) for r in (0, 1, 3)] + [broken]
    assert progressed(evidence, 120.0, now=1000.0) is None


def test_the_silent_rank_is_still_the_one_hang():
    """Named by the usual rules once the deadline finding declines: exactly the stopped rank."""
    stopped = ev(2, "pending", progress=moving_at(11942, age=8.0), answered=False, silent_s=8.0)
    evidence = [ev(r, "pending", progress=moving_at(11942, age=8.0)) for r in (0, 1, 3)]
    evidence.append(stopped)
    assert progressed(evidence, 8.0, now=1000.0) is None
    assert names(name_culprits(evidence, now=1000.0)) == [(2, "hang")]


def test_a_rank_far_behind_is_named_slow():
    evidence = [ev(r, "pending", progress=moving_at(11942)) for r in range(3)]
    evidence.append(ev(3, "pending", progress=moving_at(900, rate=8.0)))
    finding = progressed(evidence, 120.0, now=1000.0)
    assert finding is not None
    assert names(list(finding.slow)) == [(3, "slow")]
    assert "far behind: 900 calls in this step, rank 0 11942" in finding.slow[0].detail
    assert finding.message.endswith("; far behind: rank 3 on node-1")
