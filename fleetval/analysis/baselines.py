"""Named baselines: a selection of runs that a candidate is compared against.

A baseline is either explicit run ids (`--run ID...`) or `where` filters over the runs'
labels and the nodes' environment (`rocm_version=6.1.*`, `driver_version=580.*`,
`nightly=true`). Filters are resolved at compare time, so a nightly baseline by filter
stays current; what it resolved to is recorded in every comparison. Runs with injected
faults never enter a filter-based baseline unless it says `include_faulty`: their numbers
are the fault's, not the release's.

Stored beside the data as `<data>/baselines/<NAME>.json` (written atomically: temp file
+ os.replace), so the service and the command line see the same baselines.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path

from fleetval.status import usable_as_baseline
from fleetval.store.catalog import ENV_COLUMNS, Catalog, atomic_write
from fleetval.store.records import SAFE_NAME, JsonObject, Run

# Environment columns of the nodes table a filter may name. A run matches a filter on
# one of these when EVERY node of the run matches: a baseline should be homogeneous.
FILTER_COLUMNS = (*ENV_COLUMNS, "node")  # what a baseline's `where` may name of a node
# Columns of the runs table a filter may name.
RUN_COLUMNS = ("suite", "status", "submitter", "backend", "run_id")


class BaselineError(ValueError):
    """Bad baseline input: an unknown name, an unknown filter key, a filter matching nothing."""


class UnknownBaseline(BaselineError):
    """No baseline of that name; the message lists the known ones."""


class UnknownFilterKey(BaselineError):
    """A `where` key that is no environment column, run column or label of the store (the
    request's fault, not the stored runs'): `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """A named selection of runs: explicit ids, or filters resolved when compared."""

    name: str
    run_ids: tuple[str, ...] = ()
    where: dict[str, str] = field(default_factory=dict)
    last: int | None = None  # with `where`: only the newest N matching runs
    include_faulty: bool = False  # with `where`: also runs with injected faults
    description: str = ""
    created_at: str = ""

    def describe(self) -> str:
        if self.run_ids:
            return "runs " + ", ".join(self.run_ids)
        text = " ".join(f"{k}={v}" for k, v in sorted(self.where.items()))
        text += " (faulty runs included)" if self.include_faulty else ""
        return text + (f" (newest {self.last})" if self.last else "")

    def to_json(self) -> str:
        rec = asdict(self)
        rec["run_ids"] = list(self.run_ids)
        return json.dumps(rec, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Baseline:
        rec: JsonObject = json.loads(text)
        return cls(**{**rec, "run_ids": tuple(rec.get("run_ids") or ())})


@dataclass(frozen=True, kw_only=True)
class ResolvedBaseline:
    """A baseline and the runs it stands for right now (oldest first)."""

    baseline: Baseline
    run_ids: tuple[str, ...]


def check_name(name: str) -> str:
    if not SAFE_NAME.match(name):
        raise BaselineError(f"baseline name {name!r}: use letters, digits, '.', '_' and '-' only")
    return name


class Baselines:
    """The baselines of one data directory."""

    def __init__(self, store: Catalog) -> None:
        self.store = store
        self.dir = store.root / "baselines"

    def _path(self, name: str) -> Path:
        return self.dir / f"{check_name(name)}.json"

    def list(self) -> list[Baseline]:
        return [Baseline.from_json(p.read_text()) for p in sorted(self.dir.glob("*.json"))]

    def names(self) -> list[str]:
        return [p.stem for p in sorted(self.dir.glob("*.json"))]

    def get(self, name: str) -> Baseline:
        path = self._path(name)
        if not path.exists():
            known = (
                ", ".join(self.names())
                or "none yet; `fleetval baseline set NAME --run ID` makes one"
            )
            raise UnknownBaseline(f"no baseline {name!r}; known: {known}")
        return Baseline.from_json(path.read_text())

    def delete(self, name: str) -> None:
        self.get(name)  # unknown -> UnknownBaseline with the known names
        self._path(name).unlink()

    def set(
        self,
        name: str,
        *,
        run_ids: list[str] | None = None,
        where: dict[str, str] | None = None,
        last: int | None = None,
        description: str = "",
        include_faulty: bool = False,
    ) -> ResolvedBaseline:
        """Create or replace a baseline after proving it resolves to at least one run."""
        if bool(run_ids) == bool(where):
            raise BaselineError(
                "a baseline is either --run ID... or --where KEY=VALUE..., not both or neither"
            )
        if last is not None and (last < 1 or not where):
            raise BaselineError("--last N needs --where and N >= 1")
        baseline = Baseline(
            name=check_name(name),
            run_ids=tuple(dict.fromkeys(run_ids or ())),
            where=dict(where or {}),
            last=last,
            include_faulty=include_faulty,
            description=description,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        resolved = resolve(self.store, baseline)
        atomic_write(self._path(name), lambda f: f.write(baseline.to_json().encode()), replace=True)
        return resolved

    def resolve(self, name: str) -> ResolvedBaseline:
        return resolve(self.store, self.get(name))


def resolve(
    store: Catalog, baseline: Baseline, *, runs: list[Run] | None = None
) -> ResolvedBaseline:
    """The runs a baseline stands for now; every run id must exist and filters must match."""
    if baseline.run_ids:
        # NOTE: explicit ids are looked up (one query), never found by listing the history
        ids = list(baseline.run_ids)
        known = set(store.find_runs(ids)) if runs is None else {r.run_id for r in runs}
        absent = [r for r in baseline.run_ids if r not in known]
        if absent:
            raise BaselineError(
                f"baseline {baseline.name!r}: no run {', '.join(absent)} in {store.root}; "
                "`fleetval runs` lists them"
            )
        return ResolvedBaseline(baseline=baseline, run_ids=baseline.run_ids)
    runs = store.runs() if runs is None else runs
    matched = select_runs(store, baseline.where, runs, include_faulty=baseline.include_faulty)
    if not matched:
        raise BaselineError(
            f"baseline {baseline.name!r}: no run matches {baseline.describe()} "
            f"among {len(runs)} runs in {store.root}"
        )
    if baseline.last:
        matched = matched[-baseline.last :]
    return ResolvedBaseline(baseline=baseline, run_ids=tuple(matched))


def select_runs(
    store: Catalog,
    where: dict[str, str],
    runs: list[Run] | None = None,
    *,
    include_faulty: bool = False,
) -> list[str]:
    """Run ids (oldest first) matching every filter; values are fnmatch globs. Runs with
    injected faults are left out unless `include_faulty`."""
    runs = store.runs() if runs is None else runs
    label_keys = {k for r in runs for k in r.labels}
    env = {k: v for k, v in where.items() if k in FILTER_COLUMNS}
    for key in where:
        if key not in FILTER_COLUMNS and key not in RUN_COLUMNS and key not in label_keys:
            raise UnknownFilterKey(
                key,
                f"unknown filter key {key!r}; environment columns: {', '.join(FILTER_COLUMNS)}; "
                f"run columns: {', '.join(RUN_COLUMNS)}; labels in this store: "
                f"{', '.join(sorted(label_keys)) or 'none'}",
            )
    env_ok = _runs_matching_env(store, env) if env else None
    out = []
    for run in runs:
        # Unless the filter names a status: the runs fleetval.status finds usable.
        if "status" not in where and not usable_as_baseline(run.status):
            continue
        if env_ok is not None and run.run_id not in env_ok:
            continue
        if run.injected and not include_faulty:
            continue
        if all(_run_matches(run, k, v) for k, v in where.items() if k not in env):
            out.append(run.run_id)
    return out


def _run_matches(run: Run, key: str, pattern: str) -> bool:
    value = getattr(run, key) if key in RUN_COLUMNS else run.labels.get(key)
    return value is not None and fnmatchcase(str(value), pattern)


def _runs_matching_env(store: Catalog, env: dict[str, str]) -> set[str]:
    """Runs whose every node matches every environment filter."""
    ok: dict[str, bool] = {}
    for rec in store.node_rows():
        match = all(rec[k] is not None and fnmatchcase(str(rec[k]), p) for k, p in env.items())
        ok[rec["run_id"]] = ok.get(rec["run_id"], True) and match
    return {run for run, good in ok.items() if good}
