"""The local backend runs a real subprocess: here a stand-in worker that records what it got and exits as told."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from facefusion_provider.exceptions import EXIT_INVALID_MEDIA, EXIT_RETRYABLE
from facefusion_provider.operators.local import LocalSwapChunkOperator, LocalWorkerOperator

FAKE_WORKER = """
import json, os, sys
with open(os.environ["FAKE_WORKER_RECORD"], "a") as record:
    record.write(json.dumps({"argv": sys.argv[1:], "try": os.environ.get("FACEFUSION_TRY_NUMBER"),
                             "faults": os.environ.get("FACEFUSION_TEST_FAULTS")}) + "\\n")
code = int(os.environ.get("FAKE_WORKER_EXIT", "0"))
if code:
    report = json.dumps({"failure_class": os.environ["FAKE_WORKER_CLASS"], "retryable": code == 75,
                         "message": os.environ["FAKE_WORKER_MESSAGE"]})
    print("worker log line", file=sys.stderr)
    print(report, file=sys.stderr)
    if os.environ.get("FAKE_WORKER_TERMINATION_LOG") == "1":
        with open(os.environ["FACEFUSION_TERMINATION_LOG"], "w") as log:
            log.write(report)
sys.exit(code)
"""


@pytest.fixture
def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("FAKE_WORKER_RECORD", str(record))
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORKER_COMMAND", f"{sys.executable} {script}")

    def launches() -> list[dict[str, Any]]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return launches


def _context(try_number: int = 1) -> Any:
    return {"ti": SimpleNamespace(try_number=try_number)}


def test_prepare_runs_the_worker_with_the_contract_argv_and_try_number(
    tmp_path: Path, fake_worker: Callable[[], list[dict[str, Any]]]
) -> None:
    job_uri = (tmp_path / "jobs" / "j1").as_uri()
    operator = LocalWorkerOperator(
        task_id="prepare", command="prepare", job_uri=job_uri, worker_args=["--target", "file:///in.mp4"]
    )

    operator.execute(_context(try_number=2))

    assert fake_worker() == [
        {"argv": ["prepare", "--job-uri", job_uri, "--target", "file:///in.mp4"], "try": "2", "faults": None}
    ]


def test_committed_chunk_starts_no_process(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    write_job: Callable[..., Any],
    commit_chunk: Callable[..., Path],
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    commit_chunk(job, 2)

    for index in (2, 3):
        chunk = job.chunks[index].model_dump()
        LocalSwapChunkOperator(task_id="swap_chunk", job_uri=job.job_uri, chunk=chunk).execute(_context())

    assert [launch["argv"] for launch in fake_worker()] == [["swap-chunk", "--job-uri", job.job_uri, "--index", "3"]]


def test_current_output_starts_no_process_for_chunks_or_merge(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    write_job: Callable[..., Any],
    commit_output: Callable[..., None],
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    commit_output(job)

    LocalSwapChunkOperator(task_id="swap_chunk", job_uri=job.job_uri, chunk=job.chunks[0].model_dump()).execute(
        _context()
    )
    LocalWorkerOperator(task_id="merge", command="merge", job_uri=job.job_uri).execute(_context())
    LocalWorkerOperator(
        task_id="prepare", command="prepare", job_uri=job.job_uri, worker_args=["--output", job.output_uri]
    ).execute(_context())

    assert fake_worker() == []


def test_bad_input_fails_at_once_with_the_workers_message(
    tmp_path: Path, fake_worker: Callable[[], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_WORKER_EXIT", str(EXIT_INVALID_MEDIA))
    monkeypatch.setenv("FAKE_WORKER_CLASS", "invalid_media")
    monkeypatch.setenv("FAKE_WORKER_MESSAGE", "file:///in.mp4: not a video (a text file)")
    monkeypatch.setenv("FAKE_WORKER_TERMINATION_LOG", "1")
    operator = LocalWorkerOperator(task_id="prepare", command="prepare", job_uri=(tmp_path / "j").as_uri())

    with pytest.raises(AirflowFailException, match=r"invalid_media, exit code 12\): file:///in.mp4: not a video"):
        operator.execute(_context())


def test_retryable_failure_is_an_ordinary_task_failure(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    write_job: Callable[..., Any],
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    monkeypatch.setenv("FAKE_WORKER_EXIT", str(EXIT_RETRYABLE))
    monkeypatch.setenv("FAKE_WORKER_CLASS", "retryable")
    monkeypatch.setenv("FAKE_WORKER_MESSAGE", "injected transient failure (swap-chunk chunk 1 try 1)")
    monkeypatch.setenv("FACEFUSION_TEST_FAULTS", '[{"command": "swap-chunk"}]')
    operator = LocalSwapChunkOperator(task_id="swap_chunk", job_uri=job.job_uri, chunk=job.chunks[1].model_dump())

    with pytest.raises(AirflowException, match="injected transient failure") as raised:
        operator.execute(_context())

    assert not isinstance(raised.value, AirflowFailException)
    assert fake_worker()[0]["faults"] == '[{"command": "swap-chunk"}]'  # the test-only switch reaches the worker


def test_template_fields_extend_the_parents() -> None:
    assert isinstance(LocalWorkerOperator.template_fields, tuple)
    assert set(BaseOperator.template_fields) <= set(LocalWorkerOperator.template_fields)
    assert {"job_uri", "worker_args"} <= set(LocalWorkerOperator.template_fields)
    assert set(LocalWorkerOperator.template_fields) < set(LocalSwapChunkOperator.template_fields)
    assert "chunk" in LocalSwapChunkOperator.template_fields


def test_templated_job_uri_and_args_render_natively(tmp_path: Path) -> None:
    from airflow.sdk import DAG

    with DAG("native", schedule=None, render_template_as_native_obj=True):
        operator = LocalWorkerOperator(
            task_id="prepare", command="prepare", job_uri="{{ params.job }}", worker_args="{{ params.args }}"
        )
    operator.render_template_fields({"params": {"job": "file:///w/jobs/j", "args": ["--source", "file:///a.png"]}})

    assert operator.job_uri == "file:///w/jobs/j"
    assert operator.worker_args == ["--source", "file:///a.png"]
