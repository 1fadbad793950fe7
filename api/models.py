"""Request and response bodies of the REST API (responses apart from requests)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]
LabelValue = Annotated[str, StringConstraints(max_length=1024)]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitRequest(_In):
    """A shipped suite by name, or an inline suite (the same keys as a suite YAML file)."""

    suite: str | dict[str, Any] = Field(
        description="A shipped suite name (smoke, collectives, ...) or an inline suite"
    )
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)
    submission_id: Name | None = Field(
        default=None, description="Client-chosen: submitting the same id again returns the same run"
    )
    retries: int = Field(
        default=0, ge=0, le=10, description="Requeue this often if the service dies mid-run"
    )


class BaselineRequest(_In):
    """Explicit runs, or filters (labels, run and environment columns) resolved at compare time."""

    runs: list[Name] | None = Field(default=None, min_length=1, max_length=1000)
    where: dict[LabelKey, LabelValue] | None = Field(default=None, min_length=1, max_length=64)
    last: int | None = Field(default=None, ge=1)
    description: Annotated[str, StringConstraints(max_length=1024)] = ""


class CompareRequest(_In):
    baseline: Name
    runs: list[Name] = Field(min_length=1, max_length=1000)
    threshold_pct: float | None = Field(default=None, gt=0, le=1000)
    per: Literal["sku", "node"] = "sku"


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Progress(_Out):
    job: int | None = None
    step: str | None = None
    index: int = 0  # steps ended so far
    total: int = 0
    percent: float = 0.0
    detail: str = ""
    culprits: list[dict[str, Any]] = Field(default_factory=list)


class RunOut(_Out):
    run_id: str
    suite: str
    status: str
    message: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    submitter: str = ""
    submission_id: str | None = None
    attempt: int = 1
    retries: int = 0
    retry_of: str | None = None
    retried_as: str | None = None
    submitted_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    queue_position: int | None = None
    progress: Progress | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)  # verdicts of the steps ended


class RunList(_Out):
    runs: list[RunOut]
    next_cursor: str | None = None


class BaselineOut(_Out):
    name: str
    runs: list[str]
    where: dict[str, str]
    last: int | None
    description: str
    created_at: str
    resolves_to: list[str] | None = None


class Health(_Out):
    status: Literal["ok"] = "ok"
    executor: bool  # this process runs the queue
    queue_depth: int
    ray_error: str = ""
