from __future__ import annotations

import pytest

from facefusion_provider.operators.backends import load_backend, swap_span_operator, worker_operator
from facefusion_provider.operators.local import LocalSwapSpanOperator, LocalWorkerOperator


def test_local_backend_is_the_default() -> None:
    operator = worker_operator("merge", task_id="merge", work_uri="file:///w/work/j", output_uri="file:///o.mp4")

    assert isinstance(operator, LocalWorkerOperator)
    assert (operator.command, operator.work_uri, operator.output_uri) == ("merge", "file:///w/work/j", "file:///o.mp4")


def test_swap_span_is_a_partial_to_map_over_spans() -> None:
    from airflow.sdk import DAG

    span = {"index": 0, "first": 0, "last": 4, "start": 0, "end": 32, "label": "frames 0-31 (4 segments)"}
    with DAG("mapped", schedule=None):
        mapped = swap_span_operator(
            task_id="swap_span",
            work_uri="file:///w/work/j",
            output_uri="file:///o.mp4",
            target_uri="file:///i.mp4",
            pool="gpu",
        ).expand(span=[span])

    assert mapped.operator_class is LocalSwapSpanOperator
    assert mapped.partial_kwargs["pool"] == "gpu"


def test_unknown_backend_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"\[facefusion\] backend: 'slurm' is not available"):
        load_backend("slurm")
