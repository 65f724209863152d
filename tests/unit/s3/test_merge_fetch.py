"""The remux on a real S3 endpoint (moto's server, in this process): segments downloaded ahead and checked in one
read; a bad segment in the middle fails the merge by name, publishes nothing and keeps every segment's marker. The
outputs are .mov files, which the merge remuxes (an MP4 is joined from the indexes: ``test_index_join``)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import fsspec
import pytest
from committed import committed_work, segment_file_uri
from readback import frame_digests, packet_payloads
from s3_servers import MotoServer
from synth import VideoSpec, pattern_frames, write_video

from facefusion_provider import storage, worker
from facefusion_provider.exceptions import InputMissingError
from facefusion_provider.media.mp4index import top_level_boxes
from facefusion_provider.work.layout import WorkLayout, output_marker_uri
from facefusion_provider.work.records import WorkSpec


@dataclass(frozen=True)
class S3Job:
    work_uri: str
    spec: WorkSpec
    target: str
    output_uri: str
    client: Any

    @property
    def layout(self) -> WorkLayout:
        return WorkLayout(self.work_uri)

    def merge(self) -> worker.MergeResult:
        return worker.merge(self.work_uri, self.target, self.output_uri)

    def keys(self, bucket: str, prefix: str) -> list[str]:
        found = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
        return sorted(item["Key"] for item in found)


def top_level_kinds(path: Path) -> list[str]:
    with path.open("rb") as handle:
        return [box.kind for box in top_level_boxes(handle, path.stat().st_size)]


@pytest.fixture
def s3_job(moto_server: MotoServer, use_s3_endpoint: Callable[[str], None], tmp_path: Path) -> Iterator[S3Job]:
    """A committed work of 5 two-frame segments under ``s3://work``, its output to go to ``s3://videos/out/``."""
    use_s3_endpoint(moto_server.url)
    target = str(tmp_path / "target.mp4")
    video = VideoSpec(frame_rate=Fraction(25), audio_rate=8000)
    write_video(target, video, pattern_frames(10, video.width, video.height))
    name = uuid.uuid4().hex
    work_uri, spec = committed_work(
        f"s3://work/{name}", target, segment_size=2, processors=[], output_video_quality=100
    )
    try:
        yield S3Job(work_uri, spec, target, f"s3://videos/out/{name}.mov", moto_server.client())
    finally:
        fsspec.filesystem("s3").clear_instance_cache()


def test_an_s3_work_merges_from_segments_downloaded_ahead(s3_job: S3Job, private_tmp: Path, tmp_path: Path) -> None:
    result = s3_job.merge()

    assert result.frame_count == 10 and len(s3_job.spec.segments) == 5
    local = tmp_path / "merged.mov"
    storage.get_file(result.output_uri, local)
    assert [d.md5 for d in frame_digests(str(local))] == [d.md5 for d in frame_digests(s3_job.target)]
    assert packet_payloads(str(local)) == packet_payloads(s3_job.target)
    assert top_level_kinds(local) == ["ftyp", "moov", "wide", "mdat"]  # playable while it downloads (QuickTime padding)
    assert s3_job.client.list_multipart_uploads(Bucket="videos").get("Uploads", []) == []
    assert storage.exists(output_marker_uri(result.output_uri))
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_bad_segment_in_the_middle_is_computed_again_and_the_output_is_frame_exact(
    damage: str, s3_job: S3Job, private_tmp: Path, tmp_path: Path, worker_threads: Callable[[], list[Any]]
) -> None:
    key = segment_file_uri(s3_job.work_uri, 2).removeprefix("s3://work/")
    if damage == "corrupt":  # rewritten without a checksum: only the remux's download can tell
        data = s3_job.client.get_object(Bucket="work", Key=key)["Body"].read()
        s3_job.client.put_object(Bucket="work", Key=key, Body=data[:-10] + b"0123456789")
    else:
        s3_job.client.delete_object(Bucket="work", Key=key)

    result = s3_job.merge()

    output = tmp_path / "healed.mov"
    s3_job.client.download_file("videos", result.output_uri.removeprefix("s3://videos/"), str(output))
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(s3_job.target)]
    assert storage.exists(s3_job.layout.retired_marker(2, 0)) and storage.exists(s3_job.layout.segment_marker(2, 1))
    assert s3_job.client.list_multipart_uploads(Bucket="videos", Prefix="out/").get("Uploads", []) == []
    assert list(private_tmp.iterdir()) == []
    assert worker_threads() == []


def test_get_file_sha256_downloads_and_hashes_in_one_read(moto_server: MotoServer, tmp_path: Path) -> None:
    endpoint, client = moto_server.url, moto_server.client()
    data = bytes(range(256)) * 5000
    key = f"blobs/{uuid.uuid4().hex}.bin"
    client.put_object(Bucket="work", Key=key, Body=data)
    with storage.using_s3_credentials(storage.S3Credentials("testing", "testing", endpoint_url=endpoint)):
        digest = storage.get_file_sha256(f"s3://work/{key}", tmp_path / "copy.bin")
        with pytest.raises(InputMissingError, match=rf"^s3://work/{key}\.gone: no such file$"):
            storage.get_file_sha256(f"s3://work/{key}.gone", tmp_path / "gone.bin")
    assert digest == hashlib.sha256(data).hexdigest() and (tmp_path / "copy.bin").read_bytes() == data
    assert not (tmp_path / "gone.bin").exists()
    fsspec.filesystem("s3").clear_instance_cache()
