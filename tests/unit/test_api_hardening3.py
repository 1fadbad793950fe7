"""Requests and suites written to hurt, third pass (issue 40): patterns that cannot backtrack,
names that cannot walk the file system, methods named in a 405, quotas that hold under
concurrency. HTTP is probed on a real `fleetval serve` on loopback (no executor, no Ray)
over a temporary data directory the tests write first."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest

from fleetval.api.db import Scope, ServiceDB
from fleetval.checks.model_pattern import MAX_SUBJECT, check_model_pattern, model_matches
from fleetval.store.dataset import Store
from fleetval.store.schema import Row, rows_to_table
from fleetval.testing.signoff import H100, healthy, write_run
from tests.helpers.service import Replica

TINY = {
    "name": "tiny",
    "placement": {"world_sizes": [2], "gpus_per_rank": 0},
    "steps": [{"check": "collectives", "collectives": ["barrier"], "size": 64}],
}
# Forty optional characters then one that never comes: Python's `re` tries 2^40 ways.
BACKTRACKS = ".?" * 40 + "!"


def at_once(targets: list[Callable[[], None]], *, timeout_s: float = 120) -> None:
    """Each target in a thread of its own, all started together; back when every one is done
    (or has had `timeout_s`)."""
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)


def assert_429_past_the_limit(
    statuses: list[tuple[int, str | None]], *, served_at_least: int
) -> None:
    """Concurrent requests past a limit: some served, the rest 429, each saying when to retry."""
    codes = sorted(code for code, _ in statuses)
    assert set(codes) == {200, 429} and codes.count(200) >= served_at_least, codes
    assert all(after for code, after in statuses if code == 429)


WIDE = "20261101-000200-wide01"  # one step of 64 rows x 100,000 samples (51 MB of doubles)


def wide_step(run_id: str, *, rows: int, iters: int) -> pa.Table:
    """A bandwidth step whose every row holds `iters` samples."""
    table = rows_to_table(
        [
            Row(run_id=run_id, step="bw", check="bandwidth", collective="all_reduce", op="sum",
                dtype="float32", size_bytes=1 << 20, world_size=rows, rank=r, node="gpu-1",
                iters=iters, time_us_median=10.0)
            for r in range(rows)
        ]
    )  # fmt: skip
    values = np.random.default_rng(1).uniform(9.0, 11.0, rows * iters)
    offsets = pa.array(np.arange(0, rows * iters + 1, iters, dtype=np.int32))
    samples = pa.ListArray.from_arrays(offsets, pa.array(values))
    at = table.schema.get_field_index("samples_us")
    return table.set_column(at, table.schema.field(at), samples.cast(table.schema.field(at).type))


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def Serve(data: Path, *args: str) -> Replica:
    return Replica(data, args)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """A serve over a store of two H100 runs (one whose stored suite holds a pattern that
    backtracks), with a read, a submit and an admin token."""
    data = tmp_path_factory.mktemp("served")
    store = Store(data)
    rng = np.random.default_rng(3)
    write_run(store, "20261101-000000-base01", healthy("20261101-000000-base01", rng))
    minimum = {"gpu_model": BACKTRACKS, "collective": "all_reduce", "min_busbw_gbps": 1}
    gates = {"busbw": {"minimums": [minimum], "use_defaults": False}}
    write_run(store, "20261101-000100-evil01", healthy("20261101-000100-evil01", rng), gates=gates)
    store.write_results_table(WIDE, "part-0", wide_step(WIDE, rows=64, iters=100_000))
    db = ServiceDB(data)
    tokens = {
        "read": db.create_token(Scope.READ, "reader"),
        "alice": db.create_token(Scope.SUBMIT, "alice"),
        "root": db.create_token(Scope.ADMIN, "root"),
    }
    db.close()
    server = Serve(data).start()
    headers = {k: {"Authorization": f"Bearer {v}"} for k, v in tokens.items()}
    headers["pid"] = server.proc.pid  # type: ignore[assignment,union-attr]
    try:
        yield server.url, headers
    finally:
        server.stop()


# -- 1. gpu_model patterns are matched in linear time -----------------------------------


def test_the_worst_pattern_built_matches_in_under_10_ms():
    from fleetval.checks import model_pattern

    # NOTE: the slowest of those tried (nested counted repeats make the largest RE2 program
    # a 128-character pattern can); the backtracking classics are far under it
    worst = ["(.{0,9}){0,99}!", "(.{0,30}){0,30}!", BACKTRACKS, "(.*){20}!", "(a|aa)*c"]
    subjects = ["a" * MAX_SUBJECT, "ab" * 64, "é" * MAX_SUBJECT, "a" * 100_000]
    for pattern in worst:
        check_model_pattern(pattern)
        for subject in subjects:
            took = []
            for _ in range(3):
                model_pattern._split.cache_clear()  # the compile counts too
                started = time.perf_counter()
                assert not model_matches(pattern, subject)
                took.append(time.perf_counter() - started)
            assert min(took) < 0.010, (pattern, subject[:10], min(took))


@pytest.mark.parametrize(
    "pattern",
    [
        r"H100(?!.*(PCIe|NVL))",
        r"H200(?!.*NVL)",
        r"A100(?!.*PCIE)",
        r"A100.*(?!.*80GB)",
        r"(?!.*PCIe)",
        "MI300X|MI325X",
        "A100.*SXM",
        "^NVIDIA",
        "SXM$",
        r"\bH100\b",
        "h1?00",
        "cpu",
    ],
)
def test_a_pattern_means_what_pythons_re_means(pattern):
    import re

    models = [
        H100, "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "H100 SXM H100 PCIe", "PCIe H100",
        "NVIDIA H200", "NVIDIA H200 NVL", "AMD Instinct MI300X", "MI325X", "cpu", "",
        "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB", "h100 nvl h100", "A100 80GB A100",
    ]  # fmt: skip
    for model in models:
        assert model_matches(pattern, model) == bool(re.search(pattern, model, re.I)), model


@pytest.mark.parametrize(
    "pattern, says",
    [
        (r"(a)\1", "invalid escape"),
        (r"(?<=H)100", "lookaround"),
        (r"H100(?=.*SXM)", "lookaround"),
        (r"(?:H100(?!.*PCIe))|MI300X", "lookaround"),
        (r"(\pL|\pN|\pP|\pS){0,999}!", "too large"),
        ("x" * 200, "at most 128"),
    ],
)
def test_a_pattern_re2_cannot_match_is_refused_with_the_reason(pattern, says):
    with pytest.raises(ValueError, match=says):
        check_model_pattern(pattern)


def test_a_stored_backtracking_pattern_stalls_neither_its_report_nor_healthz(served):
    url, h = served
    # The stored run's report searches the pattern in its H100's model: seconds to forever
    # under a backtracking engine, with /healthz waiting behind it.
    health: list[float] = []

    def probe() -> None:
        time.sleep(0.3)
        started = time.monotonic()
        httpx.get(f"{url}/healthz", timeout=15)
        health.append(time.monotonic() - started)

    report = f"{url}/v1/runs/20261101-000100-evil01/report"
    accept = {**h["read"], "Accept": "application/json"}
    started = time.monotonic()
    prober = threading.Thread(target=probe)
    prober.start()
    r = httpx.get(report, headers=accept, timeout=15)
    prober.join()
    assert r.status_code == 200, r.text
    assert time.monotonic() - started < 10
    assert health and health[0] < 5


def test_a_pattern_is_checked_at_submit_by_what_re2_accepts(served):
    url, h = served
    minimum = {"gpu_model": BACKTRACKS, "collective": "all_reduce", "min_busbw_gbps": 1}
    suite = {**TINY, "gates": {"busbw": {"minimums": [minimum]}}}
    r = httpx.post(f"{url}/v1/runs", json={"suite": suite}, headers=h["alice"], timeout=10)
    assert r.status_code == 201, r.text
    bad = {**minimum, "gpu_model": r"(?<=H)100"}
    suite = {**TINY, "gates": {"busbw": {"minimums": [bad]}}}
    r = httpx.post(f"{url}/v1/runs", json={"suite": suite}, headers=h["alice"], timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"][-1] == "gpu_model"
    assert "lookaround" in r.json()["detail"]


# -- 9. step names name files: one safe path component, checked at parse time ------------


@pytest.mark.parametrize("name", ["../../../../tmp/evil", "a/b", ".hidden", "x" * 65])
def test_a_step_name_that_is_no_safe_file_name_is_422_naming_the_field(served, name):
    url, h = served
    suite = {**TINY, "steps": [{**TINY["steps"][0], "name": name}]}
    r = httpx.post(f"{url}/v1/runs", json={"suite": suite}, headers=h["alice"], timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "suite", "steps", "0", "name"]


def test_a_plain_step_name_is_accepted(served):
    url, h = served
    suite = {**TINY, "steps": [{**TINY["steps"][0], "name": "barrier-1.fast_path"}]}
    r = httpx.post(f"{url}/v1/runs", json={"suite": suite}, headers=h["alice"], timeout=10)
    assert r.status_code == 201, r.text


# -- 10. a 405 names the methods the path serves -----------------------------------------


@pytest.mark.parametrize(
    "method, path, allowed",
    [
        ("DELETE", "/v1/runs", "GET, POST"),
        ("PUT", "/v1/runs/20261101-000000-base01", "GET"),
        ("POST", "/healthz", "GET"),
        ("PATCH", "/v1/baselines/b1", "DELETE, GET, PUT"),
        ("GET", "/v1/compare", "POST"),
    ],
)
def test_a_405_names_the_allowed_methods(served, method, path, allowed):
    url, h = served
    r = httpx.request(method, f"{url}{path}", headers=h["root"], timeout=10)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allowed


# -- 11. a baseline name is checked alike everywhere; no problem names the data directory --


def test_a_baseline_name_that_is_no_name_is_422_on_report_and_compare(served):
    url, h = served
    evil = "../../etc/passwd"
    report = f"{url}/v1/runs/20261101-000000-base01/report"
    r = httpx.get(report, params={"baseline": evil}, headers=h["read"], timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["query", "baseline"]
    body = {"baseline": evil, "runs": ["20261101-000000-base01"]}
    r = httpx.post(f"{url}/v1/compare", json=body, headers=h["read"], timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "baseline"]


def test_a_conflict_does_not_name_the_data_directory(served, tmp_path_factory):
    url, h = served
    body = {"runs": ["20261101-000000-nope01"]}
    r = httpx.put(f"{url}/v1/baselines/b1", json=body, headers=h["root"], timeout=10)
    assert r.status_code == 409, r.text
    assert "20261101-000000-nope01" in r.json()["detail"]
    data = str(tmp_path_factory.getbasetemp())
    assert data not in r.text and "/tmp" not in r.text and "the store" in r.text


# -- 8. the client reads its token from the environment or a file, never a command line ---


def test_the_client_reads_its_token_from_the_file_fleetval_token_file_names(served, tmp_path):
    url, h = served
    secret = tmp_path / "token"
    secret.write_text(h["read"]["Authorization"].removeprefix("Bearer ") + "\n")
    secret.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "FLEETVAL_TOKEN"}
    env |= {"FLEETVAL_TOKEN_FILE": str(secret), "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "fleetval.cli", "schedule", "list", "--json", "--server", url]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith("[")
    env["FLEETVAL_TOKEN_FILE"] = str(tmp_path / "absent")
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "FLEETVAL_TOKEN_FILE" in res.stderr, res.stderr


def test_the_docs_never_put_a_token_on_a_command_line():
    root = Path(__file__).resolve().parents[2]
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            assert "--token $" not in line and "--token ..." not in line, f"{doc.name}:{n}"


# -- 13. the schedule quota is checked in the insert's own transaction --------------------


def test_concurrent_schedules_never_pass_the_quota_together(tmp_path):
    (tmp_path / "limits.yaml").write_text("max_schedules_per_owner: 2\n")
    db = ServiceDB(tmp_path)
    token = db.create_token(Scope.SUBMIT, "carol")
    db.close()
    server = Serve(tmp_path, "--limits", str(tmp_path / "limits.yaml")).start()
    statuses: list[int] = []
    barrier = threading.Barrier(16)

    def create(i: int) -> None:
        body = {"name": f"nightly-{i}", "cron": "@daily", "suite": TINY}
        with httpx.Client(timeout=30) as client:
            barrier.wait()
            r = client.post(f"{server.url}/v1/schedules", json=body,
                            headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        statuses.append(r.status_code)

    try:
        at_once([partial(create, i) for i in range(16)], timeout_s=60)
    finally:
        server.stop()
    assert sorted(statuses) == [201, 201] + [429] * 14, sorted(statuses)


# -- 12. baselines come in pages; a filter baseline resolves to a bounded number of runs ---


def test_baselines_are_listed_in_pages(served):
    url, h = served
    for name in ("page-a", "page-b", "page-c"):
        body = {"runs": ["20261101-000000-base01"]}
        r = httpx.put(f"{url}/v1/baselines/{name}", json=body, headers=h["root"], timeout=10)
        assert r.status_code in (200, 201), r.text
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        r = httpx.get(f"{url}/v1/baselines", params=params, headers=h["read"], timeout=10)
        assert r.status_code == 200, r.text
        assert len(r.json()) <= 2
        seen += [b["name"] for b in r.json()]
        pages += 1
        cursor = r.headers.get("x-fleetval-next-cursor")
        if cursor is None:
            break
    assert pages >= 2 and seen == sorted(seen) and {"page-a", "page-b", "page-c"} <= set(seen)
    r = httpx.get(f"{url}/v1/baselines", params={"limit": 0}, headers=h["read"], timeout=10)
    assert r.status_code == 422


def test_a_filter_baseline_resolves_to_at_most_max_baseline_runs(tmp_path):
    store = Store(tmp_path)
    rng = np.random.default_rng(5)
    for i in range(3):
        write_run(store, f"20261101-00000{i}-run00{i}", healthy(f"20261101-00000{i}-run00{i}", rng))
    (tmp_path / "limits.yaml").write_text("max_baseline_runs: 2\n")
    db = ServiceDB(tmp_path)
    auth = {"Authorization": f"Bearer {db.create_token(Scope.ADMIN, 'root')}"}
    db.close()
    server = Serve(tmp_path, "--limits", str(tmp_path / "limits.yaml")).start()
    try:
        put = f"{server.url}/v1/baselines/all-release"
        r = httpx.put(put, json={"where": {"suite": "release"}}, headers=auth, timeout=10)
        assert r.status_code == 201, r.text
        assert r.json()["last"] == 2
        assert r.json()["resolves_to"] == ["20261101-000001-run001", "20261101-000002-run002"]
        body = {"where": {"suite": "release"}, "last": 3}
        r = httpx.put(put, json=body, headers=auth, timeout=10)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"] == ["body", "last"]
        assert "max_baseline_runs" in r.json()["detail"]
    finally:
        server.stop()


# -- 2. a read of samples decodes a bounded row group, and only so many run at once -------


def test_one_rows_samples_cost_one_bounded_row_group_not_the_step(served):
    url, h = served
    results = f"{url}/v1/runs/{WIDE}/results"
    small = f"{url}/v1/runs/20261101-000000-base01/results"
    for _ in range(2):  # warm: imports and the first pages of the small run
        r = httpx.get(small, params={"samples": "true", "limit": 5}, headers=h["read"], timeout=30)
        assert r.status_code == 200, r.text
    before = peak_rss_mb(h["pid"])  # type: ignore[arg-type]
    r = httpx.get(results, params={"samples": "true", "limit": 1}, headers=h["read"], timeout=30)
    assert r.status_code == 200, r.text
    assert len(r.json()["rows"][0]["samples_us"]) == 100_000
    grew = peak_rss_mb(h["pid"]) - before  # type: ignore[arg-type]
    # NOTE: the whole step's samples are 51 MB of doubles: decoding its one row group grew
    # the peak by ~230 MB; a 2 MiB group by ~25 MB (the JSON page and the other columns)
    assert grew < 60, f"the server's peak grew {grew:.0f} MB for one row's samples"


def test_sample_reads_past_max_sample_reads_are_429(served):
    url, h = served
    results = f"{url}/v1/runs/{WIDE}/results"
    statuses: list[tuple[int, str | None]] = []
    barrier = threading.Barrier(12)

    def read() -> None:
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            r = client.get(results, params={"samples": "true", "limit": 10}, headers=h["read"])
        statuses.append((r.status_code, r.headers.get("retry-after")))

    at_once([read] * 12)
    assert_429_past_the_limit(statuses, served_at_least=4)


# -- 3. attribution needs a window or a run cap; heavy reads have a small pool of their own -


def test_an_attribution_without_a_window_or_a_run_cap_is_422_naming_it(served):
    url, h = served
    r = httpx.post(f"{url}/v1/attribute", json={}, headers=h["read"], timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "since"]
    r = httpx.post(f"{url}/v1/attribute", json={"last": 10**6}, headers=h["read"], timeout=30)
    assert r.status_code == 422, r.text
    assert "max_attribute_runs" in r.json()["detail"]
    r = httpx.post(f"{url}/v1/attribute", json={"last": 5}, headers=h["read"], timeout=30)
    assert r.status_code in (200, 409), r.text  # these runs have no per-node versions to vary


def test_reports_past_max_heavy_reads_are_429_and_leave_other_routes_free(served):
    url, h = served
    report = f"{url}/v1/runs/20261101-000000-base01/report"
    statuses: list[tuple[int, str | None]] = []
    light: list[float] = []
    barrier = threading.Barrier(9)

    def fetch() -> None:
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            r = client.get(report, headers={**h["read"], "Accept": "text/markdown"})
        statuses.append((r.status_code, r.headers.get("retry-after")))

    def status() -> None:
        barrier.wait()
        started = time.monotonic()
        r = httpx.get(f"{url}/v1/runs/{WIDE}", headers=h["read"], timeout=30)
        assert r.status_code == 200
        light.append(time.monotonic() - started)

    at_once([*[fetch] * 8, status])
    assert_429_past_the_limit(statuses, served_at_least=2)
    assert light and light[0] < 5


# -- 7. /docs (scripts from a CDN) only when asked -----------------------------------------


def test_docs_are_off_unless_asked(served, tmp_path):
    url, _ = served
    assert httpx.get(f"{url}/docs", timeout=10).status_code == 404
    assert httpx.get(f"{url}/redoc", timeout=10).status_code == 404
    assert httpx.get(f"{url}/openapi.json", timeout=10).status_code == 200
    server = Serve(tmp_path, "--docs").start()
    try:
        assert httpx.get(f"{server.url}/docs", timeout=10).status_code == 200
    finally:
        server.stop()
