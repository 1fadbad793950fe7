"""What every check shares: its step model, the rank's context, progress and faults."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fleetval.store.schema import Row
from fleetval.vocab import FaultKind

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class RankContext:
    """Who a rank is, decided by the driver before the process group exists."""

    run_id: str
    job: int
    rank: int
    world_size: int
    local_rank: int  # index among this job's ranks on the same node
    local_world_size: int
    node: str  # the node's name: its `fleetval/node` label, else its hostname
    node_rank: int
    backend: str
    device: str  # "cpu" or "cuda:N" (ROCm builds of torch use "cuda" too)
    device_id: str | None
    seed: int


@dataclass(frozen=True)
class ActiveFault:
    """A fault from the suite that applies to this rank in this step."""

    kind: FaultKind
    ms: float = 0.0


@dataclass(frozen=True)
class Progress:
    """What a rank last reached; the driver reads it to name where a hung rank stopped."""

    step: str = ""
    collective: str | None = None
    iteration: int | None = None
    phase: str = "idle"
    seq: int = 0  # collectives entered so far: a rank behind the others never arrived
    updated_at: float = field(default_factory=time.time)
    calls: int = 0  # collectives (or timed calls) entered in this step
    planned: int | None = None  # how many this step makes, where its check says (CheckContext.plan)
    step_started_at: float | None = None  # wall clock when this step started on the rank

    def rate(self) -> float | None:
        """Calls per second in this step so far (None before the first)."""
        if self.step_started_at is None or self.calls == 0:
            return None
        spent = self.updated_at - self.step_started_at
        return self.calls / spent if spent > 0 else None

    def describe(self) -> str:
        where = [self.phase, self.step, self.collective]
        text = " ".join(w for w in where if w)
        if self.iteration is not None:
            text += f" iteration {self.iteration}"
        return f"{text} ({time.time() - self.updated_at:.1f}s ago)"


class Heartbeat:
    """Thread-safe latest Progress of a rank (the check runs in one thread, the driver reads in another)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress = Progress()

    def set(self, **changes: Any) -> None:
        with self._lock:
            self._progress = replace(self._progress, updated_at=time.time(), **changes)

    def get(self) -> Progress:
        with self._lock:
            return self._progress


@dataclass(frozen=True)
class Timing:
    """Per-iteration times of one measured call, with when each iteration ran."""

    samples_us: list[float]  # device time of each call (events on GPU, perf_counter on CPU)
    enter_unix_us: list[float]  # wall clock right before each timed call
    exit_unix_us: list[float]  # and right after it
    held_us: list[float]  # the injected delay right before each call (0.0 without one)

    @property
    def per_call_us(self) -> list[float]:
        """Each call as the job lives it: this rank's injected delay, then the call.

        NOTE: a delay is injected before the call so that it shows as late arrival (the
        rank waits least inside the collective: `samples_us`, what `fleetval.detect.lateness`
        reads). Time per call counts it as a slow device's time: otherwise two delayed ranks
        together, neither waiting for the other, would time as healthy.
        """
        return [s + h for s, h in zip(self.samples_us, self.held_us, strict=True)]


class CheckContext:
    """Everything a check's `run` needs inside one rank actor."""

    def __init__(
        self,
        rank: RankContext,
        step: str,
        faults: tuple[ActiveFault, ...],
        heartbeat: Heartbeat,
    ) -> None:
        self.rank = rank
        self.step = step
        self.faults = faults
        self.heartbeat = heartbeat
        import torch  # NOTE: here, not at the top: the driver imports this module, only ranks run it

        self.device: torch.device = torch.device(rank.device)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def row(self, **fields: Any) -> Row:
        """A Row with this rank's identity filled in."""
        r = self.rank
        return Row(
            run_id=r.run_id,
            job=r.job,
            step=self.step,
            world_size=r.world_size,
            rank=r.rank,
            local_rank=r.local_rank,
            node=r.node,
            device=r.device,
            device_id=r.device_id,
            backend=r.backend,
            **fields,
        )

    def enter(self, collective: str, iteration: int) -> float:
        """Call right before each collective: applies this rank's faults, then reports progress;
        returns the microseconds an injected delay held the rank (0.0 without one).

        Faults come first so that a delayed or hung rank's progress stays behind the ranks
        already waiting inside the collective: that gap is how the driver names it.
        """
        held = 0.0
        for fault in self.faults:
            if fault.kind == FaultKind.DELAY:
                t0 = time.perf_counter()
                time.sleep(fault.ms / 1000)
                held += (time.perf_counter() - t0) * 1e6
            elif fault.kind == FaultKind.HANG:
                while True:  # stop participating; only the driver's deadline ends this
                    time.sleep(3600)
            elif fault.kind == FaultKind.CRASH:
                os._exit(17)
        last = self.heartbeat.get()
        self.heartbeat.set(
            step=self.step,
            collective=collective,
            iteration=iteration,
            phase="in",
            seq=last.seq + 1,
            calls=last.calls + 1,
        )
        return held

    def plan(self, calls: int) -> None:
        """Say how many `enter` calls this step will make, so a deadline that runs out while
        every rank progresses can say how far it got and what deadline would have fit."""
        self.heartbeat.set(planned=calls)

    def has_fault(self, kind: FaultKind) -> bool:
        return any(f.kind == kind for f in self.faults)

    def synchronize(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize(self.device)

    def measure(self, name: str, fn: Callable[[], object], *, warmup: int, iters: int) -> Timing:
        """The one warm-up-and-time loop of every timed check.

        Each call, warm-up included, is announced with `enter` (faults, progress) outside
        the timed region, so an injected delay shows as late arrival, as a real one would;
        `Timing.per_call_us` adds it back where time per call is what counts. Entry and exit are read on this host's wall clock around each timed call: ranks
        on one host can be lined up by them; across hosts only the samples compare.
        """
        for i in range(warmup):
            self.enter(name, -1 - i)
            fn()
        samples, enters, exits, held = [], [], [], []
        for i in range(iters):
            held.append(self.enter(name, i))
            enters.append(time.time() * 1e6)
            samples.append(self.time_us(fn))
            exits.append(time.time() * 1e6)
        return Timing(samples, enters, exits, held)

    def time_us(self, fn: Callable[[], object]) -> float:
        """Wall time of fn on this rank's device: CUDA events on GPU, perf_counter on CPU."""
        if self.on_gpu:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000.0
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
