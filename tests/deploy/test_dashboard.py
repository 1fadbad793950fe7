"""The Grafana dashboard asks only for what the service's /metrics exports (names and labels),
read from a live app's /metrics; the Prometheus configuration scrapes it with a read token."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from fleetval.api import Settings, create_app
from fleetval.api.db import Scope, ServiceDB

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "fleetval-dashboard.json"
# What a PromQL expression may name besides metrics: functions, keywords, Grafana variables.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "irate",
    "histogram_quantile", "label_values", "le", "on", "ignoring", "and", "or", "unless",
}  # fmt: skip
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Series names -> label names, from a live app's /metrics, with every family holding data."""
    data = tmp_path_factory.mktemp("serve")
    app = create_app(Settings(data_dir=data, run_executor=False))
    db = ServiceDB(data)
    token = db.create_token(Scope.READ, "prometheus")
    # A run ended with a culprit, and a busbw figure: so every family has samples and labels.
    db.add(run_id="r1", submission_id=None, suite="smoke", suite_json="{}", labels={},
           submitter="ci", retries=0)  # fmt: skip
    assert db.claim_next() == "r1"
    step = {"job": 0, "step": "bandwidth", "check": "bandwidth", "status": "fail", "seconds": 3.0,
            "culprits": [{"rank": 2, "node": "gpu-017", "reason": "hang"}]}  # fmt: skip
    db.record_event("r1", {"kind": "end"}, steps=[step], finish=("fail", "rank 2 hung"))
    db.set_busbw("r1", [("all_reduce", "large", "gpu-017", 312.5)])
    with TestClient(app) as client:
        assert client.get("/metrics").status_code == 401  # why prometheus.yml carries a token
        reply = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
        for suffix in SUFFIXES.get(family.type, ("",)):
            series.setdefault(family.name + suffix, set())
    return series


def _exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for row in dash["panels"] for p in (row, *row.get("panels", []))]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v.get("definition")]
    return exprs


def test_dashboard_names_only_exported_metrics_and_labels(exported: dict[str, set[str]]) -> None:
    exprs = _exprs()
    assert len(exprs) >= 8
    used: set[str] = set()
    for expr in exprs:
        bare = re.sub(r'"[^"]*"|\[[^\]]*\]|\$\w+', "", expr)  # strings, ranges, variables
        names = {w for w in re.findall(r"[a-zA-Z_:][\w:]*", bare) if w not in PROMQL_WORDS}
        metrics = {n for n in names if n.startswith("fleetval_")}
        assert metrics, f"no fleetval metric in {expr!r}"
        unknown = metrics - exported.keys()
        assert not unknown, f"{expr!r} names {unknown}; the service exports {sorted(exported)}"
        labels = names - metrics
        have = set().union(*(exported[m] for m in metrics)) | {"le"}
        assert labels <= have, f"{expr!r} uses labels {labels - have} the metrics lack"
        used |= metrics
    # The panels: runs by status, queue depth, step durations, busbw, culprits.
    for needed in ("fleetval_runs", "fleetval_queue_depth", "fleetval_step_duration_seconds_bucket",
                   "fleetval_busbw_gbps", "fleetval_culprits_total"):  # fmt: skip
        assert needed in used


def test_exported_families_carry_the_dashboards_dimensions(exported: dict[str, set[str]]) -> None:
    assert exported["fleetval_busbw_gbps"] >= {"node", "collective"}
    assert exported["fleetval_culprits_total"] >= {"node", "reason"}
    assert exported["fleetval_runs"] >= {"status"}


def test_prometheus_scrapes_metrics_with_a_token() -> None:
    conf = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = conf["scrape_configs"]
    assert {j["job_name"] for j in jobs} == {"fleetval", "fleetval-kubernetes"}
    for job in jobs:
        assert job["metrics_path"] == "/metrics"
        assert job["authorization"]["type"] == "Bearer"
        assert job["authorization"]["credentials_file"].startswith("/")
    static = next(j for j in jobs if j["job_name"] == "fleetval")["static_configs"][0]
    assert static["targets"] == ["fleetval.fleetval.svc:8080"]  # deploy/kubernetes' Service
