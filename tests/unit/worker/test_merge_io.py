"""The remux's I/O: segments fetched ahead in threads while the remux runs, each read once, disk use bounded, and every
failure raised from the merge call with nothing published, no thread left running and no temporary file left behind.

The outputs here are .mov files, which the merge remuxes; an MP4 is joined from the indexes (``test_index_join``).
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from committed import committed_work, segment_file_uri
from readback import frame_digests, packet_payloads

from facefusion_provider import storage, worker
from facefusion_provider.contract import MERGE_PREFETCH_VARIABLE
from facefusion_provider.exceptions import InvalidOptionError, InvalidWorkError
from facefusion_provider.media.mp4index import top_level_boxes
from facefusion_provider.media.probe import probe_video
from facefusion_provider.output.remux import PendingSegment, SegmentFile, merge_segments
from facefusion_provider.storage.prefetch import Prefetch
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import WorkSpec

from .conftest import MakeVideo

PASSTHROUGH: dict[str, Any] = {"processors": [], "output_video_quality": 100}
MERGE_TIMINGS = {
    "markers_s",
    "remux_s",
    "fetch_wait_s",
    "fetch_work_s",
    "verify_s",
    "publish_s",
    "preview_s",
    "total_s",
}


@pytest.fixture
def remote_work(make_video: MakeVideo, tmp_path: Path) -> Iterator[tuple[str, WorkSpec, str]]:
    """A work of 6 two-frame segments (with audio) on ``memory://``: remote storage, so the merge downloads each."""
    target = make_video(frames=12, audio_rate=8000)
    root = f"memory://merge-io/{uuid.uuid4().hex}"
    work_uri, spec = committed_work(root, target, segment_size=2, **PASSTHROUGH)
    yield work_uri, spec, target
    storage.remove_tree(root)


def _output(tmp_path: Path) -> str:
    return str(tmp_path / "out" / "result.mov")


def test_prefetch_hands_results_out_in_order_with_a_bounded_number_alive() -> None:
    lock = threading.Lock()
    alive: set[int] = set()
    most_alive = 0
    delays = [random.Random(7).uniform(0, 0.01) for _ in range(30)]

    def make(index: int) -> int:
        nonlocal most_alive
        time.sleep(delays[index])  # finish out of order
        with lock:
            alive.add(index)
            most_alive = max(most_alive, len(alive))
        return index

    def release(index: int) -> None:
        with lock:
            alive.remove(index)

    tasks = [functools.partial(make, index) for index in range(30)]
    with Prefetch(tasks, 3, release) as prefetch:
        handed = list(prefetch.results())
    assert handed == list(range(30))
    assert most_alive <= 4  # the one in use and three ahead
    assert alive == set()  # the last one too was released


def test_a_failed_task_is_raised_in_its_turn_and_no_task_outlives_close() -> None:
    lock = threading.Lock()
    started: list[int] = []
    running = 0
    released: list[int] = []

    def make(index: int) -> int:
        nonlocal running
        with lock:
            started.append(index)
            running += 1
        try:
            time.sleep(0.02)
            if index == 2:
                raise InvalidWorkError("segment 2 is corrupt")
            return index
        finally:
            with lock:
                running -= 1

    tasks = [functools.partial(make, index) for index in range(20)]
    taken: list[int] = []
    with pytest.raises(InvalidWorkError, match="segment 2 is corrupt"), Prefetch(tasks, 2, released.append) as prefetch:
        taken.extend(prefetch.results())
    assert taken == [0, 1]
    assert running == 0  # close waited for the downloads in flight
    assert max(started) <= 4  # nothing far ahead of the failure was started (segments 3 and 4 came into the window)
    assert sorted(released) == sorted(set(started) - {2})  # every finished result was released, used or not
    time.sleep(0.05)
    assert running == 0 and max(started) <= 4  # and nothing starts later


def test_prefetch_tasks_use_the_callers_s3_credentials() -> None:
    credentials = storage.S3Credentials(access_key_id="AKIDEXAMPLE", secret_access_key="secret")
    tasks = [lambda: storage.storage_options("s3://bucket/key").get("key")] * 3
    with storage.using_s3_credentials(credentials), Prefetch(tasks, 2) as prefetch:
        assert list(prefetch.results()) == ["AKIDEXAMPLE"] * 3


def test_merge_segments_asks_for_each_segment_only_after_the_previous_one_is_read(
    make_video: MakeVideo, tmp_path: Path
) -> None:
    # The paths arrive one by one and each earlier copy is deleted when the next is asked for, as the worker does.
    target = make_video(frames=12, audio_rate=8000)
    work_uri, spec = committed_work(str(tmp_path / "root"), target, segment_size=3, **PASSTHROUGH)
    staging = tmp_path / "staging"
    staging.mkdir()
    asked: list[int] = []

    def arriving() -> Iterator[str]:
        previous: Path | None = None
        for segment in spec.segments:
            asked.append(segment.index)
            if previous is not None:
                previous.unlink()
            previous = staging / f"{segment.index}.mp4"
            shutil.copyfile(storage.local_path(segment_file_uri(work_uri, segment.index)) or "", previous)
            yield str(previous)
        asked.append(-1)  # asked once more after the last segment
        assert previous is not None
        previous.unlink()

    pending = [PendingSegment(segment.start, segment.end) for segment in spec.segments]
    merged = tmp_path / "lazy.mp4"
    assert (
        merge_segments(pending, target, probe_video(target, target), str(merged), name=target, paths=arriving()) == 12
    )
    assert asked == [0, 1, 2, 3, -1] and list(staging.iterdir()) == []
    assert [d.md5 for d in frame_digests(str(merged))] == [d.md5 for d in frame_digests(target)]
    assert packet_payloads(str(merged)) == packet_payloads(target)


def test_merge_segments_raises_what_the_paths_raise(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=6)
    probe = probe_video(target, target)

    def failing() -> Iterator[str]:
        yield target
        raise InvalidWorkError("segment 1: checksum differs")

    pending = [PendingSegment(0, 6), PendingSegment(6, 12)]
    with pytest.raises(InvalidWorkError, match="segment 1: checksum differs"):
        merge_segments(pending, target, probe, str(tmp_path / "o.mp4"), name="t", paths=failing())
    with pytest.raises(TypeError, match="frames 0-5 has no file: pass paths"):
        merge_segments([PendingSegment(0, 6)], target, probe, str(tmp_path / "o.mp4"), name="t")
    assert merge_segments([SegmentFile(target, 0, 6)], target, probe, str(tmp_path / "o.mp4"), name="t") == 6


def test_a_remote_work_reads_each_segment_once_with_few_on_disk_and_the_remux_starts_early(
    remote_work: tuple[str, WorkSpec, str],
    private_tmp: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work_uri, spec, target = remote_work
    monkeypatch.setenv(MERGE_PREFETCH_VARIABLE, "2")
    downloads: list[tuple[str, int, bool]] = []  # (segment, segment files on disk already, output being written)
    hashed: list[str] = []
    out_folder = tmp_path / "out"
    real_download, real_hash = storage.get_file_sha256, storage.file_sha256

    def counting_download(uri: str, local: str | os.PathLike[str]) -> str:
        on_disk = len([name for name in os.listdir(os.path.dirname(local)) if name.endswith(".mp4")])
        writing = any(".partial-" in name for name in os.listdir(out_folder))
        downloads.append((os.path.basename(uri), on_disk, writing))
        return real_download(uri, local)

    def recording_hash(path: str | os.PathLike[str]) -> str:
        hashed.append(os.fspath(path))
        return real_hash(path)

    monkeypatch.setattr(storage, "get_file_sha256", counting_download)
    monkeypatch.setattr(storage, "file_sha256", recording_hash)
    result = worker.merge(work_uri, target, _output(tmp_path))

    files = sorted(segment_file_uri(work_uri, s.index).rsplit("/", 1)[1] for s in spec.segments)
    assert sorted(name for name, _, _ in downloads) == files  # each once
    assert hashed == []  # each segment is hashed as it downloads, the output as it is published: none is read again
    assert max(on_disk for _, on_disk, _ in downloads) <= 2  # the segment being remuxed and two ahead, at most 3
    assert downloads[-1][2]  # the remux was writing the output before the last segment was fetched
    assert set(result.timings) == MERGE_TIMINGS
    assert result.timings["fetch_wait_s"] <= result.timings["remux_s"]
    output = _output(tmp_path)
    assert [d.md5 for d in frame_digests(output)] == [d.md5 for d in frame_digests(target)]
    assert packet_payloads(output) == packet_payloads(target)
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_bad_segment_in_the_middle_is_computed_again_and_the_output_is_frame_exact(
    damage: str,
    remote_work: tuple[str, WorkSpec, str],
    private_tmp: Path,
    tmp_path: Path,
    worker_threads: Callable[[], list[Any]],
) -> None:
    # memory:// keeps no checksum: the remux's own download is what finds the damage, as on S3 for an object without one.
    work_uri, spec, target = remote_work
    layout = WorkLayout(work_uri)
    segment_uri = segment_file_uri(work_uri, 3)
    if damage == "corrupt":
        data = storage.read_bytes(segment_uri)
        storage.write_bytes_atomic(segment_uri, data[:-10] + b"0123456789")
    else:
        storage.remove_tree(segment_uri)

    result = worker.merge(work_uri, target, _output(tmp_path))

    assert [d.md5 for d in frame_digests(result.output_uri)] == [d.md5 for d in frame_digests(target)]
    assert storage.exists(layout.retired_marker(3, 0)) and storage.exists(layout.segment_marker(3, 1))
    assert not any(storage.exists(layout.retired_marker(s.index, 0)) for s in spec.segments if s.index != 3)
    assert list(private_tmp.iterdir()) == []  # the downloads went with their folder
    assert worker_threads() == []  # every fetch thread was joined


def test_a_local_work_hashes_its_segments_in_place_and_keeps_them(
    make_video: MakeVideo, tmp_path: Path, private_tmp: Path
) -> None:
    target = make_video(frames=9)
    work_uri, _ = committed_work(str(tmp_path / "root"), target, segment_size=3, **PASSTHROUGH)
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    segments = sorted(folder.glob("*.mp4"))
    result = worker.merge(work_uri, target, str(tmp_path / "out.mov"))
    assert sorted(folder.glob("*.mp4")) == segments and len(segments) == 3
    assert set(result.timings) == MERGE_TIMINGS and list(private_tmp.iterdir()) == []
    assert [d.md5 for d in frame_digests(str(tmp_path / "out.mov"))] == [d.md5 for d in frame_digests(target)]
    with (tmp_path / "out.mov").open("rb") as output:  # the moov in front, and no temporary file left beside it
        assert [box.kind for box in top_level_boxes(output, (tmp_path / "out.mov").stat().st_size)][:2] == [
            "ftyp",
            "moov",
        ]
    assert not [path.name for path in tmp_path.iterdir() if ".partial-" in path.name]


def test_the_prefetch_setting_is_checked(
    remote_work: tuple[str, WorkSpec, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work_uri, _, target = remote_work
    monkeypatch.setenv(MERGE_PREFETCH_VARIABLE, "0")
    with pytest.raises(
        InvalidOptionError, match=r"FACEFUSION_MERGE_PREFETCH: input should be greater than or equal to 1, got '0'"
    ):
        worker.merge(work_uri, target, "/tmp/never-written.mov")
