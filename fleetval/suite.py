"""Suites: the YAML a user writes, validated by pydantic before anything runs."""

from __future__ import annotations

import difflib
import io
import json
import re
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal, Self, Union, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from fleetval.analysis.compare_settings import CompareSettings
from fleetval.checks import CHECKS
from fleetval.fleet.settings import SweepSettings
from fleetval.policy import FailurePolicy
from fleetval.signoff.gates import Gates
from fleetval.vocab import Backend, FaultKind, Strategy

SUITES_PACKAGE = "fleetval.suites"  # shipped suites: package data, found in any install
# A step's name names files and directories in the store: one path component, never `..`.
STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_LEADING_PATH = re.compile(r"([a-z_]+(?:\.[\w-]+)+): ")  # "faults.0.step: ..." of a check below


class SuiteError(ValueError):
    """A suite that cannot run; `problems` are "field.path: message" lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid suite {source}:\n" + "\n".join(f"  {p}" for p in problems))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Placement(_Model):
    """How ranks map onto the cluster: one Ray bundle (and actor) per rank."""

    # "all": as many ranks as the (eligible) cluster can place: one per GPU on GPU nodes.
    world_sizes: list[PositiveInt | Literal["all"]] = Field(
        default_factory=lambda: [2], min_length=1
    )
    # "auto": one GPU per rank where the cluster has GPUs, else CPU ranks. Fractions
    # (0.25) share one GPU between ranks (gloo only: NCCL refuses duplicate GPUs).
    gpus_per_rank: NonNegativeFloat | Literal["auto"] = "auto"
    cpus_per_rank: PositiveFloat = 1.0
    strategy: Strategy = Strategy.PACK
    nodes: list[str] | None = None  # restrict to these node names (label fleetval/node or hostname)


class Fault(_Model):
    """Injected misbehaviour, so detection can be shown on any machine."""

    kind: FaultKind
    rank: Annotated[int, Field(ge=0)] | None = None
    node: str | None = None
    ms: PositiveFloat | None = None
    step: str | None = None  # only in the step with this name (default: every step)
    # With `node`: only in jobs that also hold this node (a slow link between the two).
    peer: str | None = None
    # Two topology groups (racks, switches, domains): every job that holds a node of each
    # is slow (its ranks in the first group late: a slow trunk between them).
    between: Annotated[list[str], Field(min_length=2, max_length=2)] | None = None

    @model_validator(mode="after")
    def _target(self) -> Self:
        if self.between is not None:
            if self.rank is not None or self.node is not None or self.peer is not None:
                raise ValueError("`between` names two groups, without `rank`, `node` or `peer`")
            if self.between[0] == self.between[1]:
                raise ValueError("`between` names two different groups")
        elif (self.rank is None) == (self.node is None):
            raise ValueError("a fault names exactly one of `rank`, `node` or `between`")
        if self.peer is not None and self.peer == (self.node or self.peer):
            raise ValueError("`peer` needs `node` and names another node (the link's far end)")
        if self.kind == FaultKind.DELAY and self.ms is None:
            raise ValueError("a delay fault needs `ms`")
        if self.kind != FaultKind.DELAY and self.ms is not None:
            raise ValueError(f"`ms` applies to delay faults only, not {self.kind.value}")
        return self

    def applies(
        self,
        *,
        rank: int,
        node: str,
        step: str,
        nodes: frozenset[str],
        groups: Mapping[str, frozenset[str]] | None = None,
    ) -> bool:
        """This rank (or node) in this step, in a job over `nodes` (the peer among them);
        a `between` fault: the ranks of the first group's nodes in a job over `nodes` that
        holds a node of each group (`groups`: node -> the groups it is in)."""
        if self.between is not None:
            a, b = ({n for n in nodes if g in (groups or {}).get(n, ())} for g in self.between)
            spans = any(x != y for x in a for y in b)
            # NOTE: the ranks of the first group's nodes are late and the others wait in the
            # collective: late arrival shows in the samples, and time per call on every rank.
            return spans and node in a and self.step in (None, step)
        target = self.rank == rank if self.rank is not None else self.node == node
        linked = self.peer is None or self.peer in nodes
        return target and linked and self.step in (None, step)


def _step_union() -> Any:
    models = tuple(check.params for check in CHECKS.values())
    return Annotated[Union[models], Field(discriminator="check")]  # noqa: UP007


StepModel = _step_union()


class Suite(_Model):
    """A validation suite: what to run, where, with which faults and deadlines."""

    name: str = Field(min_length=1)
    description: str = ""
    backend: Backend = Backend.AUTO
    seed: int = 0
    placement: Placement = Placement()
    timeouts: FailurePolicy = FailurePolicy()  # the failure policy: deadlines and thresholds
    steps: list[StepModel] = Field(min_length=1)  # type: ignore[valid-type]
    faults: list[Fault] = Field(default_factory=list)
    compare: CompareSettings = CompareSettings()  # regression thresholds for runs of this suite
    gates: Gates | None = (
        None  # release sign-off gates (fleetval/signoff/gates.py); None: the defaults
    )
    # How `fleetval sweep` judges the fleet (fleetval/fleet/settings.py).
    sweep: SweepSettings = SweepSettings()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        for i, step in enumerate(self.steps):
            if step.name is not None and not STEP_NAME.fullmatch(step.name):
                raise ValueError(
                    f"steps.{i}.name: {step.name[:80]!r}: a step name is 1-64 letters, digits, "
                    "'.', '_' or '-', starting with a letter or digit"
                )
        names = [s.step_name for s in self.steps]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"step names must be unique; repeated: {', '.join(dupes)}")
        for field_name in ("alone_steps", "pair_steps"):
            unknown = [n for n in getattr(self.sweep, field_name) or [] if n not in names]
            if unknown:
                raise ValueError(
                    f"sweep.{field_name}: no step named {', '.join(unknown)} ({', '.join(names)})"
                )
        fixed = [w for w in self.placement.world_sizes if w != "all"]
        biggest = max(fixed) if len(fixed) == len(self.placement.world_sizes) else None
        for i, fault in enumerate(self.faults):
            if fault.step is not None and fault.step not in names:
                raise ValueError(
                    f"faults.{i}.step: no step named {fault.step!r} ({', '.join(names)})"
                )
            if fault.rank is not None and biggest is not None and fault.rank >= biggest:
                raise ValueError(
                    f"faults.{i}.rank: rank {fault.rank} does not exist; the largest world size is {biggest}"
                )
        return self

    @field_validator("gates")
    @classmethod
    def _gate_checks(cls, gates: Gates | None) -> Gates | None:
        for where, names in (gates.named_checks() if gates else {}).items():
            unknown = [n for n in names if n not in CHECKS]
            if unknown:
                raise ValueError(
                    f"{where}: unknown check {', '.join(unknown)}; known: {', '.join(CHECKS)}"
                )
        return gates

    def step_timeout(self, step: Any) -> float:
        return step.timeout_s or self.timeouts.step_s

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


def _path_of(loc: tuple[int | str, ...]) -> str:
    """pydantic's location without the union tag it inserts after `steps.N`."""
    parts = [
        str(p) for i, p in enumerate(loc) if not (i == 2 and loc[0] == "steps" and p in CHECKS)
    ]
    return ".".join(parts) or "(suite)"


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """A hint (`; did you mean 'iters'?`) for an unknown key close to a key of its model."""
    keys = _keys_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys of the model at a validation location (a step's by its check's tag)."""
    model: Any = Suite
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list: the same model
        if model is None or (part in CHECKS and loc[0] == "steps"):
            model = CHECKS[part].params if part in CHECKS else None
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field else None
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The one pydantic model an annotation holds (X, X | None, list[X], dict[str, X])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = {m for a in get_args(annotation) if (m := _model_in(a)) is not None}
    return found.pop() if len(found) == 1 else None


def _problems(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid":
            msg = f"unknown check {e['input'].get('check')!r}; known: {', '.join(CHECKS)}"
        elif e["type"] == "extra_forbidden":
            msg = f"unknown key {e['loc'][-1]!r}{_did_you_mean(e['loc'])}"
        elif e["type"] == "union_tag_not_found":
            msg = f"a step needs `check:` one of {', '.join(CHECKS)}"
        path = _path_of(e["loc"])
        if path == "(suite)" and (lead := _LEADING_PATH.match(msg)):  # the field it names
            path, msg = lead.group(1), msg[lead.end() :]
        out.append(f"{path}: {msg}")
    return out


def parse_suite(data: Any, source: str = "<suite>", *, strict: bool = False) -> Suite:
    """`strict`: JSON's types as the suite's JSON Schema says them (the service's inline
    suites): `false` is no number, `"3"` no integer."""
    if not isinstance(data, dict):
        raise SuiteError(source, [f"(suite): expected a mapping, got {type(data).__name__}"])
    try:
        if strict:
            return Suite.model_validate_json(json.dumps(data), strict=True)
        return Suite.model_validate(data)
    except ValidationError as err:
        raise SuiteError(source, _problems(err)) from err


def _suites_dir() -> Traversable:
    try:
        return resources.files(SUITES_PACKAGE)
    except ModuleNotFoundError:  # NOTE: an editable install made before suites/ was mapped
        return Path(__file__).resolve().parent.parent / "suites"


def shipped_suites() -> dict[str, Traversable]:
    """Shipped suite names and their YAML (through importlib.resources: wheels and zips too)."""
    found = [f for f in _suites_dir().iterdir() if f.name.endswith(".yaml")]
    return {f.name.removesuffix(".yaml"): f for f in sorted(found, key=lambda f: f.name)}


def load_suite(ref: str | Path) -> Suite:
    """A shipped suite by name (`smoke`) or a YAML file by path."""
    path: Traversable = Path(ref)
    if not path.is_file():
        known = shipped_suites()
        if str(ref) not in known:
            raise SuiteError(
                str(ref),
                [f"(suite): no such file, and no shipped suite of that name ({', '.join(known)})"],
            )
        path = known[str(ref)]
    return parse_suite_text(path.read_text(), str(path))


def parse_suite_text(text: str, source: str = "<suite>") -> Suite:
    """A suite from YAML (or JSON) text."""
    stream = io.StringIO(text)
    stream.name = source  # type: ignore[misc]  # NOTE: what YAML's error marks name, not "<unicode string>"
    try:
        data = yaml.safe_load(stream)
    except yaml.YAMLError as err:
        raise SuiteError(source, [f"(yaml): {err}"]) from err
    return parse_suite(data, source)
