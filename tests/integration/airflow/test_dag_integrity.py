"""The DAG file imports cleanly, parses fast, stays light (no media or inference modules) and serializes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DAG_FILE = REPO / "dags" / "facefusion_swap.py"
HEAVY_MODULES = ("cv2", "onnxruntime", "numpy", "av")


@pytest.fixture(scope="module")
def dagbag():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE))


def test_dag_imports_without_errors(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    for dag_id in ("facefusion_swap", "facefusion_swap_batch"):
        assert [t.task_id for t in dagbag.dags[dag_id].topological_sort()] == [
            "validate",
            "prepare",
            "plan",
            "swap_span",
            "merge",
            "cleanup",
        ]


def test_dag_parses_fast(dagbag) -> None:  # type: ignore[no-untyped-def]
    (stat,) = [s for s in dagbag.dagbag_stats if "facefusion_swap" in s.dags]
    assert stat.duration.total_seconds() < 2.0


@pytest.mark.parametrize("dag_file", ["facefusion_swap.py", "facefusion_s3_ingest.py"])
def test_importing_a_dag_loads_no_heavy_module(dag_file: str) -> None:
    script = (
        "import json, runpy, sys\n"
        f"runpy.run_path({str(REPO / 'dags' / dag_file)!r})\n"
        f"print(json.dumps([m for m in {HEAVY_MODULES!r} if m in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_span_tasks_are_mapped_pooled_prioritised_and_retried_with_backoff(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["facefusion_swap"]
    swap_span = dag.get_task("swap_span")

    assert swap_span.map_index_template == "{{ task.span['label'] }}"
    assert swap_span.partial_kwargs["pool"] == "default_pool"  # a fresh Airflow has it: no run waits on a missing pool
    assert swap_span.partial_kwargs["max_active_tis_per_dagrun"] == 4
    for task in (swap_span, dag.get_task("prepare"), dag.get_task("merge")):
        retries = task.partial_kwargs["retries"] if task is swap_span else task.retries
        assert retries == 3
    assert dag.get_task("validate").retries == 0  # bad conf stays bad
    assert dag.get_task("merge").retry_exponential_backoff == 2.0
    assert dag.render_template_as_native_obj
    batch = dagbag.dags["facefusion_swap_batch"].get_task("swap_span")
    assert swap_span.partial_kwargs["priority_weight"] > batch.partial_kwargs["priority_weight"]  # interactive first


def test_params_are_one_field_per_option(dagbag) -> None:  # type: ignore[no-untyped-def]
    from facefusion_provider.options import Options

    dag = dagbag.dags["facefusion_swap"]

    assert dag.params.get_param("face_swapper_blend").schema["allOf"] == [{"minimum": 0, "maximum": 100}]
    assert {"source_uris", "target_uri", "output_uri", *Options.model_fields} == set(dag.params.keys())


def test_dag_serializes_for_the_scheduler(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.serialization.serialized_objects import DagSerialization

    dag = dagbag.dags["facefusion_swap"]
    restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))

    assert restored.task_ids == dag.task_ids
    assert restored.get_task("cleanup").outlets[0].name == "facefusion_swap_output"
