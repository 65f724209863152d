"""The merge of an S3 target on a real S3 endpoint (moto's server in this process, behind a proxy that counts every
request and injects real HTTP failures): the original's audio is read by ranged reads ahead, the output is the same
file a merge of a local copy writes, and a failing range fails the merge as a storage error with nothing published."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import fsspec
import pytest
from readback import frame_digests, packet_payloads
from s3_servers import Fault, FaultyProxy, MotoServer
from synth import VideoSpec, pattern_frames, write_video

from facefusion_provider import contract, storage, worker
from facefusion_provider.exceptions import RetryableError
from facefusion_provider.options import Options
from facefusion_provider.output.merge import _merge_original, copied_sample_ranges
from facefusion_provider.work.ids import work_id
from facefusion_provider.work.layout import WorkLayout

PASSTHROUGH: dict[str, Any] = {"processors": [], "output_video_quality": 100}
BIG_FRAMES = {"preset": "ultrafast", "crf": "0"}  # 320x240 lossless: about 70 KB a frame, more than FFmpeg reads over
WHOLE_FILE_BLOCK = str(64 * 1024 * 1024)  # the fallback file's first read then caches all of a small target


@dataclass
class FaultAfter(Fault):
    """A fault that lets the first ``after`` matching requests through (e.g. the read of the target's index)."""

    after: int = 0
    seen: int = 0

    def matches(self, method: str, path: str) -> bool:
        if not super().matches(method, path):
            return False
        self.seen += 1
        return self.seen > self.after


@dataclass(frozen=True)
class S3:
    endpoint: str
    proxy: FaultyProxy
    client: Any

    def target_gets(self, key: str) -> list[tuple[int | str, str | None, int]]:
        """(status, Range header, bytes answered) of every GET of ``videos/key`` since the last ``forget``."""
        path = re.compile(rf"^/videos/{re.escape(key)}(\?|$)")
        return [
            (e.status, e.request_range, e.body_bytes)
            for e in self.proxy.exchanges()
            if e.method == "GET" and path.search(e.path)
        ]

    def keys(self, prefix: str) -> list[str]:
        found = self.client.list_objects_v2(Bucket="videos", Prefix=prefix).get("Contents", [])
        return sorted(item["Key"] for item in found)


@pytest.fixture(scope="module")
def s3_server(moto_server: MotoServer) -> Iterator[S3]:
    proxy = FaultyProxy(moto_server.port)
    try:
        yield S3(proxy.url, proxy, moto_server.client(endpoint=proxy.url))
    finally:
        proxy.stop()


@pytest.fixture
def s3(s3_server: S3, use_s3_endpoint: Callable[[str], None]) -> Iterator[S3]:
    use_s3_endpoint(s3_server.endpoint)
    fsspec.filesystem("s3").clear_instance_cache()
    s3_server.proxy.clear()
    yield s3_server
    s3_server.proxy.clear()
    fsspec.filesystem("s3").clear_instance_cache()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Targets, written once: big frames with AAC (index at the end, and first), and two that have no audio index."""
    folder = tmp_path_factory.mktemp("media")
    big = VideoSpec(width=320, height=240, frame_rate=Fraction(25), codec_options=BIG_FRAMES, audio_rate=44100)
    small = VideoSpec(width=64, height=48, frame_rate=Fraction(25))
    targets = {
        "long": (big, 250, "long.mp4"),
        "short": (big, 50, "short.mp4"),
        "no-audio": (small, 20, "no-audio.mp4"),
        "matroska": (VideoSpec(width=64, height=48, audio_rate=8000, container_format="matroska"), 20, "audio.mkv"),
    }
    paths = {}
    for name, (spec, frames, file_name) in targets.items():
        paths[name] = folder / file_name
        write_video(str(paths[name]), spec, pattern_frames(frames, spec.width, spec.height))
    paths["long-faststart"] = folder / "long-faststart.mp4"
    with (
        av.open(str(paths["long"])) as source,
        av.open(str(paths["long-faststart"]), "w", options={"movflags": "+faststart"}) as copy,
    ):
        streams = {stream.index: copy.add_stream_from_template(stream) for stream in source.streams}
        for packet in source.demux():
            if packet.size:
                packet.stream = streams[packet.stream_index]
                copy.mux(packet)
    return paths


def upload(s3: S3, path: Path) -> tuple[str, str]:
    """The target's key and URI under ``s3://videos/in/``, a fresh name each time."""
    key = f"in/{uuid.uuid4().hex}{path.suffix}"
    s3.client.upload_file(str(path), "videos", key)
    return key, f"s3://videos/{key}"


@dataclass(frozen=True)
class CommittedWork:
    work_uri: str
    target_uri: str
    output_uri: str

    def merge(self, output_uri: str | None = None) -> worker.MergeResult:
        return worker.merge(self.work_uri, self.target_uri, output_uri or self.output_uri)


def committed_job(target_uri: str, name: str) -> CommittedWork:
    """A work under its own root ``s3://work/{name}`` with its one segment committed, to merge to ``out/{name}.mov`` (remuxed: these
    tests are about the remux's reads; an MP4 output is joined from the indexes, ``test_index_join``)."""
    options = {"segment_size": 1000, **PASSTHROUGH}
    work = work_id(storage.content_id(target_uri), [], Options(**options))
    work_uri = WorkLayout.under(f"s3://work/{name}", work).work_uri
    spec = worker.prepare(work_uri, [], target_uri, **options)
    worker.swap_span(work_uri, target_uri, 0, len(spec.segments))
    return CommittedWork(work_uri, target_uri, f"s3://videos/out/{name}.mov")


def downloaded(uri: str, folder: Path) -> bytes:
    path = folder / uri.rsplit("/", 1)[-1]
    storage.get_file(uri, path)
    return path.read_bytes()


@pytest.mark.parametrize("layout", ["long", "long-faststart"], ids=["index-at-end", "index-first"])
def test_an_s3_target_merges_to_the_same_file_as_a_local_copy(
    s3: S3, media: dict[str, Path], layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, target_uri = upload(s3, media[layout])
    name = uuid.uuid4().hex
    spec = committed_job(target_uri, name)

    s3.proxy.forget_exchanges()
    ranged = spec.merge()
    gets = s3.target_gets(key)

    # The same work merged again to another output, with the target read from a local copy (the plain path).
    monkeypatch.setenv(contract.INPUT_CACHE_DIR_VARIABLE, str(tmp_path / "node-cache"))
    local = spec.merge(f"s3://videos/out/{name}-local.mov")

    assert downloaded(ranged.output_uri, tmp_path) == downloaded(local.output_uri, tmp_path)
    merged = tmp_path / f"{name}.mov"
    assert packet_payloads(str(merged)) == packet_payloads(str(media[layout]))
    assert [d.md5 for d in frame_digests(str(merged))] == [d.md5 for d in frame_digests(str(media[layout]))]
    with open(media[layout], "rb") as handle:
        planned = copied_sample_ranges(handle)
    assert planned is not None
    pieces = {f"bytes={start}-{end - 1}" for start, end in storage.range_pieces(planned[0])}
    assert pieces <= {request_range for _, request_range, _ in gets}  # every audio range was read ahead, once
    assert sum(request_range in pieces for _, request_range, _ in gets) == len(pieces)


def test_reading_only_the_audio_fetches_only_its_samples_past_the_opening(
    s3: S3, media: dict[str, Path], monkeypatch: pytest.MonkeyPatch, worker_threads: Callable[[], list[Any]]
) -> None:
    # What the merge's demuxer does with the streams it does not copy discarded: it reads the moov, probes the first
    # packets, then only the audio samples. Through the reader each of those comes once, by ranges fetched ahead.
    monkeypatch.setenv(contract.S3_READ_BLOCK_VARIABLE, str(1024 * 1024))
    monkeypatch.setattr(storage, "RANGE_BYTES_PER_GET", 1)  # a GET per gap: this file is small
    key, target_uri = upload(s3, media["long"])
    work = committed_job(target_uri, uuid.uuid4().hex)
    spec = worker.load_work(WorkLayout(work.work_uri))
    size = media["long"].stat().st_size

    s3.proxy.forget_exchanges()
    with storage.open_input(target_uri) as target, _merge_original(spec, target_uri, target) as original:
        assert not isinstance(original, str)
        with av.open(original, options={"skip_frame": "all"}) as container:
            opened = sum(answered for _, _, answered in s3.target_gets(key))
            container.streams.video[0].discard = av.stream.Discard.all
            audio = [bytes(packet) for packet in container.demux(container.streams.audio[0]) if packet.size]
    fetched = sum(answered for _, _, answered in s3.target_gets(key))

    assert [payload for _, payload in packet_payloads(str(media["long"]))] == audio
    audio_bytes = sum(map(len, audio))
    assert fetched - opened <= audio_bytes  # past the opening: audio samples only, each once
    assert fetched < size * 0.5 and opened < 8 * 1024 * 1024  # the opening: the moov and FFmpeg's 5 MB probe
    assert worker_threads() == []


def test_a_range_that_fails_once_is_retried_and_the_merge_succeeds(
    s3: S3, media: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(contract.S3_READ_BLOCK_VARIABLE, WHOLE_FILE_BLOCK)
    key, target_uri = upload(s3, media["short"])
    spec = committed_job(target_uri, uuid.uuid4().hex)
    s3.proxy.forget_exchanges()
    s3.proxy.inject(FaultAfter("GET", rf"/videos/{re.escape(key)}", 503, times=2, after=1))

    result = spec.merge()

    gets = s3.target_gets(key)
    assert gets[0][2] == media["short"].stat().st_size  # the index read: the whole small file, cached
    assert [status for status, _, _ in gets[1:3]] == [503, 503]  # the next two, ranged reads of the audio, failed
    assert len(gets) > 3 and all(status == 206 for status, _, _ in gets[3:])  # and were retried
    merged = tmp_path / "merged.mov"
    storage.get_file(result.output_uri, merged)
    assert packet_payloads(str(merged)) == packet_payloads(str(media["short"]))


def test_a_range_that_keeps_failing_fails_the_merge_as_retryable_with_nothing_published(
    s3: S3,
    media: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    private_tmp: Path,
    worker_threads: Callable[[], list[Any]],
) -> None:
    monkeypatch.setenv(contract.S3_READ_BLOCK_VARIABLE, WHOLE_FILE_BLOCK)
    monkeypatch.setenv(contract.S3_MAX_ATTEMPTS_VARIABLE, "2")
    key, target_uri = upload(s3, media["short"])
    name = uuid.uuid4().hex
    spec = committed_job(target_uri, name)
    s3.proxy.inject(FaultAfter("GET", rf"/videos/{re.escape(key)}", 503, times=10_000, after=1))

    with pytest.raises(RetryableError, match=rf"^{re.escape(target_uri)}: storage still failing after retries"):
        spec.merge()

    assert s3.keys(f"out/{name}") == [] and s3.keys(f"out/.{name}") == []
    assert worker_threads() == [] and list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("kind", ["no-audio", "matroska"])
def test_targets_without_audio_or_without_a_moov_merge_as_before(
    s3: S3, media: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    _, target_uri = upload(s3, media[kind])
    result = committed_job(target_uri, uuid.uuid4().hex).merge()

    merged = tmp_path / "merged.mov"
    storage.get_file(result.output_uri, merged)
    assert [d.md5 for d in frame_digests(str(merged))] == [d.md5 for d in frame_digests(str(media[kind]))]
    assert packet_payloads(str(merged)) == packet_payloads(str(media[kind]))
