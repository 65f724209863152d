"""Work folders on the local filesystem, written the way the worker writes them, and a stand-in worker, for operator tests
without Airflow's DB."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from recorded_stats import RecordedStats, recorded_stats
from written import Written, commit_output, commit_segment, write_work


@pytest.fixture(autouse=True)
def _isolated_airflow(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No [facefusion] setting or fault switch leaks in from the environment that runs the tests."""
    for name in list(os.environ):
        if name.startswith("AIRFLOW__FACEFUSION__") or name.startswith("FACEFUSION_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    yield


@pytest.fixture(name="write_work")
def write_work_fixture() -> Callable[..., Written]:
    return write_work


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


FAKE_WORKER = """
import json, os, sys
with open(os.environ["FAKE_WORKER_RECORD"], "a") as record:
    record.write(json.dumps({"argv": sys.argv[1:], "try": os.environ.get("FACEFUSION_TRY_NUMBER"),
                             "faults": os.environ.get("FACEFUSION_TEST_FAULTS"),
                             "task": os.environ.get("FACEFUSION_TASK_KEY"),
                             "run": os.environ.get("FACEFUSION_RUN_KEY"),
                             "allowed": os.environ.get("FACEFUSION_ALLOWED_OUTPUT_PREFIXES"),
                             "metrics": {k: v for k, v in os.environ.items()
                                         if k.startswith(("FACEFUSION_METRIC_", "OTEL_"))}}) + "\\n")
for line in os.environ.get("FAKE_WORKER_LINES", "").split("|"):
    if line:
        print(line, file=sys.stderr, flush=True)
code = int(os.environ.get("FAKE_WORKER_EXIT", "0"))
if code:
    report = json.dumps({"failure_class": os.environ["FAKE_WORKER_CLASS"], "retryable": code == 75,
                         "message": os.environ["FAKE_WORKER_MESSAGE"]})
    print("worker log line", file=sys.stderr)
    print(report, file=sys.stderr)
    if os.environ.get("FAKE_WORKER_TERMINATION_LOG") == "1":
        with open(os.environ["FACEFUSION_TERMINATION_LOG"], "w") as log:
            log.write(report)
sys.exit(code)
"""


@pytest.fixture
def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("FAKE_WORKER_RECORD", str(record))
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORKER_COMMAND", f"{sys.executable} {script}")

    def launches() -> list[dict[str, Any]]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return launches
