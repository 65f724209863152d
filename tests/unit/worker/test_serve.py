"""A standing worker (``facefusion-worker serve``) as KEDA and an idle cluster see it: SIGTERM lets it commit the
segment in flight and take no other (no claim left to lapse, no work lost), and the next worker reuses what it
committed and finishes the work; idle, it reads the change signal instead of listing the works, and a run announced
meanwhile is picked up."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from committed import hold_run_lease, work_uri_for
from faults import fault_env
from fresh_loop import run_async

from facefusion_provider import storage, worker
from facefusion_provider.contract import ALLOWED_INPUT_PREFIXES_VARIABLE
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor
from facefusion_provider.triggers import span_committed as span_trigger
from facefusion_provider.work.claims import SegmentClaims, WorkState, latest_claims, scan_work
from facefusion_provider.work.layout import PREPARE_CLAIM, RootLayout, WorkLayout
from facefusion_provider.work.leases import live_standing_workers
from facefusion_provider.worker.scheduler import HelpMemory, live_works, prepare_waiting_work

from .conftest import MakeVideo

SEGMENT = 8
OPTIONS: dict[str, Any] = {"processors": [], "output_video_quality": 100, "segment_size": SEGMENT}


def _serve(work_root: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", work_root, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _wait_for(condition: Any, process: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _committed_bytes(layout: WorkLayout, indexes: frozenset[int]) -> dict[int, tuple[bytes, bytes]]:
    """Each committed segment's marker and the file it names, as bytes."""
    found = {}
    for index in indexes:
        marker = storage.read_bytes(layout.segment_marker(index))
        found[index] = (marker, storage.read_bytes(layout.segment_file(json.loads(marker)["file"])))
    return found


def _segment_files(layout: WorkLayout, index: int) -> list[str]:
    return sorted(
        path.name for path in Path(layout.work_uri.removeprefix("file://")).glob(f"segments/{index:05d}.*.mp4")
    )


def test_sigterm_commits_the_segment_in_flight_and_takes_no_other(
    make_video: MakeVideo, work_root: str, tmp_path: Path
) -> None:
    """KEDA scaling a standing worker down mid-segment: it commits that segment, releases its claims and goes; the
    next worker reuses every segment it committed (not a byte rewritten) and finishes the work."""
    target = make_video(frames=8 * SEGMENT)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)
    layout = WorkLayout(work_uri)
    hold_run_lease(layout, "run-1", target, output_uri=(tmp_path / "out.mp4").as_uri())
    slow = fault_env([{"command": "swap-span", "indexes": [0], "frame_delay": 0.08}])
    standing = _serve(work_root, env=slow)
    _wait_for(lambda: len(scan_work(layout).committed) >= 1, standing)

    standing.send_signal(signal.SIGTERM)
    out, err = standing.communicate(timeout=60)

    assert standing.returncode == 0, err[-3000:]
    assert "after committing its segment in flight" in err
    committed = scan_work(layout).committed
    claimed = {int(name) for name in latest_claims(layout) if name.isdigit()}
    assert claimed == set(committed), "a claim was left to lapse: its segment would wait a TTL for another worker"
    assert 1 <= len(committed) < 8  # it stopped early, and lost nothing it had taken
    assert live_standing_workers(RootLayout.of(work_root)) == []
    assert json.loads(out.strip().splitlines()[-1])["segments"] == len(committed)
    kept = _committed_bytes(layout, committed)

    successor = _serve(work_root, "--idle-exit", "2")
    out, err = successor.communicate(timeout=120)

    assert successor.returncode == 0, err[-3000:]
    assert scan_work(layout).committed == frozenset(range(8))
    assert json.loads(out.strip().splitlines()[-1])["segments"] == 8 - len(committed)  # only the segments left
    assert _committed_bytes(layout, committed) == kept  # reused as they were: same markers, same files
    assert all(len(_segment_files(layout, index)) == 1 for index in committed)  # nobody computed them again
    assert (tmp_path / "out.mp4").stat().st_size > 0  # the run's output, merged by the worker that finished


def test_an_idle_worker_reads_the_signal_and_picks_up_a_run_announced_meanwhile(
    make_video: MakeVideo, work_root: str, tmp_path: Path
) -> None:
    target = make_video(frames=2 * SEGMENT)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)  # prepared, but no run wants it yet
    layout = WorkLayout(work_uri)
    storage.write_bytes_atomic(RootLayout.of(work_root).signal, b"0")
    standing = _serve(work_root, "--idle-exit", "8")
    time.sleep(3)  # idle: it backs off to one look every 2 s

    # validate's hold announces the run on the signal
    hold_run_lease(layout, "run-1", target, output_uri=(tmp_path / "out.mp4").as_uri())

    _wait_for(lambda: len(scan_work(layout).committed) == 2, standing)
    out, err = standing.communicate(timeout=60)
    assert standing.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["segments"] == 2
    assert result["looks"] <= 12  # about 11 s idle in all: a look every 2 s at most, and no listing loop


def test_a_run_every_standing_worker_refuses_fails_at_once_naming_why(
    make_video: MakeVideo, work_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standing workers may not read the run's target (their input allow-list): each says so in the work, the
    span's wait sees that every live one refused and fails, not retried, with their reason; a worker that stops
    takes its refusal back."""
    target = make_video(frames=2 * SEGMENT)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)
    layout = WorkLayout(work_uri)
    hold_run_lease(layout, "run-1", target, output_uri=(tmp_path / "out.mp4").as_uri())
    elsewhere = {ALLOWED_INPUT_PREFIXES_VARIABLE: (tmp_path / "somewhere-else").as_uri()}
    standing = _serve(work_root, "--idle-exit", "20", env=elsewhere)
    try:
        _wait_for(lambda: bool(storage.list_files(layout.refusals_dir)), standing)
        monkeypatch.setattr(span_trigger, "REFUSALS_EVERY_SECONDS", 0.0)
        trigger = span_trigger.SpanCommittedTrigger(work_uri, 0, 2, poll_seconds=0.05)

        async def first_event() -> dict[str, Any]:
            async for event in trigger.run():
                return dict(event.payload)
            raise AssertionError("no event")

        began = time.monotonic()
        event = run_async(asyncio.wait_for(first_event(), timeout=30))
        assert event["status"] == "refused" and time.monotonic() - began < 10
        with pytest.raises(AirflowFailException, match=r"every live standing worker .* gave up .*somewhere-else"):
            SpanCommittedSensor(
                task_id="swap_span", work_uri=work_uri, output_uri="", target_uri=target, run_key="", span={}
            ).execute_complete({}, event)
        assert scan_work(layout).committed == frozenset()
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.communicate(timeout=60)
    assert storage.list_files(layout.refusals_dir) == []  # withdrawn as it stopped


def test_a_standing_worker_that_prepares_a_run_from_its_lease_announces_it(
    make_video: MakeVideo, work_root: str, tmp_path: Path
) -> None:
    """The other idle workers saw the run unprepared and went back to the change signal: the worker that prepares it
    rewrites the signal, so they join now rather than when some other run is announced."""
    target = make_video(frames=2 * SEGMENT)
    layout = WorkLayout(work_uri_for(work_root, [], target, **OPTIONS))
    hold_run_lease(layout, "run-1", target, output_uri=(tmp_path / "out.mp4").as_uri(), options=OPTIONS)
    signal_uri = RootLayout.of(work_root).signal
    announced = storage.stat(signal_uri)
    (run,) = live_works(work_root, besides="")

    prepare_waiting_work(run, None, HelpMemory(), owner="standing/one")

    prepared = storage.stat(signal_uri)
    assert storage.exists(layout.work_json)
    assert announced is not None and prepared is not None and prepared.version != announced.version


def test_a_standing_worker_that_finds_another_preparing_a_run_waits_for_its_announcement_closely(
    make_video: MakeVideo, work_root: str, tmp_path: Path
) -> None:
    """Another worker holds the run's prepare claim: this one prepares nothing and remembers that the signal will
    change when the work is written (``serve`` then looks every 0.25 s instead of backing off to 1.5 s)."""
    target = make_video(frames=2 * SEGMENT)
    layout = WorkLayout(work_uri_for(work_root, [], target, **OPTIONS))
    hold_run_lease(layout, "run-1", target, output_uri=(tmp_path / "out.mp4").as_uri(), options=OPTIONS)
    assert SegmentClaims(layout, owner="standing/other").take_name(PREPARE_CLAIM, WorkState(frozenset(), {}))
    (run,) = live_works(work_root, besides="")
    memory = HelpMemory()

    prepare_waiting_work(run, None, memory, owner="standing/one")

    assert memory.prepared_elsewhere
    assert not storage.exists(layout.work_json)
