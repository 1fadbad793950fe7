"""Request and response bodies of the REST API (responses apart from requests)."""

from __future__ import annotations

import binascii
import json
import re
from datetime import date
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from fleetval.api.schedules import cron_pattern
from fleetval.store.records import JsonObject, RunHeader, StoredRow
from fleetval.suite import shipped_suites
from fleetval.vocab import Catchup

LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]
LabelValue = Annotated[str, StringConstraints(max_length=1024)]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
# The store's run ids and baseline names: letters, digits, '.', '_' and '-'.
STORE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
RunId = Annotated[str, StringConstraints(pattern=STORE_NAME)]
# NOTE: validated by the library (parse_suite: field paths, cross-field rules); the schema
# says the two forms: a shipped name, or an inline suite, whose schema (`Suite`: the step
# union by `check`, every parameter) the app adds to the OpenAPI's components from the
# suite model itself (app.suite_schemas).
SUITE_REF = "#/components/schemas/Suite"
SuiteSpec = Annotated[
    str | JsonObject,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "enum": list(shipped_suites()), "title": "Shipped suite"},
                {"$ref": SUITE_REF},
            ]
        }
    ),
]


# Suite sections published by name only (an object): their schemas are deep enough to make
# a schema-driven client (Schemathesis's coverage phase) take minutes per operation; the
# service validates them as `fleetval run` does, 422 naming the field.
LOOSE_SECTIONS = {
    "gates": "Release sign-off gates (docs/signoff.md)",
    "sweep": "How `fleetval sweep` judges the fleet (fleetval/fleet/settings.py)",
    "compare": "Regression thresholds for runs of this suite (README.md, compare)",
}


def suite_components() -> JsonObject:
    """The inline suite's JSON Schema and the schemas it refers to, as OpenAPI components
    (`SUITE_REF`), made from the suite model: the step union with its `check` discriminator,
    every check's parameters, placement, timeouts and faults (LOOSE_SECTIONS by name)."""
    from fleetval.suite import Suite

    schema = Suite.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    for key, description in LOOSE_SECTIONS.items():
        loose = {"type": "object", "description": description}
        schema["properties"][key] = (
            {"anyOf": [loose, {"type": "null"}]} if key == "gates" else loose
        )
    out = {"Suite": {**schema, "title": "Inline suite"}}
    pending = [out["Suite"]]
    while pending:  # NOTE: only the definitions still referred to
        text = json.dumps(pending.pop())
        for name in re.findall(r'"#/components/schemas/([^"]+)"', text):
            if name not in out:
                out[name] = defs[name]
                pending.append(defs[name])
    return out


def _whole_number(value: object) -> object:
    """`2.0` as 2: JSON has one number type, JSON Schema's `integer` admits `2.0`, and a
    client's serializer (or one reading our own responses as doubles) may write it so."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# NOTE: the integer request fields: strict (`"3"`, `true` and `2.5` are refused) but a whole
# JSON number in either spelling, so what the schema admits the server admits. The bounds
# sit inside, before the validator: outside it pydantic publishes no `minimum`/`maximum`.
_WHOLE = BeforeValidator(_whole_number)
Retries = Annotated[int, Field(ge=0, le=10), _WHOLE]
Last = Annotated[int, Field(ge=1), _WHOLE]
History = Annotated[int, Field(ge=0, le=1000), _WHOLE]


class _In(BaseModel):
    # NOTE: strict: `"retries": false` or `"3"` is not a number, as the schema says
    model_config = ConfigDict(extra="forbid", strict=True)


class SubmitRequest(_In):
    """A shipped suite by name, or an inline suite (the same keys as a suite YAML file)."""

    suite: SuiteSpec = Field(
        description="A shipped suite name (smoke, collectives, ...) or an inline suite"
    )
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)
    submission_id: Name | None = Field(
        default=None, description="Client-chosen: submitting the same id again returns the same run"
    )
    retries: Retries = Field(
        default=0, description="Requeue this often if the service dies mid-run"
    )


class ScheduleRequest(_In):
    """A named cron schedule: each firing submits `suite` with `labels`, as its creator."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    cron: Annotated[str, StringConstraints(pattern=cron_pattern())] = Field(
        description="UTC. Five fields (minute hour day month weekday), @daily and the like, or "
        "a sixth field for seconds written last (`* * * * * */30`)",
        examples=["@daily", "*/15 * * * *", "0 2 * * mon-fri"],
    )
    suite: SuiteSpec = Field(description="A shipped suite name or an inline suite, as submit")
    # NOTE: two fewer than a submission's: every firing adds `schedule` and `fire_time`
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=62)
    retries: Retries = Field(default=0, description="As a submission's retries")
    catchup: Catchup = Field(
        default=Catchup.ONCE,
        strict=False,  # NOTE: the enum from its JSON string; strict takes only members
        description="Firings missed while no service ran: `once` runs one for the latest of "
        "them, `skip` waits for the next fire time; never a backlog",
    )


Description = Annotated[str, StringConstraints(max_length=1024)]
LAST = "Only the newest N matching runs"


class BaselineRuns(_In):
    """Explicit runs."""

    runs: list[RunId] = Field(min_length=1, max_length=1000)
    description: Description = ""


class BaselineWhere(_In):
    """Filters (labels, run and environment columns; globs) resolved at compare time."""

    where: dict[LabelKey, LabelValue] = Field(min_length=1, max_length=64)
    last: Last | None = Field(default=None, description=LAST)
    description: Description = ""


BaselineRequest = BaselineRuns | BaselineWhere


class CompareRequest(_In):
    baseline: RunId
    runs: list[RunId] = Field(min_length=1, max_length=1000)
    threshold_pct: float | None = Field(default=None, gt=0, le=1000)
    per: Literal["sku", "node"] = "sku"
    history: History | None = Field(
        default=None,
        description="Earlier runs of the suite that inform each run-to-run spread "
        "(default: the suite's history_runs, else 30; 0: none), as `compare --history`",
    )


class AttributeRequest(_In):
    """As `fleetval attribute`: the runs `where` chooses (KEY=GLOB), started on or after `since`.
    A window (`since`) or a cap (`last`) is required: the schema says so, and a body with
    neither is 422 naming `since`."""

    model_config = ConfigDict(
        **_In.model_config,
        json_schema_extra={"anyOf": [{"required": ["since"]}, {"required": ["last"]}]},
    )

    where: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)
    # NOTE: a date, published as `format: date` (a pattern would admit "0000-00-00"); JSON
    # has no date type, so its text is parsed even though requests are strict
    since: date | None = Field(default=None, strict=False, description="YYYY-MM-DD")
    last: Last | None = Field(
        default=None, description=f"{LAST} (at most the service's max_attribute_runs)"
    )
    metric: Literal["busbw", "latency"] | None = None


FileName = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
# RFC 4648 base64 with its padding: what binascii's strict mode decodes
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# NOTE: absent or a string (an explicit null is refused): published as a string, validated as
# nullable so an error's loc ends at the field, not at a union branch
OptionalText = Annotated[str | None, WithJsonSchema({"type": "string"})]
OptionalBase64 = Annotated[
    str | None,
    StringConstraints(pattern=BASE64),
    WithJsonSchema({"type": "string", "pattern": BASE64}),
]


def _no_null(value: object) -> object:
    # NOTE: the field is absent or a string, as the schema says; an explicit null is refused
    if value is None:
        raise ValueError("absent or a string, never null")
    return value


class JobFile(_In):
    """One file a training job wrote: `text` (a step log, NCCL RAS or Inspector output, a JSON
    Flight Recorder dump) or `base64` (a pickled dump), exactly one of the two."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["text"]}, {"required": ["base64"]}]}
    )

    name: FileName = Field(
        description="As on disk: a dump's name ends in its rank (`fr_rank_3.pkl`); a folder "
        "per host (`node-1/fr_rank_3.pkl`) names the host",
        examples=["node-1/fr_rank_3.pkl", "logs/rank3.log"],
    )
    text: OptionalText = None
    base64: OptionalBase64 = Field(
        default=None, description="The file's bytes, base64 (RFC 4648, padded)"
    )

    _not_null = field_validator("text", "base64", mode="before")(_no_null)

    @model_validator(mode="after")
    def _one_form(self) -> JobFile:
        if (self.text is None) == (self.base64 is None):
            raise ValueError("give the file as `text` or as `base64`, exactly one")
        return self

    def content(self) -> bytes:
        if self.base64 is not None:
            return binascii.a2b_base64(self.base64, strict_mode=True)
        return (self.text or "").encode()


class StragglersRequest(_In):
    """As `fleetval stragglers PATH...`: the job's Flight Recorder dumps, step logs and NCCL
    diagnostics, one entry per file."""

    files: list[JobFile] = Field(min_length=1, max_length=4096)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Progress(_Out):
    job: int | None = None
    step: str | None = None
    index: int = 0  # steps ended so far
    total: int = 0
    percent: float = 0.0
    detail: str = ""
    culprits: list[JsonObject] = Field(default_factory=list)


# NOTE: no docstring, which would become the OpenAPI schema's description. A run as the
# service shows it: the run's header (`RunHeader`, declared with `Run` in
# fleetval/store/records.py), where the queue has it (`Submission`'s own fields), its times,
# live progress and step verdicts. A stored run the service never queued is its `listing`
# with these defaults.
class RunOut(_Out, RunHeader):
    submission_id: str | None = None
    attempt: int = 1
    retries: int = 0
    retry_of: str | None = None
    retried_as: str | None = None
    submitted_at: str | None = None
    started_at: str | None = None  # ISO 8601, as `Run.listing` writes it
    finished_at: str | None = None
    queue_position: int | None = None
    progress: Progress | None = None
    steps: list[JsonObject] = Field(default_factory=list)  # verdicts of the steps ended


class RunList(_Out):
    runs: list[RunOut]
    next_cursor: str | None = None


class ScheduleOut(_Out):
    name: str
    cron: str
    suite: str | JsonObject
    labels: dict[str, str]
    retries: int
    catchup: str
    owner: str
    created_at: str
    next_fire: str
    last_fire: str | None = None
    last_run_id: str | None = None
    last_error: str = ""
    fired: int = 0
    refused: int = 0
    skipped: int = 0


class BaselineOut(_Out):
    """A baseline as stored. NOTE: its request fields say what a request accepts (`last` >= 1,
    as `BaselineWhere`), so a client that GETs a baseline and PUTs back its `where`, `last`
    and `description` (or `runs` and `description`) is never refused for a value the service
    itself wrote: the natural way to edit one over REST. The form not used is empty."""

    name: str
    runs: list[str]
    where: dict[str, str]
    last: Annotated[int, Field(ge=1)] | None = Field(description=LAST)
    description: str
    created_at: str
    resolves_to: list[str] | None = None


class Health(_Out):
    status: Literal["ok", "degraded"] = "ok"
    executor: bool  # this process runs the queue
    queue_depth: int
    ray_error: str = ""  # "Ray not reachable"; with a read token, the error Ray raised
    reason: str = ""  # why degraded; its exception text only to a read token
    index: Literal["ready", "building"] = "ready"  # the run index; building: reads of runs 503


class ResultPage(_Out):
    run_id: str
    count: int  # rows in this page
    rows: list[StoredRow]
    next_cursor: str | None = None


class TokenRequest(_In):
    scope: Literal["read", "submit", "admin"]
    name: Name = Field(description="The owner: runs this token submits belong to this name")
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)


class TokenOut(_Out):
    id: str
    name: str
    scope: str
    created_at: str
    expires_at: str | None = None
    revoked_at: str | None = None


class NewToken(TokenOut):
    token: str = Field(description="Shown once; only its hash is stored")
