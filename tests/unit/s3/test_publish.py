"""Publishing the merge's output (moto's S3 server, a local folder, fsspec's memory store): the media data of an S3
output uploads while the muxer still writes it, the object appears only when whole, with its moov in front (FFmpeg's
``+faststart`` file, byte for byte), and a failure leaves nothing: no object, no pending upload, no temporary file."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import pytest
from committed import committed_work
from readback import frame_digests, packet_payloads
from s3_servers import pending_uploads

from facefusion_provider import storage, worker
from facefusion_provider.media.faststart import moov_at_end
from facefusion_provider.media.mp4index import top_level_boxes
from facefusion_provider.output import publish
from facefusion_provider.output.publish import OutputPublisher


class PublishError(Exception):
    """Raised by a test inside the publisher's block: the merge failed after some parts were uploaded."""


def _remux(source: Path, path: Path, **options: str) -> bytes:
    with av.open(str(source)) as container, av.open(str(path), "w", options=options) as output:
        streams = {s.index: output.add_stream_from_template(s) for s in container.streams}
        for packet in container.demux(list(container.streams)):
            if packet.dts is not None:
                packet.stream = streams[packet.stream.index]
                output.mux(packet)
    return path.read_bytes()


@pytest.fixture(scope="module")
def outputs(large_video: Path) -> tuple[bytes, bytes]:
    """The same packets muxed with the moov last, and as ``+faststart``."""
    folder = large_video.parent
    moov_last = _remux(large_video, folder / "last.mp4")
    faststart = _remux(large_video, folder / "first.mp4", movflags="+faststart")
    assert len(moov_last) > 2 * storage.UPLOAD_MIN_PART_BYTES + 1024 * 1024  # three parts: two full, one short
    return moov_last, faststart


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """S3's smallest parts, looked at often: a test-sized output streams in several parts."""
    monkeypatch.setattr(publish, "DEFAULT_PART_BYTES", storage.UPLOAD_MIN_PART_BYTES)
    monkeypatch.setattr(publish, "FOLLOW_SECONDS", 0.01)


def _write_media_then_wait_for_part_2(publisher: OutputPublisher, moov_last: bytes, client: Any, key: str) -> Any:
    """Writes the file as the muxer does up to the end of its media data, and waits until part 2 is uploaded."""
    layout = moov_at_end(io.BytesIO(moov_last))
    assert layout is not None
    muxer = open(publisher.path, "wb")  # noqa: SIM115 - the test hands it back to be finished
    for start in range(0, layout.media_end, 256 * 1024):
        muxer.write(moov_last[start : min(start + 256 * 1024, layout.media_end)])
    muxer.flush()
    upload_id = pending_uploads(client, key)[0]["UploadId"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = client.list_parts(Bucket="videos", Key=key, UploadId=upload_id).get("Parts", [])
        if any(part["PartNumber"] == 2 for part in parts):
            return muxer
        time.sleep(0.05)
    raise AssertionError("part 2 was not uploaded while the media data was being written")


def test_an_s3_output_uploads_while_written_and_appears_whole_with_its_moov_first(
    s3: Any, outputs: tuple[bytes, bytes], small_parts: None, tmp_path: Path, worker_threads: Callable[[], list[Any]]
) -> None:
    moov_last, faststart = outputs
    key = f"out/{uuid.uuid4().hex}.mp4"
    with OutputPublisher(f"s3://videos/{key}", str(tmp_path), expected_bytes=len(moov_last)) as publisher:
        muxer = _write_media_then_wait_for_part_2(publisher, moov_last, s3, key)
        assert s3.list_objects_v2(Bucket="videos", Prefix=key).get("KeyCount") == 0  # nothing shows yet
        with muxer:
            muxer.write(moov_last[muxer.tell() :])  # the muxer's trailer: the moov, last
        finished = publisher.finish()
        with finished.open() as published:
            assert published.read() == faststart
        publisher.publish()

    assert s3.get_object(Bucket="videos", Key=key)["Body"].read() == faststart
    assert pending_uploads(s3, key) == [] and list(tmp_path.iterdir()) == []
    assert worker_threads() == []


def test_a_failure_after_parts_went_up_leaves_no_object_and_no_pending_upload(
    s3: Any, outputs: tuple[bytes, bytes], small_parts: None, tmp_path: Path, worker_threads: Callable[[], list[Any]]
) -> None:
    moov_last, _ = outputs
    key = f"out/{uuid.uuid4().hex}.mp4"
    with (
        pytest.raises(PublishError),
        OutputPublisher(f"s3://videos/{key}", str(tmp_path), expected_bytes=len(moov_last)) as publisher,
    ):
        _write_media_then_wait_for_part_2(publisher, moov_last, s3, key).close()
        raise PublishError("a segment failed its check")

    assert s3.list_objects_v2(Bucket="videos", Prefix=key).get("KeyCount") == 0
    assert pending_uploads(s3, key) == [] and list(tmp_path.iterdir()) == []
    assert worker_threads() == []


@pytest.mark.parametrize("store", ["local", "memory"])
def test_other_stores_get_the_finished_file_at_once(store: str, outputs: tuple[bytes, bytes], tmp_path: Path) -> None:
    _, faststart = outputs
    destination = tmp_path / "videos" / "out.mp4"
    uri = destination.as_uri() if store == "local" else f"memory://videos/{uuid.uuid4().hex}.mp4"
    work = tmp_path / "work"
    work.mkdir()
    with OutputPublisher(uri, str(work), expected_bytes=len(faststart)) as publisher:
        assert not publisher.moov_last  # the muxer moves the moov in front itself: nothing uploads while it writes
        Path(publisher.path).write_bytes(faststart)
        assert publisher.finish().size == len(faststart)
        assert not storage.exists(uri)
        publisher.publish()

    assert storage.read_bytes(uri) == faststart
    assert list(work.iterdir()) == [] and (store == "memory" or list(destination.parent.iterdir()) == [destination])

    with pytest.raises(PublishError), OutputPublisher(uri + ".mov", str(work), expected_bytes=0) as failing:
        Path(failing.path).write_bytes(faststart)
        failing.finish()
        raise PublishError("the frame check failed")
    assert not storage.exists(uri + ".mov") and list(work.iterdir()) == []
    assert store == "memory" or list(destination.parent.iterdir()) == [destination]


def test_a_part_that_took_in_the_moov_is_sent_again_cut_at_the_media_end(
    s3: Any, outputs: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    moov_last, faststart = outputs
    layout = moov_at_end(io.BytesIO(moov_last))
    assert layout is not None
    # Part 2 ends inside the moov: the follower finds it complete once the trailer is written, moov bytes and all.
    part = (len(moov_last) - layout.media_start) // 2
    assert layout.media_end < layout.media_start + 2 * part <= len(moov_last)
    monkeypatch.setattr(publish, "DEFAULT_PART_BYTES", part)
    monkeypatch.setattr(publish, "FOLLOW_SECONDS", 0.01)
    key = f"out/{uuid.uuid4().hex}.mp4"
    with OutputPublisher(f"s3://videos/{key}", str(tmp_path), expected_bytes=0) as publisher:
        Path(publisher.path).write_bytes(moov_last)
        upload_id = pending_uploads(s3, key)[0]["UploadId"]
        deadline = time.monotonic() + 30
        while not s3.list_parts(Bucket="videos", Key=key, UploadId=upload_id).get("Parts"):
            assert time.monotonic() < deadline, "the follower never uploaded part 2"
            time.sleep(0.05)
        publisher.finish()
        publisher.publish()

    assert s3.get_object(Bucket="videos", Key=key)["Body"].read() == faststart


def test_a_merge_to_s3_streams_its_output_in_parts_and_publishes_every_packet(
    s3: Any, large_video: Path, small_parts: None, private_tmp: Path, worker_threads: Callable[[], list[Any]]
) -> None:
    name = uuid.uuid4().hex
    passthrough = {"processors": [], "output_video_quality": 100}
    work_uri, _ = committed_work(f"s3://work/{name}", str(large_video), **passthrough)

    worker.merge(work_uri, str(large_video), f"s3://videos/out/{name}.mov")  # a .mov is remuxed

    merged = private_tmp.parent / "merged.mov"
    merged.write_bytes(s3.get_object(Bucket="videos", Key=f"out/{name}.mov")["Body"].read())
    assert merged.stat().st_size > 2 * storage.UPLOAD_MIN_PART_BYTES  # published from three parts or more
    assert packet_payloads(str(merged), "audio") == packet_payloads(str(large_video), "audio")
    assert [d.md5 for d in frame_digests(str(merged))] == [d.md5 for d in frame_digests(str(large_video))]
    with merged.open("rb") as handle:
        assert [box.kind for box in top_level_boxes(handle, merged.stat().st_size)][:2] == ["ftyp", "moov"]
    assert pending_uploads(s3, f"out/{name}") == [] and list(private_tmp.iterdir()) == []
    assert worker_threads() == []


def test_a_file_not_laid_out_as_the_muxer_writes_is_published_as_it_is(
    s3: Any, outputs: tuple[bytes, bytes], small_parts: None, tmp_path: Path
) -> None:
    _, faststart = outputs  # its moov is in front already: nothing to move, and no streamed part holds only media
    key = f"out/{uuid.uuid4().hex}.mp4"
    with OutputPublisher(f"s3://videos/{key}", str(tmp_path), expected_bytes=len(faststart)) as publisher:
        assert publisher.moov_last
        Path(publisher.path).write_bytes(faststart)
        time.sleep(0.1)  # the follower sees the whole file, and finds no media start in its head
        assert publisher.finish().size == len(faststart)
        publisher.publish()

    assert s3.get_object(Bucket="videos", Key=key)["Body"].read() == faststart


def test_parts_grow_so_an_output_twice_the_expected_size_fits_s3s_part_limit() -> None:
    assert publish.part_bytes(0) == publish.DEFAULT_PART_BYTES
    for expected in (10**9, 10**11, 5 * 10**12):
        assert 2 * expected <= publish.part_bytes(expected) * storage.UPLOAD_MAX_PARTS
    assert publish.part_bytes(10**11) > publish.DEFAULT_PART_BYTES
