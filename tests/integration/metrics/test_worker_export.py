"""The worker's metrics, pushed over OTLP/HTTP from a process of their own to a real endpoint that decodes them: the
totals are the truth, every point carries the task's attributes, a commit pushes at once and SIGTERM pushes the rest."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults import fault_env
from otlp_receiver import OtlpReceiver, child_environment

from facefusion_provider import metric_names as names
from facefusion_provider.exceptions import EXIT_INVALID_MEDIA, EXIT_RETRYABLE
from facefusion_provider.telemetry import metrics as worker_metrics_module

WORKER = Path(__file__).with_name("simulated_worker.py")
TASK_ENVIRONMENT = {
    "FACEFUSION_METRIC_DAG_ID": "facefusion_swap",
    "FACEFUSION_METRIC_RUN_ID": "manual__2026-01-02T03:04:05+00:00",
    "FACEFUSION_METRIC_TASK_ID": "swap_span",
    "FACEFUSION_METRIC_MAP_INDEX": "3",
    "FACEFUSION_TRY_NUMBER": "2",
    "NODE_NAME": "gpu-node-7",
    "NVIDIA_VISIBLE_DEVICES": "GPU-8c1f6c6e-1d6e-4a55-9b8f-3a2d2c1b0a99",
}


def start_worker(receiver: OtlpReceiver, *args: int, **extra: str) -> subprocess.Popen[str]:
    env = child_environment(
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=receiver.endpoint,
        # Only commits and the exit push: a periodic push would blur what each test proves.
        OTEL_METRIC_EXPORT_INTERVAL="600000",
        **TASK_ENVIRONMENT,
        **extra,
    )
    command = [sys.executable, str(WORKER), *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == expected:
            return
    pytest.fail(f"the worker ended without printing {expected!r}: {process.stderr.read() if process.stderr else ''}")


def test_a_finished_worker_exports_the_true_totals_with_its_task_attributes(otlp_receiver: OtlpReceiver) -> None:
    worker = start_worker(otlp_receiver, 50, 10)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "counted 50" in out

    assert otlp_receiver.total(names.FRAMES.name, stage="decode") == 50
    assert otlp_receiver.total(names.FRAMES.name, stage="swap") == 50
    assert otlp_receiver.total(names.FRAMES.name, stage="encode") == 50
    assert otlp_receiver.total(names.FACES.name, kind="detected") == 100
    assert otlp_receiver.total(names.FACES.name, kind="swapped") == 50
    assert otlp_receiver.total(names.SEGMENTS_COMMITTED.name) == 5
    assert otlp_receiver.total(names.IO_BYTES.name, direction="read") == 50_000
    assert otlp_receiver.total(names.IO_BYTES.name, direction="write") == 2_500
    assert otlp_receiver.total(names.MODEL_LOAD_TIME.name, model="inswapper_128") == 0.25
    assert otlp_receiver.total(names.FAILURES.name, failure_class="no_face", retryable="false") == 1
    assert otlp_receiver.total(names.FRAMES_REMAINING.name) == 0
    assert 0 < otlp_receiver.total(names.STAGE_TIME.name, stage="swap") < 5

    points = otlp_receiver.points()
    assert {point.name for point in points} == {spec.name for spec in names.WORKER_METRICS}
    for point in points:
        assert (
            point.attributes.items()
            >= {
                "dag_id": "facefusion_swap",
                "run_id": "manual__2026-01-02T03:04:05+00:00",
                "task_id": "swap_span",
                "map_index": "3",
                "try_number": "2",
                "work_id": "work-0123",
                "node": "gpu-node-7",
                "gpu": "GPU-8c1f6c6e-1d6e-4a55-9b8f-3a2d2c1b0a99",
            }.items()
        ), point
        assert point.resource["service.name"] == names.WORKER_SERVICE_NAME
        spec = next(spec for spec in names.WORKER_METRICS if spec.name == point.name)
        assert point.unit == spec.unit
        assert (point.kind, point.monotonic) == (("sum", True) if spec.kind == "counter" else ("gauge", False))


def test_sigterm_pushes_everything_counted_before_it(otlp_receiver: OtlpReceiver) -> None:
    worker = start_worker(otlp_receiver, 100, 7, 33)
    wait_for_line(worker, "waiting")
    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=30)

    assert worker.returncode == 143  # the CLI's SystemExit(128 + SIGTERM)
    assert "counted 33" in out
    assert otlp_receiver.total(names.FRAMES.name, stage="encode") == 33  # 5 frames past the last commit (28) too
    assert otlp_receiver.total(names.SEGMENTS_COMMITTED.name) == 4
    assert otlp_receiver.total(names.FRAMES_REMAINING.name) == 67


def test_a_commit_pushes_at_once_so_a_killed_worker_loses_only_what_followed(otlp_receiver: OtlpReceiver) -> None:
    worker = start_worker(otlp_receiver, 100, 20, 25)
    wait_for_line(worker, "waiting")
    assert otlp_receiver.wait_until(lambda: otlp_receiver.total(names.SEGMENTS_COMMITTED.name) == 1)
    worker.kill()
    worker.communicate(timeout=30)

    assert worker.returncode == -signal.SIGKILL
    # The commit's push runs in the background: it holds the commit's 20 frames, and may hold some that followed.
    assert 20 <= otlp_receiver.total(names.FRAMES.name, stage="encode") <= 25


def test_otel_sdk_disabled_exports_nothing(otlp_receiver: OtlpReceiver) -> None:
    worker = start_worker(otlp_receiver, 10, 5, OTEL_SDK_DISABLED="true")
    _, err = worker.communicate(timeout=60)

    assert worker.returncode == 0, err
    assert otlp_receiver.requests == []


def test_an_endpoint_that_refuses_neither_fails_nor_holds_up_the_worker() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1/metrics"
    env = child_environment(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=closed, **TASK_ENVIRONMENT)
    started = time.monotonic()
    worker = subprocess.run(
        [sys.executable, str(WORKER), "50", "10"], env=env, capture_output=True, text=True, check=False, timeout=60
    )

    assert worker.returncode == 0, worker.stderr
    assert "counted 50" in worker.stdout
    # Pushes run in the background and the last one gives up after the exit budget, not the SDK's 10 s and retries.
    assert time.monotonic() - started < worker_metrics_module.EXIT_FLUSH_TIMEOUT_S * 2 + 3


@pytest.mark.parametrize(
    ("retryable", "failure_class", "exit_code"),
    [(False, "invalid_media", EXIT_INVALID_MEDIA), (True, "retryable", EXIT_RETRYABLE)],
)
def test_a_failed_worker_command_is_counted_by_its_class(
    otlp_receiver: OtlpReceiver, tmp_path: Path, retryable: bool, failure_class: str, exit_code: int
) -> None:
    fault = [{"command": "swap-span", "indexes": [3], "retryable": retryable}]
    env = child_environment(
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=otlp_receiver.endpoint,
        **fault_env(fault),
        FACEFUSION_METRIC_WORK_ID="5f0c2a9be41d",
        **TASK_ENVIRONMENT,
    )
    work_uri = (tmp_path / "work" / "5f0c2a9be41d").as_uri()
    command = ["swap-span", "--work-uri", work_uri, "--target", str(tmp_path / "in.mp4"), "--segments", "12:16"]
    worker = subprocess.run(
        [sys.executable, "-m", "facefusion_provider.worker.cli", *command, "--span", "3"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert worker.returncode == exit_code, worker.stderr
    (point,) = otlp_receiver.latest(names.FAILURES.name)
    assert point.value == 1
    assert (
        point.attributes.items()
        >= {
            "failure_class": failure_class,
            "retryable": str(retryable).lower(),
            "work_id": "5f0c2a9be41d",
            "task_id": "swap_span",
            "map_index": "3",
        }.items()
    )
