"""Spans of segments between real worker processes: a killed worker's retry resumes at its first uncommitted segment,
a duplicated worker changes nothing, a fast worker takes a slow span's tail, a worker done with its run helps other
runs, and a standing worker works every live run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from committed import hold_run_lease, work_uri_for
from faults import fault_env
from readback import frame_digests, packet_payloads

from facefusion_provider import storage, worker
from facefusion_provider.contract import HELP_SECONDS_VARIABLE
from facefusion_provider.work.claims import SegmentClaims, scan_work
from facefusion_provider.work.layout import PREPARE_CLAIM, RootLayout, WorkLayout, merge_claim_name
from facefusion_provider.work.leases import live_standing_workers

from .conftest import MakeVideo

SEGMENT = 8
OPTIONS: dict[str, Any] = {"processors": [], "output_video_quality": 100, "segment_size": SEGMENT}
MINE_AND_OTHERS = {"mine": 2, "live": 10, "old": 3, "unreadable": 4}  # segments of each run's target
KEYFRAMES = {"preset": "ultrafast", "crf": "18", "g": str(SEGMENT)}  # a keyframe every segment: a short pre-roll


def _span(
    work_uri: str, target: str, segments: str, *, span: int = 0, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "facefusion_provider.worker",
            "swap-span",
            "--work-uri",
            work_uri,
            "--target",
            target,
            "--segments",
            segments,
            "--span",
            str(span),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def _segment_files(work_uri: str) -> dict[str, tuple[int, bytes]]:
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir() if p.name.endswith(".mp4")}


def _markers(work_uri: str) -> list[str]:
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    return sorted(p.name for p in folder.glob("?????.json"))


def _slow(span: int, delay: float) -> dict[str, str]:
    return fault_env([{"command": "swap-span", "indexes": [span], "frame_delay": delay}])


def _digests(path: str | Path) -> list[str]:
    return [digest.md5 for digest in frame_digests(str(path))]


def test_a_killed_worker_resumes_at_its_first_uncommitted_segment(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    frames = 12 * SEGMENT
    target = make_video(frames=frames, codec_options=KEYFRAMES)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)
    task = {"FACEFUSION_TASK_KEY": "dag/run/swap_span/0"}  # both tries run for one task
    first_try = _span(work_uri, target, "0:12", env={**task, **_slow(0, 0.03)})
    deadline = time.monotonic() + 60
    while len(_markers(work_uri)) < 4:
        assert first_try.poll() is None and time.monotonic() < deadline, "the worker did not commit four segments"
        time.sleep(0.05)
    first_try.send_signal(signal.SIGKILL)
    first_try.wait()
    committed = _markers(work_uri)
    before = _segment_files(work_uri)
    retry = _result(_span(work_uri, target, "0:12", env=task))
    left = frames - len(committed) * SEGMENT
    assert retry["reused"] == len(committed) and retry["committed"] == 12 - len(committed)
    assert retry["decoded_frames"] <= left + SEGMENT + SEGMENT  # what was left, one segment in flight, the pre-roll
    after = _segment_files(work_uri)
    assert {name: after[name] for name in before if name in after} == {
        name: value for name, value in before.items() if name in after
    }  # committed files are never written again
    output = tmp_path / "resumed.mp4"
    worker.merge(work_uri, target, str(output))
    plain = worker.run([], target, str(tmp_path / "plain.mp4"), str(tmp_path / "other-root"), **OPTIONS)
    assert _digests(output) == _digests(storage.local_path(plain.output_uri) or "") == _digests(target)


def test_two_workers_on_one_span_commit_each_segment_once(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    target = make_video(frames=10 * SEGMENT, codec_options=KEYFRAMES)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)
    twins = [_span(work_uri, target, "0:10", env=_slow(0, 0.005)) for _ in range(2)]  # a duplicated pod
    results = [_result(process) for process in twins]
    assert sum(result["committed"] for result in results) == 10  # every segment committed exactly once
    assert len(_markers(work_uri)) == 10 and len(_segment_files(work_uri)) == 10  # no loser's file left behind
    output = tmp_path / "out.mp4"
    worker.merge(work_uri, target, str(output))
    assert _digests(output) == _digests(target)


def test_a_fast_worker_takes_the_tail_of_a_slow_span(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=16 * SEGMENT, codec_options=KEYFRAMES)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)
    delay = 0.06
    slow = _span(work_uri, target, "0:8", span=0, env=_slow(0, delay))
    fast = _span(work_uri, target, "8:16", span=1)
    slow_result, fast_result = _result(slow), _result(fast)
    alone = 8 * SEGMENT * delay  # the slow span's frames on the slow worker: what the run waits for without helping
    assert fast_result["helped_in_run"] >= 2 and slow_result["committed"] + fast_result["committed"] == 16
    # The slow worker's own time (from its start, which a busy machine may delay) is the run's critical path.
    # A slow worker that a busy machine started after the fast one had taken everything found its span done: 0 s.
    slow_total = 0.0 if slow_result["skipped"] else slow_result["timings"]["total_s"]
    assert slow_total < 0.75 * alone, (slow_result, fast_result)
    output = tmp_path / "out.mp4"
    worker.merge(work_uri, target, str(output))
    assert _digests(output) == _digests(target)


def test_a_worker_done_with_its_own_run_helps_other_live_runs(make_video: MakeVideo, work_root: str) -> None:
    """Only recent runs are helped, a run whose target this worker cannot read is left alone, and the helped run's
    own task then finds its span done."""
    targets = {name: make_video(frames=count * SEGMENT, name=f"{name}.mp4") for name, count in MINE_AND_OTHERS.items()}
    works = {name: work_uri_for(work_root, [], target, **OPTIONS) for name, target in targets.items()}
    for name, work_uri in works.items():
        worker.prepare(work_uri, [], targets[name], **OPTIONS)
    hold_run_lease(WorkLayout(works["live"]), "live-run", targets["live"])
    hold_run_lease(WorkLayout(works["old"]), "old-run", targets["old"], age=timedelta(hours=2))
    hold_run_lease(WorkLayout(works["unreadable"]), "run", str(Path(work_root) / "gone.mp4"))
    mine = _result(_span(works["mine"], targets["mine"], "0:2", env={HELP_SECONDS_VARIABLE: "60"}))
    assert (mine["committed"], mine["helped_runs"], mine["helped_segments"]) == (2, 1, MINE_AND_OTHERS["live"])
    assert len(_markers(works["live"])) == MINE_AND_OTHERS["live"]
    assert _markers(works["old"]) == _markers(works["unreadable"]) == []
    live = MINE_AND_OTHERS["live"]
    assert _result(_span(works["live"], targets["live"], f"0:{live}"))["skipped"]
    output = Path(work_root).parent / "live-swapped.mp4"
    worker.merge(works["live"], targets["live"], str(output))
    assert _digests(output) == _digests(targets["live"])


def test_a_standing_worker_prepares_and_works_every_live_run_merges_its_outputs_and_leaves_no_heartbeat(
    make_video: MakeVideo, work_root: str
) -> None:
    targets = {
        "a": make_video(frames=3 * SEGMENT, name="a.mp4"),
        "b": make_video(frames=5 * SEGMENT, name="b.mp4", audio_rate=48000),
    }
    works = {name: work_uri_for(work_root, [], target, **OPTIONS) for name, target in targets.items()}
    outputs = {name: Path(work_root).parent / f"{name}-swapped.mp4" for name in targets}
    worker.prepare(works["a"], [], targets["a"], **OPTIONS)
    for name, work_uri in works.items():  # b's work is not prepared: its lease carries what validate checked
        lease_options = OPTIONS if name == "b" else None
        hold_run_lease(
            WorkLayout(work_uri),
            f"run-{name}",
            targets[name],
            output_uri=outputs[name].as_uri(),
            options=lease_options,
        )
    stale = Path(work_root).parent / "a-failed-run.mp4"  # a failed run keeps the work: its output is its retry's
    hold_run_lease(WorkLayout(works["a"]), "run-failed", targets["a"], state="kept", output_uri=stale.as_uri())
    root = RootLayout.of(work_root)
    standing = subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", work_root, "--idle-exit", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not live_standing_workers(root):  # its heartbeat says it is alive while it works
        assert standing.poll() is None and time.monotonic() < deadline, standing.communicate()[1][-3000:]
        time.sleep(0.05)
    served = _result(standing)
    assert (served["runs"], served["segments"]) == (2, 8)
    assert live_standing_workers(root) == []  # gone with the worker
    for name, work_uri in works.items():
        # The worker that committed the last segment merged the run's output; its merge task finds it done.
        assert _digests(outputs[name]) == _digests(targets[name])
        assert worker.merge(work_uri, targets[name], str(outputs[name])).skipped
        assert storage.exists(WorkLayout(work_uri).claim(merge_claim_name(f"run-{name}"), 1))
    assert not stale.exists()
    assert storage.exists(WorkLayout(works["b"]).claim(PREPARE_CLAIM, 1))  # the worker prepared it, stored its sound
    assert storage.exists(WorkLayout(works["b"]).sound_file)
    assert packet_payloads(str(outputs["b"])) == packet_payloads(targets["b"])
    assert not storage.exists(WorkLayout(works["a"]).claim(PREPARE_CLAIM, 1))


def test_a_helper_goes_to_a_run_nobody_has_started_before_the_short_free_runs_of_a_started_one(
    make_video: MakeVideo, work_root: str
) -> None:
    """Joining a started run costs a seek for a short piece; an untouched run is a whole one."""
    targets = {
        name: make_video(frames=count * SEGMENT, name=f"{name}.mp4")
        for name, count in {"mine": 1, "started": 6, "fresh": 4}.items()
    }
    works = {name: work_uri_for(work_root, [], target, **OPTIONS) for name, target in targets.items()}
    for name, work_uri in works.items():
        worker.prepare(work_uri, [], targets[name], **OPTIONS)
    hold_run_lease(WorkLayout(works["started"]), "older-run", targets["started"], age=timedelta(minutes=5))
    hold_run_lease(WorkLayout(works["fresh"]), "newer-run", targets["fresh"])
    other = SegmentClaims(WorkLayout(works["started"]), owner="another-task")
    assert all(other.take(index, scan_work(WorkLayout(works["started"]))) for index in (0, 1, 2))  # alive, held
    process = _span(works["mine"], targets["mine"], "0:1", env={HELP_SECONDS_VARIABLE: "60"})
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    helped = [line.split(" of work ")[1].split()[0] for line in err.splitlines() if "(helping another run)" in line]
    fresh, started = WorkLayout(works["fresh"]).work_id, WorkLayout(works["started"]).work_id
    assert helped == [fresh] * 4 + [started] * 3, helped  # the whole fresh run, then the started run's free tail
