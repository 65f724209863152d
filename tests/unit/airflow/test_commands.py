from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from held import run_lease

from facefusion_provider.contract import (
    parse_failure_report,
    prepare_worker_args,
    span_worker_args,
    worker_argv,
)
from facefusion_provider.exceptions import (
    EXIT_INTERNAL,
    EXIT_NO_FACE,
    EXIT_RETRYABLE,
    EXIT_STORAGE_FULL,
    NON_RETRYABLE_EXIT_CODES,
)
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import (
    completed_work,
    failure_exception,
    raise_for_failure,
    task_worker_env,
    worker_call,
    worker_env,
)
from facefusion_provider.operators.spans import decided_for_this_try, nothing_to_do
from facefusion_provider.options import Options
from facefusion_provider.work import leases


def test_argv_follows_the_worker_contract() -> None:
    assert worker_argv("merge", "s3://b/work/w", ["--target", "s3://b/in.mp4", "--output", "s3://b/o.mp4"]) == [
        "merge",
        "--work-uri",
        "s3://b/work/w",
        "--target",
        "s3://b/in.mp4",
        "--output",
        "s3://b/o.mp4",
    ]
    span = {"index": 2, "first": 8, "last": 12}
    assert span_worker_args("s3://b/in.mp4", span) == ["--target", "s3://b/in.mp4", "--segments", "8:12", "--span", "2"]
    with pytest.raises(ValueError, match="unknown worker command"):
        worker_argv("run", "file:///w/work/j")


def test_prepare_args_carry_inputs_and_changed_options() -> None:
    options = Options(segment_size=8, face_swapper_blend=70, processors=[])

    args = prepare_worker_args(["file:///a.png", "file:///b.png"], "file:///in.mp4", options)

    assert args[:6] == ["--source", "file:///a.png", "--source", "file:///b.png", "--target", "file:///in.mp4"]
    assert args[6:] == ["--processors", "--face-swapper-blend", "70", "--segment-size", "8"]


def test_env_carries_try_number_task_run_key_and_allow_lists_and_help_only_when_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__ALLOWED_INPUT_PREFIXES", "s3://in/a, s3://in/b")
    env = worker_env(3, key="d/r/swap_span/2", run_key="d--r")
    assert env == {
        "FACEFUSION_TRY_NUMBER": "3",
        "FACEFUSION_TASK_KEY": "d/r/swap_span/2",
        "FACEFUSION_RUN_KEY": "d--r",
        "FACEFUSION_ALLOWED_INPUT_PREFIXES": "s3://in/a/,s3://in/b/",
        "FACEFUSION_ALLOWED_OUTPUT_PREFIXES": "",
    }
    monkeypatch.setenv("AIRFLOW__FACEFUSION__HELP_OTHER_RUNS_SECONDS", "600")
    assert worker_env(1)["FACEFUSION_HELP_OTHER_RUNS_SECONDS"] == "600"  # workers then help other live runs


def test_a_tasks_env_adds_its_metric_labels_the_work_id_and_where_to_push() -> None:
    ti = SimpleNamespace(dag_id="facefusion_swap", run_id="manual__1", task_id="swap_span", map_index=2, try_number=3)
    airflow_side = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://prometheus:9090/api/v1/otlp",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
    }

    call = worker_call("merge", "s3://work/work/5f0c2a9be41d", "s3://out/o.mp4", run_key="facefusion_swap--manual__1")
    env = task_worker_env({"ti": ti}, airflow_side, call)

    assert env == {
        **worker_env(3, key="facefusion_swap/manual__1/swap_span/2", run_key=call.run_key),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://prometheus:9090/api/v1/otlp",  # never the headers: they may hold keys
        "FACEFUSION_METRIC_DAG_ID": "facefusion_swap",
        "FACEFUSION_METRIC_RUN_ID": "manual__1",
        "FACEFUSION_METRIC_TASK_ID": "swap_span",
        "FACEFUSION_METRIC_MAP_INDEX": "2",
        "FACEFUSION_METRIC_WORK_ID": "5f0c2a9be41d",
    }


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


@pytest.mark.parametrize("exit_code", [EXIT_STORAGE_FULL, None])  # a process's exit code, or a pod's report alone
def test_a_full_disk_is_retried_once_and_other_retryable_failures_as_often_as_the_task_allows(
    exit_code: int | None,
) -> None:
    full = parse_failure_report(exit_code, _report("storage_full", True, "file:///work/x: no space left on device"))
    assert not isinstance(failure_exception(full, try_number=1), AirflowFailException)
    final = failure_exception(full, " (pod ns/p)", try_number=2)
    assert isinstance(final, AirflowFailException)
    assert str(final) == (
        f"worker failed (storage_full{'' if exit_code is None else ', exit code 19'}): file:///work/x: no space left "
        "on device (pod ns/p); not retried again: storage_full is retried once at most"
    )
    timeout = parse_failure_report(EXIT_RETRYABLE, _report("retryable", True, "storage timeout"))
    assert not isinstance(failure_exception(timeout, try_number=9), AirflowFailException)


def test_completed_work_from_markers_and_validates_finding(
    tmp_path: Path,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
) -> None:
    hook = FaceFusionStorageHook()
    work_uri, output = (tmp_path / "work" / "work0").as_uri(), (tmp_path / "out.mp4").as_uri()
    span = {"index": 0, "first": 0, "last": 2, "label": "frames 0-15 (2 segments)"}
    prepare, merge = worker_call("prepare", work_uri, output), worker_call("merge", work_uri, output)
    swap = worker_call("swap-span", work_uri, output, target_uri=output, span=span)
    assert completed_work(hook, prepare) is None
    assert completed_work(hook, swap, hook.committed_segments(work_uri)) is None  # no work yet: the worker runs

    work = write_work(tmp_path, tmp_path / "out.mp4")
    assert completed_work(hook, prepare) == "work work0 is already prepared"
    assert completed_work(hook, swap, hook.committed_segments(work_uri)) is None
    assert completed_work(hook, merge) is None

    commit_segment(work, 0)
    assert completed_work(hook, swap, hook.committed_segments(work_uri)) is None  # one of two
    commit_segment(work, 1)
    assert completed_work(hook, swap, hook.committed_segments(work_uri)) == (
        "every segment of span 0 (frames 0-15 (2 segments)) is committed"
    )

    # validate's finding travels with the call: no second look at the output
    done = worker_call("merge", work_uri, output, output_done=True)
    assert "already holds the output of work work0" in (completed_work(hook, done) or "")


def test_the_output_is_done_only_with_this_works_readable_marker(
    tmp_path: Path, write_work: Callable[..., Any], commit_output: Callable[..., None]
) -> None:
    hook = FaceFusionStorageHook()
    work = write_work(tmp_path, tmp_path / "out.mp4")
    (tmp_path / "out.mp4").write_bytes(b"video")
    (tmp_path / ".out.mp4.facefusion.json").write_text("{not json")
    assert hook.output_done(work.output_uri, "work0") is None  # unreadable: redo

    commit_output(work, work_id="another-work")
    assert hook.output_done(work.output_uri, "work0") is None  # another work's output: this run's merge runs
    commit_output(work)
    assert hook.output_done(work.output_uri, "work0") is not None
    assert hook.output_done((tmp_path / "elsewhere.mp4").as_uri(), "work0") is None


def test_a_later_try_asks_again_whether_the_output_is_done(
    tmp_path: Path, write_work: Callable[..., Any], commit_output: Callable[..., None]
) -> None:
    """validate decided "not done" at the run's start; a span cleared after the run published finds it done, and so
    does the merge task of a run a standing worker merged."""
    hook = FaceFusionStorageHook()
    work = write_work(tmp_path, tmp_path / "out.mp4")
    span = {"index": 0, "first": 0, "last": 2, "label": "frames 0-15 (2 segments)"}
    swap = worker_call("swap-span", work.work_uri, work.output_uri, target_uri=work.output_uri, span=span)
    commit_output(work)

    def context(try_number: int) -> dict[str, Any]:
        return {"ti": SimpleNamespace(try_number=try_number)}

    assert not decided_for_this_try(hook, swap, context(1)).output_done, "a first try trusts validate"
    assert decided_for_this_try(hook, swap, context(2)).output_done
    assert "already holds the output of work work0" in (nothing_to_do(hook, swap, context(2)) or "")
    merge = worker_call("merge", work.work_uri, work.output_uri)  # a standing worker may have merged it meanwhile
    assert decided_for_this_try(hook, merge, context(1)).output_done


def test_a_task_holds_its_runs_lease_again_as_it_starts(tmp_path: Path, write_work: Callable[..., Any]) -> None:
    """A run cleared after it failed (its lease ``kept``) or queued past its TTL holds the work as an active run
    again, from the lease validate wrote (passed by the DAG)."""
    hook = FaceFusionStorageHook()
    work = write_work(tmp_path, tmp_path / "out.mp4")
    lease = run_lease("mine", ttl=600)
    leases.hold(work.layout, "mine", lease)
    leases.keep_for_retry(work.layout, "mine", ttl_seconds=168 * 3600)
    span = {"index": 0, "first": 0, "last": 2, "label": "frames 0-15 (2 segments)"}
    call = worker_call(
        "swap-span",
        work.work_uri,
        work.output_uri,
        run_key="mine",
        run_lease=lease.model_dump(mode="json"),
        target_uri=work.output_uri,
        span=span,
    )

    assert nothing_to_do(hook, call, {"ti": SimpleNamespace(try_number=1)}) is None

    (held,) = leases.run_leases(work.layout)
    assert (held.key, held.lease.state, held.lease.ttl_seconds) == ("mine", "active", 600)
