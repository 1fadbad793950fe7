"""What the service returns, a client may send back; what it streams, it bounds (issue 24):
a baseline read and PUT back, whole JSON numbers, Parquet downloads in capped parts (a real
store, read back with pandas and DuckDB)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from fleetval.api import Settings, create_app
from fleetval.api.db import Scope
from fleetval.api.limits import Limits
from fleetval.store.dataset import Store
from fleetval.store.records import Run
from fleetval.store.schema import RESULTS_SCHEMA

RUN = "20260101-000000-aaaaaa"
PARQUET = {"Accept": "application/vnd.apache.parquet"}


def _client(data: Path, limits: Limits) -> Iterator[tuple[TestClient, dict[str, str]]]:
    app = create_app(
        Settings(data_dir=data, run_executor=False, run_scheduler=False, limits=limits)
    )
    auth = {"Authorization": f"Bearer {app.state.db.create_token(Scope.ADMIN, 'root')}"}
    with TestClient(app) as client:
        yield client, auth


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    Store(tmp_path).write_run(
        Run(run_id=RUN, suite="nightly", status="pass", started_at=datetime.now(UTC),
                  labels={"nightly": "true"})
    )  # fmt: skip
    yield from _client(tmp_path, Limits(max_parquet_rows=7, max_parquet_samples=60))


# -- 1. a baseline as the service returns it is a baseline it accepts ----------------------


def test_a_baseline_read_back_and_put_back_is_accepted(api):
    client, auth = api
    made = client.put("/v1/baselines/nb", json={"where": {"nightly": "true"}, "last": 3},
                      headers=auth)  # fmt: skip
    assert made.status_code == 201, made.text
    got = client.get("/v1/baselines/nb", headers=auth).json()
    again = {k: got[k] for k in ("where", "last", "description")}
    assert client.put("/v1/baselines/nb", json=again, headers=auth).status_code == 200
    listed = client.get("/v1/baselines", headers=auth).json()[0]
    assert listed["last"] == 3
    by_runs = client.put("/v1/baselines/rb", json={"runs": [RUN]}, headers=auth).json()
    back = {k: by_runs[k] for k in ("runs", "description")}
    assert client.put("/v1/baselines/rb", json=back, headers=auth).status_code == 200


def test_the_published_baseline_says_what_a_request_accepts(api):
    """The response schema's `last` is the request's (>= 1): a schema-driven client that
    feeds a returned value back (schemathesis's stateful phase) is never refused."""
    client, _ = api
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    out, where = schemas["BaselineOut"]["properties"], schemas["BaselineWhere"]["properties"]
    assert out["last"]["anyOf"] == where["last"]["anyOf"]
    assert {"type": "integer", "minimum": 1} in out["last"]["anyOf"]


@pytest.mark.parametrize(
    "path, body, status",
    [
        ("/v1/baselines/nb", {"where": {"nightly": "true"}, "last": 2.0}, 201),
        ("/v1/runs", {"suite": "smoke", "retries": 3.0}, 201),
        # past validation: there is no baseline of that name
        ("/v1/compare", {"baseline": "nb", "runs": [RUN], "history": 0.0}, 404),
    ],
)
def test_a_whole_number_written_as_a_float_is_the_integer(api, path, body, status):
    """JSON has one number type: `2.0` is JSON Schema's integer 2 (schemathesis sends it)."""
    client, auth = api
    method = client.put if path.startswith("/v1/baselines") else client.post
    r = method(path, json=body, headers=auth)
    assert r.status_code == status, r.text


@pytest.mark.parametrize("last", ["2", True, 2.5, 0, 0.0, -1])
def test_what_is_not_a_whole_number_at_least_one_is_still_422(api, last):
    client, auth = api
    r = client.put("/v1/baselines/nb", json={"where": {"nightly": "true"}, "last": last},
                   headers=auth)  # fmt: skip
    assert r.status_code == 422 and r.json()["errors"][0]["loc"][:2] == ["body", "BaselineRuns"]
    assert any(e["loc"][:3] == ["body", "BaselineWhere", "last"] for e in r.json()["errors"])


# -- 2. a Parquet download is at most max_parquet_rows rows and max_parquet_samples samples -


def _write_results(root: Path, samples_of: list[int]) -> pa.Table:
    """One row per rank (rank i has samples_of[i] samples) in two files, as a run writes."""
    rows = [
        {"run_id": RUN, "job": i % 2, "step": "bw", "check": "bandwidth", "rank": i,
         "node": f"n{i % 3}", "status": "pass", "samples_us": [float(i)] * n}
        for i, n in enumerate(samples_of)
    ]  # fmt: skip
    store = Store(root)
    for job in (0, 1):
        part = [r for r in rows if r["job"] == job]
        store.write_results_table(RUN, f"job{job}-bw", pa.Table.from_pylist(part, RESULTS_SCHEMA))
    return store.results([RUN])


def _parts(client: TestClient, auth: dict[str, str], **params: str) -> list[pd.DataFrame]:
    parts, cursor = [], None
    while True:
        r = client.get(f"/v1/runs/{RUN}/results", headers={**auth, **PARQUET},
                       params={**params, **({"cursor": cursor} if cursor else {})})  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == PARQUET["Accept"]
        parts.append(pd.read_parquet(io.BytesIO(r.content)))
        cursor = r.headers.get("X-Fleetval-Next-Cursor")
        assert r.headers["X-Fleetval-Truncated"] == ("true" if cursor else "false")
        if cursor is None:
            return parts
        assert len(parts) < 50, "the parts never end"


def test_a_parquet_download_comes_in_parts_of_at_most_max_rows(api, tmp_path):
    client, auth = api
    stored = _write_results(tmp_path, [2] * 20).to_pandas()
    parts = _parts(client, auth)
    assert [len(p) for p in parts] == [7, 7, 6]
    whole = pd.concat(parts, ignore_index=True)
    assert list(whole.columns) == RESULTS_SCHEMA.names
    assert whole["rank"].tolist() == stored["rank"].tolist()
    assert [list(s) for s in whole["samples_us"]] == [list(s) for s in stored["samples_us"]]
    first = client.get(f"/v1/runs/{RUN}/results?format=parquet", headers=auth)
    assert first.headers["X-Fleetval-Total-Rows"] == "20"
    assert first.headers["X-Fleetval-Next-Cursor"] == "7"
    (tmp_path / "part.parquet").write_bytes(first.content)
    [(count,)] = duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 'part.parquet'}'").fetchall()
    assert count == 7


def test_a_parquet_part_stops_before_the_row_past_max_samples(api, tmp_path):
    client, auth = api
    # 60 samples per part: ranks 0-2 (25+25), then 3 alone (100: one row always comes),
    # then 4-5 (30+30), then 6
    _write_results(tmp_path, [25, 25, 25, 100, 30, 30, 10])
    parts = _parts(client, auth)
    assert [p["rank"].tolist() for p in parts] == [[0, 2], [4, 6], [1], [3], [5]]


def test_filters_and_cursor_page_the_matching_rows(api, tmp_path):
    client, auth = api
    _write_results(tmp_path, [1] * 30)
    parts = _parts(client, auth, node="n1")
    assert [len(p) for p in parts] == [7, 3]
    assert sorted(pd.concat(parts)["rank"]) == list(range(1, 30, 3))
    rest = client.get(
        f"/v1/runs/{RUN}/results", params={"format": "parquet", "node": "n1", "cursor": "7"},
        headers=auth,
    )  # fmt: skip
    assert pq.read_table(io.BytesIO(rest.content))["rank"].to_pylist() == [
        13,
        19,
        25,
    ]  # job 1, after job 0
    assert "X-Fleetval-Next-Cursor" not in rest.headers
