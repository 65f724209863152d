"""Composing an object from bytes and ranges of other objects on moto's S3 server (large ranges copied by S3 itself,
nothing at the key until it is whole), and the merge joining an MP4 output on S3 that way."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from committed import committed_work
from readback import frame_digests, packet_payloads
from s3_servers import Fault, FaultyProxy, MotoServer, pending_uploads

from facefusion_provider import storage, worker
from facefusion_provider.exceptions import InputMissingError
from facefusion_provider.media.mp4index import top_level_boxes
from facefusion_provider.storage.compose import ByteSlice, plan_parts

MIN = storage.UPLOAD_MIN_PART_BYTES


def test_parts_copy_every_large_range_and_assemble_the_rest_at_least_the_smallest_size() -> None:
    big, other = "s3://work/big", "s3://work/other"
    pieces = [b"h" * 100, ByteSlice(big, 0, 3 * MIN), b"m" * 50, ByteSlice(other, 0, MIN + 10), ByteSlice(other, 1, 9)]
    parts = plan_parts(pieces)
    # The 100-byte head borrows the start of the large range to reach S3's smallest part, and S3 copies the rest of
    # it. The next range is large, but what is left of it after topping up the 50 bytes is not: it is assembled.
    assert [part.copy for part in parts] == [None, ByteSlice(big, MIN - 100, 3 * MIN), None]
    assert parts[0].size == MIN and parts[2].size == 50 + MIN + 10 + 8
    assert sum(part.size for part in parts) == sum(len(p) if isinstance(p, bytes) else p.size for p in pieces)
    local = plan_parts([b"x", ByteSlice("file:///tmp/a", 0, 3 * MIN)])  # a local range is never an S3 copy
    assert all(part.copy is None for part in local) and all(part.size >= MIN for part in local[:-1])


def test_a_local_compose_copies_through_the_process_where_the_kernel_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "segment.bin"
    body = np.random.default_rng(9).bytes(3 * 1024 * 1024)
    source.write_bytes(body)

    def across_filesystems(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", across_filesystems)  # what another filesystem answers
    destination = tmp_path / "out" / "joined.bin"
    storage.compose(destination.as_uri(), [b"head", ByteSlice(source.as_uri(), 10, len(body)), b"tail"])
    assert destination.read_bytes() == b"head" + body[10:] + b"tail"
    assert sorted(path.name for path in destination.parent.iterdir()) == ["joined.bin"]  # no partial file left


def test_an_object_composed_on_s3_equals_its_pieces_and_s3_copied_the_large_ranges(s3: Any) -> None:
    rng = np.random.default_rng(3)
    first, second = rng.bytes(MIN + 123), rng.bytes(MIN + 4567)
    name = uuid.uuid4().hex
    s3.put_object(Bucket="work", Key=f"{name}/first", Body=first)
    s3.put_object(Bucket="work", Key=f"{name}/second", Body=second)
    a, b = f"s3://work/{name}/first", f"s3://work/{name}/second"
    pieces: list[storage.Piece] = [
        b"head",
        ByteSlice(b, 10, 20),
        ByteSlice(a, 0, len(first)),
        ByteSlice(b, 0, len(second)),
        b"tail",
    ]

    composed = storage.compose(f"s3://videos/{name}.bin", pieces)

    expected = b"head" + second[10:20] + first + second + b"tail"
    assert s3.get_object(Bucket="videos", Key=f"{name}.bin")["Body"].read() == expected
    assert composed.size == len(expected) and composed.copied_bytes >= len(second)  # the second range: copied whole
    assert composed.moved_bytes == len(expected) - composed.copied_bytes
    assert pending_uploads(s3, name) == []


def test_a_part_copy_that_fails_once_is_retried_and_the_object_is_whole(
    moto_server: MotoServer, use_s3_endpoint: Callable[[str], None]
) -> None:
    proxy = FaultyProxy(moto_server.port)  # in front of moto: records every request, answers the first copy with 503
    try:
        use_s3_endpoint(proxy.url)
        client = moto_server.client()
        name, body = uuid.uuid4().hex, np.random.default_rng(5).bytes(MIN + 99)
        client.put_object(Bucket="work", Key=f"{name}/segment", Body=body)
        proxy.inject(Fault("PUT", r"partNumber=2\b", 503))
        pieces: list[storage.Piece] = [b"h" * MIN, ByteSlice(f"s3://work/{name}/segment", 0, len(body))]

        composed = storage.compose(f"s3://videos/{name}.bin", pieces)

        assert client.get_object(Bucket="videos", Key=f"{name}.bin")["Body"].read() == b"h" * MIN + body
        copies = [e for e in proxy.exchanges() if e.method == "PUT" and "partNumber=2" in e.path]
        assert [e.status for e in copies] == [503, 200] and composed.copied_bytes == len(body)
    finally:
        proxy.stop()
        fsspec.filesystem("s3").clear_instance_cache()


def test_a_missing_range_fails_the_compose_and_leaves_no_object_and_no_upload(s3: Any) -> None:
    name = uuid.uuid4().hex
    s3.put_object(Bucket="work", Key=f"{name}/there", Body=b"x" * (MIN + 1))
    pieces: list[storage.Piece] = [b"head", ByteSlice(f"s3://work/{name}/there", 0, MIN + 1)]
    pieces.append(ByteSlice(f"s3://work/{name}/gone", 0, 10))
    with pytest.raises(InputMissingError, match=f"{name}/gone"):
        storage.compose(f"s3://videos/{name}.bin", pieces)
    assert "Contents" not in s3.list_objects_v2(Bucket="videos", Prefix=name)
    assert pending_uploads(s3, name) == []


def test_a_merge_to_s3_joins_the_segments_by_server_side_copies(
    s3: Any, large_video: Path, private_tmp: Path, worker_threads: Callable[[], list[Any]]
) -> None:
    name = uuid.uuid4().hex
    options = {"processors": [], "output_video_quality": 100, "output_video_preset": "ultrafast", "segment_size": 45}
    work_uri, spec = committed_work(f"s3://work/{name}", str(large_video), **options)

    result = worker.merge(work_uri, str(large_video), f"s3://videos/out/{name}.mp4")

    assert result.method == "index" and len(spec.segments) == 2
    # The head and the audio borrow from segment 0 to make S3's smallest part (what is left of it is too small to
    # copy); segment 1 is copied by S3 whole.
    assert result.timings["copied_mb"] * 1e6 > MIN
    merged = private_tmp.parent / "merged.mp4"
    merged.write_bytes(s3.get_object(Bucket="videos", Key=f"out/{name}.mp4")["Body"].read())
    assert [d.md5 for d in frame_digests(str(merged))] == [d.md5 for d in frame_digests(str(large_video))]
    assert packet_payloads(str(merged), "audio") == packet_payloads(str(large_video), "audio")
    with merged.open("rb") as handle:
        assert [box.kind for box in top_level_boxes(handle, merged.stat().st_size)] == ["ftyp", "moov", "mdat"]
    assert pending_uploads(s3, f"out/{name}") == [] and list(private_tmp.iterdir()) == []
    assert worker_threads() == []
