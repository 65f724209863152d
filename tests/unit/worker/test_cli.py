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
from committed import work_uri_for
from faults import FAULTS_VARIABLE
from faults import install as install_faults

from facefusion_provider import worker
from facefusion_provider.contract import PROGRESS_PREFIX
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


def test_commands_in_separate_processes(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=17, audio_rate=48000)
    work = work_uri_for(work_root, [], target, processors=[], output_video_quality=100, segment_size=8)
    output = tmp_path / "out.mp4"
    prepared = _worker("prepare", "--work-uri", work, "--target", target, "--segment-size", "8", *PASSTHROUGH)
    assert prepared.returncode == 0, prepared.stderr
    assert json.loads(prepared.stdout) == {"work_id": work.rsplit("/", 1)[1], "frames": 17, "segments": 2}
    swapped = _worker("swap-span", "--work-uri", work, "--target", target, "--segments", "1:2", "--span", "1")
    assert swapped.returncode == 0, swapped.stderr
    assert json.loads(swapped.stdout)["committed"] == 2  # its own segment, then the other span's
    again = _worker("--log-level", "warning", "swap-span", "--work-uri", work, "--target", target, "--segments", "0:1")
    assert json.loads(again.stdout)["skipped"] is True
    assert again.stderr == ""
    merged = _worker("merge", "--work-uri", work, "--target", target, "--output", str(output))
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout)["frame_count"] == 17
    assert output.is_file() and (tmp_path / "out.preview.jpg").is_file()
    progress = [line for line in swapped.stderr.splitlines() if PROGRESS_PREFIX in line]
    assert len(progress) == 2 and json.loads(progress[-1].split(PROGRESS_PREFIX)[1]) == {
        "span": 1,
        "segments_committed": 1,
        "segments_total": 1,
        "committed_here": 2,
        "frames_done": 17,
    }


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


def test_a_passthrough_run_loads_no_opencv_nor_onnxruntime_and_leaves_no_thread_behind(
    make_video: MakeVideo, tmp_path: Path
) -> None:
    target = make_video(frames=9)
    argv = ["run", "--target", target, "--output", str(tmp_path / "out.mp4"), "--work-root", str(tmp_path / "w")]
    code = (
        "import os, sys; from facefusion_provider.worker import cli;"
        f"code = cli.main({[*argv, '--processors']!r});"
        "print(code, sorted(m for m in ('numpy', 'cv2', 'onnxruntime') if m in sys.modules),"
        " len(os.listdir('/proc/self/task')))"
    )
    env = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, env=env
    )
    # numpy loaded, but its OpenBLAS without a pool of threads spinning beside the encoder's: one thread is left
    assert result.stdout.split("\n")[-2] == "0 ['numpy'] 1", result.stderr[-2000:]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["swap-span", "--work-uri", "w", "--target", "t.mp4"], "the following arguments are required: --segments"),
        (
            ["swap-span", "--work-uri", "w", "--target", "t.mp4", "--segments", "3:1"],
            "argument --segments: expected FIRST:LAST with FIRST < LAST, got '3:1'",
        ),
        (["resize"], "invalid choice: 'resize'"),
        (
            ["run", "--target", "t.mp4", "--output", "o.mp4", "--output-video-encoder", "mpeg1"],
            "output_video_encoder: Input should be 'libx264', 'libx265', 'libvpx-vp9', 'h264_nvenc', 'hevc_nvenc' or "
            "'prores_ks'",
        ),
        (
            ["run", "--target", "t.mp4", "--output", "o.mp4", "--segment-size", "0"],
            "segment_size: Input should be greater",
        ),
        (
            ["run", "--target", "t.mp4", "--output", "o.mp4", "--chunk-size", "64"],
            "chunk_size: no longer an option: it is called segment_size now; give segment_size instead (--segment-size)",
        ),
        (["--log-level", "loud", "merge", "--work-uri", "w"], "argument --log-level: invalid choice: 'loud'"),
        (["merge", "--work-uri", "w", "--target", "t.mp4"], "the following arguments are required: --output"),
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
    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(worker, "swap_span", crash)
    assert cli.main(["swap-span", "--work-uri", "w", "--target", "t.mp4", "--segments", "0:1"]) == EXIT_INTERNAL
    report = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert report == {"failure_class": "internal", "retryable": True, "message": "RuntimeError: disk on fire"}


def test_models_dir_is_accepted_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []

    def record(*args: object, models_dir: str | None = None, **kwargs: object) -> worker.SpanResult:
        seen.append(models_dir)
        return worker.SpanResult(0, 0, 1, 0, 0, 1, 0, 0, 0, skipped=True)

    monkeypatch.setattr(worker, "swap_span", record)
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", "/from/env")
    span = ["swap-span", "--work-uri", "w", "--target", "t.mp4", "--segments", "0:1"]
    assert cli.main(["--models-dir", "/before", *span]) == 0
    assert cli.main([*span, "--models-dir", "/after"]) == 0
    assert cli.main(span) == 0
    assert seen == ["/before", "/after", "/from/env"]


def test_injected_faults_fail_the_chosen_command_and_try(
    make_video: MakeVideo,
    tmp_path: Path,
    work_root: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = make_video(frames=10)
    work = work_uri_for(work_root, [], target, segment_size=5, processors=[])
    worker.prepare(work, [], target, segment_size=5, processors=[])
    faults = [
        {"command": "swap-span", "indexes": [1], "tries": [1], "retryable": True},
        {"command": "merge", "tries": [1], "retryable": False},
    ]
    monkeypatch.setenv(FAULTS_VARIABLE, json.dumps(faults))
    install_faults(monkeypatch.setattr)  # what a worker process started with ``fault_env`` does as it imports
    monkeypatch.setenv("FACEFUSION_TRY_NUMBER", "1")
    span = ["swap-span", "--work-uri", work, "--target", target]
    merge = ["merge", "--work-uri", work, "--target", target, "--output", str(tmp_path / "out.mp4")]
    assert cli.main([*span, "--segments", "1:2", "--span", "1"]) == EXIT_RETRYABLE
    assert cli.main([*span, "--segments", "0:1", "--span", "0"]) == 0
    assert cli.main(merge) == EXIT_INVALID_MEDIA
    monkeypatch.setenv("FACEFUSION_TRY_NUMBER", "2")
    assert cli.main([*span, "--segments", "1:2", "--span", "1"]) == 0
    assert cli.main(merge) == 0
    messages = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert messages == [
        "injected transient failure (swap-span span 1 try 1)",
        "injected permanent failure (merge try 1)",
    ]


def test_sigterm_stops_a_run_and_leaves_no_output_nor_temporary_file(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=400, width=320, height=240)
    work, scratch, output = tmp_path / "work", tmp_path / "tmp", tmp_path / "out" / "out.mp4"
    scratch.mkdir()
    arguments = ["run", "--target", target, "--output", str(output), "--work-root", str(work), "--segment-size", "400"]
    running = subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", *arguments, *PASSTHROUGH],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.monotonic() + 60
        while not list(work.glob("work/*/work.json")):  # prepared: the one segment of 400 frames is being encoded
            assert running.poll() is None and time.monotonic() < deadline, running.stderr and running.stderr.read()
            time.sleep(0.01)
        time.sleep(0.3)
        running.send_signal(signal.SIGTERM)
        _, errors = running.communicate(timeout=60)
    finally:
        running.kill()

    assert running.returncode == 128 + signal.SIGTERM, errors
    assert not output.parent.exists() or list(output.parent.iterdir()) == []  # neither output nor partial file
    # Every temporary folder removed on the way out. onnxruntime 1.32 writes its telemetry session id to $TMPDIR/.ses
    # when it is imported (its 1DS client; ORT_DISABLE_TELEMETRY does not stop it): that file is not ours to remove.
    assert [path.name for path in scratch.iterdir() if path.name != ".ses"] == []
    assert list(work.glob("work/*/segments/*")) == []  # the segment was cut short: nothing of it committed
