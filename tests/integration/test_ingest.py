"""`fleetval ingest` as a fleet team uses it, through the real CLI and store: a real nccl-tests
table (tests/data/real) and a real rccl-tests JSON file become runs; a baseline set from
ingested runs; a second file with a planted 10% busbw drop fails compare naming the collective
and size, a clean one passes; DuckDB reads the ingested store; a bad file writes nothing."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import duckdb
from typer.testing import CliRunner

from fleetval.cli.app import app

REAL = Path(__file__).resolve().parents[1] / "data" / "real"
TABLE = REAL / "nccl-tests-a3mega-h100-2node.txt"
ROW = re.compile(r"^(\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+)((?:\s+\S+){8})\s*$")
runner = CliRunner()


def rescale(text: str, *, time: float = 1.0, bw: float = 1.0) -> str:
    """The table with every time scaled by `time` and algbw/busbw by `bw` (result lines only)."""
    out = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            cols = m.group(2).split()
            for i in range(0, 8, 4):
                cols[i] = f"{float(cols[i]) * time:.2f}"
                cols[i + 1] = f"{float(cols[i + 1]) * bw:.2f}"
                cols[i + 2] = f"{float(cols[i + 2]) * bw:.2f}"
            line = m.group(1) + "".join(f"  {c:>7}" for c in cols)
        out.append(line)
    return "\n".join(out) + "\n"


def jittered(seed: int) -> str:
    """A run-to-run copy of the real table: time x (1+e), bandwidths / (1+e), |e| <= 1.5%."""
    e = random.Random(seed).uniform(-0.015, 0.015)
    return rescale(TABLE.read_text(), time=1 + e, bw=1 / (1 + e))


def cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def ingest(data: Path, *files: Path, label: str = "fleet=a3") -> list[str]:
    code, out = cli("ingest", *map(str, files), "--data", str(data), "--label", label, "--json")
    assert code == 0, out
    return [r["run_id"] for r in json.loads(out)]


def test_ingest_baseline_compare_and_duckdb(tmp_path: Path) -> None:
    data = tmp_path / "data"
    files = []
    for seed in range(5):
        f = tmp_path / f"base{seed}.txt"
        f.write_text(jittered(seed))
        files.append(f)
    base = ingest(data, *files)
    rccl = ingest(data, REAL / "rccl-tests-pr93-jsonl.json", label="fleet=mi")
    assert len(base) == 5 and len(rccl) == 1
    assert cli("baseline", "set", "a3", *[a for r in base for a in ("--run", r)],
               "--data", str(data))[0] == 0  # fmt: skip

    dropped = tmp_path / "all_reduce_perf_dropped.txt"
    dropped.write_text(rescale(jittered(11), bw=0.9))
    code, out = cli("compare", "-b", "a3", "--run", ingest(data, dropped)[0], "--data", str(data))
    assert code == 1, out
    assert "all_reduce" in out and "8GiB" in out

    clean = tmp_path / "all_reduce_perf_clean.txt"
    clean.write_text(jittered(12))
    code, out = cli("compare", "-b", "a3", "--run", ingest(data, clean)[0], "--data", str(data))
    assert code == 0, out

    results = duckdb.sql(
        f'SELECT "check", collective, world_size, count(*) AS n, count(DISTINCT node) AS nodes '
        f"FROM read_parquet('{data}/results/*/*.parquet') WHERE run_id = '{base[0]}' "
        'GROUP BY ALL ORDER BY "check"'
    ).fetchall()
    assert results == [("bandwidth", "all_reduce", 16, 62, 2),
                       ("bandwidth_in_place", "all_reduce", 16, 62, 2)]  # fmt: skip
    nodes = duckdb.sql(
        f"SELECT hostname, gpu_model, gpu_count FROM read_parquet('{data}/nodes/{base[0]}.parquet')"
        " ORDER BY hostname"
    ).fetchall()
    assert nodes == [("ztan-mig-235z", "NVIDIA H100 80GB HBM3", 8),
                     ("ztan-mig-gq73", "NVIDIA H100 80GB HBM3", 8)]  # fmt: skip
    ((busbw,),) = duckdb.sql(
        f"SELECT busbw_gbps FROM read_parquet('{data}/results/{rccl[0]}/*.parquet') "
        "WHERE size_bytes = 4096 AND \"check\" = 'bandwidth'"
    ).fetchall()
    assert abs(busbw - 0.31578622752644403) < 1e-12


def test_a_bad_file_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bad = REAL / "nccl-1357-ibext-sharp.log"  # a debug log, not results
    code, out = cli("ingest", str(TABLE), str(bad), "--data", str(data))
    assert code == 2
    assert "not a results file" in out and "nccl-tests" in out
    assert not data.exists() or not any(data.rglob("*.parquet"))


def test_nccl_log_command(tmp_path: Path) -> None:
    code, out = cli("nccl-log", str(REAL / "nccl-1538-ibext_v8-roce.log"), "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["network"], doc["fabric"], doc["link_layer"]) == ("IBext_v8", "RoCE", "RoCE")
    code, out = cli("nccl-log", str(REAL / "rccl-therock-comm-libs.log"))
    assert code == 0 and "rccl 2.30.4" in out and "iommu=pt" in out
    code, out = cli("nccl-log", str(TABLE))
    assert code == 2 and "NCCL_DEBUG=INFO" in out


def test_pasted_tail_and_nameless_table_stored_saying_what_was_inferred(tmp_path: Path) -> None:
    """ROCm/rccl#2078's pasted tail (named by its closing line) and the real a3mega table with
    every line that names the program cut: both stored, labels saying what was read from the
    numbers, rows with the collective and world size."""
    data = tmp_path / "data"
    nameless = tmp_path / "pasted.txt"
    lines = TABLE.read_text().splitlines()
    nameless.write_text("\n".join(line for line in lines if "_perf" not in line))
    tail = REAL / "rccl-2078-ainic-all-reduce-tail.txt"
    code, out = cli("ingest", str(tail), str(nameless), "--data", str(data), "--json")
    assert code == 0, out
    tail_run, table_run = json.loads(out)
    assert tail_run["labels"]["world_size_inferred"] == "true"
    assert "collective_inferred" not in tail_run["labels"]
    assert table_run["labels"]["collective_inferred"] == "true"
    assert "world_size_inferred" not in table_run["labels"]  # from the rank lines
    for run, world in ((tail_run, 16), (table_run, 16)):
        got = duckdb.sql(
            f"SELECT DISTINCT collective, world_size FROM "
            f"read_parquet('{data}/results/{run['run_id']}/*.parquet')"
        ).fetchall()
        assert got == [("all_reduce", world)]


def test_an_ambiguous_table_exits_2_naming_the_ambiguity_and_writes_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    gather = REAL / "rccl-1490-all-gather-srun-label.txt"  # redop none: all_gather or alltoall
    code, out = cli("ingest", str(TABLE), str(gather), "--data", str(data))
    assert code == 2
    said = " ".join(out.split())  # the console wraps at its width
    assert "fits all_gather and all_to_all alike" in said and "--label collective=" in said
    assert not data.exists() or not any(data.rglob("*.parquet"))
    code, out = cli("ingest", str(gather), "--data", str(data), "--label", "collective=all_gather",
                    "--json")  # fmt: skip
    assert code == 0, out
    [run] = json.loads(out)
    assert run["labels"]["world_size_inferred"] == "true" and run["labels"]["collective"] == (
        "all_gather")  # fmt: skip


def test_nccl_log_says_the_cuda_driver_version(tmp_path: Path) -> None:
    code, out = cli("nccl-log", str(REAL / "nccl-tests-320-cuda-driver-12060.log"))
    assert code == 1 and "CUDA 12.6 (driver CUDA 12.6)" in out  # the log reports an error


def test_nccl_log_exits_1_on_a_log_that_reports_an_error(tmp_path: Path) -> None:
    """A failed log (an NCCL error) exits 1, as text or JSON; an excerpt that never reached
    init's end, but reports no error, is read (exit 0) and says so."""
    failed = REAL / "nccl-229-aws-libfabric-ring.log"
    code, out = cli("nccl-log", str(failed), "--json")
    assert code == 1 and json.loads(out)["errors"] == ["ncclSystemError"]
    code, out = cli("nccl-log", str(failed))
    assert code == 1 and "nccl error    ncclSystemError" in out
    code, out = cli("nccl-log", str(REAL / "nccl-1538-ibext_v8-roce.log"))
    assert code == 0 and "init          not completed in this log" in out


def test_summary_of_an_imported_table_counts_ranks_and_sets_in_place_beside(
    tmp_path: Path,
) -> None:
    """The 16-rank, 2-node a3mega table and ROCm/rccl#2078's 16-rank tail: `ranks` is the world
    size (not the rows, one per node and half), and each size is one line with the out-of-place
    and in-place figures side by side, as nccl-tests prints them."""
    data = tmp_path / "data"
    tail = REAL / "rccl-2078-ainic-all-reduce-tail.txt"
    table_run, tail_run = ingest(data, TABLE, tail)
    for run in (table_run, tail_run):
        code, out = cli("results", run, "--summary", "--json", "--data", str(data))
        assert code == 0, out
        lines = json.loads(out)
        assert {line["ranks"] for line in lines} == {16}
        assert len({line["size"] for line in lines}) == len(lines)  # one line per size
    by_size = {line["size"]: line for line in json.loads(cli(
        "results", table_run, "--summary", "--json", "--data", str(data))[1])}  # fmt: skip
    # `8  2  float  sum  -1  135.8 0.00 0.00 0  123.5 0.00 0.00 0` in the file
    small = by_size[8]
    assert small["time_us"] == 135.8 and small["ip_time_us"] == 123.5
    assert small["time_min_us"] == small["time_max_us"] == 135.8
    big = by_size[8589934592]  # `47535 180.71 338.82 0  47743 179.92 337.35 0`
    assert (big["busbw_gbps"], big["ip_busbw_gbps"]) == (338.82, 337.35)
    assert big["wrong"] == big["ip_wrong"] == 0


def test_show_and_results_name_an_imported_run_s_steps_alike(tmp_path: Path) -> None:
    """`show` lists the steps `bandwidth` and `bandwidth_in_place`; `results --step` takes
    those names, and a filter that matches nothing says so (exit 2) instead of an empty table."""
    data = tmp_path / "data"
    [run] = ingest(data, TABLE)
    code, out = cli("show", run, "--json", "--data", str(data))
    steps = {s["step"] for s in json.loads(out)["run"]["summary"]["steps"]}
    assert steps == {"bandwidth", "bandwidth_in_place"}
    for step in steps:
        code, out = cli("results", run, "--step", step, "--json", "--data", str(data))
        assert code == 0, out
        rows = json.loads(out)
        assert len(rows) == 62 and {r["step"] for r in rows} == {step}
    code, out = cli("results", run, "--step", "nccl-tests", "--data", str(data))
    assert code == 2
    said = " ".join(out.split())
    assert "no row of run" in said and "--step nccl-tests" in said
    assert "steps: bandwidth, bandwidth_in_place" in said
