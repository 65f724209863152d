from __future__ import annotations

import pytest

from facefusion_provider.operators.backends import load_backend, swap_chunk_operator, worker_operator
from facefusion_provider.operators.local import LocalSwapChunkOperator, LocalWorkerOperator


def test_local_backend_is_the_default() -> None:
    operator = worker_operator("merge", task_id="merge", job_uri="file:///w/jobs/j")

    assert isinstance(operator, LocalWorkerOperator)
    assert (operator.command, operator.job_uri) == ("merge", "file:///w/jobs/j")


def test_swap_chunk_is_a_partial_to_map_over_chunks() -> None:
    from airflow.sdk import DAG

    with DAG("mapped", schedule=None):
        mapped = swap_chunk_operator(task_id="swap_chunk", job_uri="file:///w/jobs/j", pool="gpu").expand(
            chunk=[{"index": 0, "start": 0, "end": 8, "label": "frames 0-7"}]
        )

    assert mapped.operator_class is LocalSwapChunkOperator
    assert mapped.partial_kwargs["pool"] == "gpu"


def test_unknown_backend_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"\[facefusion\] backend: 'slurm' is not available"):
        load_backend("slurm")
