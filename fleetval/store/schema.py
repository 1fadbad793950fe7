"""Measurement rows and the one Arrow schema of each stored table.

Every check returns `Row`s; the store writes them with `RESULTS_SCHEMA`. The schema is
versioned (`SCHEMA_VERSION`) and documented in docs/schema.md; any Arrow reader can use
it without fleetval.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import pyarrow as pa

from fleetval.jsontypes import JsonObject

# What a node runs and is: environment columns of NODES_SCHEMA (defined in the catalog,
# which filters on them without pyarrow).
from fleetval.store.base import ENV_COLUMNS as ENV_COLUMNS  # one definition, pyarrow-free
from fleetval.store.records import StoredRow
from fleetval.vocab import Status

SCHEMA_VERSION = 3  # 2: summaries/ table; runs.metrics (declarations of the checks run)
# 3: lateness/ table (each rank's lateness, written with its results part)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One measurement by one rank: a long, typed row (never dimensions packed in names)."""

    run_id: str = ""
    job: int = 0
    step: str = ""
    check: str = ""
    collective: str | None = None
    op: str | None = None
    dtype: str | None = None
    size_bytes: int | None = None
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    node: str = ""
    device: str = ""  # "cpu", "cuda:0"
    device_id: str | None = None  # GPU UUID or PCI bus id: names the physical device
    backend: str = ""
    iters: int = 0
    time_us_median: float | None = None
    time_us_p99: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    metric: str | None = None  # for non-collective measurements, e.g. "gemm_tflops"
    value: float | None = None
    unit: str | None = None
    wrong: int = 0  # elements that differ from the exact expected value
    status: str = Status.INFO.value  # nothing is PASS unless a check judged it
    message: str = ""
    samples_us: tuple[float, ...] = ()  # per-iteration times, so statistics are possible later
    details: JsonObject = field(default_factory=dict)  # check-specific, stored as JSON

    def to_record(self) -> StoredRow:
        rec = dataclasses.asdict(self)
        rec["samples_us"] = list(self.samples_us)
        rec["details"] = json.dumps(self.details, sort_keys=True, default=str)
        return rec


RESULTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("job", pa.int32()),
        ("step", pa.string()),
        ("check", pa.string()),
        ("collective", pa.string()),
        ("op", pa.string()),
        ("dtype", pa.string()),
        ("size_bytes", pa.int64()),
        ("world_size", pa.int32()),
        ("rank", pa.int32()),
        ("local_rank", pa.int32()),
        ("node", pa.string()),
        ("device", pa.string()),
        ("device_id", pa.string()),
        ("backend", pa.string()),
        ("iters", pa.int32()),
        ("time_us_median", pa.float64()),
        ("time_us_p99", pa.float64()),
        ("algbw_gbps", pa.float64()),
        ("busbw_gbps", pa.float64()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("unit", pa.string()),
        ("wrong", pa.int64()),
        ("status", pa.string()),
        ("message", pa.string()),
        ("samples_us", pa.list_(pa.float64())),
        ("details", pa.string()),
    ],
    metadata={"fleetval.schema_version": str(SCHEMA_VERSION), "fleetval.table": "results"},
)

NODES_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("node", pa.string()),
        ("hostname", pa.string()),
        ("node_ip", pa.string()),
        ("ray_node_id", pa.string()),
        ("gpu_model", pa.string()),
        ("gpu_count", pa.int32()),
        ("gpu_ids", pa.list_(pa.string())),  # UUIDs or PCI bus ids
        ("driver_version", pa.string()),
        ("cuda_version", pa.string()),
        ("rocm_version", pa.string()),
        ("hip_version", pa.string()),
        ("nccl_version", pa.string()),
        ("rccl_version", pa.string()),
        ("torch_version", pa.string()),
        ("ray_version", pa.string()),
        ("python_version", pa.string()),
        ("kernel", pa.string()),
        ("cpu_model", pa.string()),
        ("extra", pa.string()),  # JSON: anything else the fingerprint found
    ],
    metadata={"fleetval.schema_version": str(SCHEMA_VERSION), "fleetval.table": "nodes"},
)

# What a node's fingerprint reports (the driver adds run_id, node and ray_node_id).
FINGERPRINT_COLUMNS = tuple(
    n for n in NODES_SCHEMA.names if n not in ("run_id", "node", "ray_node_id")
)

RUNS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("suite", pa.string()),
        ("status", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("labels", pa.map_(pa.string(), pa.string())),
        ("submitter", pa.string()),
        ("backend", pa.string()),
        ("faults", pa.string()),  # JSON list of injected faults: a report always says so
        ("suite_json", pa.string()),  # the validated suite, so a run can be reproduced
        ("summary", pa.string()),  # JSON: per-step status and failure culprits
        ("message", pa.string()),
        ("metrics", pa.string()),  # JSON list: the metric declarations of the checks run
    ],
    metadata={"fleetval.schema_version": str(SCHEMA_VERSION), "fleetval.table": "runs"},
)


# One run reduced per identity and node, written beside each results part: compare and
# trend read these, not the samples. `center` is the run's robust value for the identity
# on that node (see fleetval/store/summaries.py for how each kind is reduced).
SUMMARIES_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("check", pa.string()),
        ("collective", pa.string()),
        ("op", pa.string()),
        ("dtype", pa.string()),
        ("size_bytes", pa.int64()),
        ("world_size", pa.int32()),
        ("metric", pa.string()),  # the row's own metric; null for timed collectives
        ("unit", pa.string()),
        ("node", pa.string()),
        ("kind", pa.string()),  # timed | value | correct
        ("ranks", pa.int32()),  # result rows reduced into this one
        ("iters", pa.int32()),  # iterations (timed) or devices (value) behind `center`
        ("center", pa.float64()),  # timed: median over iterations of the ranks' mean time, us
        ("spread", pa.float64()),  # within-run spread: 1.4826 MAD / center
        ("busbw_scale", pa.float64()),  # busbw = busbw_scale / time (GB/s x us)
        ("wrong", pa.int64()),
        ("failed", pa.int32()),  # rows with status fail or wrong elements
    ],
    metadata={"fleetval.schema_version": str(SCHEMA_VERSION), "fleetval.table": "summaries"},
)


# Each rank's lateness in one results part, written beside it: the fleet-outlier check reads
# these, not the samples (`fleetval/store/summaries.py`, `rank_lateness`).
LATENESS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("check", pa.string()),
        ("collective", pa.string()),
        ("world_size", pa.int32()),
        ("rank", pa.int32()),
        ("node", pa.string()),  # the node of the rank's first row
        # median over sizes and dtypes of the median over iterations of the share of the
        # collective's time the others waited for this rank, percent
        ("lateness_pct", pa.float64()),
        ("rows", pa.int32()),  # result rows (sizes x dtypes) behind lateness_pct
    ],
    metadata={"fleetval.schema_version": str(SCHEMA_VERSION), "fleetval.table": "lateness"},
)


def rows_to_table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([r.to_record() for r in rows], schema=RESULTS_SCHEMA)


# String columns read dictionary-encoded: cheaper to decode, and their indices are group codes.
DICT_COLS = ("run_id", "check", "collective", "op", "dtype", "node", "device_id", "metric",
             "unit", "status")  # fmt: skip


# One row per run, node and GPU: the hardware the health check read (`gpu_hardware` rows; the
# reading is in their details), written beside each results part that has any. Counters are
# as the source printed them; null where it printed nothing (see docs/schema.md).
GPU_METRIC = "gpu_hardware"
NODE_HW_METRIC = "hw_node_action"  # the node's row beside its GPUs': its action, its drain line
_GPU_INTS = ("index", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
             "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "ecc_deferred",
             "retired_sbe", "retired_dbe", "remap_corrected", "remap_uncorrected", "pcie_gen",
             "pcie_gen_max", "pcie_width", "pcie_width_max", "pcie_replays", "nvlink_up",
             "nvlink_total", "xgmi_up", "xgmi_total")  # fmt: skip
_GPU_FLOATS = ("sm_clock_mhz", "sm_clock_max_mhz", "temp_c", "temp_slowdown_c",
               "temp_slowdown_margin_c", "power_w", "power_limit_w", "power_default_limit_w")  # fmt: skip
_GPU_BOOLS = ("ecc_enabled", "sram_threshold_exceeded", "retired_pending", "remap_pending",
              "remap_failed")  # fmt: skip
_GPU_STRINGS = ("vendor", "source", "uuid", "serial", "pci_bus_id", "name", "model", "vbios",
                "driver_version", "perf_state", "recovery_action")  # fmt: skip
_GPU_JSON = ("ecc_blocks", "remap_histogram", "nvlink_errors")  # nested counters, as JSON
GPUS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("job", pa.int32()),
        ("step", pa.string()),
        ("node", pa.string()),
        ("device_id", pa.string()),
        *[(c, pa.string()) for c in _GPU_STRINGS],
        *[(c, pa.int64()) for c in _GPU_INTS],
        *[(c, pa.float64()) for c in _GPU_FLOATS],
        *[(c, pa.bool_()) for c in _GPU_BOOLS],
        ("clock_reasons", pa.list_(pa.string())),
        *[(c, pa.string()) for c in _GPU_JSON],
        ("status", pa.string()),  # the health row's judgement of this GPU
        ("action", pa.string()),  # fleetval.detect.hardware.Action
        ("findings", pa.list_(pa.string())),  # finding codes
        ("not_judged", pa.list_(pa.string())),  # what the source did not say
    ],
    metadata={"fleetval.schema_version": str(SCHEMA_VERSION), "fleetval.table": "gpus"},
)


def gpus_table(results: pa.Table) -> pa.Table:
    """The GPUS_SCHEMA rows of a results part: one per `gpu_hardware` row with a reading or a
    finding. A GPU that only a kernel event or another tool's result names (a `dcgmi diag`
    test, the Fabric block) has its findings and null counters."""
    hits = [i for i, m in enumerate(results.column("metric").to_pylist()) if m == GPU_METRIC]
    recs = []
    for row in results.take(hits).to_pylist() if hits else []:
        details = json.loads(row["details"] or "{}")
        reading = details.get("reading") or {}
        if not reading and not details.get("findings"):
            continue
        recs.append({
            **{k: row[k] for k in ("run_id", "job", "step", "node", "device_id", "status")},
            **{c: reading.get(c) for c in (*_GPU_STRINGS, *_GPU_INTS, *_GPU_FLOATS, *_GPU_BOOLS,
                                            "clock_reasons")},
            **{c: json.dumps(reading.get(c) or {}, sort_keys=True) if reading else None
               for c in _GPU_JSON},
            "action": details.get("action"),
            "findings": [f["code"] for f in details.get("findings", [])],
            "not_judged": details.get("not_judged", []),
        })  # fmt: skip
    return pa.Table.from_pylist(recs, schema=GPUS_SCHEMA)
