"""``facefusion-worker``: the four commands, one JSON line on stdout, failure reports and exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from facefusion_provider import worker
from facefusion_provider.exceptions import EXIT_INTERNAL, EXIT_INVALID_MEDIA, EXIT_INVALID_OPTION, EXIT_RETRYABLE
from facefusion_provider.worker import cli

from .conftest import MakeVideo

PASSTHROUGH = ["--processors", "--output-video-quality", "100"]


def _worker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "facefusion_provider.worker", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_commands_in_separate_processes(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=17, audio_rate=48000)
    job = str(tmp_path / "job")
    output = tmp_path / "out.mp4"
    prepared = _worker(
        "prepare", "--job-uri", job, "--target", target, "--output", str(output), "--chunk-size", "8", *PASSTHROUGH
    )
    assert prepared.returncode == 0, prepared.stderr
    summary = json.loads(prepared.stdout)
    assert summary["job_uri"] == Path(job).as_uri()
    assert summary["chunks"] == [{"index": 0, "start": 0, "end": 8}, {"index": 1, "start": 8, "end": 17}]
    for chunk in summary["chunks"]:
        swapped = _worker("swap-chunk", "--job-uri", job, "--index", str(chunk["index"]))
        assert swapped.returncode == 0, swapped.stderr
        assert json.loads(swapped.stdout)["skipped"] is False
    again = _worker("--log-level", "warning", "swap-chunk", "--job-uri", job, "--index", "1")
    assert json.loads(again.stdout) == {"index": 1, "frame_count": 9, "skipped": True, "timings": {}}
    assert again.stderr == ""
    merged = _worker("merge", "--job-uri", job)
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout)["frame_count"] == 17
    assert output.is_file() and (tmp_path / "out.preview.jpg").is_file()


def test_a_failure_reports_json_and_writes_the_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    failed = _worker(
        "run",
        "--target",
        str(tmp_path / "none.mp4"),
        "--output",
        str(tmp_path / "o.mp4"),
        "--processors",
        env={"FACEFUSION_TERMINATION_LOG": str(log)},
    )
    assert failed.returncode == 11
    report = json.loads(failed.stderr.strip().splitlines()[-1])
    assert report == {
        "failure_class": "input_missing",
        "retryable": False,
        "message": f"target: {(tmp_path / 'none.mp4').as_uri()} does not exist",
    }
    assert json.loads(log.read_text()) == report


def test_help_loads_no_media_or_engine_modules() -> None:
    code = (
        "import sys; from facefusion_provider.worker import cli; cli.build_parser().format_help();"
        "print(sorted(m for m in ('av', 'numpy', 'cv2', 'onnxruntime') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
    helped = _worker("run", "--help")
    assert helped.returncode == 0
    assert "--output-video-quality" in helped.stdout and "--work-root" in helped.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["swap-chunk", "--job-uri", "j"], "the following arguments are required: --index"),
        (["swap-chunk", "--job-uri", "j", "--index", "two"], "argument --index: invalid int value: 'two'"),
        (["resize"], "invalid choice: 'resize'"),
        (
            ["run", "--target", "t.mp4", "--output", "o.mp4", "--output-video-encoder", "mpeg1"],
            "output_video_encoder: Input should be 'libx264', 'libx265', 'libvpx-vp9', 'h264_nvenc' or 'hevc_nvenc'",
        ),
        (["run", "--target", "t.mp4", "--output", "o.mp4", "--chunk-size", "0"], "chunk_size: Input should be greater"),
        (["--log-level", "loud", "merge", "--job-uri", "j"], "argument --log-level: invalid choice: 'loud'"),
        (
            ["prepare", "--job-uri", "j", "--target", "t.mp4", "--output", "o.mp4", "--chunk-wave", "-1"],
            "argument --chunk-wave: must be 0 or more, got -1",
        ),
    ],
)
def test_invalid_arguments_name_the_option(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == EXIT_INVALID_OPTION
    report = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert report["failure_class"] == "invalid_option" and report["retryable"] is False
    assert expected in report["message"]


def test_an_unexpected_error_is_internal_and_retryable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(job_uri: str, index: int, *, models_dir: str | None = None) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(worker, "swap_chunk", crash)
    assert cli.main(["swap-chunk", "--job-uri", "j", "--index", "0"]) == EXIT_INTERNAL
    report = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert report == {"failure_class": "internal", "retryable": True, "message": "RuntimeError: disk on fire"}


def test_models_dir_is_accepted_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []

    def record(job_uri: str, index: int, *, models_dir: str | None = None) -> worker.ChunkResult:
        seen.append(models_dir)
        return worker.ChunkResult(index, 1, skipped=True)

    monkeypatch.setattr(worker, "swap_chunk", record)
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", "/from/env")
    assert cli.main(["--models-dir", "/before", "swap-chunk", "--job-uri", "j", "--index", "0"]) == 0
    assert cli.main(["swap-chunk", "--job-uri", "j", "--index", "0", "--models-dir", "/after"]) == 0
    assert cli.main(["swap-chunk", "--job-uri", "j", "--index", "0"]) == 0
    assert seen == ["/before", "/after", "/from/env"]


def test_injected_faults_fail_the_chosen_command_and_try(
    make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = make_video(frames=10)
    job = str(tmp_path / "job")
    worker.prepare(job, [], target, str(tmp_path / "out.mp4"), chunk_size=5, processors=[])
    faults = [
        {"command": "swap-chunk", "indexes": [1], "tries": [1], "retryable": True},
        {"command": "merge", "tries": [1], "retryable": False},
    ]
    monkeypatch.setenv("FACEFUSION_TEST_FAULTS", json.dumps(faults))
    monkeypatch.setenv("FACEFUSION_TRY_NUMBER", "1")
    assert cli.main(["swap-chunk", "--job-uri", job, "--index", "0"]) == 0
    assert cli.main(["swap-chunk", "--job-uri", job, "--index", "1"]) == EXIT_RETRYABLE
    assert cli.main(["merge", "--job-uri", job]) == EXIT_INVALID_MEDIA
    monkeypatch.setenv("FACEFUSION_TRY_NUMBER", "2")
    assert cli.main(["swap-chunk", "--job-uri", job, "--index", "1"]) == 0
    assert cli.main(["merge", "--job-uri", job]) == 0
    messages = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert messages == [
        "injected transient failure (swap-chunk chunk 1 try 1)",
        "injected permanent failure (merge try 1)",
    ]


def test_prepare_plans_whole_waves_of_equal_chunks(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=17)
    job = str(tmp_path / "job")
    argv = ["prepare", "--job-uri", job, "--target", target, "--output", str(tmp_path / "out.mp4"), "--chunk-size", "4"]
    prepared = _worker(*argv, "--chunk-wave", "3", *PASSTHROUGH)
    assert prepared.returncode == 0, prepared.stderr
    chunks = json.loads(prepared.stdout)["chunks"]
    # 4 chunks of 4 frames would leave two of three GPUs idle in a second wave: 6 chunks of 2-3 frames fill two.
    assert [(chunk["start"], chunk["end"]) for chunk in chunks] == [(0, 2), (2, 5), (5, 8), (8, 11), (11, 14), (14, 17)]
    assert [chunk.model_dump() for chunk in worker.load_job(Path(job).as_uri()).chunks] == chunks


def test_sigterm_stops_a_run_and_leaves_no_output_nor_temporary_file(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=400, width=320, height=240)
    work, scratch, output = tmp_path / "work", tmp_path / "tmp", tmp_path / "out" / "out.mp4"
    scratch.mkdir()
    arguments = ["run", "--target", target, "--output", str(output), "--work-root", str(work), "--chunk-size", "400"]
    running = subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", *arguments, *PASSTHROUGH],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.monotonic() + 60
        while not list(work.glob("jobs/*/job.json")):  # prepared: the one chunk of 400 frames is being encoded
            assert running.poll() is None and time.monotonic() < deadline, running.stderr and running.stderr.read()
            time.sleep(0.01)
        time.sleep(0.3)
        running.send_signal(signal.SIGTERM)
        _, errors = running.communicate(timeout=60)
    finally:
        running.kill()

    assert running.returncode == 128 + signal.SIGTERM, errors
    assert not output.parent.exists() or list(output.parent.iterdir()) == []  # neither output nor partial file
    assert list(scratch.iterdir()) == []  # every temporary folder removed on the way out
    assert list(work.glob("jobs/*/chunks/*")) == []  # the chunk was cut short: nothing of it committed
