"""The local backend runs a real subprocess: here a stand-in worker that records what it got and exits as told."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from facefusion_provider.contract import SpanProgress
from facefusion_provider.exceptions import EXIT_INVALID_MEDIA, EXIT_RETRYABLE
from facefusion_provider.operators.local import FaceFusionWorkerOperator
from facefusion_provider.operators.plan import span_list


class _StateStore:
    """What ``context["task_state_store"]`` keeps for one task instance across its tries."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


def _context(try_number: int = 1, store: _StateStore | None = None) -> Any:
    ti = SimpleNamespace(
        try_number=try_number,
        dag_id="facefusion_swap",
        run_id="r1",
        task_id="swap_span",
        map_index=1,
        xcom_push=lambda **kwargs: None,
    )
    return {"ti": ti, "task_state_store": store or _StateStore()}


def _span(work: Any, index: int, wave: int = 3) -> dict[str, Any]:
    return span_list(work.spec, wave)[index]


def test_prepare_runs_the_worker_with_the_contract_argv_and_environment(
    tmp_path: Path, fake_worker: Callable[[], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__ALLOWED_OUTPUT_PREFIXES", "s3://out/")
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:4318/v1/metrics")
    work_uri = (tmp_path / "work" / "w1").as_uri()
    operator = FaceFusionWorkerOperator(
        task_id="prepare",
        command="prepare",
        work_uri=work_uri,
        output_uri=(tmp_path / "out.mp4").as_uri(),
        run_key="facefusion_swap--r1",
        worker_args=["--target", "file:///in.mp4"],
    )

    operator.execute(_context(try_number=2))

    assert fake_worker() == [
        {
            "argv": ["prepare", "--work-uri", work_uri, "--target", "file:///in.mp4"],
            "try": "2",
            "faults": None,
            "task": "facefusion_swap/r1/swap_span/1",
            "run": "facefusion_swap--r1",  # validate's run key, passed on, never recomputed
            "allowed": "s3://out/",
            "metrics": {
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:4318/v1/metrics",
                "FACEFUSION_METRIC_DAG_ID": "facefusion_swap",
                "FACEFUSION_METRIC_RUN_ID": "r1",
                "FACEFUSION_METRIC_TASK_ID": "swap_span",
                "FACEFUSION_METRIC_MAP_INDEX": "1",
                "FACEFUSION_METRIC_WORK_ID": "w1",
            },
        }
    ]


def test_a_span_whose_segments_are_all_committed_starts_no_process(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)  # 5 segments: spans 0-1, 2, 3-4
    commit_segment(work, 4)
    commit_segment(work, 2)  # span 1 is done; span 2 is half done

    for index in (2, 1):
        FaceFusionWorkerOperator(
            task_id="swap_span",
            command="swap-span",
            work_uri=work.work_uri,
            output_uri=work.output_uri,
            target_uri="file:///in.mp4",
            span=_span(work, index),
        ).execute(_context())

    assert [launch["argv"] for launch in fake_worker()] == [
        ["swap-span", "--work-uri", work.work_uri, "--target", "file:///in.mp4", "--segments", "3:5", "--span", "2"]
    ]


def test_an_output_validate_found_done_starts_no_process_even_after_cleanup(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    write_work: Callable[..., Any],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    span = _span(work, 0)
    (tmp_path / "work" / "work0" / "work.json").unlink()  # cleanup removed the shared work

    for command in ("prepare", "merge"):
        FaceFusionWorkerOperator(
            task_id=command, command=command, work_uri=work.work_uri, output_uri=work.output_uri, output_done=True
        ).execute(_context())
    FaceFusionWorkerOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        output_done=True,
        target_uri="file:///in.mp4",
        span=span,
    ).execute(_context())

    assert fake_worker() == []


def test_a_span_records_where_it_resumes_and_its_progress_in_the_task_state_store(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)
    commit_segment(work, 0)
    progress = SpanProgress(span=0, segments_committed=2, segments_total=2, committed_here=1, frames_done=8)
    monkeypatch.setenv("FAKE_WORKER_LINES", f"2026-12-03 INFO worker: {progress.line()}")
    store = _StateStore()
    operator = FaceFusionWorkerOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        target_uri="file:///in.mp4",
        span=_span(work, 0),
    )

    operator.execute(_context(store=store))

    recorded = store.values["progress"]
    assert {key: recorded[key] for key in ("segments_committed", "segments_total", "committed_here")} == {
        "segments_committed": 2,
        "segments_total": 2,
        "committed_here": 1,
    }
    assert "updated_at" in recorded


def test_bad_input_fails_at_once_with_the_workers_message_and_records_it(
    tmp_path: Path, fake_worker: Callable[[], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_WORKER_EXIT", str(EXIT_INVALID_MEDIA))
    monkeypatch.setenv("FAKE_WORKER_CLASS", "invalid_media")
    monkeypatch.setenv("FAKE_WORKER_MESSAGE", "file:///in.mp4: not a video (a text file)")
    monkeypatch.setenv("FAKE_WORKER_TERMINATION_LOG", "1")
    pushed: list[dict[str, Any]] = []
    context = _context()
    context["ti"].xcom_push = lambda **kwargs: pushed.append(kwargs)
    operator = FaceFusionWorkerOperator(
        task_id="prepare",
        command="prepare",
        work_uri=(tmp_path / "w").as_uri(),
        output_uri=(tmp_path / "o.mp4").as_uri(),
    )

    with pytest.raises(AirflowFailException, match=r"invalid_media, exit code 12\): file:///in.mp4: not a video"):
        operator.execute(context)
    assert pushed == [
        {
            "key": "failure",
            "value": {"failure_class": "invalid_media", "message": "file:///in.mp4: not a video (a text file)"},
        }
    ]


def test_retryable_failure_is_an_ordinary_task_failure(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    write_work: Callable[..., Any],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    monkeypatch.setenv("FAKE_WORKER_EXIT", str(EXIT_RETRYABLE))
    monkeypatch.setenv("FAKE_WORKER_CLASS", "retryable")
    monkeypatch.setenv("FAKE_WORKER_MESSAGE", "injected transient failure (swap-span span 1 try 1)")
    monkeypatch.setenv("FACEFUSION_TEST_FAULTS", '[{"command": "swap-span"}]')
    operator = FaceFusionWorkerOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        target_uri="file:///in.mp4",
        span=_span(work, 1),
    )

    with pytest.raises(AirflowException, match="injected transient failure") as raised:
        operator.execute(_context())

    assert not isinstance(raised.value, AirflowFailException)
    assert fake_worker()[0]["faults"] == '[{"command": "swap-span"}]'  # the test-only switch reaches the worker


def test_template_fields_extend_the_parents() -> None:
    assert isinstance(FaceFusionWorkerOperator.template_fields, tuple)
    assert set(BaseOperator.template_fields) <= set(FaceFusionWorkerOperator.template_fields)
    expected = {"work_uri", "output_uri", "run_key", "worker_args", "span", "target_uri"}
    assert expected <= set(FaceFusionWorkerOperator.template_fields)


def test_a_plugged_launcher_gets_the_contract_argv_and_its_failure_fails_the_task(tmp_path: Path) -> None:
    class RecordingLauncher:
        def __init__(self) -> None:
            self.calls: list[tuple[list[str], dict[str, str]]] = []

        def run(self, argv: Any, env: Any, on_line: Callable[[str], None]) -> tuple[int, str]:
            self.calls.append((list(argv), dict(env)))
            on_line("a worker line")
            return EXIT_INVALID_MEDIA, '{"failure_class": "invalid_media", "retryable": false, "message": "bad"}'

        def stop(self) -> None:
            pass

    launcher = RecordingLauncher()
    operator = FaceFusionWorkerOperator(
        task_id="merge",
        command="merge",
        work_uri=(tmp_path / "w").as_uri(),
        output_uri=(tmp_path / "o.mp4").as_uri(),
        run_key="facefusion_swap--r1",
        worker_args=["--target", "file:///in.mp4", "--output", (tmp_path / "o.mp4").as_uri()],
        launcher=launcher,
    )

    with pytest.raises(AirflowFailException, match=r"invalid_media, exit code 12\): bad"):
        operator.execute(_context())
    argv, env = launcher.calls[0]
    assert argv[:3] == ["merge", "--work-uri", (tmp_path / "w").as_uri()]
    assert env["FACEFUSION_RUN_KEY"] == "facefusion_swap--r1"


def test_swap_span_without_its_span_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    operator = FaceFusionWorkerOperator(
        task_id="swap_span", command="swap-span", work_uri=(tmp_path / "w").as_uri(), output_uri="file:///o.mp4"
    )
    with pytest.raises(ValueError, match="swap-span needs its span and this run's target_uri"):
        operator.execute(_context())


def test_templated_fields_render_natively(tmp_path: Path) -> None:
    from airflow.sdk import DAG

    with DAG("native", schedule=None, render_template_as_native_obj=True):
        operator = FaceFusionWorkerOperator(
            task_id="prepare",
            command="prepare",
            work_uri="{{ params.work }}",
            output_uri="{{ params.out }}",
            worker_args="{{ params.args }}",
        )
    params = {"work": "file:///w/work/j", "out": "file:///o.mp4", "args": ["--source", "file:///a.png"]}
    operator.render_template_fields({"params": params})

    assert operator.work_uri == "file:///w/work/j"
    assert operator.worker_args == ["--source", "file:///a.png"]


def test_a_full_disk_is_retried_once_then_fails_naming_the_path(
    tmp_path: Path, full_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real worker, its work root on a full filesystem: ``storage_full`` (exit 19) names the file; the first try
    is retried, the second fails the task for good however many retries the task has left."""
    from synth import VideoSpec, pattern_frames, write_video

    from facefusion_provider import storage
    from facefusion_provider.contract import prepare_worker_args
    from facefusion_provider.options import Options
    from facefusion_provider.work.ids import work_id

    target = tmp_path / "in.mp4"
    write_video(str(target), VideoSpec(), pattern_frames(8, 64, 48))
    options = Options(processors=[])
    work_uri = (full_disk / "work" / work_id(storage.content_id(target.as_uri()), [], options)).as_uri()
    operator = FaceFusionWorkerOperator(
        task_id="prepare",
        command="prepare",
        work_uri=work_uri,
        output_uri=(tmp_path / "out.mp4").as_uri(),
        worker_args=prepare_worker_args([], target.as_uri(), options),
        retries=4,
    )
    failure = rf"worker failed \(storage_full, exit code 19\): {work_uri}/\S+: no space left on device"

    with pytest.raises(AirflowException, match=failure) as first:
        operator.execute(_context(try_number=1))
    assert not isinstance(first.value, AirflowFailException)  # retried
    with pytest.raises(AirflowFailException, match=failure) as second:
        operator.execute(_context(try_number=2))
    assert str(second.value).endswith("; not retried again: storage_full is retried once at most")
