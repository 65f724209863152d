"""Pods rendered by the kubernetes backend, checked without a cluster: an explicit connection, a recording API client."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kube_pod_helpers import KUBE_CONN_ID, RecordingCoreV1Api
from written import commit_output, commit_segment, write_work

SECRET_VALUES = {
    "AWS_ACCESS_KEY_ID": "AKIAUNITTESTSECRET01",
    "AWS_SECRET_ACCESS_KEY": "unit-test-secret-key-do-not-leak-7f3a9",
    "AWS_SESSION_TOKEN": "unit-test-session-token-do-not-leak-91c2",
}
CONNECTION_PASSWORD = "unit-test-connection-password-5be1"
# A kubeconfig whose API server cannot answer: every API call in these tests goes to a recording client instead.
UNREACHABLE_CLUSTER = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "none", "cluster": {"server": "https://kubernetes.invalid:6443"}}],
    "users": [{"name": "none", "user": {"token": "not-a-real-token"}}],
    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none", "namespace": "not-this-one"}}],
    "current-context": "none",
}


@pytest.fixture(autouse=True)
def _isolated_airflow(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No [facefusion] setting or fault switch leaks in; the only Kubernetes connection is the explicit test one."""
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__FACEFUSION__", "FACEFUSION_", "KUBECONFIG")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    connection = {
        "conn_type": "kubernetes",
        "extra": {"in_cluster": False, "kube_config": json.dumps(UNREACHABLE_CLUSTER)},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{KUBE_CONN_ID.upper()}", json.dumps(connection))
    yield


@pytest.fixture
def secrets_in_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Storage credentials where a careless operator would find them: the scheduler's environment and an AWS connection."""
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    aws = {"conn_type": "aws", "login": SECRET_VALUES["AWS_ACCESS_KEY_ID"], "password": CONNECTION_PASSWORD}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(aws))
    return {**SECRET_VALUES, "connection_password": CONNECTION_PASSWORD}


@pytest.fixture
def recording_client() -> RecordingCoreV1Api:
    return RecordingCoreV1Api()


@pytest.fixture(name="write_work")
def write_work_fixture() -> Callable[..., Any]:
    return write_work


@pytest.fixture(name="commit_segment")
def commit_segment_fixture() -> Callable[..., Any]:
    return commit_segment


@pytest.fixture(name="commit_output")
def commit_output_fixture() -> Callable[..., Any]:
    return commit_output
