"""The operator-worker contract: what the operators build is what the worker reads, in one module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from facefusion_provider import contract
from facefusion_provider.contract import (
    SpanProgress,
    WorkerSettings,
    failure_report,
    merge_worker_args,
    parse_failure_report,
    parse_worker_argv,
    prepare_worker_args,
    progress_in_line,
    span_worker_args,
    using_worker_settings,
    worker_argv,
    worker_settings,
)
from facefusion_provider.exceptions import EXIT_INTERNAL, EXIT_NO_FACE, InvalidOptionError, NoFaceError
from facefusion_provider.options import Options, options_from_namespace
from facefusion_provider.output.merge import DEFAULT_MERGE_PREFETCH, merge_prefetch
from facefusion_provider.work.claims import lease_seconds

PACKAGE = Path(contract.__file__).parent


def test_the_worker_reads_back_every_prepare_flag_the_operators_build() -> None:
    options = Options(segment_size=8, face_swapper_blend=70, processors=[], output_video_quality=100)
    argv = worker_argv(
        "prepare", "s3://w/work/abc", prepare_worker_args(["s3://in/a.png", "s3://in/b.png"], "s3://in/v.mp4", options)
    )

    args = parse_worker_argv(argv)

    assert (args.command, args.work_uri, args.source, args.target) == (
        "prepare",
        "s3://w/work/abc",
        ["s3://in/a.png", "s3://in/b.png"],
        "s3://in/v.mp4",
    )
    assert options_from_namespace(args) == options


def test_the_worker_reads_back_a_span_and_a_merge() -> None:
    span = {"index": 3, "first": 12, "last": 16}
    swap = parse_worker_argv(worker_argv("swap-span", "file:///w/j", span_worker_args("file:///in.mp4", span)))
    merge = parse_worker_argv(worker_argv("merge", "file:///w/j", merge_worker_args("file:///in.mp4", "file:///o.mp4")))

    assert (swap.segments, swap.span, swap.target) == ((12, 16), 3, "file:///in.mp4")
    assert (merge.target, merge.output) == ("file:///in.mp4", "file:///o.mp4")


def test_argv_the_worker_cannot_read_is_an_invalid_option() -> None:
    with pytest.raises(InvalidOptionError, match="--segments"):
        parse_worker_argv(["swap-span", "--work-uri", "w", "--target", "t", "--segments", "5:2"])


def test_the_worker_settings_come_from_the_environment_once() -> None:
    settings = WorkerSettings.from_environ(
        {
            "FACEFUSION_TRY_NUMBER": "3",
            "FACEFUSION_TASK_KEY": "d/r/swap_span/2",
            "FACEFUSION_RUN_KEY": "d--r",
            "FACEFUSION_ALLOWED_OUTPUT_PREFIXES": "s3://out/a/, s3://out/b/",
            "FACEFUSION_HELP_OTHER_RUNS_SECONDS": "600",
            "FACEFUSION_MODELS_DIR": "",
        }
    )

    assert (settings.try_number, settings.task_key, settings.run_key) == (3, "d/r/swap_span/2", "d--r")
    assert settings.allowed_output_prefixes == ("s3://out/a/", "s3://out/b/")
    assert settings.help_other_runs_seconds == 600 and settings.models_dir is None
    assert WorkerSettings.from_environ({}) == WorkerSettings()


def test_a_bad_worker_variable_is_refused_naming_it() -> None:
    with pytest.raises(InvalidOptionError, match="FACEFUSION_TRY_NUMBER"):
        WorkerSettings.from_environ({"FACEFUSION_TRY_NUMBER": "two"})


@pytest.mark.parametrize(
    ("variable", "value", "refusal"),
    [
        ("FACEFUSION_MERGE_PREFETCH", "0", "greater than or equal to 1"),  # the merge needs one segment in flight
        ("FACEFUSION_CLAIM_LEASE_SECONDS", "0", "greater than 0"),
        ("FACEFUSION_HELP_OTHER_RUNS_SECONDS", "-5", "greater than or equal to 0"),
        ("FACEFUSION_S3_MAX_ATTEMPTS", "2.5", "valid integer"),
    ],
)
def test_a_number_the_worker_cannot_use_is_refused_by_the_contract(variable: str, value: str, refusal: str) -> None:
    with pytest.raises(
        InvalidOptionError, match=rf"^{variable}: input should be .*{refusal}.*, got '{re.escape(value)}'$"
    ):
        WorkerSettings.from_environ({variable: value})


def test_the_worker_uses_the_settings_it_installed_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACEFUSION_MERGE_PREFETCH", "7")
    monkeypatch.setenv("FACEFUSION_CLAIM_LEASE_SECONDS", "90")
    installed = WorkerSettings.from_environ({"FACEFUSION_MERGE_PREFETCH": "2", "FACEFUSION_CLAIM_LEASE_SECONDS": "2.5"})

    assert (merge_prefetch(), lease_seconds()) == (7, 90)  # a library caller: the environment's now
    with using_worker_settings(installed):
        monkeypatch.setenv("FACEFUSION_MERGE_PREFETCH", "not read")
        assert worker_settings() is installed
        assert (merge_prefetch(), lease_seconds()) == (2, 2.5)  # a fraction of a second, as the contract allows
    monkeypatch.delenv("FACEFUSION_MERGE_PREFETCH")
    assert merge_prefetch() == DEFAULT_MERGE_PREFETCH


def test_the_failure_report_the_worker_writes_is_the_one_the_operators_read() -> None:
    code, report = failure_report(NoFaceError("face.png: no face found"))
    read = parse_failure_report(code, "a log line\n" + report.line())
    assert (read.exit_code, read.failure_class, read.retryable, read.message) == (
        EXIT_NO_FACE,
        "no_face",
        False,
        "face.png: no face found",
    )

    code, report = failure_report(KeyError("frame"))
    read = parse_failure_report(None, report.line())  # a pod's termination message alone
    assert code == EXIT_INTERNAL and read.retryable and read.failure_class == "internal"


def test_a_progress_line_reads_back_wherever_it_sits_in_a_log_line() -> None:
    progress = SpanProgress(span=2, segments_committed=3, segments_total=4, committed_here=2, frames_done=24)

    assert progress_in_line(f"2026-12-04 12:00:00 INFO worker: {progress.line()}") == progress.model_dump()
    assert progress_in_line("facefusion.progress {not json") is None
    assert progress_in_line("an ordinary line") is None


def test_every_facefusion_variable_is_named_in_the_contract_alone() -> None:
    named = {value for name, value in vars(contract).items() if name.endswith("_VARIABLE")}
    literal = re.compile(r"""["'](FACEFUSION_[A-Z0-9_]+)["']""")
    elsewhere = {
        f"{path.relative_to(PACKAGE)}: {match}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "contract.py"
        for match in literal.findall(path.read_text())
    }
    assert {"FACEFUSION_RUN_KEY", "FACEFUSION_TASK_KEY", "FACEFUSION_TERMINATION_LOG"} <= named
    assert elsewhere == set(), sorted(elsewhere)
