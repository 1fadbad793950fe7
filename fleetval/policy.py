"""The one failure policy: every deadline, grace and threshold that decides when a rank is
hung, late, past a deadline or not fit to reuse, and how fast a cancel lands.

A suite sets any of these under `timeouts:` (the YAML keys are the field names); the engine
(run/job, run/step, run/culprits, run/pool, run/sweep) reads them from `suite.timeouts` and
nowhere else. docs/operations.md ("The failure policy") says what each one costs when raised
or lowered. Like Ray Train v2's `FailurePolicy`: one frozen, typed object, not constants
spread over the modules that act on it.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt, model_validator

Share = PositiveFloat  # a fraction, checked below to be at most 1


class FailurePolicy(BaseModel):
    """Every wait has a deadline (seconds), and every judgement of a rank a threshold.

    One collective is bounded by `collective_s`, a whole step by `step_s`, so the first must
    be the shorter: a stuck collective then raises on the peers of the rank that stopped,
    the driver names that rank from its silent heartbeat, and on NCCL the watchdog writes
    its Flight Recorder dumps, all before the step's own deadline. Unset, it is half of
    `step_s`, at most 120 s. (A step's own shorter `timeout_s` is fine: its deadline fires
    first and the culprit is named the same way.)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Deadlines of a job's life.
    placement_s: PositiveFloat = 60.0  # placement group ready
    rendezvous_s: PositiveFloat = 60.0  # actors up + process group formed
    step_s: PositiveFloat = 300.0  # one step on all ranks; a step's timeout_s overrides
    collective_s: PositiveFloat | None = None  # the process group's own timeout (see above)
    # After the first rank fails, how long the others get: to join, to end the step.
    join_grace_s: PositiveFloat = 5.0
    error_grace_s: PositiveFloat = 5.0
    port_retries: PositiveInt = 3  # rendezvous attempts when the master's port was taken
    # Hung: a rank's progress heartbeat is asked every probe_every_s; one that does not
    # answer within probe_answer_s is silent (a stopped process), one whose heartbeat has
    # not moved for stale_s (or stall_intervals of its own mean call interval, if longer)
    # has stopped moving.
    probe_every_s: PositiveFloat = 1.0
    probe_answer_s: PositiveFloat = 5.0
    stale_s: PositiveFloat = 2.0
    stall_intervals: PositiveFloat = 3.0
    # Past a deadline while every rank moved: a rank with fewer than far_behind of the
    # leader's calls is named slow; the step_s suggested is the planned calls at the rate
    # seen times fit_headroom.
    far_behind: Share = 0.5
    fit_headroom: PositiveFloat = 1.2
    # Evidence taken after a failure: Flight Recorder traces, each node's NCCL logs.
    flight_recorder_s: PositiveFloat = 10.0
    files_s: PositiveFloat = 20.0
    # Warm ranks (a service's pool, a sweep's): a rank must answer its health ping within
    # ping_s and its reset within reset_s to be reused, else it is replaced; an idle group
    # is freed after idle_s (it holds GPUs other drivers may want).
    ping_s: PositiveFloat = 2.0
    reset_s: PositiveFloat = 10.0
    idle_s: PositiveFloat = 300.0
    # Cancel: every wait of a run looks at the cancel event this often; a foreground run's
    # first Ctrl-C exits the process anyway if its cancel has not finished within
    # cancel_grace_s.
    poll_s: PositiveFloat = 0.5
    cancel_grace_s: PositiveFloat = 20.0

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.collective_s is not None and self.collective_s >= self.step_s:
            raise ValueError(
                f"collective_s ({self.collective_s:g}s) must be shorter than step_s "
                f"({self.step_s:g}s): one collective cannot outlast the step that runs it"
            )
        if self.far_behind > 1:
            raise ValueError(f"far_behind ({self.far_behind:g}) is a share of calls: at most 1")
        if self.probe_every_s >= self.probe_answer_s:
            raise ValueError(
                f"probe_every_s ({self.probe_every_s:g}s) must be shorter than probe_answer_s "
                f"({self.probe_answer_s:g}s): a rank is asked again before it counts as silent"
            )
        return self

    @property
    def collective(self) -> float:
        """The process group's timeout in effect."""
        return self.collective_s or min(120.0, self.step_s / 2)
