"""Ceilings an administrator sets on what a submitted suite may ask, checked at submit.

The suite language accepts any positive number (a lab machine may well run 10^6
iterations); a shared service must not: one submission of `iters: 1e12` would hold the
fleet for ever. Every numeric key of a suite is judged by what it is (an iteration count, a
byte size, a duration, a world size, a model's size), found by its name in the suite, so a
new check's `iters` or `timeout_s` is covered without a change here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from fleetval.jsontypes import JsonObject
from fleetval.suite import Suite, SuiteError

GIB = 1024**3


class Limits(BaseModel):
    """The service's ceilings (`fleetval serve --limits FILE`, YAML with these keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_iterations: PositiveInt = Field(
        100_000, description="iters, warmup, repeats, DDP steps, bursts: per step"
    )
    max_size_bytes: PositiveInt = Field(16 * GIB, description="any message or buffer size")
    max_timeout_s: PositiveFloat = Field(
        6 * 3600.0, description="any timeout or deadline; fault delays and burst lengths too"
    )
    max_world_size: PositiveInt = Field(4096, description="ranks in one job")
    max_model_params: PositiveInt = Field(
        2_000_000_000, description="a DDP model's hidden x hidden x layers"
    )
    max_gemm_size: PositiveInt = Field(65_536, description="a micro-benchmark's GEMM dimension")
    max_batch_per_rank: PositiveInt = Field(65_536, description="a DDP step's batch per rank")
    max_steps: PositiveInt = Field(64, description="steps in one suite")
    max_jobs: PositiveInt = Field(
        64, description="jobs in one suite: entries of placement.world_sizes (each runs every step)"
    )
    max_planned_s: PositiveFloat = Field(
        24 * 3600.0,
        description="the longest one suite may hold the fleet: jobs x (placement + rendezvous "
        "+ every step's deadline)",
    )
    max_planned_s_per_owner: PositiveFloat = Field(
        3 * 24 * 3600.0,
        description="planned seconds of one owner's queued and running submissions together "
        "(429 beyond)",
    )
    max_active_per_owner: PositiveInt = Field(
        20, description="queued + running submissions per token owner (429 beyond)"
    )
    max_schedules_per_owner: PositiveInt = Field(
        50, description="named schedules per token owner (429 beyond)"
    )
    min_schedule_interval_s: PositiveFloat = Field(
        60.0, description="the shortest gap a schedule's cron may have between two firings"
    )
    max_streams_per_token: PositiveInt = Field(
        8, description="server-sent event streams one token may hold open in one process (429)"
    )
    max_streams: PositiveInt = Field(
        256, description="server-sent event streams open in one process, all tokens (429)"
    )
    max_parquet_rows: PositiveInt = Field(
        100_000,
        description="result rows in one Parquet download; X-Fleetval-Next-Cursor says where "
        "the rest starts (pass it as `cursor`)",
    )
    max_parquet_samples: PositiveInt = Field(
        10_000_000,
        description="per-iteration samples in one Parquet download (80 MB of doubles), at "
        "least one row's; the file stops at the row before, as with max_parquet_rows",
    )
    max_sample_reads: PositiveInt = Field(
        4,
        description="requests reading per-iteration samples (JSON with samples, Parquet) at "
        "once, per process (429 beyond)",
    )
    max_attribute_runs: PositiveInt = Field(
        1000,
        description="runs one attribution reads (the newest of those matching; `last` over "
        "it is 422)",
    )
    max_heavy_reads: PositiveInt = Field(
        2,
        description="attributions, reports and compares under way at once, per process, on "
        "a pool of their own (429 beyond)",
    )
    max_baseline_runs: PositiveInt = Field(
        100,
        description="runs one filter baseline may resolve to: a `where` without `last` is "
        "stored with this `last`, a larger `last` is 422",
    )
    retain_finished_s: PositiveFloat = Field(
        30 * 24 * 3600.0,
        description="finished submissions and their events are pruned this long after their "
        "end (the stored runs stay in the store)",
    )

    @classmethod
    def load(cls, path: Path) -> Limits:
        """From YAML; an unknown key or a bad value raises ValueError naming it."""
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of limits")
        return cls.model_validate(data)


class OverLimit(SuiteError):
    """A suite that asks more than the service allows (422, naming the limit)."""

    kind = "over_limit"


# Keys inside a step, by what they count.
ITERATION_KEYS = frozenset({"iters", "warmup", "repeats", "steps", "bursts"})
SIZE_KEYS = frozenset({"size", "copy_bytes", "host_bytes", "cpu_copy_bytes"})
GEMM_KEYS = frozenset({"gemm_sizes", "cpu_gemm_sizes"})


def planned_s(suite: Suite) -> float:
    """The longest the suite may hold the fleet: each job waits for its placement and
    rendezvous, then runs every step up to its deadline."""
    t = suite.timeouts
    per_job = t.placement_s + t.rendezvous_s + sum(suite.step_timeout(s) for s in suite.steps)
    return len(suite.placement.world_sizes) * per_job


def check_suite(suite: Suite, limits: Limits) -> None:
    """Raise OverLimit listing every value over its ceiling, each with the limit's name."""
    problems = [
        f"{path}: {value:g} is over this service's limit {name} = {ceiling:g}"
        for path, value, name, ceiling in _over(suite.model_dump(mode="python"), limits)
    ]
    planned = planned_s(suite)
    for name in ("max_planned_s", "max_planned_s_per_owner"):
        if planned > getattr(limits, name):
            problems.append(
                f"(suite): plans {planned:g} s of work ({len(suite.placement.world_sizes)} "
                f"jobs x placement, rendezvous and {len(suite.steps)} step deadlines); over "
                f"this service's limit {name} = {getattr(limits, name):g}"
            )
    if problems:
        raise OverLimit("inline suite", problems)


def _over(suite: JsonObject, limits: Limits) -> Iterator[tuple[str, float, str, float]]:
    for path, value, name in _measures(suite):
        ceiling = getattr(limits, name)
        if value > ceiling:
            yield path, value, name, ceiling


def _measures(suite: JsonObject) -> Iterator[tuple[str, float, str]]:
    """(path, value, limit name) for every limited number in the suite."""
    yield "steps", len(suite["steps"]), "max_steps"
    yield "placement.world_sizes", len(suite["placement"]["world_sizes"]), "max_jobs"
    for i, w in enumerate(suite["placement"]["world_sizes"]):
        if isinstance(w, int):
            yield f"placement.world_sizes.{i}", w, "max_world_size"
    for key, value in suite["timeouts"].items():
        if value is not None:
            yield f"timeouts.{key}", value, "max_timeout_s"
    for i, fault in enumerate(suite["faults"]):
        if fault.get("ms") is not None:
            yield f"faults.{i}.ms", fault["ms"] / 1000, "max_timeout_s"
    for i, step in enumerate(suite["steps"]):
        yield from _step_measures(f"steps.{i}", step)


def _step_measures(at: str, step: JsonObject) -> Iterator[tuple[str, float, str]]:
    for key, value in step.items():
        path = f"{at}.{key}"
        if value is None or isinstance(value, bool):
            continue
        if key in ITERATION_KEYS and isinstance(value, int):
            yield path, value, "max_iterations"
        elif key in SIZE_KEYS or key.endswith("_bytes"):
            yield path, value, "max_size_bytes"
        elif key == "sizes" and isinstance(value, dict):
            for bound in ("min", "max"):
                yield f"{path}.{bound}", value[bound], "max_size_bytes"
        elif key.endswith("_s"):
            yield path, value, "max_timeout_s"
        elif key.endswith("_ms"):
            yield path, value / 1000, "max_timeout_s"
        elif key in GEMM_KEYS:
            for j, n in enumerate(value):
                yield f"{path}.{j}", n, "max_gemm_size"
        elif key == "batch_per_rank":
            yield path, value, "max_batch_per_rank"
    if isinstance(step.get("hidden"), int) and isinstance(step.get("layers"), int):
        params = step["hidden"] ** 2 * step["layers"]
        yield f"{at}.hidden", params, "max_model_params"
