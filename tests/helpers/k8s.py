"""The Kubernetes manifests under deploy/kubernetes and the checks the API server would apply."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
KUBERAY = ROOT / "tests" / "data" / "kuberay"
KUBERNETES_VERSION = "1.33.0"  # a current release whose schemas kubernetes-validate ships
CRDS = {"RayCluster": "raycluster.v1.openapi.json", "RayJob": "rayjob.v1.openapi.json"}


def kustomize() -> list[str] | None:
    if tool := shutil.which("kustomize"):
        return [tool, "build"]
    if tool := shutil.which("kubectl"):
        return [tool, "kustomize"]
    return None


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema with unknown fields refused: the API server would silently prune them."""
    schema = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"].get("rayClusterSpec", doc["spec"])
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    return [g["template"] for g in groups]


def validate(doc: dict[str, Any]) -> None:
    """Raises on a manifest Kubernetes (or KubeRay) would refuse or silently change."""
    kind = doc["kind"]
    if kind in CRDS:
        schema = _closed(json.loads((KUBERAY / CRDS[kind]).read_text()))
        jsonschema.validate(doc, schema)
        # The stored schema leaves pod templates out; they are core PodTemplateSpecs.
        for template in pod_templates(doc):
            pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}}
            kubernetes_validate.validate({**pod, "template": template}, KUBERNETES_VERSION, True)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
