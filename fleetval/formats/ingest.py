"""Results a fleet already has, read into stored runs: nccl-tests / rccl-tests stdout tables,
nccl-tests `-J` JSON, rccl-tests `--output_format json|csv`. The format is told by content.

Each file becomes one run written through the store's normal path (results, summaries, nodes,
run record), so baselines, compare, trend and report treat it like a fleetval run:

- every result line gives one row per node of the rank lines (nccl-tests reports one time for
  the whole collective; each node's row carries it), check `bandwidth` for out-of-place and
  `bandwidth_in_place` for in-place results, with fleetval's names for the collective, op and
  dtype, so a fleetval `bandwidth` run of the same collective, size and world size meets it;
- nodes (host, GPU model, device ids) come from the `#  Rank N ... on HOST device D [bus] MODEL`
  lines; environment (NCCL/RCCL, CUDA/HIP/ROCm versions) from any NCCL_DEBUG lines in the file.

A table is recognised by its header, or (a pasted tail) by its rows and closing lines; the
collective is named by the program (`all_reduce_perf`, also in `# Collective test concluded:`) or
the file name, else read from the numbers (`infer`), as is a world size without rank lines.

The formats' fields are those of NVIDIA/nccl-tests `src/util.cu` (stdout and JSON writers) and
ROCm/rccl-tests `src/common.cu` (`Reporter`); tests/data/README.md names the samples.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias, TypedDict

from fleetval.formats.nccllog import NcclLogSummary, parse_nccl_log
from fleetval.formats.smi import gpu_model
from fleetval.vocab import Status

EXPECTED = (
    "an nccl-tests/rccl-tests stdout table (`#  size  count  type  redop  root  time  algbw  busbw"
    "  #wrong ...`), an nccl-tests -J JSON file, or an rccl-tests --output_format json/csv file"
)

# nccl-tests program / rccl-tests Reporter names -> fleetval's collective names
COLLECTIVES = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce",
    "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "sendrecv": "send_recv", "send_recv": "send_recv",
}  # fmt: skip
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16",
          "int32": "int32", "int64": "int64", "int": "int32"}  # fmt: skip
OPS = {
    "sum": "sum",
    "prod": "product",
    "max": "max",
    "min": "min",
    "avg": "avg",
    "mulsum": "premul_sum",
}  # nccl-tests names ncclRedOpCreatePreMulSum "mulsum"
# Bytes per element of nccl-tests' types (fleetval's names): `size` against `count` tells a
# collective whose count is per rank (all_gather, reduce_scatter, alltoall) from the others.
_WIDTH = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
          "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}  # fmt: skip


class IngestError(ValueError):
    """A file that is none of the formats read here, or that lacks what a run needs."""


@dataclass(frozen=True, kw_only=True)
class Result:
    """One measurement of a result table: one size, in place or not."""

    size: int
    count: int | None
    dtype: str | None
    op: str | None
    root: int | None
    in_place: bool
    time_us: float
    algbw: float | None
    busbw: float | None
    wrong: int | None  # None: not validated ("N/A")
    collective: str | None = None  # per result in rccl-tests files


@dataclass(frozen=True, kw_only=True)
class Device:
    rank: int
    host: str
    device: int
    bus: str
    model: str


# What a file says beside its results ("nccl_version", "nodes", how an inferred value was read)
Note: TypeAlias = str | int | float | None


@dataclass(frozen=True, kw_only=True)
class Ingested:
    """What one results file holds."""

    path: str
    tool: str  # "nccl-tests" or "rccl-tests"
    fmt: str  # "table", "nccl-tests-json", "rccl-tests-json", "rccl-tests-csv"
    collective: str | None
    world_size: int | None
    iters: int = 0
    devices: tuple[Device, ...] = ()
    results: tuple[Result, ...] = ()
    log: NcclLogSummary | None = None
    notes: dict[str, Note] = field(default_factory=dict)  # kept in each row's details
    inferred: tuple[str, ...] = ()  # "collective", "world_size": read from the numbers, not named

    def collective_of(self, r: Result) -> str:
        name = r.collective or self.collective
        assert name is not None  # checked by read_results
        return name


# ---- detection --------------------------------------------------------------------------------


def read_results(
    text: str, path: str = "", *, collective: str | None = None, world_size: int | None = None
) -> Ingested:
    """Parse one results file, its format told by content. `collective` and `world_size` name
    what the file does not say (a table without the program name or rank lines). Raises
    IngestError."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"results"' in text and '"config"' in text:
        ing = _nccl_tests_json(text, path)
    elif stripped.startswith(("{", "[")) and re.search(r'"(busBw|algBw)"\s*:', text):
        ing = _rccl_tests_json(text, path)
    elif re.match(r"^(?:numCycle,)?collective,", stripped.splitlines()[0] if stripped else ""):
        ing = _rccl_tests_csv(text, path)
    elif _is_table(_unwrap(text)):
        ing = _table(text, path)
    else:
        raise IngestError(f"{path or 'input'}: not a results file; expected {EXPECTED}")
    if collective:
        ing = replace(ing, collective=_collective(collective) or collective)
    if world_size:
        ing = replace(ing, world_size=world_size)
    return _checked(ing)


def _checked(ing: Ingested) -> Ingested:
    where = ing.path or "input"
    if not ing.results:
        raise IngestError(f"{where}: {ing.fmt} without result lines; expected {EXPECTED}")
    named = ing.collective or all(r.collective for r in ing.results)
    if named and ing.world_size:
        return ing
    try:
        return infer(ing)
    except IngestError as err:
        raise IngestError(f"{where}: {err}") from None


# ---- what the numbers say ---------------------------------------------------------------------
# A table without its program's name still says which collective it measured: busbw / algbw is a
# fixed function of the world size n per collective (nccl-tests doc/PERFORMANCE.md), the redop
# column is "none" where nothing is reduced, root is -1 where there is no root, and `count` is per
# rank (size = count * width * n) for all_gather, reduce_scatter and alltoall.


@dataclass(frozen=True)
class _Shape:
    reduces: bool
    rooted: bool
    per_rank: bool
    factor: str  # busbw / algbw: "2(n-1)/n", "(n-1)/n" or "1"


_SHAPES = {
    "all_reduce": _Shape(reduces=True, rooted=False, per_rank=False, factor="2(n-1)/n"),
    "reduce_scatter": _Shape(reduces=True, rooted=False, per_rank=True, factor="(n-1)/n"),
    "all_gather": _Shape(reduces=False, rooted=False, per_rank=True, factor="(n-1)/n"),
    "all_to_all": _Shape(reduces=False, rooted=False, per_rank=True, factor="(n-1)/n"),
    "broadcast": _Shape(reduces=False, rooted=True, per_rank=False, factor="1"),
    "reduce": _Shape(reduces=True, rooted=True, per_rank=False, factor="1"),
    "send_recv": _Shape(reduces=False, rooted=False, per_rank=False, factor="1"),
}
_FACTOR = {"2(n-1)/n": lambda n: 2 * (n - 1) / n, "(n-1)/n": lambda n: (n - 1) / n,
           "1": lambda n: 1.0}  # fmt: skip
_INVERSE = {"2(n-1)/n": lambda r: 2 / (2 - r) if r < 2 else math.inf,
            "(n-1)/n": lambda r: 1 / (1 - r) if r < 1 else math.inf}  # fmt: skip
_HALF_ULP = 0.005  # bandwidths are printed with two decimals
_LOOSE = 64  # a ratio that allows more world sizes than this says none


@dataclass(frozen=True)
class _Table:
    """What the rows say, each None where they do not say it (or disagree)."""

    reduces: bool | None
    rooted: bool | None
    ranks_per_count: int | None  # size / (count * width), the same on every row
    ratio: tuple[float, float] | None  # the busbw/algbw range every row allows

    def describe(self) -> str:
        said = []
        if self.ratio:
            said.append(f"busbw/algbw {self.ratio[0]:.4f}-{self.ratio[1]:.4f}")
        if self.reduces is not None:
            said.append("a redop" if self.reduces else "redop none")
        if self.rooted is not None:
            said.append("a root" if self.rooted else "root -1")
        if self.ranks_per_count == 1:
            said.append("count of the whole buffer")
        elif self.ranks_per_count is not None:
            said.append(f"count per rank (of size / {self.ranks_per_count})")
        return ", ".join(said) or "no bandwidths, redop, root or count"


def _table_says(results: tuple[Result, ...]) -> _Table:
    ops = {r.op is not None for r in results if r.root is not None}
    roots = {r.root is not None and r.root >= 0 for r in results if r.root is not None}
    ks = set()
    for r in results:
        width = _WIDTH.get(r.dtype or "")
        if width and r.count and r.size:
            ks.add(r.size / (r.count * width))
    k = ks.pop() if len(ks) == 1 else None
    bounds = [((r.busbw - _HALF_ULP) / (r.algbw + _HALF_ULP),
               (r.busbw + _HALF_ULP) / (r.algbw - _HALF_ULP))
              for r in results if r.algbw and r.busbw is not None and r.algbw > _HALF_ULP]  # fmt: skip
    lo, hi = max((b[0] for b in bounds), default=0.0), min((b[1] for b in bounds), default=0.0)
    return _Table(
        reduces=ops.pop() if len(ops) == 1 else None,
        rooted=roots.pop() if len(roots) == 1 else None,
        ranks_per_count=int(k) if k is not None and k == int(k) else None,
        ratio=(lo, hi) if bounds and lo <= hi else None,
    )


def _worlds(shape: _Shape, t: _Table, known: int | None) -> list[int] | None:
    """The world sizes with which the collective of `shape` gives this table: [] none fits,
    None any (the table does not tell)."""
    if t.reduces is not None and shape.reduces != t.reduces:
        return []
    if t.rooted is not None and shape.rooted != t.rooted:
        return []
    if t.ranks_per_count is not None:
        if not shape.per_rank and t.ranks_per_count != 1:
            return []
        if shape.per_rank:  # NOTE: at one rank these look like all_reduce: not told apart
            known = known or t.ranks_per_count
            if known != t.ranks_per_count or known < 2:
                return []
    if known:
        fits = t.ratio is None or t.ratio[0] <= _FACTOR[shape.factor](known) <= t.ratio[1]
        return [known] if fits else []
    if t.ratio is None:
        return None
    if shape.factor == "1":
        return None if t.ratio[0] <= 1 <= t.ratio[1] else []
    lo, hi = (_INVERSE[shape.factor](max(r, 0.0)) for r in t.ratio)
    if hi - lo > _LOOSE:
        return None
    return list(range(max(2, math.ceil(lo - 1e-9)), math.floor(hi + 1e-9) + 1))


def infer(ing: Ingested) -> Ingested:
    """The collective and world size the file does not name, read from its numbers; the names
    go to `inferred`. Raises IngestError naming what the table leaves open."""
    t = _table_says(ing.results)
    named = ing.collective or next((r.collective for r in ing.results if r.collective), None)
    if named and named in _SHAPES:
        fits = {named: _worlds(_SHAPES[named], t, ing.world_size)}
    elif named:
        fits = {named: [ing.world_size] if ing.world_size else None}
    else:
        fits = {c: w for c, s in _SHAPES.items() if (w := _worlds(s, t, ing.world_size)) != []}
    if not fits:
        raise IngestError(
            f"which collective? the table ({t.describe()}) fits none of "
            f"{', '.join(_SHAPES)}; name it with --label collective=NAME"
        )
    if len(fits) > 1:
        raise IngestError(
            f"which collective? the table ({t.describe()}) fits {' and '.join(fits)} alike; "
            "name it with --label collective=NAME"
        )
    [(collective, worlds)] = fits.items()
    world = ing.world_size or (worlds[0] if worlds and len(worlds) == 1 else None)
    factor = _SHAPES[collective].factor if collective in _SHAPES else "?"
    if worlds == [] and not world:
        raise IngestError(
            f"the table ({t.describe()}) is not {collective}'s at any world size "
            f"(busbw/algbw = {factor}); is collective={collective} right?"
        )
    if not world:
        fitting = f"n = {worlds[0]}..{worlds[-1]}" if worlds else "any n"
        raise IngestError(
            f"no world size: expected '#  Rank N ... on HOST device D' lines, or results whose "
            f"busbw/algbw tell it; {collective}'s busbw/algbw = {factor} and this table "
            f"({t.describe()}) fits {fitting}; name it with --label world_size=N"
        )
    inferred = (("collective",) if not named else ()) + (
        ("world_size",) if not ing.world_size else ())  # fmt: skip
    notes = dict(ing.notes)
    if "world_size" in inferred:
        notes["world_size_from"] = "size/count" if t.ranks_per_count == world else "busbw/algbw"
    if "collective" in inferred:
        notes["collective_from"] = t.describe()
    return replace(ing, collective=ing.collective or collective, world_size=world,
                   inferred=inferred, notes=notes)  # fmt: skip


def _collective(name: str | None) -> str | None:
    if not name:
        return None
    key = re.sub(r"_perf(?:_mpi)?$", "", name.strip().lower().split("/")[-1])
    return COLLECTIVES.get(key.replace(" ", "")) or COLLECTIVES.get(key.replace("_", ""))


def _collective_in(text: str, path: str) -> str | None:
    if (m := _CONCLUDED.search(text)) and (c := _collective(m.group(1))):
        return c  # the program's own closing line, also at the end of a pasted tail
    for source in (text, Path(path).name):
        m = re.search(r"\b(\w+?)_perf\b", source)
        if m and (c := _collective(m.group(1))):
            return c
    return None


# ---- stdout tables ----------------------------------------------------------------------------

# mpirun's "[1,0]<stdout>:" tag, or srun --label's " 0: ", before every line
_TAG = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )", re.MULTILINE)
_CONCLUDED = re.compile(r"^# Collective test (?:concluded|starting): (\w+)", re.M)
# the lines that close a table: a pasted tail without the header still has them
_CLOSING = re.compile(r"^# (?:Out of bounds values|Avg bus bandwidth|Collective test concluded)",
                      re.M)  # fmt: skip
_HEADER = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw", re.M)
_RANK = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
    r"\[([^\]]+)\]\s+(.+?)\s*$",
    re.M,
)
_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|N/A)"
_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)((?:\s+{_NUM}){{4}})((?:\s+{_NUM}){{4}})?\s*$"
)


def _unwrap(text: str) -> str:
    return _TAG.sub("", text)


def _is_table(text: str) -> bool:
    """The table's header, or its rows followed by its closing lines (a pasted tail)."""
    if _HEADER.search(text):
        return True
    return bool(_CLOSING.search(text)) and any(_ROW.match(line) for line in text.splitlines())


def _table(text: str, path: str) -> Ingested:
    text = _unwrap(text)
    tool = "rccl-tests" if "rccl-tests" in text or "RCCL version" in text else "nccl-tests"
    iters = re.search(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)", text)
    results: list[Result] = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        size, count, dtype, op, root = m.groups()[:5]
        for in_place, cols in ((False, m.group(6)), (True, m.group(7))):
            if cols:
                results.append(_result(size, count, dtype, op, root, in_place, cols.split()))
    devices = tuple(
        Device(rank=int(r), host=h, device=int(d), bus=b, model=mdl)
        for r, h, d, b, mdl in _RANK.findall(text)
    )
    log = parse_nccl_log(text)
    return Ingested(
        path=path,
        tool="rccl-tests" if log.library == "rccl" else tool,
        fmt="table",
        collective=_collective_in(text, path),
        world_size=max((d.rank for d in devices), default=-1) + 1 or None,
        iters=int(iters.group(1)) if iters else 0,
        devices=_unique_ranks(devices),
        results=tuple(results),
        log=log if (log.version or log.network) else None,
    )


def _unique_ranks(devices: tuple[Device, ...]) -> tuple[Device, ...]:
    """One Device per rank (a file that holds two runs' headers repeats them)."""
    seen: dict[tuple[int, str], Device] = {}
    for d in devices:
        seen.setdefault((d.rank, d.host), d)
    return tuple(seen.values())


def _num(value: str) -> float | None:
    return None if value == "N/A" else float(value)


def _result(size: str, count: str, dtype: str, op: str, root: str, in_place: bool,
            cols: list[str]) -> Result:  # fmt: skip
    time_us, algbw, busbw, wrong = (_num(c) for c in cols)
    if time_us is None:
        raise IngestError(f"result line for size {size} has no time")
    return Result(
        size=int(size),
        count=int(count),
        dtype=DTYPES.get(dtype, dtype),
        op=OPS.get(op),
        root=int(root),
        in_place=in_place,
        time_us=time_us,
        algbw=algbw,
        busbw=busbw,
        wrong=None if wrong is None else int(wrong),
    )


# ---- nccl-tests -J ----------------------------------------------------------------------------


def _nccl_tests_json(text: str, path: str) -> Ingested:
    """NVIDIA/nccl-tests src/util.cu: {"version", "args", "config": {..., "devices": [...]},
    "results": [{"size", "count", "type", "redop", "root", "out_of_place"|"in_place":
    {"time"|"cpu_time", "alg_bw", "bus_bw", "nwrong"}}], ...}."""
    doc = _json(text, path)
    config = doc.get("config") or {}
    devices = tuple(
        Device(rank=d["rank"], host=d["hostname"], device=d["device"], bus=d["device_hex"],
               model=d["device_info"])
        for d in config.get("devices") or []
    )  # fmt: skip
    results = []
    for r in doc.get("results") or []:
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            part = r.get(key)
            if not part:
                continue
            t = part.get("time", part.get("cpu_time"))
            results.append(
                Result(
                    size=int(r["size"]),
                    count=r.get("count"),
                    dtype=DTYPES.get(r.get("type"), r.get("type")),
                    op=OPS.get(r.get("redop")),
                    root=int(str(r.get("root", "-1")).strip()),
                    in_place=in_place,
                    time_us=_float(t),
                    algbw=_float(part.get("alg_bw")),
                    busbw=_float(part.get("bus_bw")),
                    wrong=None if part.get("nwrong") is None else int(float(part["nwrong"])),
                )
            )
    args = " ".join(str(a) for a in doc.get("args") or [])
    ranks = max((d.rank for d in devices), default=-1) + 1
    return Ingested(
        path=path, tool="nccl-tests", fmt="nccl-tests-json",
        collective=_collective_in(args, path), world_size=ranks or None,
        iters=int(config.get("iterations") or 0), devices=devices, results=tuple(results),
        notes={"nccl_version": doc.get("nccl_version")},
    )  # fmt: skip


def _json(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise IngestError(
            f"{path or 'input'}: malformed JSON ({err}); expected {EXPECTED}"
        ) from err


def _float(value: Any) -> float:
    if value is None or value == "nan":
        return float("nan")
    return float(value)


# ---- rccl-tests Reporter ----------------------------------------------------------------------


def _rccl_tests_json(text: str, path: str) -> Ingested:
    """ROCm/rccl-tests `Reporter`: a JSON array of objects, or (older releases) one object a
    line; keys name, [nodes, ranks, ranksPerNode, gpusPerRank | gpus], size, type, redop,
    inPlace, time, algBw, busBw, wrong (or "#wrong")."""
    stripped = text.strip()
    if stripped.startswith("["):
        records = _json(stripped, path)
    else:
        records = [_json(line, path) for line in stripped.splitlines() if line.strip()]
    return _rccl_records([_lower(r) for r in records], path, "rccl-tests-json")


def _rccl_tests_csv(text: str, path: str) -> Ingested:
    """The same records as CSV: `[numCycle,]collective,[nodes,ranks,ranksPerNode,gpusPerRank|
    gpus],size,type,redop,inplace,time,algbw,busbw,#wrong` (older releases: ", " separators)."""
    reader = csv.DictReader(io.StringIO(text.strip()), skipinitialspace=True)
    records = [_lower({**r, "name": r.get("collective")}) for r in reader]
    return _rccl_records(records, path, "rccl-tests-csv")


def _lower(record: dict[str, Any]) -> dict[str, Any]:
    return {str(k).strip().lower().lstrip("#"): v for k, v in record.items()}


def _rccl_records(records: list[dict[str, Any]], path: str, fmt: str) -> Ingested:
    results = []
    for i, r in enumerate(records):
        try:
            wrong = r.get("wrong")
            results.append(
                Result(
                    size=int(r["size"]),
                    count=None,
                    dtype=DTYPES.get(r["type"], r["type"]),
                    op=OPS.get(str(r.get("redop"))),
                    root=None,
                    in_place=str(r["inplace"]).strip() in ("1", "true", "True"),
                    time_us=float(r["time"]),
                    algbw=float(r["algbw"]),
                    busbw=float(r["busbw"]),
                    wrong=None if wrong in (None, "N/A") else int(wrong),
                    collective=_collective(str(r.get("name"))),
                )
            )
        except (KeyError, ValueError, TypeError) as err:
            raise IngestError(f"{path or 'input'}: record {i + 1}: missing or bad {err}") from err
    first = records[0] if records else {}
    world = first.get("ranks") or first.get("gpus")
    if world and first.get("gpusperrank"):
        world = int(world) * int(first["gpusperrank"])
    return Ingested(
        path=path, tool="rccl-tests", fmt=fmt, collective=None,
        world_size=int(world) if world else None, results=tuple(results),
        notes={"nodes": first.get("nodes")},
    )  # fmt: skip


# ---- rows and nodes ---------------------------------------------------------------------------


def node_hosts(ing: Ingested) -> list[str]:
    """The hosts of the run, in rank order; one placeholder when the file names none."""
    hosts: list[str] = []
    for d in sorted(ing.devices, key=lambda d: d.rank):
        if d.host not in hosts:
            hosts.append(d.host)
    return hosts or [(ing.log.hostname if ing.log and ing.log.hostname else "unknown")]


class ResultRow(TypedDict):
    """The fields of one `fleetval.store.schema.Row` an ingested result gives."""

    run_id: str
    job: int
    step: str
    check: str
    collective: str
    op: str | None
    dtype: str | None
    size_bytes: int
    world_size: int
    rank: int
    local_rank: int
    node: str
    device: str
    device_id: str | None
    backend: str
    iters: int
    time_us_median: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int
    status: str
    message: str
    details: dict[str, Note | bool]  # stored as JSON


class NodeRecord(TypedDict, total=False):
    """A NODES_SCHEMA row of an ingested run (`fleetval.store.schema`)."""

    node: str
    hostname: str
    gpu_model: str | None
    gpu_count: int
    gpu_ids: list[str]
    extra: str  # JSON: where the run came from, the GPU SKU, what the NCCL log says
    cuda_version: str | None
    hip_version: str | None
    rocm_version: str | None
    nccl_version: str | None
    rccl_version: str | None


class _LogExtra(TypedDict, total=False):
    network: str | None
    fabric: str | None
    net_plugin: str | None
    cuda_driver_version: str | None
    sharp: bool
    ib_devices: list[str]


def result_rows(ing: Ingested, run_id: str) -> list[ResultRow]:
    """The fields of the file's rows (fleetval.store.schema.Row): one per result and node."""
    backend = "rccl" if ing.tool == "rccl-tests" else "nccl"
    first = {h: min((d for d in ing.devices if d.host == h), key=lambda d: d.rank, default=None)
             for h in node_hosts(ing)}  # fmt: skip
    rows: list[ResultRow] = []
    for r in ing.results:
        status = (Status.INFO if r.wrong is None else Status.PASS if r.wrong == 0
                  else Status.FAIL)  # fmt: skip
        check = "bandwidth_in_place" if r.in_place else "bandwidth"
        for host, dev in first.items():
            rows.append(
                ResultRow(
                    run_id=run_id,
                    job=0,
                    step=check,  # the run's steps are its checks (fleetval.run.imported)
                    check=check,
                    collective=ing.collective_of(r),
                    op=r.op,
                    dtype=r.dtype,
                    size_bytes=r.size,
                    world_size=int(ing.world_size or 1),
                    rank=dev.rank if dev else 0,
                    local_rank=0,
                    node=host,
                    device=f"gpu:{dev.device}" if dev else "",
                    device_id=dev.bus if dev else None,
                    backend=backend,
                    iters=ing.iters,
                    time_us_median=r.time_us,
                    algbw_gbps=r.algbw,
                    busbw_gbps=r.busbw,
                    wrong=r.wrong or 0,
                    status=status.value,
                    message=f"{ing.tool}: "
                    + ("not validated" if r.wrong is None else f"{r.wrong} wrong elements"),
                    details={
                        "source": ing.path,
                        "format": ing.fmt,
                        "count": r.count,
                        "root": r.root,
                        "in_place": r.in_place,
                        **ing.notes,
                    },
                )
            )
    return rows


def node_records(ing: Ingested) -> list[NodeRecord]:
    """NODES_SCHEMA rows: host and GPUs from the rank lines, versions from the NCCL log."""
    log = ing.log
    out = []
    for host in node_hosts(ing):
        devs = [d for d in ing.devices if d.host == host]
        model = devs[0].model if devs else None
        rec: NodeRecord = {
            "node": host, "hostname": host, "gpu_model": model, "gpu_count": len(devs),
            "gpu_ids": [d.bus for d in devs],
            "extra": json.dumps({"ingested_from": ing.path, "format": ing.fmt,
                                 "gpu_sku": gpu_model(model) if model else None,
                                 **_log_extra(log)}, sort_keys=True),
        }  # fmt: skip
        if log:
            rec["cuda_version"] = log.cuda_version
            rec["hip_version"] = log.hip_version
            rec["rocm_version"] = log.rocm_version
            if log.library == "rccl":
                rec["rccl_version"] = log.version
            else:
                rec["nccl_version"] = log.version
        out.append(rec)
    return out


def _log_extra(log: NcclLogSummary | None) -> _LogExtra:
    if log is None:
        return {}
    return {"network": log.network, "fabric": log.fabric, "net_plugin": log.net_plugin,
            "cuda_driver_version": log.cuda_driver_version,
            "sharp": log.sharp, "ib_devices": list(log.ib_devices)}  # fmt: skip
