"""deploy/kubernetes/extras/topology: on top of an overlay it still validates (KubeRay's CRD
schema, core kinds), the GPU workers start Ray with the labels their init container wrote,
and the init container's script turns a Node's labels into fleetval's topology labels."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetval.fleet.topology import Topology
from fleetval.run.plan import NODE_LABEL
from tests.helpers.k8s import K8S, kustomize, validate
from tests.helpers.tools import tool_missing


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    cmd = kustomize()
    if cmd is None:
        tool_missing("no kustomize or kubectl on PATH")  # NOTE: a failure under CI
    here = tmp_path_factory.mktemp("overlay")
    up = os.path.relpath(K8S, here)
    (here / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{up}/overlays/cuda]\ncomponents: [{up}/extras/topology]\n"
        "images: [{name: fleetval, newName: registry.example.com/fleetval, newTag: t}]\n"
    )
    done = subprocess.run([*cmd, str(here)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _workers(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    return cluster["spec"]["workerGroupSpecs"][0]


def test_the_topology_component_validates_and_wires_the_labels(rendered):
    for doc in rendered:
        validate(doc)
    cluster = next(d for d in rendered if d["kind"] == "RayCluster")
    assert cluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    workers = _workers(rendered)
    assert workers["rayStartParams"]["labels"] == "$FLEETVAL_LABELS"
    pod = workers["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == "registry.example.com/fleetval:t"  # the overlay's `images:` entry
    assert 'eval "$KUBERAY_GEN_RAY_START_CMD"' in pod["containers"][0]["args"][0]
    account = next(d for d in rendered if d["kind"] == "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    binding = next(d for d in rendered if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == account["metadata"]["namespace"] == "fleetval"
    role = next(d for d in rendered if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


def test_the_init_script_writes_the_labels_fleetval_reads(rendered, tmp_path: Path):
    """The script as the manifest holds it, run against a Node object served on loopback
    (the API's shape: metadata.labels), its paths pointed at the test's own files."""
    import http.server
    import json
    import threading

    node = {"metadata": {"name": "gpu-7", "labels": {
        "topology.kubernetes.io/zone": "us-east-1a",
        "nvidia.com/gpu.clique": "7b1f6d2e-2c3a-4f61-9d7e-0a1b2c3d4e5f.3",  # clusterUUID.cliqueID
        "kubernetes.io/hostname": "gpu-7"}}}  # fmt: skip

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/api/v1/nodes/gpu-7"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(json.dumps(node).encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (init,) = _workers(rendered)["template"]["spec"]["initContainers"]
    script = init["command"][2]
    for real, ours in (
        ("https://kubernetes.default.svc", f"http://127.0.0.1:{server.server_port}"),
        ("/var/run/secrets/kubernetes.io/serviceaccount", str(tmp_path)),
        ("/fleetval-topology/labels", str(tmp_path / "labels")),
        ('ssl.create_default_context(cafile=f"{sa}/ca.crt")', "None"),
    ):
        assert real in script
        script = script.replace(real, ours)
    (tmp_path / "token").write_text("t")
    env = {e["name"]: e.get("value", "") for e in init["env"]} | {"FLEETVAL_NODE": "gpu-7"}
    try:
        done = subprocess.run(["python", "-c", script], env={**os.environ, **env}, timeout=30)
    finally:
        server.shutdown()
    assert done.returncode == 0
    labels = dict(kv.split("=", 1) for kv in (tmp_path / "labels").read_text().split(","))
    assert labels == {NODE_LABEL: "gpu-7", "fleetval/rack": "us-east-1a",
                      "fleetval/domain": "7b1f6d2e-2c3a-4f61-9d7e-0a1b2c3d4e5f.3"}  # fmt: skip
    topo = Topology.from_labels({"gpu-7": labels})
    assert topo.group("gpu-7", "rack") == "us-east-1a" and topo.levels == ["rack", "domain"]
