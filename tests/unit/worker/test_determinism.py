"""Deterministic frames: the default face swap at the default quality gives the same decoded frames whatever the thread
counts (the swap's and the CPUs the encoder may use), whichever segment a span starts at, and after a worker killed with
SIGKILL mid-span is resumed. Shared, content-addressed segments rest on this."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from committed import work_uri_for
from faults import fault_env
from people import carphone, person_file
from readback import frame_digests

from facefusion_provider import storage, worker
from facefusion_provider.work.layout import WorkLayout

SEGMENT = 8
FRAMES = 3 * SEGMENT
# The default face swap (classic) at the default quality; its faces followed between searches every 5 frames, which
# does not divide the segment: a span started at a segment must search there itself to give a run's frames.
OPTIONS: dict[str, Any] = {"segment_size": SEGMENT, "face_detector_interval": 5}


@dataclass(frozen=True)
class Reference:
    """A target, a source, and the frames of one plain run over them (4 swap threads, every CPU)."""

    target: str
    source: str
    frames: list[str]


def _digests(path: str | Path) -> list[str]:
    return [digest.md5 for digest in frame_digests(str(path))]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    folder = tmp_path_factory.mktemp("determinism")
    target = str(carphone(folder / "carphone.mp4", frames=FRAMES))
    source = person_file(folder / "astronaut.jpg")
    output = folder / "reference.mp4"
    worker.run([str(source)], target, str(output), str(folder / "work"), execution_thread_count=4, **OPTIONS)
    frames = _digests(output)
    assert len(frames) == FRAMES
    assert sum(a != b for a, b in zip(frames, _digests(target), strict=True)) > FRAMES // 2  # faces were swapped
    return Reference(target, str(source), frames)


def _on_one_cpu(call: Callable[[], object]) -> None:
    """``call()`` in a thread that may use one CPU only: an encoder left on "auto" threads would use one thread."""
    failures: list[BaseException] = []

    def pinned() -> None:
        try:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # this thread and the threads it starts
            call()
        except BaseException as error:  # reported in the test's thread
            failures.append(error)

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


def test_two_runs_with_other_thread_counts_and_cpus_give_equal_frames(reference: Reference, tmp_path: Path) -> None:
    output = tmp_path / "again.mp4"
    _on_one_cpu(
        lambda: worker.run(
            [reference.source],
            reference.target,
            str(output),
            str(tmp_path / "work"),
            execution_thread_count=1,
            **OPTIONS,
        )
    )
    assert _digests(output) == reference.frames


def test_a_span_started_mid_video_equals_a_run_from_frame_0(reference: Reference, tmp_path: Path) -> None:
    work_root = str(tmp_path / "work")
    work_uri = work_uri_for(work_root, [reference.source], reference.target, **OPTIONS)
    worker.prepare(work_uri, [reference.source], reference.target, **OPTIONS)
    last = worker.swap_span(work_uri, reference.target, 2, 3, span=1)  # its own segment first, then the others
    assert (last.committed, last.helped_in_run) == (3, 2)
    output = tmp_path / "from-the-middle.mp4"
    worker.merge(work_uri, reference.target, str(output))
    assert _digests(output) == reference.frames


def _markers(work_uri: str) -> list[str]:
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    return sorted(path.name for path in folder.glob("?????.json"))


def _swap_span(work_uri: str, target: str, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = ["swap-span", "--work-uri", work_uri, "--target", target, "--segments", "0:3", "--span", "0"]
    return subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def test_resume_after_kill_9_mid_span_equals_an_uninterrupted_run(reference: Reference, tmp_path: Path) -> None:
    work_root = str(tmp_path / "work")
    work_uri = work_uri_for(work_root, [reference.source], reference.target, **OPTIONS)
    worker.prepare(work_uri, [reference.source], reference.target, **OPTIONS)
    task = {"FACEFUSION_TASK_KEY": "dag/run/swap_span/0"}  # both tries are one task's: the retry takes over its claims
    slow = fault_env([{"command": "swap-span", "indexes": [0], "frame_delay": 0.1}])
    first_try = _swap_span(work_uri, reference.target, {**task, **slow})
    deadline = time.monotonic() + 120
    while not _markers(work_uri):
        assert first_try.poll() is None and time.monotonic() < deadline, "the worker committed no segment"
        time.sleep(0.02)
    first_try.send_signal(signal.SIGKILL)  # the second segment is in flight
    first_try.wait()
    assert len(_markers(work_uri)) < 3
    retry = _swap_span(work_uri, reference.target, task)
    out, err = retry.communicate(timeout=300)
    assert retry.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["reused"] >= 1
    output = tmp_path / "resumed.mp4"
    worker.merge(work_uri, reference.target, str(output))
    assert _digests(output) == reference.frames
