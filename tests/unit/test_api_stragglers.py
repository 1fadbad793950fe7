"""`POST /v1/stragglers` on a real `fleetval serve` on loopback (no executor, no Ray): a real
gloo job's Flight Recorder dumps (pickles, sent as base64) and step logs (text) give the same
JSON as `fleetval stragglers --json` over the same files and store, to a read token; bad
input is 422 naming the field."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from fleetval.api.db import Scope, ServiceDB
from fleetval.cli import app
from fleetval.store.dataset import Store
from fleetval.testing.sweeps import write_sweep
from tests.helpers.service import Replica

JOB = Path(__file__).parents[1] / "data" / "stragglers" / "late-sleep"


def job_files(root: Path) -> list[dict[str, str]]:
    """Every file of the job as the request carries it, named relative to the job's folder
    (`dumps/node-1/fr_rank_2`: the folder names the host, the name the rank)."""
    out = []
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = f.read_bytes()
        name = str(f.relative_to(root))
        if raw[:1] == b"\x80":  # a pickled dump
            out.append({"name": name, "base64": base64.b64encode(raw).decode()})
        else:
            out.append({"name": name, "text": raw.decode()})
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, httpx.Client]]:
    """A serve over a store of two sweeps (node-1 suspect in the newer), with a read token."""
    data = tmp_path_factory.mktemp("stragglers")
    store = Store(data)
    ok = {n: ("healthy", 10.0) for n in ("node-0", "node-1")}
    write_sweep(store, 0, ok)
    write_sweep(store, 1, {**ok, "node-1": ("suspect", 7.0)})
    db = ServiceDB(data)
    token = db.create_token(Scope.READ, "reader")
    db.close()
    server = Replica(data).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as client:  # fmt: skip
            yield data, client
    finally:
        server.stop()


def post(client: httpx.Client, files: list[dict[str, Any]]) -> httpx.Response:
    return client.post("/v1/stragglers", json={"files": files})


def test_a_read_token_gets_the_same_json_as_the_command(served: tuple[Path, httpx.Client]):
    data, client = served
    res = post(client, job_files(JOB))
    assert res.status_code == 200, res.text
    doc = res.json()
    assert doc["stragglers"] == [2] and doc["not_read"] == []
    (window,) = doc["windows"]
    (late,) = window["ranks"]
    assert (late["rank"], late["host"]) == (2, "node-1")
    assert 0.048 < late["low_s"] <= late["lateness_s"] <= late["high_s"] < 0.056
    assert doc["nodes"]["node-1"][0].startswith("sweeps, oldest first: healthy (")
    assert "suspect (" in doc["nodes"]["node-1"][0]
    cli = CliRunner().invoke(app, ["stragglers", str(JOB), "--json", "--data", str(data)])
    assert cli.exit_code == 1, cli.output
    assert doc == json.loads(cli.output)


def test_without_a_token_it_is_401(served: tuple[Path, httpx.Client]) -> None:
    _, client = served
    res = httpx.post(client.base_url.join("/v1/stragglers"), json={"files": job_files(JOB)})
    assert res.status_code == 401


def test_nothing_readable_is_422_naming_what_was_looked_for(served):
    _, client = served
    res = post(client, [{"name": "notes.txt", "text": "nothing here\n"}])
    assert res.status_code == 422
    (err,) = res.json()["errors"]
    assert err["loc"] == ["body", "files"] and err["type"] == "nothing_readable"
    assert "looked for PyTorch Flight Recorder dumps" in err["msg"] and "notes.txt" in err["msg"]


def test_a_pickle_that_names_code_is_never_loaded(served, tmp_path: Path) -> None:
    """A dump is read data-only: a pickle that would call a function is not read, and says so."""
    _, client = served
    evil = pickle.dumps({"entries": [], "x": Path("/etc/passwd")})
    files = [*job_files(JOB), {"name": "dumps/node-1/fr_rank_9",
                               "base64": base64.b64encode(evil).decode()}]  # fmt: skip
    res = post(client, files)
    assert res.status_code == 200, res.text
    (skipped,) = res.json()["not_read"]
    assert skipped.startswith("dumps/node-1/fr_rank_9 (not a readable Flight Recorder dump")
    assert "pathlib" in skipped and res.json()["stragglers"] == [2]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"files": [{"name": "a", "base64": "not base64!"}]}, ["body", "files", 0, "base64"]),
        ({"files": [{"name": "a", "text": "x", "base64": "eA=="}]}, ["body", "files", 0]),
        ({"files": [{"name": "a"}]}, ["body", "files", 0]),
        ({"files": []}, ["body", "files"]),
        ({"files": [{"name": "", "text": "x"}]}, ["body", "files", 0, "name"]),
        ({"files": [{"name": "a", "text": "x", "mode": "r"}]}, ["body", "files", 0, "mode"]),
        ({"files": [{"name": "a", "text": None, "base64": "eA=="}]}, ["body", "files", 0, "text"]),
        ({"files": [{"name": "a", "base64": "eA"}]}, ["body", "files", 0, "base64"]),
    ],
)
def test_bad_input_is_422_naming_the_field(served, body: dict[str, Any], loc: list[Any]):
    """Refused by the server naming the field, and by the OpenAPI's own schema alike."""
    _, client = served
    res = client.post("/v1/stragglers", json=body)
    assert res.status_code == 422, res.text
    assert loc in [e["loc"] for e in res.json()["errors"]], res.json()
    assert not request_schema(client).is_valid(body)


def request_schema(client: httpx.Client) -> Any:
    import jsonschema

    spec = client.get("/openapi.json").json()
    ref = {"$ref": "#/components/schemas/StragglersRequest", "components": spec["components"]}
    return jsonschema.Draft202012Validator(ref)


def test_the_schema_accepts_both_forms(served) -> None:
    _, client = served
    body = {"files": [{"name": "a.log", "text": "x"}, {"name": "b", "base64": "eA=="}]}
    assert request_schema(client).is_valid(body)
    res = client.post("/v1/stragglers", json=body)  # well-formed; nothing in it to read
    assert res.status_code == 422 and res.json()["errors"][0]["loc"] == ["body", "files"]
