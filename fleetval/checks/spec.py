"""What a check declares to the product, torch-free: the plug-in contract.

A check is one package under `fleetval/checks/`: `__init__.py` declares the plug-in (this
module's `CheckPlugin`: what it proves, its parameter model from `params.py`, its metrics,
its sign-off gate, the incidents it raises, how `show` presents it); its rank-side module,
`rank.py` beside `params.py`, holds `run_<name>`, the run every rank executes (torch). Only a rank running a
step imports `rank.py`: suite validation, the read side (store, analysis, sign-off, reports,
`show`), `submit` and the API need only the declarations, so they never import torch.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, PositiveFloat

from fleetval.formats.smi import gpu_model
from fleetval.metrics import MetricDecl
from fleetval.status import severity
from fleetval.text import human_bytes
from fleetval.vocab import Status

if TYPE_CHECKING:
    from fleetval.store.records import Run, StoredRow


class StepSpec(BaseModel):
    """Keys every step has; each check subclasses it with `check: Literal[...]` and its params."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    name: str | None = None  # defaults to the check's name; unique within a suite
    timeout_s: PositiveFloat | None = None  # overrides the suite's timeouts.step_s

    @property
    def step_name(self) -> str:
        return self.name or self.check


# -- sign-off gates -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One row behind a gate: what was measured or found, where, and whether it holds."""

    ok: bool  # supports the gate (True) or breaks it (False)
    text: str  # one line a person reads
    check: str | None = None
    step: str | None = None
    collective: str | None = None
    dtype: str | None = None
    size_bytes: int | None = None
    world_size: int | None = None
    rank: int | None = None
    node: str | None = None
    device_id: str | None = None
    value: float | None = None
    expected: float | None = None
    unit: str | None = None


@dataclass(frozen=True)
class GateInputs:
    """What every gate evaluator reads: the stored run, its rows and nodes (the sign-off adds
    the comparison for its own gates: `fleetval.signoff.gates.RunInputs`)."""

    record: Run
    rows: list[StoredRow]
    nodes: list[StoredRow]


@dataclass(frozen=True)
class Outcome:
    ok: bool | None  # None: no evidence (the gate FAILs and says so)
    summary: str
    evidence: list[Evidence]


@dataclass(frozen=True, kw_only=True)
class Gate:
    """A sign-off gate: its `gates:` key, config model, evaluator and what it requires, in words."""

    name: str
    config: type[BaseModel]
    evaluate: Callable[[Any, Any], Outcome]  # (GateInputs or the sign-off's RunInputs, config)
    requires: Callable[[Any], str]
    order: int  # position in reports: gates are listed by it


# -- evidence, as every gate words it ---------------------------------------------------------


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def tally(evidence: list[Evidence], *, noun: str, missed: str, met: str, none: str) -> Outcome:
    """A gate whose evidence rows each hold or break: FAIL on any break, no evidence is `None`."""
    failing = sum(1 for e in evidence if not e.ok)
    if failing:
        return Outcome(False, f"{failing} of {len(evidence)} {missed}", evidence)
    if not evidence:
        return Outcome(None, none, [])
    return Outcome(True, f"{plural(len(evidence), noun)} {met}", evidence)


def where(r: StoredRow) -> str:
    dev = f" ({r['device_id']})" if r.get("device_id") else ""
    return f"rank {r['rank']} on {r['node']}{dev}"


def ident(r: StoredRow) -> str:
    size = human_bytes(r["size_bytes"]) if r.get("size_bytes") is not None else None
    parts = [r.get("collective"), r.get("op"), r.get("dtype"), size, f"n={r['world_size']}"]
    return " ".join(p for p in parts if p)


def row_evidence(r: StoredRow, ok: bool, text: str, **extra: Any) -> Evidence:
    keys = ("check", "step", "collective", "dtype", "size_bytes", "world_size", "rank", "node",
            "device_id")  # fmt: skip
    return Evidence(ok=ok, text=text, **{k: r.get(k) for k in keys}, **extra)


def gpu_label(node: StoredRow) -> str:
    """The GPU model a node reports, normalised to its SKU ("NVIDIA H100 SXM", "AMD Instinct
    MI250X": `fleetval.formats.smi.gpu_model`); "cpu" for a node without GPUs (gloo on CPU)."""
    raw = node.get("gpu_model")
    if not raw:
        return "cpu" if not node.get("gpu_count") else "unknown"
    try:
        gfx = json.loads(node.get("extra") or "{}").get("gpu_gfx")
    except (ValueError, AttributeError):
        gfx = None
    return gpu_model(raw, gfx) or raw


# -- presentation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultTable:
    """A table `show` prints for a check's rows (plain values: the CLI formats them)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class FigureContext:
    """What a check's headline figures are judged against, beside its own rows."""

    models: dict[str, str]  # node -> GPU model label (`gpu_label`)
    gates: Any  # the suite's parsed `gates:` (signoff.gates.Gates) or None


def worst_rows(rows: Sequence[StoredRow], *_: object) -> list[str]:
    """The failing and warning rows, worst first: the figures of a check without headline ones."""
    bad = [r for r in rows if severity(r["status"]) >= severity(Status.WARN)]
    bad.sort(key=lambda r: -severity(r["status"]))
    return [f"{r['status']}: rank {r['rank']} {row_what(r)}: {r['message']}" for r in bad]


def row_what(r: StoredRow) -> str:
    size = human_bytes(r["size_bytes"]) if r.get("size_bytes") is not None else None
    parts = [r.get("metric"), r.get("collective"), r.get("op"), r.get("dtype"), size]
    return " ".join(p for p in parts if p)


# -- the plug-in --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CheckPlugin:
    """Everything the product needs from one check; see the module docstring."""

    name: str
    params: type[StepSpec]  # the step's YAML keys, from the torch-free `<pkg>/params.py`
    doc: str  # what it proves, one line (`fleetval checks`)
    metrics: tuple[MetricDecl, ...] = ()  # what its rows measure; recorded with every run
    gate: Gate | None = None
    incident: str | None = None  # the incident kind a failing row raises in reports
    synchronizing: frozenset[str] = frozenset()  # metrics whose end is a collective (lateness)
    tables: Callable[[Sequence[StoredRow]], list[ResultTable]] | None = None  # for `show`
    # what `fleetval run` prints per step: the headline figures against their expectation
    figures: Callable[[Sequence[StoredRow], FigureContext], list[str]] = worst_rows

    @property
    def rank_module(self) -> str:
        """The module of the run (torch), `rank.py` beside `params.py`; imported when it runs."""
        return f"{self.params.__module__.rpartition('.')[0]}.rank"

    @property
    def run_name(self) -> str:
        """The function every rank runs, `run_<name>`: (CheckContext, params) -> list[Row]."""
        return f"run_{self.name}"

    @cached_property
    def _rank(self) -> Any:
        return importlib.import_module(self.rank_module)

    @property
    def run(self) -> Callable[..., list[Any]]:
        return getattr(self._rank, self.run_name)
