"""The Python API: prepare, swap_chunk, merge and run, their results, reuse of finished work, and job-folder checks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from facefusion_provider import storage, worker
from facefusion_provider.exceptions import InputMissingError, InvalidJobError, InvalidOptionError
from facefusion_provider.media.readback import frame_digests
from facefusion_provider.types import ChunkMarker, OutputMarker

from .conftest import MakeVideo, job_folders

PASSTHROUGH: dict[str, Any] = {"processors": [], "output_video_quality": 100}


def test_run_returns_the_result_and_removes_the_job_folder(
    make_video: MakeVideo, tmp_path: Path, work_root: str
) -> None:
    target = make_video(frames=22, audio_rate=48000)
    output = tmp_path / "out" / "result.mp4"
    result = worker.run([], target, str(output), work_root, chunk_size=10, **PASSTHROUGH)
    assert result.output_uri == output.as_uri()
    assert result.preview_uri == (tmp_path / "out" / "result.preview.jpg").as_uri()
    assert (result.frame_count, result.chunk_count, result.skipped) == (22, 2, False)
    assert {"prepare_s", "swap_s", "merge_s", "total_s"} <= set(result.timings)
    assert output.is_file() and (tmp_path / "out" / "result.preview.jpg").read_bytes()[:2] == b"\xff\xd8"
    marker = OutputMarker.model_validate_json(
        Path(storage.local_path(storage.output_marker_uri(result.output_uri)) or "").read_text()
    )
    assert (marker.job_id, marker.frame_count, marker.sha256) == (result.job_id, 22, storage.file_sha256(output))
    assert job_folders(work_root) == []


def test_a_second_run_of_the_same_job_does_no_work(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=10)
    output = str(tmp_path / "out.mp4")
    first = worker.run([], target, output, work_root, **PASSTHROUGH)
    before = os.stat(output).st_mtime_ns
    second = worker.run([], target, output, work_root, **PASSTHROUGH)
    assert second.skipped and second.job_id == first.job_id and second.frame_count == 10
    assert os.stat(output).st_mtime_ns == before
    third = worker.run([], target, output, work_root, processors=[], output_video_quality=99)
    assert not third.skipped and third.job_id != first.job_id  # a pixel option changed: a new job


def test_keep_work_keeps_the_committed_chunks(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    target = make_video(frames=17)
    result = worker.run([], target, str(tmp_path / "out.mp4"), work_root, keep_work=True, chunk_size=8, **PASSTHROUGH)
    (folder,) = job_folders(work_root)
    assert folder.name == result.job_id
    markers = [ChunkMarker.model_validate_json((folder / "chunks" / f"{i:05d}.json").read_text()) for i in range(2)]
    assert [(m.start, m.end, m.frame_count) for m in markers] == [(0, 8, 8), (8, 17, 9)]
    for marker in markers:
        assert marker.sha256 == storage.file_sha256(folder / "chunks" / f"{marker.index:05d}.mp4")
        assert {"decode_s", "process_s", "encode_s", "total_s", "decoded_frames"} <= set(marker.timings)


def test_step_by_step_matches_run(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=25, audio_rate=48000)
    job_uri = str(tmp_path / "job")
    output = str(tmp_path / "out.mp4")
    spec = worker.prepare(job_uri, [], target, output, chunk_size=8, **PASSTHROUGH)
    assert [(c.start, c.end) for c in spec.chunks] == [(0, 8), (8, 16), (16, 25)]
    assert json.loads((tmp_path / "job" / "job.json").read_text())["job_id"] == spec.job_id
    results = [worker.swap_chunk(job_uri, chunk.index) for chunk in reversed(spec.chunks)]  # any order
    assert [r.skipped for r in results] == [False, False, False]
    assert worker.swap_chunk(job_uri, 1).skipped
    merged = worker.merge(job_uri)
    assert (merged.frame_count, merged.skipped) == (25, False)
    assert worker.merge(job_uri).skipped
    assert [d.md5 for d in frame_digests(output)] == [d.md5 for d in frame_digests(target)]


def test_prepare_reuses_job_json_and_refuses_another_job_in_the_folder(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=12)
    job_uri = str(tmp_path / "job")
    output = str(tmp_path / "out.mp4")
    first = worker.prepare(job_uri, [], target, output, **PASSTHROUGH)
    written = (tmp_path / "job" / "job.json").stat().st_mtime_ns
    again = worker.prepare(job_uri, [], target, output, execution_thread_count=2, **PASSTHROUGH)  # not a pixel option
    assert again.job_id == first.job_id
    assert (tmp_path / "job" / "job.json").stat().st_mtime_ns == written
    with pytest.raises(InvalidJobError, match=r"belongs to job"):
        worker.prepare(job_uri, [], target, output, processors=[], output_video_quality=50)


def test_swap_chunk_after_the_output_is_done_reads_nothing(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=12)
    job_uri = str(tmp_path / "job")
    spec = worker.prepare(job_uri, [], target, str(tmp_path / "out.mp4"), chunk_size=4, **PASSTHROUGH)
    for chunk in spec.chunks:
        worker.swap_chunk(job_uri, chunk.index)
    worker.merge(job_uri)
    os.unlink(target)  # nothing below may read the target any more
    for chunk_file in (tmp_path / "job" / "chunks").glob("*.json"):
        chunk_file.unlink()  # even without chunk markers: the output marker says the job is done
    assert all(worker.swap_chunk(job_uri, chunk.index).skipped for chunk in spec.chunks)
    assert worker.merge(job_uri).skipped


def test_merge_refuses_missing_or_corrupt_chunks_and_writes_nothing(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=12)
    job_uri = str(tmp_path / "job")
    output = tmp_path / "out.mp4"
    spec = worker.prepare(job_uri, [], target, str(output), chunk_size=4, **PASSTHROUGH)
    worker.swap_chunk(job_uri, 0)
    worker.swap_chunk(job_uri, 2)
    with pytest.raises(InvalidJobError, match=r"chunks 1 of 3 are not committed"):
        worker.merge(job_uri)
    worker.swap_chunk(job_uri, 1)
    chunk = tmp_path / "job" / "chunks" / "00001.mp4"
    chunk.write_bytes(chunk.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(InvalidJobError, match=r"00001.mp4: checksum differs"):
        worker.merge(job_uri)
    assert list(tmp_path.glob("out*")) == [] and len(spec.chunks) == 3


def test_merge_refuses_a_chunk_with_other_frames(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=12)
    job_uri = str(tmp_path / "job")
    output = tmp_path / "out.mp4"
    worker.prepare(job_uri, [], target, str(output), chunk_size=6, **PASSTHROUGH)
    worker.swap_chunk(job_uri, 0)
    worker.swap_chunk(job_uri, 1)
    chunks = tmp_path / "job" / "chunks"
    # Chunk 1's file replaced by chunk 0's (and its marker's checksum updated to match): it holds other frames.
    (chunks / "00001.mp4").write_bytes((chunks / "00000.mp4").read_bytes())
    marker = json.loads((chunks / "00001.json").read_text())
    marker["sha256"] = storage.file_sha256(chunks / "00001.mp4")
    (chunks / "00001.json").write_text(json.dumps(marker))
    with pytest.raises(
        InvalidJobError, match=r"00001.mp4: is labelled .*chunk 0 frames 0-5.*expected .*chunk 1 frames 6-11"
    ):
        worker.merge(job_uri)
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
    with pytest.raises(InvalidOptionError, match=r"output: .* is the target itself"):
        worker.run([], target, target, work_root, **PASSTHROUGH)
    with pytest.raises(InvalidOptionError, match=r"source: face_swapper needs at least one source image"):
        worker.run([], target, output, work_root, processors=["face_swapper"])
    with pytest.raises(InputMissingError, match=r"source: .*nobody.png does not exist"):
        worker.run([str(tmp_path / "nobody.png")], target, output, work_root, processors=["face_swapper"])
    job_uri = str(tmp_path / "job")
    worker.prepare(job_uri, [], target, output, **PASSTHROUGH)
    with pytest.raises(InvalidOptionError, match=r"index: 3 is not a chunk.*allowed: 0-0"):
        worker.swap_chunk(job_uri, 3)
    with pytest.raises(InvalidJobError, match=r"no job.json; run prepare"):
        worker.swap_chunk(str(tmp_path / "nojob"), 0)
    assert not os.path.exists(output)


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
    import shutil

    import facefusion_provider.media.merge as media_merge

    target = make_video(frames=9)
    stray = make_video(frames=4, name="stray.mp4")

    def broken_merge(chunks: object, original: object, probe: object, output_path: str, **kwargs: object) -> int:
        shutil.copyfile(stray, output_path)  # a remux that lost frames
        return 9

    monkeypatch.setattr(media_merge, "merge_chunks", broken_merge)
    out = tmp_path / "out"
    with pytest.raises(InvalidJobError, match=r"holds 4 frames, expected 9 .* not published"):
        worker.run([], target, str(out / "result.mp4"), str(tmp_path / "work"), **PASSTHROUGH)
    assert list(out.iterdir()) == []  # no output, no staging file, no preview, no marker


def test_the_same_job_with_another_output_reuses_the_chunks(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=10)
    job_uri = str(tmp_path / "job")
    spec = worker.prepare(job_uri, [], target, str(tmp_path / "first.mp4"), chunk_size=5, **PASSTHROUGH)
    for chunk in spec.chunks:
        worker.swap_chunk(job_uri, chunk.index)
    worker.merge(job_uri)
    moved = tmp_path / "moved.mp4"
    os.replace(target, moved)  # the same content under another name, and another output
    again = worker.prepare(job_uri, [], str(moved), str(tmp_path / "second.mp4"), chunk_size=5, **PASSTHROUGH)
    assert again.job_id == spec.job_id and again.target_uri == moved.as_uri()
    assert all(worker.swap_chunk(job_uri, chunk.index).skipped for chunk in spec.chunks)
    assert not worker.merge(job_uri).skipped
    assert [d.md5 for d in frame_digests(str(tmp_path / "second.mp4"))] == [d.md5 for d in frame_digests(str(moved))]
