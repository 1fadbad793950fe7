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

The formats' fields are those of NVIDIA/nccl-tests `src/util.cu` (stdout and JSON writers) and
ROCm/rccl-tests `src/common.cu` (`Reporter`); tests/data/README.md names the samples.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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
OPS = {"sum": "sum", "prod": "product", "max": "max", "min": "min", "avg": "avg"}
# busbw / algbw per collective as a function of the world size n (nccl-tests PERFORMANCE.md)
_BUS_FACTOR_INVERSE = {
    "all_reduce": lambda r: 2 / (2 - r),
    "all_gather": lambda r: 1 / (1 - r),
    "reduce_scatter": lambda r: 1 / (1 - r),
    "all_to_all": lambda r: 1 / (1 - r),
}


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
    notes: dict[str, Any] = field(default_factory=dict)

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
    elif _HEADER.search(_unwrap(text)):
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
    if any(r.collective is None for r in ing.results) and ing.collective is None:
        raise IngestError(
            f"{where}: which collective? expected the program name (all_reduce_perf, ...) in the "
            "file or its name, or --label collective=all_reduce"
        )
    if not ing.world_size:
        ing = replace(ing, world_size=_world_from_busbw(ing))
    if not ing.world_size:
        raise IngestError(
            f"{where}: no world size: expected '#  Rank N ... on HOST device D' lines "
            "or results whose busbw/algbw tell it"
        )
    return ing


def _world_from_busbw(ing: Ingested) -> int | None:
    """n from busbw/algbw = f(n), at the largest size (rounding hurts least there)."""
    rows = [r for r in ing.results if r.algbw and r.busbw and r.algbw > 0]
    if not rows:
        return None
    r = max(rows, key=lambda r: r.size)
    inverse = _BUS_FACTOR_INVERSE.get(ing.collective_of(r))
    ratio = r.busbw / r.algbw  # type: ignore[operator]
    if inverse is None or ratio >= (2 if ing.collective_of(r) == "all_reduce" else 1):
        return None
    ing.notes["world_size_from"] = "busbw/algbw"
    return round(inverse(ratio))


def _collective(name: str | None) -> str | None:
    if not name:
        return None
    key = re.sub(r"_perf(?:_mpi)?$", "", name.strip().lower().split("/")[-1])
    return COLLECTIVES.get(key.replace(" ", "")) or COLLECTIVES.get(key.replace("_", ""))


def _collective_in(text: str, path: str) -> str | None:
    for source in (text, Path(path).name):
        m = re.search(r"\b(\w+?)_perf\b", source)
        if m and (c := _collective(m.group(1))):
            return c
    return None


# ---- stdout tables ----------------------------------------------------------------------------

# mpirun's "[1,0]<stdout>:" tag before every line
_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:", re.MULTILINE)
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


def result_rows(ing: Ingested, run_id: str) -> list[dict[str, Any]]:
    """The fields of the file's rows (fleetval.store.schema.Row): one per result and node."""
    backend = "rccl" if ing.tool == "rccl-tests" else "nccl"
    first = {h: min((d for d in ing.devices if d.host == h), key=lambda d: d.rank, default=None)
             for h in node_hosts(ing)}  # fmt: skip
    rows = []
    for r in ing.results:
        status = (Status.INFO if r.wrong is None else Status.PASS if r.wrong == 0
                  else Status.FAIL)  # fmt: skip
        for host, dev in first.items():
            rows.append(
                dict(
                    run_id=run_id,
                    job=0,
                    step=ing.tool,
                    check="bandwidth_in_place" if r.in_place else "bandwidth",
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


def node_records(ing: Ingested) -> list[dict[str, Any]]:
    """NODES_SCHEMA rows: host and GPUs from the rank lines, versions from the NCCL log."""
    log = ing.log
    out = []
    for host in node_hosts(ing):
        devs = [d for d in ing.devices if d.host == host]
        model = devs[0].model if devs else None
        rec: dict[str, Any] = {
            "node": host, "hostname": host, "gpu_model": model, "gpu_count": len(devs),
            "gpu_ids": [d.bus for d in devs],
            "extra": json.dumps({"ingested_from": ing.path, "format": ing.fmt,
                                 "gpu_sku": gpu_model(model) if model else None,
                                 **_log_extra(log)}, sort_keys=True),
        }  # fmt: skip
        if log:
            rec.update(
                cuda_version=log.cuda_version, hip_version=log.hip_version,
                rocm_version=log.rocm_version,
                **{f"{log.library or 'nccl'}_version": log.version},
            )  # fmt: skip
        out.append(rec)
    return out


def _log_extra(log: NcclLogSummary | None) -> dict[str, Any]:
    if log is None:
        return {}
    return {"network": log.network, "fabric": log.fabric, "net_plugin": log.net_plugin,
            "sharp": log.sharp, "ib_devices": list(log.ib_devices)}  # fmt: skip
