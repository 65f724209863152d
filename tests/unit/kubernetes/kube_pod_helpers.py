"""Helpers of the kubernetes backend's tests: settings, rendering, schema checks and a recording API client."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s
from kubernetes.client.exceptions import ApiException

from facefusion_provider.settings import FaceFusionSettings, KubernetesSettings
from facefusion_provider.work.layout import WorkLayout

KUBE_CONN_ID = "kubernetes_unit_test"
# The Kubernetes schema version the rendered pods and deploy/ manifests are checked against.
KUBERNETES_VERSION = "1.32"


def make_pod_settings(**values: str) -> KubernetesSettings:
    """The kubernetes settings from ``[facefusion]`` text values, as ``load_settings`` would parse them."""
    return FaceFusionSettings.from_values(values, airflow_home="/nonexistent").kubernetes


def serialize(pod: k8s.V1Pod) -> dict[str, Any]:
    value: dict[str, Any] = ApiClient().sanitize_for_serialization(pod)
    return value


def validate_strictly(manifest: dict[str, Any]) -> None:
    """Raises when the manifest does not match the Kubernetes schema (unknown fields included)."""
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def job_uri_under(root: Path, work_id: str = "5f0c2a9be41d7c3a8e6b1f20") -> str:
    return WorkLayout.under(root.as_uri(), work_id).work_uri


class RecordingCoreV1Api:
    """Stands in for ``kubernetes.client.CoreV1Api`` at the API boundary: records every call, creates nothing."""

    def __init__(self) -> None:
        self.api_client = ApiClient()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.remote_pod: k8s.V1Pod | None = None  # what the cluster would answer for the task's pod

    def create_namespaced_pod(self, body: dict[str, Any], namespace: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("create_namespaced_pod", {"body": body, "namespace": namespace}))
        return body

    def list_namespaced_pod(self, namespace: str, label_selector: str, **kwargs: Any) -> Any:
        self.calls.append(("list_namespaced_pod", {"namespace": namespace, "label_selector": label_selector}))
        return SimpleNamespace(items=[])

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> k8s.V1Pod:
        self.calls.append(("read_namespaced_pod", {"name": name, "namespace": namespace}))
        if self.remote_pod is None:
            raise ApiException(status=404, reason="Not Found")
        return self.remote_pod

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
        self.calls.append(("delete_namespaced_pod", {"name": name, "namespace": namespace}))

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        self.calls.append(("patch_namespaced_pod", {"name": name, "namespace": namespace, "body": body}))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


RUN_ID = "manual__2026-01-01T00:00:00+00:00"


class RecordingTaskInstance:
    def __init__(self, *, task_id: str, map_index: int = -1, try_number: int = 1) -> None:
        self.dag_id = "facefusion_swap"
        self.run_id = RUN_ID
        self.task_id = task_id
        self.map_index = map_index
        self.try_number = try_number
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def task_context(task_id: str, *, map_index: int = -1, try_number: int = 1) -> dict[str, Any]:
    """The parts of an Airflow task context that the pod operator reads."""
    ti = RecordingTaskInstance(task_id=task_id, map_index=map_index, try_number=try_number)
    return {"ti": ti, "run_id": RUN_ID, "dag": SimpleNamespace(dag_id=ti.dag_id)}
