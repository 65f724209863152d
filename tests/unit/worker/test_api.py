"""The Python API: prepare, swap_span, merge and run; shared work reused across outputs and runs; work-folder checks."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from committed import work_uri_for
from readback import frame_digests
from skimage import data

from facefusion_provider import contract, storage, worker
from facefusion_provider.exceptions import InputMissingError, InvalidOptionError, InvalidWorkError
from facefusion_provider.media.images import encode_image
from facefusion_provider.options import Options
from facefusion_provider.work import leases
from facefusion_provider.work.claims import retire_commit
from facefusion_provider.work.layout import WorkLayout, output_marker_uri
from facefusion_provider.work.records import OutputMarker, RunHolder, RunLease, SegmentMarker

from .conftest import MakeVideo, work_folders

PASSTHROUGH: dict[str, Any] = {"processors": [], "output_video_quality": 100}


def _digests(path: str | Path) -> list[str]:
    return [digest.md5 for digest in frame_digests(str(path))]


def _frame_md5s(video: Path) -> list[str]:
    return [digest.md5 for digest in frame_digests(str(video))]


def _markers(work_uri: str) -> dict[int, SegmentMarker]:
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    found = {int(p.name[:5]): SegmentMarker.model_validate_json(p.read_text()) for p in folder.glob("?????.json")}
    return dict(sorted(found.items()))


def test_run_returns_the_result_and_removes_the_work_folder(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    target = make_video(frames=22, audio_rate=48000)
    output = tmp_path / "out" / "result.mp4"
    result = worker.run([], target, str(output), work_root, segment_size=10, **PASSTHROUGH)
    assert result.output_uri == output.as_uri()
    assert result.preview_uri == (tmp_path / "out" / "result.preview.jpg").as_uri()
    assert (result.frame_count, result.segment_count, result.skipped) == (22, 2, False)
    assert {"prepare_s", "swap_s", "merge_s", "total_s"} <= set(result.timings)
    assert output.is_file() and (tmp_path / "out" / "result.preview.jpg").read_bytes()[:2] == b"\xff\xd8"
    marker = OutputMarker.model_validate_json(
        Path(storage.local_path(output_marker_uri(result.output_uri)) or "").read_text()
    )
    # Joined from the segments' indexes: the merge never read the output's bytes, so it names no checksum.
    assert (marker.work_id, marker.frame_count, marker.method) == (result.work_id, 22, "index")
    assert (marker.size, marker.sha256) == (output.stat().st_size, None)
    assert 0 < marker.timings["publish_s"] < marker.timings["total_s"]  # what cleanup reports as the merge's seconds
    # For whom: the CLI run's lease named this output (an Airflow run's names its DAG and run: the Output tab's "by").
    assert marker.run is not None and (marker.run.kind, marker.run.host) == ("cli", socket.gethostname())
    assert marker.written_at is not None and marker.written_at.tzinfo is not None
    assert work_folders(work_root) == []
    assert _digests(output) == _digests(target)


def test_a_second_run_of_the_same_work_does_no_work(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=10)
    output = str(tmp_path / "out.mp4")
    first = worker.run([], target, output, work_root, **PASSTHROUGH)
    before = os.stat(output).st_mtime_ns
    second = worker.run([], target, output, work_root, **PASSTHROUGH)
    assert second.skipped and second.work_id == first.work_id and second.frame_count == 10
    assert os.stat(output).st_mtime_ns == before
    third = worker.run([], target, output, work_root, processors=[], output_video_quality=99)
    assert not third.skipped and third.work_id != first.work_id  # a pixel option changed: new work


def test_keep_work_keeps_the_committed_segments(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=17)
    result = worker.run([], target, str(tmp_path / "out.mp4"), work_root, keep_work=True, segment_size=8, **PASSTHROUGH)
    (folder,) = work_folders(work_root)
    assert folder.name == result.work_id
    markers = _markers(folder.as_uri())
    assert [(m.start, m.end, m.frame_count) for m in markers.values()] == [(0, 8, 8), (8, 17, 9)]
    for marker in markers.values():
        assert marker.sha256 == storage.file_sha256(folder / "segments" / marker.file)
    assert not list((folder / "runs").glob("*.json"))  # the run's lease is released


def test_step_by_step_matches_run(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=25, audio_rate=48000)
    options = {"segment_size": 8, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    output = str(tmp_path / "out.mp4")
    spec = worker.prepare(work_uri, [], target, **options)
    assert [(s.start, s.end) for s in spec.segments] == [(0, 8), (8, 16), (16, 25)]
    assert (
        json.loads(Path(storage.local_path(WorkLayout(work_uri).work_json) or "").read_text())["work_id"]
        == spec.work_id
    )
    last = worker.swap_span(work_uri, target, 2, 3, span=1)  # alone, it does its span, then helps the other
    assert (last.committed, last.helped_in_run, last.frames) == (3, 2, 25)
    assert worker.swap_span(work_uri, target, 0, 2, span=0).skipped
    merged = worker.merge(work_uri, target, output)
    assert (merged.frame_count, merged.skipped) == (25, False)
    assert worker.merge(work_uri, target, output).skipped
    assert _digests(output) == _digests(target)


def test_prepare_reuses_job_json_and_refuses_a_folder_of_other_inputs(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    target = make_video(frames=12)
    work_uri = work_uri_for(work_root, [], target, **PASSTHROUGH)
    first = worker.prepare(work_uri, [], target, **PASSTHROUGH)
    work_json = Path(storage.local_path(WorkLayout(work_uri).work_json) or "")
    written = work_json.stat().st_mtime_ns
    again = worker.prepare(work_uri, [], target, execution_thread_count=2, **PASSTHROUGH)  # not a pixel option
    assert again.work_id == first.work_id and work_json.stat().st_mtime_ns == written
    with pytest.raises(InvalidWorkError, match=r"this folder is for other inputs or options .* start a new run"):
        worker.prepare(work_uri, [], target, processors=[], output_video_quality=50)


def test_after_the_output_is_done_merge_reads_nothing(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=12)
    output = str(tmp_path / "out.mp4")
    options = {"segment_size": 4, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    worker.swap_span(work_uri, target, 0, 3)
    worker.merge(work_uri, target, output)
    shutil.rmtree(storage.local_path(work_uri) or "")  # a cleanup removed the shared work
    Path(target).write_bytes(b"no longer a video")  # nothing below may read the target or the work
    assert worker.merge(work_uri, target, output).skipped  # the output's marker names this work


def test_merge_names_segments_not_committed_and_heals_damaged_ones(
    make_video: MakeVideo, tmp_path: Path, work_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = make_video(frames=12)
    options = {"segment_size": 4, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    worker.swap_span(work_uri, target, 0, 3)
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    marker = folder / "00001.json"
    kept = marker.read_bytes()
    marker.unlink()
    with pytest.raises(InvalidWorkError, match=r"segments 1 of 3 are not committed"):
        worker.merge(work_uri, target, str(tmp_path / "out.mp4"))
    assert list(tmp_path.glob("out*")) == []
    marker.write_bytes(kept)
    worker.merge(work_uri, target, str(tmp_path / "reference.mp4"))

    markers = _markers(work_uri)
    flipped, truncated = folder / markers[1].file, folder / markers[2].file
    data = flipped.read_bytes()
    flipped.write_bytes(data[:200] + bytes(byte ^ 0xFF for byte in data[200:264]) + data[264:])  # same size
    truncated.write_bytes(truncated.read_bytes()[:-10])
    (folder / "00000.json").write_text("{not a marker")
    with caplog.at_level(logging.WARNING, "facefusion_provider.output.integrity"):
        worker.merge(work_uri, target, str(tmp_path / "healed.mp4"))
    damaged = sorted(r.getMessage() for r in caplog.records if r.name == "facefusion_provider.output.integrity")
    assert [re.sub(r" of work .*", "", line) for line in damaged] == [f"segment {i}" for i in range(3)]
    assert "00000.json: not a segment marker" in damaged[0] and "its checksum differs" in damaged[1]
    assert "holds" in damaged[2]
    assert _frame_md5s(tmp_path / "healed.mp4") == _frame_md5s(tmp_path / "reference.mp4")
    assert sorted(p.name for p in folder.glob("*.retired.json")) == [f"0000{i}.0.retired.json" for i in range(3)]
    assert sorted(p.name for p in folder.glob("0000?.1.json")) == [f"0000{i}.1.json" for i in range(3)]
    caplog.clear()
    worker.merge(work_uri, target, str(tmp_path / "again.mp4"))  # the new incarnations pass their checks
    assert caplog.records == [] or all("damaged" not in record.getMessage() for record in caplog.records)


def test_a_merge_computes_the_segments_an_earlier_merge_retired_and_died_before_computing(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    target = make_video(frames=12)
    options = {"segment_size": 4, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    worker.swap_span(work_uri, target, 0, 3)
    worker.merge(work_uri, target, str(tmp_path / "reference.mp4"))
    retire_commit(WorkLayout(work_uri), 1, 0, "its checksum differs from its marker's")  # then that merge was killed

    worker.merge(work_uri, target, str(tmp_path / "healed.mp4"))
    assert _frame_md5s(tmp_path / "healed.mp4") == _frame_md5s(tmp_path / "reference.mp4")
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    assert sorted(p.name for p in folder.glob("0000?.1.json")) == ["00001.1.json"]


def test_the_merge_of_a_run_whose_work_was_removed_prepares_it_again_from_the_runs_lease(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    """A work swept while its run waited past its lease's TTL: the run's merge prepares it again (the work is
    content-addressed, so segments committed into it since stand) instead of failing for a missing work.json."""
    target = make_video(frames=12)
    options = {"segment_size": 4, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    worker.swap_span(work_uri, target, 0, 3)
    layout = WorkLayout(work_uri)
    lease = RunLease(
        holder=RunHolder(kind="airflow", dag_id="facefusion_swap", run_id="r1"),
        ttl_seconds=3600,
        output_uri=(tmp_path / "out.mp4").as_uri(),
        created_at=datetime.now(UTC),
        target_uri=Path(target).resolve().as_uri(),
        options=Options(**options).model_dump(mode="json"),
    )
    leases.hold(layout, "facefusion_swap--r1", lease)
    Path(storage.local_path(layout.work_json) or "").unlink()
    with pytest.raises(InvalidWorkError, match=r"no work\.json"):
        worker.merge(work_uri, target, str(tmp_path / "out.mp4"))  # outside a run: nothing to prepare it from

    worker.merge(work_uri, target, str(tmp_path / "out.mp4"), run_key="facefusion_swap--r1")
    assert _frame_md5s(tmp_path / "out.mp4") == _frame_md5s(Path(target))


def test_merge_refuses_a_segment_file_with_other_frames(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=12)
    output = tmp_path / "out.mp4"
    options = {"segment_size": 6, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    worker.swap_span(work_uri, target, 0, 2)
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    markers = _markers(work_uri)
    # Segment 1's file replaced by segment 0's (and its marker's checksum updated to match): it holds other frames.
    (folder / markers[1].file).write_bytes((folder / markers[0].file).read_bytes())
    data = json.loads((folder / "00001.json").read_text())
    data.update(sha256=storage.file_sha256(folder / markers[1].file), size=(folder / markers[1].file).stat().st_size)
    (folder / "00001.json").write_text(json.dumps(data))
    with pytest.raises(InvalidWorkError, match=r"is labelled .*segment 0 frames 0-5.*expected .*segment 1 frames 6-11"):
        worker.merge(work_uri, target, str(output))
    assert not output.exists()


def test_option_and_argument_errors_name_the_field(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=5)
    output = str(tmp_path / "out.mp4")
    with pytest.raises(InvalidOptionError, match=r"trim_frame_start: 9 is past the last frame.*5 frames"):
        worker.run([], target, output, work_root, trim_frame_start=9, **PASSTHROUGH)
    with pytest.raises(InvalidOptionError, match=r"output_video_encoder.*'libx264'"):
        worker.run([], target, output, work_root, processors=[], output_video_encoder="mpeg1")
    with pytest.raises(InvalidOptionError, match=r"output: .*\.avi.*allowed: \.mp4"):
        worker.run([], target, str(tmp_path / "out.avi"), work_root, **PASSTHROUGH)
    with pytest.raises(InvalidOptionError, match=r"output: .* would overwrite an input"):
        worker.run([], target, target, work_root, **PASSTHROUGH)
    with pytest.raises(InvalidOptionError, match=r"source: face_swapper needs at least one source image"):
        worker.run([], target, output, work_root, processors=["face_swapper"])
    with pytest.raises(InputMissingError, match=r"source: .*nobody.png does not exist"):
        worker.run([str(tmp_path / "nobody.png")], target, output, work_root, processors=["face_swapper"])
    with pytest.raises(InvalidOptionError, match=r"output: .* names a folder, not a file"):
        worker.run([], target, str(tmp_path) + "/", work_root, **PASSTHROUGH)
    work_uri = work_uri_for(work_root, [], target, **PASSTHROUGH)
    worker.prepare(work_uri, [], target, **PASSTHROUGH)
    with pytest.raises(InvalidOptionError, match=r"segments: 0:3 is not a range of the work's 1 segments"):
        worker.swap_span(work_uri, target, 0, 3)
    with pytest.raises(InvalidWorkError, match=r"no work.json; run prepare"):
        worker.swap_span(str(tmp_path / "nojob"), target, 0, 1)
    assert not os.path.exists(output)


def test_the_allow_lists_in_the_environment_are_enforced_by_the_worker(
    make_video: MakeVideo, tmp_path: Path, work_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = make_video(frames=5)
    monkeypatch.setenv(contract.ALLOWED_OUTPUT_PREFIXES_VARIABLE, str(tmp_path / "allowed"))
    with pytest.raises(
        InvalidOptionError, match=r"output: .*/elsewhere/out.mp4 is outside the allowed output locations"
    ):
        worker.run([], target, str(tmp_path / "elsewhere" / "out.mp4"), work_root, **PASSTHROUGH)
    monkeypatch.setenv(contract.ALLOWED_INPUT_PREFIXES_VARIABLE, str(tmp_path / "inputs"))
    with pytest.raises(InvalidOptionError, match=r"target: .* is outside the allowed input locations"):
        worker.run([], target, str(tmp_path / "allowed" / "out.mp4"), work_root, **PASSTHROUGH)


def test_trim_end_past_the_video_is_clamped(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=8)
    result = worker.run(
        [], target, str(tmp_path / "out.mp4"), work_root, trim_frame_start=2, trim_frame_end=100, **PASSTHROUGH
    )
    assert result.frame_count == 6


def test_paths_with_spaces_and_special_characters(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=5, name="my clip #2.mp4")
    output = tmp_path / "results (final)" / "clip #2 swapped.mp4"
    result = worker.run([], target, str(output), str(tmp_path / "work dir"), **PASSTHROUGH)
    assert output.is_file() and (tmp_path / "results (final)" / "clip #2 swapped.preview.jpg").is_file()
    assert storage.local_path(result.output_uri) == str(output)


def test_a_merged_file_with_the_wrong_frames_is_never_published(
    make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import facefusion_provider.output.remux as media_merge

    target = make_video(frames=9)
    stray = make_video(frames=4, name="stray.mp4")

    def broken_merge(segments: object, original: object, probe: object, output_path: str, **kwargs: object) -> int:
        shutil.copyfile(stray, output_path)  # a remux that lost frames
        return 9

    monkeypatch.setattr(media_merge, "merge_segments", broken_merge)
    out = tmp_path / "out"
    with pytest.raises(InvalidWorkError, match=r"holds 4 frames, expected 9 .* not published"):
        worker.run([], target, str(out / "result.mov"), str(tmp_path / "work"), **PASSTHROUGH)  # a .mov is remuxed
    assert list(out.iterdir()) == []  # no output, no staging file, no preview, no marker


def test_two_outputs_of_one_work_share_its_segments(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=10)
    options = {"segment_size": 5, **PASSTHROUGH}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    worker.swap_span(work_uri, target, 0, 2)
    worker.merge(work_uri, target, str(tmp_path / "first.mp4"))
    moved = tmp_path / "moved.mp4"
    os.replace(target, moved)  # the same content under another name, merged to another output
    assert work_uri_for(work_root, [], str(moved), **options) == work_uri
    assert worker.swap_span(work_uri, str(moved), 0, 2).skipped
    assert not worker.merge(work_uri, str(moved), str(tmp_path / "second.mp4")).skipped
    assert _digests(tmp_path / "second.mp4") == _digests(tmp_path / "first.mp4") == _digests(moved)
    work_json = storage.read_bytes(WorkLayout(work_uri).work_json)
    assert b"first.mp4" not in work_json and b"second.mp4" not in work_json  # no run's output in the shared record


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="this machine has CUDA")
def test_prepare_computes_the_identity_on_the_cpu_and_the_span_refuses_a_missing_gpu(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    """``prepare`` may run off the GPU pool, so a run asking for CUDA prepares on the CPU; the span, which would do the
    frame work there, refuses it at once rather than slip onto the CPU."""
    face = tmp_path / "astronaut.png"
    face.write_bytes(encode_image(np.ascontiguousarray(data.astronaut()), "png"))
    target = make_video(frames=8)
    options: dict[str, Any] = {"execution_providers": ["cuda"], "segment_size": 8}
    work_uri = work_uri_for(work_root, [str(face)], target, **options)
    spec = worker.prepare(work_uri, [str(face)], target, **options)
    assert spec.identity["classic"], spec.identity  # the astronaut's face, found on the CPU
    with pytest.raises(InvalidOptionError, match=r"^options.execution_providers: none of cuda is available here"):
        worker.swap_span(work_uri, target, 0, 1, span=0)
    assert _markers(work_uri) == {}  # nothing committed
