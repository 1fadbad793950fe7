"""A run's life (fleetval.run.life): every legal transition, every illegal one refused, the one
stop path (a request with its reason, a cancel event observed) and the outcome it records."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from fleetval.run.life import (
    STOPPED_MESSAGES,
    TERMINAL,
    TRANSITIONS,
    WHO,
    IllegalTransition,
    Mover,
    RunEvent,
    RunLife,
    RunOutcome,
    RunPhase,
    RunStopped,
    StopReason,
    StopSwitch,
)
from fleetval.vocab import QueueStatus, RunStatus

# A path of engine events from `starting` to each state, and the event that sends the last.
PATHS: dict[RunPhase, list[RunEvent]] = {
    RunPhase.STARTING: [],
    RunPhase.RUNNING: [RunEvent.START],
    RunPhase.STOPPING: [RunEvent.START, RunEvent.STOP],
    RunPhase.FINISHED: [RunEvent.START, RunEvent.FINISH],
    RunPhase.CANCELLED: [RunEvent.START, RunEvent.STOP, RunEvent.STOPPED],
    RunPhase.ERROR: [RunEvent.START, RunEvent.FAIL],
}


def send(life: RunLife, event: RunEvent) -> Any:
    """An event through the life's own methods (the only way to move it)."""
    if event == RunEvent.START:
        return life.start()
    if event == RunEvent.STOP:
        return life.request_stop(StopReason.REQUEST)
    if event == RunEvent.FINISH:
        return life.finish(RunStatus.PASS)
    if event == RunEvent.STOPPED:
        return life.stopped()
    return life.fail(RuntimeError("boom"))


def life_in(state: RunPhase) -> RunLife:
    life = RunLife()
    for event in PATHS[state]:
        send(life, event)
    assert life.state == state
    return life


def test_the_table_covers_every_state_and_names_who_sends_each_event() -> None:
    assert set(PATHS) == set(RunPhase)
    assert {s for s, _ in TRANSITIONS} == set(RunPhase) - TERMINAL  # an end is an end
    assert set(WHO) == set(RunEvent)
    assert [e for e, who in WHO.items() if who == Mover.ANYONE] == [RunEvent.STOP]
    # the states that are a run's or a queue's statuses are spelled as the vocabulary does
    assert RunPhase.RUNNING == QueueStatus.RUNNING
    assert RunPhase.CANCELLED == RunStatus.CANCELLED and RunPhase.ERROR == RunStatus.ERROR


@pytest.mark.parametrize(("state", "event"), sorted(TRANSITIONS))
def test_every_legal_transition(state: RunPhase, event: RunEvent) -> None:
    life = life_in(state)
    send(life, event)
    assert life.state == TRANSITIONS[state, event]
    assert life.history[-1] == (state, event, TRANSITIONS[state, event])
    assert (life.outcome is not None) == (life.state in TERMINAL)


ILLEGAL = sorted(
    (s, e)
    for s, e in itertools.product(RunPhase, RunEvent)
    if (s, e) not in TRANSITIONS and e != RunEvent.STOP
)


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_every_illegal_transition_is_refused(state: RunPhase, event: RunEvent) -> None:
    life = life_in(state)
    before = (life.state, list(life.history), life.outcome)
    with pytest.raises(IllegalTransition, match=f"does not take {event}"):
        send(life, event)
    assert (life.state, life.history, life.outcome) == before


@pytest.mark.parametrize("state", [RunPhase.STOPPING, *sorted(TERMINAL)])
def test_a_stop_asked_of_a_stopping_or_ended_run_is_answered_no(state: RunPhase) -> None:
    """A stop is a request from any thread: too late or twice, it changes nothing, and
    never raises in the thread that asked."""
    life = life_in(state)
    before = (life.state, list(life.history), life.stop_reason)
    assert life.request_stop(StopReason.SERVICE) is False
    assert (life.state, life.history, life.stop_reason) == before


def test_a_stop_unwinds_the_engines_waits_and_ends_the_run_cancelled_with_its_reason() -> None:
    life = life_in(RunPhase.RUNNING)
    life.check()  # nothing asked: the wait goes on
    assert life.request_stop(StopReason.SERVICE)
    with pytest.raises(RunStopped) as raised:
        life.check()
    assert raised.value.reason == StopReason.SERVICE
    outcome = life.stopped(lambda o: f"record of {o.status}")  # type: ignore[arg-type,return-value]
    assert outcome == RunOutcome(
        RunPhase.CANCELLED,
        RunStatus.CANCELLED,
        STOPPED_MESSAGES[StopReason.SERVICE],
        StopReason.SERVICE,
        "record of cancelled",  # type: ignore[arg-type]
    )
    assert life.outcome == outcome
    life.check()  # ended: nothing left to unwind


def test_a_stop_after_the_last_step_lets_the_run_finish_judged() -> None:
    life = life_in(RunPhase.STOPPING)
    outcome = life.finish(RunStatus.WARN)
    assert (outcome.state, outcome.status, outcome.reason) == (
        RunPhase.FINISHED,
        RunStatus.WARN,
        StopReason.REQUEST,
    )


def test_a_run_asked_to_stop_before_it_started_stops_at_its_first_look() -> None:
    life = RunLife()
    assert life.request_stop(StopReason.REQUEST)
    life.start()  # the engine opens its record: still stopping
    assert life.state == RunPhase.STOPPING
    with pytest.raises(RunStopped):
        life.check()


def test_the_cancel_event_is_observed_as_a_stop_with_its_reason() -> None:
    plain, ctrl_c = threading.Event(), StopSwitch(StopReason.CTRL_C)
    lives = RunLife(plain), RunLife(ctrl_c)
    for life in lives:
        life.start()
        assert not life.stopping
    plain.set()
    ctrl_c.set()
    assert [life.stopping for life in lives] == [True, True]
    assert [life.stop_reason for life in lives] == [StopReason.REQUEST, StopReason.CTRL_C]
    assert lives[1].stopped().message == "interrupted; finished steps are kept"
    assert lives[0].stopped().message == "cancelled by request; finished steps are kept"


@pytest.mark.parametrize(
    ("err", "message"),
    [
        (ValueError("placement.world_sizes: too big"), "placement.world_sizes: too big"),
        (OSError("disk full"), "OSError: disk full"),
    ],
)
def test_a_failed_run_ends_error_saying_why(err: BaseException, message: str) -> None:
    life = RunLife()
    outcome = life.fail(err)
    assert (outcome.state, outcome.status, outcome.message) == (
        RunPhase.ERROR,
        RunStatus.ERROR,
        message,
    )


def test_only_one_of_many_threads_stopping_a_run_moves_it() -> None:
    life = life_in(RunPhase.RUNNING)
    answers: list[bool] = []
    threads = [
        threading.Thread(target=lambda r=r: answers.append(life.request_stop(r)))
        for r in list(StopReason) * 8
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [False] * (len(threads) - 1) + [True]
    assert [e for _, e, _ in life.history].count(RunEvent.STOP) == 1
