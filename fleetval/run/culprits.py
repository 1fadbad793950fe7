"""Naming the culprit of a broken step from what each rank left behind. Pure: no Ray.

A peer's timeout or lost connection is a symptom, never the culprit. The culprit is the
rank that stopped answering (a SIGSTOPped process cannot answer its progress heartbeat),
that died, that raised on its own, or that fell behind the others' collectives.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fleetval.checks.base import Progress
from fleetval.policy import FailurePolicy
from fleetval.run.outcome import Culprit
from fleetval.text import short
from fleetval.vocab import CulpritReason

# What a rank raises when a PEER failed: transport errors, timeouts, aborts, a remote exit.
# NOTE: not `DistBackendError` as such: every NCCL failure is one, a rank's own too (an
# unhandled CUDA error, OOM at init, "Duplicate GPU detected"); only its text tells them apart
# (tests/unit/test_nccl_error_texts.py classifies real ones from public issues).
_SYMPTOMS = re.compile(
    "|".join(
        (
            r"gloo/transport",
            r"Timed out waiting",
            r"Connection (?:reset|closed|refused)",
            r"Broken pipe",
            r"Socket Timeout",
            r"Watchdog caught collective operation timeout",
            r"communicator was aborted",
            r"NCCL communicator .*abort",
            r"(?:process group|ProcessGroupNCCL)\b.*\babort",
            r"ncclRemoteError",
            r"remote process exited",
            r"DistNetworkError",
            r"DistStoreError",
            r"timed out after \d+ ?m?s",
        )
    ),
    re.IGNORECASE,
)


def is_symptom(error_text: str) -> bool:
    """Whether an exception's text says a peer failed (rather than this rank itself)."""
    return bool(_SYMPTOMS.search(error_text))


@dataclass(frozen=True)
class RankEvidence:
    """What the driver knows about one rank when a step broke."""

    rank: int
    node: str
    device_id: str | None
    outcome: str  # "ok" (returned rows), "crash" (process died), "raised", "pending"
    error: str = ""  # the exception text, for "crash" and "raised"
    answered: bool = True  # its progress heartbeat answered the final probe
    progress: Progress | None = None  # its latest progress (final probe, else last seen)
    silent_s: float = 0.0  # how long since it last answered a probe
    pid: int = 0

    def culprit(self, reason: str, detail: str) -> Culprit:
        return Culprit(self.rank, self.node, self.device_id, str(reason), detail, self.pid)


DEFAULT = FailurePolicy()


def name_culprits(
    evidence: Sequence[RankEvidence], now: float | None = None, policy: FailurePolicy = DEFAULT
) -> list[Culprit]:
    """Who broke the step, in order of how directly the evidence points at them:
    silent ranks (stopped), dead ranks, ranks that raised on their own, ranks behind the
    others' collectives; only when nothing else explains it, every rank still waiting or
    that raised a peer's error."""
    when = time.time() if now is None else now
    for rule in (_silent, _dead, _own_errors, lambda ev: _behind(ev, when, policy), _fallback):
        named = rule(evidence)
        if named:
            return named
    return []


def _silent(ev: Sequence[RankEvidence]) -> list[Culprit]:
    return [
        e.culprit(
            CulpritReason.HANG,
            f"stopped answering: no heartbeat for {e.silent_s:.1f}s; last reached {_where(e.progress)}",
        )
        for e in ev
        if e.outcome in ("pending", "raised") and not e.answered
    ]


def _dead(ev: Sequence[RankEvidence]) -> list[Culprit]:
    return [
        e.culprit(CulpritReason.CRASH, f"rank process died: {short(e.error)}")
        for e in ev
        if e.outcome == "crash"
    ]


def _own_errors(ev: Sequence[RankEvidence]) -> list[Culprit]:
    return [
        e.culprit(CulpritReason.ERROR, f"raised {short(e.error)}")
        for e in ev
        if e.outcome == "raised" and not is_symptom(e.error)
    ]


def _behind(ev: Sequence[RankEvidence], now: float, policy: FailurePolicy) -> list[Culprit]:
    """Ranks that entered fewer collectives than the leader, did not finish, and whose
    heartbeat stopped moving (a rank merely one collective behind a busy leader is not).
    `now` is wall-clock time, as the ranks stamp their heartbeats."""
    seqs = {e.rank: e.progress.seq for e in ev if e.progress is not None}
    if not seqs:
        return []
    lead = max(seqs.values())
    leader = next(e.progress for e in ev if e.progress is not None and e.progress.seq == lead)
    return [
        e.culprit(
            CulpritReason.HANG,
            f"fell behind: entered {seqs.get(e.rank, 0)} collectives, the others {lead}; "
            f"last reached {_where(e.progress)}; the others reached {leader.describe()}",
        )
        for e in ev
        if e.outcome != "ok"
        and seqs.get(e.rank, -1) < lead
        and (e.progress is None or now - e.progress.updated_at > policy.stale_s)
    ]


def _fallback(ev: Sequence[RankEvidence]) -> list[Culprit]:
    pending = [
        e.culprit(CulpritReason.HANG, f"did not finish; last reached {_where(e.progress)}")
        for e in ev
        if e.outcome == "pending"
    ]
    return pending or [
        e.culprit(CulpritReason.ERROR, f"raised {short(e.error)}")
        for e in ev
        if e.outcome == "raised"
    ]


@dataclass(frozen=True)
class DeadlineFinding:
    """A step's deadline ran out while every rank was still progressing: nobody stopped."""

    message: str
    slow: tuple[Culprit, ...] = ()  # moving, but far behind the others (the job still aborts)
    fits_s: float | None = None  # the step_s that would have fit, where the check planned


def moving(p: Progress, now: float, policy: FailurePolicy = DEFAULT) -> bool:
    """Whether a rank's heartbeat is still advancing at its own pace (`now`: wall clock).

    NOTE: within `stall_intervals` of its own mean interval between calls (at least
    `stale_s`): a big gloo all_reduce takes seconds a call."""
    rate = p.rate()
    stale = policy.stale_s
    allowed = max(stale, policy.stall_intervals / rate) if rate else stale
    return now - p.updated_at <= allowed


def progressed(
    evidence: Sequence[RankEvidence],
    step_s: float,
    now: float | None = None,
    policy: FailurePolicy = DEFAULT,
) -> DeadlineFinding | None:
    """The deadline finding when every rank is still running the step, answered its final
    probe and is moving; None when any rank stopped, died or raised (name_culprits names it)."""
    when = time.time() if now is None else now
    beats = [e.progress for e in evidence]
    if not evidence or any(e.outcome != "pending" or not e.answered for e in evidence):
        return None
    if any(p is None or not moving(p, when, policy) for p in beats):
        return None
    lead = max(evidence, key=lambda e: e.progress.calls if e.progress else 0)
    p = lead.progress or Progress()  # NOTE: never None here (checked above)
    rate = p.rate()
    pace = f" at {rate:.4g} it/s" if rate else ""
    of = f" of {p.planned}" if p.planned else ""
    fits = p.planned / rate * policy.fit_headroom if p.planned and rate else None
    advice = (f"; step_s ≈ {fits:.0f} s would have fit" if fits is not None
              else "; its check does not say how many calls remain: raise step_s")  # fmt: skip
    what = f" ({p.collective})" if p.collective else ""
    message = (f"deadline: step_s={step_s:g} s ran out while every rank progressed: "
               f"iteration {p.calls}{of}{what}{pace}{advice}")  # fmt: skip
    slow = _far_behind(evidence, lead, policy.far_behind)
    if slow:
        message += "; far behind: " + ", ".join(f"rank {c.rank} on {c.node}" for c in slow)
    return DeadlineFinding(message, slow, fits)


def _far_behind(
    evidence: Sequence[RankEvidence], lead: RankEvidence, share: float
) -> tuple[Culprit, ...]:
    top = lead.progress.calls if lead.progress else 0
    out = []
    for e in evidence:
        calls = e.progress.calls if e.progress else 0
        if calls < share * top and top - calls > 1:
            detail = (f"far behind: {calls} calls in this step, rank {lead.rank} {top}; "
                      f"still progressing, last reached {_where(e.progress)}")  # fmt: skip
            out.append(e.culprit(CulpritReason.SLOW, detail))
    return tuple(out)


def _where(p: Progress | None) -> str:
    return p.describe() if p is not None else "nothing (no answer)"
