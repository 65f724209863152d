"""Without an exporter configured the worker's metrics cost nothing: OpenTelemetry is never imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from facefusion_provider.metric_names import OTLP_ENDPOINT_VARIABLES, REMOTE_WRITE_URL_VARIABLE
from facefusion_provider.telemetry.metrics import WorkerMetrics, worker_metrics

FRAME_LOOP = """
import sys
from facefusion_provider.telemetry.metrics import worker_metrics

metrics = worker_metrics({"work_id": "j"})
for _ in range(3):
    metrics.frames("decode")
    with metrics.timed("swap"):
        metrics.faces("swapped", 1)
    metrics.frames_remaining(2)
metrics.segment_committed()
metrics.failure("no_face", retryable=False)
metrics.flush()
print(type(metrics).__name__, sorted(name for name in sys.modules if name.startswith("opentelemetry")))
"""


def test_an_unconfigured_worker_never_imports_opentelemetry() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OTEL_", "FACEFUSION_METRICS_"))}
    result = subprocess.run(
        [sys.executable, "-c", FRAME_LOOP], env=env, capture_output=True, text=True, check=False, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["WorkerMetrics", "[]"]


def test_the_null_metrics_object_is_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*OTLP_ENDPOINT_VARIABLES, REMOTE_WRITE_URL_VARIABLE):
        monkeypatch.delenv(name, raising=False)

    first, second = worker_metrics(), worker_metrics({"work_id": "j"})

    assert first is second and type(first) is WorkerMetrics
