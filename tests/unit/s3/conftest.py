"""Ingestion planning, ledger and credential tests: no Airflow database, no S3 server (those are in integration/s3)."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No setting, credential or endpoint leaks in from the environment that runs the tests."""
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__FACEFUSION__", "FACEFUSION_", "AWS_", "AIRFLOW_CONN_", "AIRFLOW_VAR_")):
            monkeypatch.delenv(name)
    yield
