"""Work folders on the local filesystem, written the way the worker writes them, for operator tests without Airflow's DB."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from recorded_stats import RecordedStats, recorded_stats
from written import Written, commit_output, commit_segment, write_job


@pytest.fixture(autouse=True)
def _isolated_airflow(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No [facefusion] setting or fault switch leaks in from the environment that runs the tests."""
    for name in list(os.environ):
        if name.startswith("AIRFLOW__FACEFUSION__") or name.startswith("FACEFUSION_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    yield


@pytest.fixture(name="write_job")
def write_job_fixture() -> Callable[..., Written]:
    return write_job


@pytest.fixture(name="commit_segment")
def commit_segment_fixture() -> Callable[[Written, int], Path]:
    return commit_segment


@pytest.fixture(name="commit_output")
def commit_output_fixture() -> Callable[..., None]:
    return commit_output


@pytest.fixture
def stats_sent() -> Iterator[RecordedStats]:
    """What the operators send through Airflow's stats while the test runs."""
    with recorded_stats() as recorder:
        yield recorder
