from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from facefusion_provider.exceptions import EXIT_INTERNAL, EXIT_NO_FACE, EXIT_RETRYABLE, NON_RETRYABLE_EXIT_CODES
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import (
    completed_work,
    parse_failure_report,
    prepare_worker_args,
    raise_for_failure,
    worker_argv,
    worker_env,
)
from facefusion_provider.options import Options


def test_argv_follows_the_worker_contract() -> None:
    assert worker_argv("swap-chunk", "file:///w/jobs/j", index=7) == [
        "swap-chunk",
        "--job-uri",
        "file:///w/jobs/j",
        "--index",
        "7",
    ]
    assert worker_argv("merge", "s3://b/jobs/j") == ["merge", "--job-uri", "s3://b/jobs/j"]
    with pytest.raises(ValueError, match="chunk index"):
        worker_argv("swap-chunk", "file:///w/jobs/j")
    with pytest.raises(ValueError, match="unknown worker command"):
        worker_argv("run", "file:///w/jobs/j")


def test_prepare_args_carry_inputs_and_changed_options() -> None:
    options = Options(chunk_size=8, face_swapper_blend=70, processors=[])

    args = prepare_worker_args(["file:///a.png", "file:///b.png"], "file:///in.mp4", "file:///out.mp4", options)

    assert args[:8] == [
        "--source",
        "file:///a.png",
        "--source",
        "file:///b.png",
        "--target",
        "file:///in.mp4",
        "--output",
        "file:///out.mp4",
    ]
    assert args[8:] == ["--processors", "--face-swapper-blend", "70", "--chunk-size", "8"]


def test_env_carries_try_number_and_passes_faults_through_only_when_set() -> None:
    assert worker_env(3, {"PATH": "/bin"}) == {"FACEFUSION_TRY_NUMBER": "3"}
    faults = '[{"command": "swap-chunk", "indexes": [1]}]'
    assert worker_env(1, {"FACEFUSION_TEST_FAULTS": faults})["FACEFUSION_TEST_FAULTS"] == faults


def _report(failure_class: str, retryable: bool, message: str) -> str:
    return "some log line\n" + json.dumps({"failure_class": failure_class, "retryable": retryable, "message": message})


@pytest.mark.parametrize("exit_code", sorted(NON_RETRYABLE_EXIT_CODES))
def test_bad_input_exit_codes_fail_without_retry(exit_code: int) -> None:
    failure = parse_failure_report(exit_code, _report("no_face", False, "no face in face.png"))

    with pytest.raises(AirflowFailException, match=r"no face in face\.png"):
        raise_for_failure(failure)


@pytest.mark.parametrize("exit_code", [EXIT_RETRYABLE, EXIT_INTERNAL, 2, -9])
def test_other_failures_are_retried(exit_code: int) -> None:
    failure = parse_failure_report(exit_code, _report("retryable", True, "storage timeout"))

    assert failure.retryable
    with pytest.raises(AirflowException) as raised:
        raise_for_failure(failure)
    assert not isinstance(raised.value, AirflowFailException)


def test_failure_message_comes_from_the_report_or_the_signal() -> None:
    assert parse_failure_report(EXIT_NO_FACE, _report("no_face", False, "no face")).describe() == (
        "worker failed (no_face, exit code 13): no face"
    )
    assert "SIGKILL" in parse_failure_report(-9, None).message
    assert parse_failure_report(1, "Traceback ...\nMemoryError").message == "Traceback ...\nMemoryError"


def test_without_exit_code_the_report_decides() -> None:
    assert not parse_failure_report(None, _report("invalid_media", False, "truncated")).retryable
    assert parse_failure_report(None, _report("retryable", True, "timeout")).retryable


def test_completed_work_from_markers(
    tmp_path: Path,
    write_job: Callable[..., object],
    commit_chunk: Callable[..., Path],
    commit_output: Callable[..., None],
) -> None:
    hook = FaceFusionStorageHook()
    job_uri = (tmp_path / "jobs" / "job0").as_uri()
    assert completed_work(hook, "prepare", job_uri) is None
    assert completed_work(hook, "swap-chunk", job_uri, 0) is None  # no job yet: the worker runs and reports

    job = write_job(tmp_path, tmp_path / "out.mp4")
    same_output = ["--target", "file:///in.mp4", "--output", job.output_uri]
    assert (
        completed_work(hook, "prepare", job_uri, worker_args=same_output) == "job job0 is already prepared (5 chunks)"
    )
    other_output = ["--output", (tmp_path / "elsewhere.mp4").as_uri()]
    assert completed_work(hook, "prepare", job_uri, worker_args=other_output) is None  # the worker re-points the job
    assert completed_work(hook, "swap-chunk", job_uri, 1) is None
    assert completed_work(hook, "merge", job_uri) is None

    commit_chunk(job, 1)
    assert completed_work(hook, "swap-chunk", job_uri, 1) == "chunk 1 (frames 8-15) is already committed"
    assert completed_work(hook, "swap-chunk", job_uri, 2) is None

    commit_output(job, job_id="another-job")
    assert completed_work(hook, "swap-chunk", job_uri, 2) is None
    assert completed_work(hook, "merge", job_uri) is None

    commit_output(job)
    assert "already holds the output of job job0" in (completed_work(hook, "swap-chunk", job_uri, 2) or "")
    assert "already holds the output of job job0" in (completed_work(hook, "merge", job_uri) or "")


def test_unreadable_chunk_marker_means_redo(tmp_path: Path, write_job: Callable[..., object]) -> None:
    write_job(tmp_path, tmp_path / "out.mp4")
    marker = tmp_path / "jobs" / "job0" / "chunks" / "00002.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("{not json")

    assert completed_work(FaceFusionStorageHook(), "swap-chunk", (tmp_path / "jobs" / "job0").as_uri(), 2) is None
