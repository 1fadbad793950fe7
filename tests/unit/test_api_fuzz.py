"""Property-based requests against every route of the OpenAPI spec: never a 500.

(Schemathesis-style, with hypothesis directly: random path parameters, query values,
headers and JSON bodies, some of them near-valid.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetval.api import Settings, create_app
from fleetval.api.db import Scope

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
NEAR_VALID = st.fixed_dictionaries(
    {},
    optional={
        "suite": st.one_of(
            TEXT,
            st.just("smoke"),
            st.dictionaries(st.sampled_from(["name", "steps", "placement", "faults"]), JSON),
        ),
        "labels": st.dictionaries(TEXT, TEXT | st.integers(), max_size=3),
        "submission_id": TEXT,
        "retries": st.integers(-5, 20),
        "runs": st.lists(TEXT, max_size=3),
        "where": st.dictionaries(TEXT, TEXT, max_size=3),
        "baseline": TEXT,
        "threshold_pct": st.floats(allow_nan=False, allow_infinity=False) | st.none(),
        "per": TEXT,
        "last": st.integers(-2, 5),
    },
)
PATH_VALUE = st.text(
    st.characters(codec="ascii", min_codepoint=33, max_codepoint=126, exclude_characters="/?#%"),
    min_size=1,
    max_size=20,
)


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    data: Path = tmp_path_factory.mktemp("fuzz")
    app = create_app(Settings(data_dir=data, run_executor=False, max_body_bytes=4096))
    token = app.state.db.create_token(Scope.ADMIN, "fuzz")
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def operations(client: TestClient) -> list[tuple[str, str]]:
    spec = client.get("/openapi.json").json()
    return [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_request_gets_a_500(client, data):
    method, path = data.draw(st.sampled_from(operations(client)))
    url = re.sub(r"\{[^}]+\}", lambda _: data.draw(PATH_VALUE), path)
    params = data.draw(
        st.dictionaries(
            st.sampled_from(
                ["status", "suite", "label", "limit", "cursor", "step", "rank", "format", "samples"]
            ),
            TEXT,
            max_size=3,
        )
    )
    body = data.draw(NEAR_VALID | JSON) if method in ("POST", "PUT") else None
    headers = data.draw(
        st.sampled_from([{}, {"Last-Event-ID": "7"}, {"Accept": "application/vnd.apache.parquet"}])
    )
    r = client.request(method, url, params=params, json=body, headers=headers)
    assert r.status_code < 500, (method, url, params, body, r.text)


@pytest.mark.parametrize(
    "body",
    [
        b'{"suite": {"name": Infinity}}',
        b'{"suite": NaN}',
        b'{"suite": "smoke", "retries": -Infinity}',
    ],
)
def test_non_finite_json_numbers_are_422_with_the_field(client, body):
    r = client.post("/v1/runs", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["loc"][:2] in (["body", "suite"], ["body", "retries"])


# -- the OpenAPI says what the server accepts (issue 24 §5.10) -----------------------------


def _body_validator(client: TestClient, model: str) -> Any:
    import jsonschema

    spec = client.get("/openapi.json").json()
    schema = {"$ref": f"#/components/schemas/{model}", "components": spec["components"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(
    "path, model, body",
    [
        ("/v1/runs", "SubmitRequest", {"suite": {"name": "x", "steps": [{}]}}),
        ("/v1/runs", "SubmitRequest", {"suite": {"name": "x", "steps": [{"check": "nope"}]}}),
        (
            "/v1/runs",
            "SubmitRequest",
            {"suite": {"name": "x", "steps": [{"check": "p2p", "x": 1}]}},
        ),
        ("/v1/runs", "SubmitRequest", {"suite": {"name": "x", "steps": [], "seed": False}}),
        ("/v1/schedules", "ScheduleRequest", {"name": "n", "cron": "@a", "suite": "smoke"}),
        ("/v1/schedules", "ScheduleRequest", {"name": "n", "cron": "0 0 0 * *", "suite": "smoke"}),
        (
            "/v1/schedules",
            "ScheduleRequest",
            {"name": "n", "cron": "* * * * * */5", "suite": "smoke"},
        ),
    ],
)
def test_what_the_schema_refuses_the_server_refuses(client, path, model, body):
    assert not _body_validator(client, model).is_valid(body)
    assert client.post(path, json=body).status_code == 422


@pytest.mark.parametrize(
    "path, model, body",
    [
        ("/v1/runs", "SubmitRequest", {"suite": {"name": "x", "steps": [{"check": "p2p"}]}}),
        ("/v1/schedules", "ScheduleRequest", {"name": "n1", "cron": "@daily", "suite": "smoke"}),
        ("/v1/schedules", "ScheduleRequest",
         {"name": "n2", "cron": "*/5 1-3 * jan,mar mon-fri 30", "suite": "smoke"}),
    ],
)  # fmt: skip
def test_what_the_schema_accepts_the_server_accepts(client, path, model, body):
    assert _body_validator(client, model).is_valid(body)
    assert client.post(path, json=body).status_code == 201
