"""The operators' run-level figures through Airflow's own metrics: Airflow's OTel backend (``[metrics] otel_on``),
initialised as the task runner initialises it, pushes them to a real OTLP endpoint with their tags."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from otlp_receiver import OtlpReceiver, child_environment

from facefusion_provider import metric_names as names
from facefusion_provider.contract import WorkerSettings
from facefusion_provider.hooks.run_metrics import worker_metric_environment
from facefusion_provider.telemetry.metrics import metric_attributes

# What a task does: the task runner's own stats.initialize, then the helpers; the figures leave at exit.
TASK = """
from airflow.sdk.configuration import conf
from airflow.sdk.observability import stats
from airflow.sdk.observability.metrics import stats_utils

stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))

from facefusion_provider.hooks import run_metrics

tags = {"dag_id": "facefusion_swap", "run_id": "manual__1"}
run_metrics.segments(reused=12, launched=20, tags=tags)
run_metrics.run_fps(9600, 320.0, tags=tags)
run_metrics.merge_seconds(4.5, tags=tags)
run_metrics.output_bytes(123_456_789, tags=tags)
run_metrics.bad_input("target_uri", dag_id="facefusion_swap")
run_metrics.bad_input("target_uri", dag_id="facefusion_swap")
run_metrics.segments_waiting(7, tags=tags)
"""


def test_run_figures_arrive_through_airflows_otel_backend(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    env = child_environment(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__METRICS__OTEL_ON="True",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=otlp_receiver.endpoint,
    )
    result = subprocess.run(
        [sys.executable, "-c", TASK], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr

    run = {"dag_id": "facefusion_swap", "run_id": "manual__1"}
    assert otlp_receiver.total(names.SEGMENTS_REUSED.name, **run) == 12
    assert otlp_receiver.total(names.SEGMENTS_LAUNCHED.name, **run) == 20
    assert otlp_receiver.total(names.RUN_FPS.name, **run) == 30
    assert otlp_receiver.total(names.MERGE_SECONDS.name, **run) == 4.5
    assert otlp_receiver.total(names.OUTPUT_BYTES.name, **run) == 123_456_789
    assert otlp_receiver.total(names.BAD_INPUT.name, dag_id="facefusion_swap", field="target_uri") == 2
    assert otlp_receiver.total(names.SEGMENTS_WAITING.name, **run) == 7
    kinds = {point.name: (point.kind, point.monotonic) for point in otlp_receiver.points()}
    for spec in names.RUN_METRICS:
        assert kinds[spec.name] == (("sum", True) if spec.kind == "counter" else ("gauge", False)), spec.name


@dataclass(frozen=True)
class TaskInstance:
    dag_id: str
    run_id: str
    task_id: str
    map_index: int | None


def test_the_worker_environment_names_the_task_in_the_workers_attributes() -> None:
    mapped = TaskInstance("facefusion_swap", "manual__1", "swap_span", 3)
    unmapped = TaskInstance("facefusion_swap", "manual__1", "merge", None)

    assert worker_metric_environment(mapped, {}, work_id="abc") == {
        "FACEFUSION_METRIC_DAG_ID": "facefusion_swap",
        "FACEFUSION_METRIC_RUN_ID": "manual__1",
        "FACEFUSION_METRIC_TASK_ID": "swap_span",
        "FACEFUSION_METRIC_MAP_INDEX": "3",
        "FACEFUSION_METRIC_WORK_ID": "abc",
    }
    assert worker_metric_environment(unmapped, {})["FACEFUSION_METRIC_MAP_INDEX"] == "-1"
    assert "FACEFUSION_METRIC_WORK_ID" not in worker_metric_environment(unmapped, {})
    environment = worker_metric_environment(mapped, {}, work_id="abc")
    assert (
        metric_attributes(WorkerSettings.from_environ(environment), environment).items()
        >= {
            "dag_id": "facefusion_swap",
            "run_id": "manual__1",
            "task_id": "swap_span",
            "map_index": "3",
            "work_id": "abc",
        }.items()
    )


def test_the_worker_environment_forwards_where_to_push_but_no_credentials() -> None:
    airflow_side = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://prometheus-server.monitoring.svc/api/v1/otlp",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
        "OTEL_SERVICE_NAME": "airflow",
        "OTEL_METRIC_EXPORT_INTERVAL": "",
    }

    env = worker_metric_environment(TaskInstance("d", "r", "swap_span", 0), airflow_side)

    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://prometheus-server.monitoring.svc/api/v1/otlp"
    assert not {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME", "OTEL_METRIC_EXPORT_INTERVAL"} & set(env)
