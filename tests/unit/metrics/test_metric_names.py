"""The metric catalogue: the Prometheus names the dashboard and the alerts query, and where the attributes come from."""

from __future__ import annotations

import socket

import pytest

from facefusion_provider import metric_names as names
from facefusion_provider.contract import WorkerSettings
from facefusion_provider.telemetry.metrics import exporter_configured, metric_attributes


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        # prometheus/otlptranslator's own examples
        ("requests.count", "1", "counter", "requests_count_total"),
        ("memory.usage", "By", "gauge", "memory_usage_bytes"),
        ("http.server.duration", "s", "gauge", "http_server_duration_seconds"),
        # a unit already in the name is not repeated, nor is _total
        ("job.run.seconds", "s", "counter", "job_run_seconds_total"),
        ("jobs.total", "", "counter", "jobs_total"),
        # an annotation in braces adds no suffix
        ("queue.items", "{item}", "gauge", "queue_items"),
    ],
)
def test_prometheus_names_follow_the_otlp_translation(
    name: str, unit: str, kind: names.MetricKind, expected: str
) -> None:
    assert names.prometheus_name(name, unit, kind) == expected


def test_the_catalogue_in_prometheus_form() -> None:
    assert {spec.prometheus for spec in names.ALL_METRICS} == {
        "facefusion_worker_frames_total",
        "facefusion_worker_faces_total",
        "facefusion_worker_stage_time_seconds_total",
        "facefusion_worker_segments_committed_total",
        "facefusion_worker_segments_retired_total",
        "facefusion_worker_model_load_time_seconds_total",
        "facefusion_worker_io_bytes_total",
        "facefusion_worker_failures_total",
        "facefusion_worker_frames_remaining",
        "facefusion_worker_media_paths_total",
        "airflow_facefusion_segments_reused_total",
        "airflow_facefusion_segments_launched_total",
        "airflow_facefusion_run_fps",
        "airflow_facefusion_merge_seconds",
        "airflow_facefusion_output_bytes_total",
        "airflow_facefusion_bad_input_total",
        "airflow_facefusion_segments_waiting",
    }
    assert len({spec.name for spec in names.ALL_METRICS}) == len(names.ALL_METRICS)
    assert all(names.stat_name(spec).startswith("facefusion.") for spec in names.RUN_METRICS)


def test_attributes_come_from_the_operators_variables_the_node_and_the_gpu() -> None:
    environ = {
        "FACEFUSION_METRIC_DAG_ID": "facefusion_swap",
        "FACEFUSION_METRIC_RUN_ID": "scheduled__2026-01-01T00:00:00+00:00",
        "FACEFUSION_METRIC_TASK_ID": "swap_span",
        "FACEFUSION_METRIC_MAP_INDEX": "0",
        "FACEFUSION_TRY_NUMBER": "1",
        "NODE_NAME": "gpu-a",
        "CUDA_VISIBLE_DEVICES": "1",
        "NVIDIA_VISIBLE_DEVICES": "all",
    }

    assert metric_attributes(WorkerSettings.from_environ(environ), environ) == {
        "dag_id": "facefusion_swap",
        "run_id": "scheduled__2026-01-01T00:00:00+00:00",
        "task_id": "swap_span",
        "map_index": "0",
        "try_number": "1",
        "node": "gpu-a",
        "gpu": "1",
    }


@pytest.mark.parametrize(
    ("environ", "gpu"),
    [
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-0f3c"}, "GPU-0f3c"),  # a Kubernetes pod: the device plugin's UUID
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, None),
        ({"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}, None),
        ({}, None),
    ],
)
def test_the_gpu_attribute_names_one_device_or_none(environ: dict[str, str], gpu: str | None) -> None:
    attributes = metric_attributes(WorkerSettings(), environ)

    assert attributes.get("gpu") == gpu
    assert attributes["node"] == socket.gethostname()  # no NODE_NAME: a local run
    assert "dag_id" not in attributes


@pytest.mark.parametrize(
    ("environ", "configured"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://prometheus:9090/api/v1/otlp/v1/metrics"}, True),
        ({"FACEFUSION_METRICS_REMOTE_WRITE_URL": "http://prometheus:9090/api/v1/write"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_METRICS_EXPORTER": "none"}, False),
    ],
)
def test_metrics_are_on_only_when_an_endpoint_is_set(environ: dict[str, str], configured: bool) -> None:
    assert exporter_configured(WorkerSettings.from_environ(environ), environ) is configured
