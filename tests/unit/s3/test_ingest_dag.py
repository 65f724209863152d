"""The ingestion DAG file: parses cleanly and light, takes its schedule and defaults from the Variable, serializes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
DAG_FILE = REPO / "dags" / "facefusion_s3_ingest.py"
SETTINGS = {
    "schedule": "0 * * * *",
    "input_prefix": "s3://videos/incoming/",
    "output_prefix": "s3://videos/swapped/",
    "source_uris": ["s3://videos/faces/me.jpg"],
    "options": {"face_swapper_blend": 90},
    "max_runs_per_scan": 4,
}


def parse(monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any] | None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    if settings is not None:
        monkeypatch.setenv("AIRFLOW_VAR_FACEFUSION_INGEST", json.dumps(settings))
    return DagBag(dag_folder=str(DAG_FILE))


def test_the_dag_is_scan_then_mapped_triggers_then_report(monkeypatch: pytest.MonkeyPatch) -> None:
    dagbag = parse(monkeypatch, None)
    assert dagbag.import_errors == {}
    dag = dagbag.dags["facefusion_s3_ingest"]
    assert [task.task_id for task in dag.topological_sort()] == ["scan", "start_swap", "report"]
    start_swap = dag.get_task("start_swap")
    assert start_swap.partial_kwargs["skip_when_already_exists"] is True
    assert start_swap.partial_kwargs["wait_for_completion"] is False
    assert dag.get_task("report").trigger_rule == "none_failed_min_one_success"
    assert dag.max_active_runs == 1 and not dag.catchup
    assert dag.is_paused_upon_creation is True
    assert type(dag.timetable).__name__ == "NullTimetable"  # without the Variable: nothing runs on its own


def test_schedule_and_defaults_come_from_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = parse(monkeypatch, SETTINGS).dags["facefusion_s3_ingest"]
    assert dag.timetable.expression == "0 * * * *"
    assert dag.params["input_prefix"] == "s3://videos/incoming/"
    assert dag.params["source_uris"] == ["s3://videos/faces/me.jpg"]
    assert dag.params["face_swapper_blend"] == 90
    assert dag.params["max_runs_per_scan"] == 4
    assert dag.params.get_param("face_swapper_blend").schema["allOf"] == [{"minimum": 0, "maximum": 100}]
    manual_only = parse(monkeypatch, {**SETTINGS, "schedule": "none"}).dags["facefusion_s3_ingest"]
    assert type(manual_only.timetable).__name__ == "NullTimetable"


def test_a_bad_variable_is_an_import_error_naming_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    dagbag = parse(monkeypatch, {**SETTINGS, "options": {"face_swapper_blend": 150}})
    (error,) = dagbag.import_errors.values()
    assert "facefusion_ingest.options.face_swapper_blend" in error


def test_the_dag_serializes_for_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    dag = parse(monkeypatch, SETTINGS).dags["facefusion_s3_ingest"]
    restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert restored.params["input_prefix"] == "s3://videos/incoming/"
    assert set(restored.task_ids) == {"scan", "start_swap", "report"}
