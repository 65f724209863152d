from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from facefusion_provider.operators.cleanup import SWAP_OUTPUT_ASSET, CleanupJobOperator
from facefusion_provider.operators.plan import PlanChunksOperator


def test_plan_returns_every_chunk_with_its_frame_label(tmp_path: Path, write_job: Callable[..., Any]) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4", frames=40, chunk_size=8)

    chunks = PlanChunksOperator(task_id="plan", job_uri=job.job_uri).execute({})  # type: ignore[arg-type]

    assert chunks[0] == {"index": 0, "start": 0, "end": 8, "label": "frames 0-7"}
    assert [c["label"] for c in chunks] == ["frames 0-7", "frames 8-15", "frames 16-23", "frames 24-31", "frames 32-39"]


def test_plan_without_a_prepared_job_fails_at_once(tmp_path: Path) -> None:
    operator = PlanChunksOperator(task_id="plan", job_uri=(tmp_path / "jobs" / "none").as_uri())

    with pytest.raises(AirflowFailException, match=r"no job\.json"):
        operator.execute({})  # type: ignore[arg-type]


def _cleanup_context() -> dict[str, Any]:
    return {"outlet_events": defaultdict(SimpleNamespace)}


def test_cleanup_removes_the_job_and_publishes_the_output(
    tmp_path: Path, write_job: Callable[..., Any], commit_chunk: Callable[..., Path], commit_output: Callable[..., None]
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    commit_chunk(job, 0)
    commit_output(job)
    context = _cleanup_context()
    operator = CleanupJobOperator(task_id="cleanup", job_uri=job.job_uri, job_id=job.job_id, output_uri=job.output_uri)

    operator.execute(context)  # type: ignore[arg-type]

    assert not (tmp_path / "jobs" / "job0").exists()
    assert (tmp_path / "out.mp4").exists()
    assert operator.outlets == [SWAP_OUTPUT_ASSET]
    extra = context["outlet_events"][SWAP_OUTPUT_ASSET].extra
    assert extra == {"output_uri": job.output_uri, "job_id": "job0", "frame_count": 40, "sha256": "1" * 64}


def test_cleanup_keeps_the_job_when_the_output_is_not_this_jobs(
    tmp_path: Path, write_job: Callable[..., Any], commit_chunk: Callable[..., Path], commit_output: Callable[..., None]
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    marker = commit_chunk(job, 0)
    commit_output(job, job_id="other")
    operator = CleanupJobOperator(task_id="cleanup", job_uri=job.job_uri, job_id=job.job_id, output_uri=job.output_uri)

    with pytest.raises(RuntimeError, match="carries no marker of job job0"):
        operator.execute(_cleanup_context())  # type: ignore[arg-type]
    assert marker.exists()
