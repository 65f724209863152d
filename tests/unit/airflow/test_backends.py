from __future__ import annotations

import pytest

from facefusion_provider.operators.backends import load_backend, swap_span_operator, worker_operator
from facefusion_provider.operators.local import FaceFusionWorkerOperator
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor

SPAN = {"index": 0, "first": 0, "last": 4, "start": 0, "end": 32, "label": "frames 0-31 (4 segments)"}


def test_local_backend_is_the_default() -> None:
    operator = worker_operator("merge", task_id="merge", work_uri="file:///w/work/j", output_uri="file:///o.mp4")

    assert isinstance(operator, FaceFusionWorkerOperator)
    assert (operator.command, operator.work_uri, operator.output_uri) == ("merge", "file:///w/work/j", "file:///o.mp4")


def test_swap_span_is_a_partial_of_the_same_worker_operator_to_map_over_spans() -> None:
    from airflow.sdk import DAG

    with DAG("mapped", schedule=None):
        mapped = swap_span_operator(
            task_id="swap_span",
            work_uri="file:///w/work/j",
            output_uri="file:///o.mp4",
            target_uri="file:///i.mp4",
            pool="gpu",
        ).expand(span=[SPAN])

    assert mapped.operator_class is FaceFusionWorkerOperator
    assert mapped.partial_kwargs["command"] == "swap-span"
    assert mapped.partial_kwargs["pool"] == "gpu"


def test_unknown_backend_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"\[facefusion\] backend: 'slurm' is not available"):
        load_backend("slurm")


def test_with_standing_workers_the_dag_makes_its_span_tasks_waits_shown_in_its_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW__FACEFUSION__SPAN_WORKERS", "standing")
    dag_file = Path(__file__).resolve().parents[3] / "dags" / "facefusion_swap.py"

    bag = DagBag(dag_folder=str(dag_file))

    assert bag.import_errors == {}
    tasks = {task.task_id: task for task in bag.dags["facefusion_swap"].tasks}
    assert tasks["swap_span"].operator_class is SpanCommittedSensor  # type: ignore[union-attr]
    assert tasks["plan"].wave == 1  # type: ignore[union-attr]
    assert isinstance(tasks["prepare"], FaceFusionWorkerOperator) and isinstance(
        tasks["merge"], FaceFusionWorkerOperator
    )
