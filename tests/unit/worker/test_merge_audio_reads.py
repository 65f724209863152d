"""The merge's reads of the original: the samples of the streams it copies, planned from the moov and fetched ahead in
ranges, while every other read goes to the file as before; the bytes handed to FFmpeg are the file's either way."""

from __future__ import annotations

import functools
import io
import itertools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import pytest

from facefusion_provider import storage
from facefusion_provider.media.mp4index import TrackIndex, read_movie_index
from facefusion_provider.output.merge import copied_sample_ranges
from facefusion_provider.storage.prefetch import Prefetch

from .conftest import MakeVideo

BIG_FRAMES = {"preset": "ultrafast", "crf": "0"}  # 320x240 lossless: about 70 KB a frame, more than FFmpeg reads over


class Recorder(io.RawIOBase):
    """A file that records every read it answers: (position, size asked, size returned)."""

    def __init__(self, inner: io.RawIOBase | io.BufferedIOBase) -> None:
        super().__init__()
        self.inner = inner
        self.reads: list[tuple[int, int, int]] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def read(self, size: int | None = -1) -> bytes:
        position = self.inner.tell()
        data = self.inner.read(size)
        assert data is not None
        self.reads.append((position, -1 if size is None else size, len(data)))
        return data


def read_range(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(start)
        return handle.read(end - start)


def opening_reads(path: str) -> int:
    """Bytes FFmpeg reads to open the file as the merge does (the moov, then a probe of the first packets)."""
    with open(path, "rb") as raw:
        recorder = Recorder(raw)
        with av.open(recorder, options={"skip_frame": "all"}):
            return sum(returned for _, _, returned in recorder.reads)


def audio_packets(source: str | io.RawIOBase, *, discard_others: bool) -> list[tuple[int | None, bytes]]:
    """The audio packets as the merge demuxes them (headers only, nothing decoded), optionally with the others discarded."""
    with av.open(source, options={"skip_frame": "all"}) as container:
        if discard_others:
            for stream in container.streams:
                if stream.type != "audio":
                    stream.discard = av.stream.Discard.all
        return [(packet.pts, bytes(packet)) for packet in container.demux(container.streams.audio[0]) if packet.size]


def planned_audio(path: str) -> tuple[list[storage.ByteRange], TrackIndex]:
    """The merge's plan of ranges for ``path`` and its audio track, every audio sample checked to lie in a range."""
    movie = read_movie_index(path)
    assert movie is not None
    with open(path, "rb") as handle:
        planned = copied_sample_ranges(handle)
    assert planned is not None
    ranges, size = planned
    assert size == Path(path).stat().st_size
    audio = next(track for track in movie.tracks if track.handler == "soun")
    for offset, length in zip(audio.offsets.tolist(), audio.sizes.tolist(), strict=True):
        assert any(start <= offset and offset + length <= end for start, end in ranges)
    return ranges, audio


def test_the_plan_holds_every_audio_sample_and_skips_the_video_between_them(
    make_video: MakeVideo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "RANGE_BYTES_PER_GET", 1)  # as many GETs as gaps: this file is small
    path = make_video(frames=40, width=320, height=240, codec_options=BIG_FRAMES, audio_rate=44100)
    ranges, audio = planned_audio(path)
    assert all(later[0] - earlier[1] > storage.RANGE_GAP_BYTES for earlier, later in itertools.pairwise(ranges))
    assert sum(end - start for start, end in ranges) == int(audio.sizes.sum())  # not one byte of video


def test_a_small_file_is_read_in_few_gets_whatever_its_gaps(make_video: MakeVideo) -> None:
    # A GET costs about as much as a megabyte: below that per request, the largest gaps alone stay open.
    path = make_video(frames=40, width=320, height=240, codec_options=BIG_FRAMES, audio_rate=44100)
    ranges, _ = planned_audio(path)
    assert 1 <= len(ranges) <= max(1, Path(path).stat().st_size // storage.RANGE_BYTES_PER_GET)


def test_samples_closer_than_ffmpeg_reads_over_are_planned_as_one_range(make_video: MakeVideo) -> None:
    # Small frames: FFmpeg reads through the video between two audio samples instead of seeking, so the plan must too.
    path = make_video(frames=40, audio_rate=44100)
    with open(path, "rb") as handle:
        planned = copied_sample_ranges(handle)
    assert planned is not None
    ranges, _ = planned
    assert len(ranges) == 1


@pytest.mark.parametrize(
    "fields",
    [{"audio_rate": None}, {"audio_rate": 8000, "container_format": "matroska", "name": "target.mkv"}],
    ids=["no-audio", "matroska"],
)
def test_there_is_no_plan_without_samples_to_copy_or_without_a_moov(
    make_video: MakeVideo, fields: dict[str, object]
) -> None:
    path = make_video(frames=10, **fields)
    with open(path, "rb") as handle:
        assert copied_sample_ranges(handle) is None


def planned_pieces(make_video: MakeVideo) -> tuple[str, int, list[storage.ByteRange]]:
    """A clip of large frames with audio, its size, and the pieces the merge would fetch ahead of its demuxer."""
    path = make_video(frames=250, width=320, height=240, codec_options=BIG_FRAMES, audio_rate=44100)
    with open(path, "rb") as handle:
        planned = copied_sample_ranges(handle)
    assert planned is not None
    return path, Path(path).stat().st_size, storage.range_pieces(planned[0])


@pytest.mark.parametrize("discard_others", [True, False], ids=["video-discarded", "video-read"])
def test_ffmpeg_gets_the_same_packets_through_the_reader_and_reads_ahead_only_the_audio(
    make_video: MakeVideo, discard_others: bool
) -> None:
    path, size, pieces = planned_pieces(make_video)
    fetches = [functools.partial(read_range, path, start, end) for start, end in pieces]
    with open(path, "rb") as raw, Prefetch(fetches, storage.RANGE_FETCHES_AT_ONCE) as fetching:
        fallback = Recorder(raw)
        reader = storage.RangeReader(fallback, pieces, fetching.results(), size)
        spy = Recorder(reader)
        packets = audio_packets(spy, discard_others=discard_others)

    assert packets == audio_packets(path, discard_others=False)
    assert reader.fetched_bytes == sum(end - start for start, end in pieces)  # every piece was used
    assert all(returned > 0 for position, _, returned in spy.reads if position < size)  # no early end of file
    in_pieces = [
        (position + returned, end)
        for position, _, returned in spy.reads
        for start, end in pieces
        if start <= position < end
    ]
    assert in_pieces and all(stop <= end for stop, end in in_pieces)  # never past a piece's end ...
    assert sum(stop == end for stop, end in in_pieces) >= len(pieces)  # ... and short where a piece ends
    from_file = sum(returned for _, _, returned in fallback.reads)
    assert from_file == reader.fallback_bytes
    assert not [position for position, _, _ in fallback.reads if any(s <= position < e for s, e in pieces)]
    if discard_others:  # the file itself answered no more than the opening reads: the audio came from the ranges
        assert from_file <= opening_reads(path) < size / 2


def test_reads_end_at_a_piece_fall_back_between_pieces_and_past_them() -> None:
    data = random.Random(3).randbytes(1000)
    pieces = [(100, 200), (200, 300), (500, 600), (700, 800)]
    taken: list[int] = []

    def fetched() -> Iterator[bytes]:
        for index, (start, end) in enumerate(pieces):
            taken.append(index)
            yield data[start:end]

    fallback = Recorder(io.BytesIO(data))
    reader = storage.RangeReader(fallback, pieces, fetched(), len(data))

    assert reader.read(150) == data[:100]  # stops where the first piece starts
    assert reader.read(150) == data[100:200] and taken == [0]  # a piece's read ends at its end
    assert reader.read(50) == data[200:250] and reader.read(500) == data[250:300]
    assert reader.read(500) == data[300:500]  # the gap, from the file
    reader.seek(750)
    assert reader.read(10) == data[750:760] and taken == [0, 1, 2, 3]  # a piece passed over was taken and dropped
    reader.seek(550)
    assert reader.read(20) == data[550:570]  # a piece already passed: from the file
    buffer = bytearray(400)
    reader.seek(-300, io.SEEK_END)
    assert reader.readinto(buffer) == 100 and bytes(buffer[:100]) == data[700:800]
    assert reader.read() == data[800:] and reader.read(10) == b"" and reader.tell() == len(data)
    assert reader.seek(-1, io.SEEK_CUR) == 999 and reader.read(5) == data[999:]
    with pytest.raises(ValueError):
        reader.seek(-1)
    assert [p for p, _, _ in fallback.reads] == [0, 300, 550, 800, 999]
    assert (reader.fetched_bytes, reader.fallback_reads) == (400, 5)


def test_a_failed_fetch_fails_every_later_read_of_the_pieces_with_the_same_error() -> None:
    data = bytes(range(256)) * 4
    failure = ConnectionResetError("connection reset by peer")

    def fetched() -> Iterator[bytes]:
        yield data[100:200]
        raise failure

    reader = storage.RangeReader(io.BytesIO(data), [(100, 200), (300, 400)], fetched(), len(data))
    assert reader.read(300) == data[:100] and reader.read(300) == data[100:200]
    for _ in range(2):
        reader.seek(350)
        with pytest.raises(ConnectionResetError) as raised:
            reader.read(10)
        assert raised.value is failure
    reader.seek(0)
    assert reader.read(50) == data[:50]  # outside the pieces the file still answers


def test_a_failed_fetch_ends_the_demux_with_its_error_and_leaves_no_fetch_running(
    make_video: MakeVideo, worker_threads: Callable[[], list[Any]]
) -> None:
    path, size, pieces = planned_pieces(make_video)
    started: list[int] = []

    def fetch(index: int) -> bytes:
        started.append(index)
        if index == len(pieces) // 2:
            raise TimeoutError("read timed out")
        return read_range(path, *pieces[index])

    fetches = [functools.partial(fetch, index) for index in range(len(pieces))]
    with (
        pytest.raises(TimeoutError, match="read timed out"),
        open(path, "rb") as raw,
        Prefetch(fetches, storage.RANGE_FETCHES_AT_ONCE) as fetching,
    ):
        audio_packets(storage.RangeReader(raw, pieces, fetching.results(), size), discard_others=True)
    assert worker_threads() == []
    assert max(started) <= len(pieces) // 2 + storage.RANGE_FETCHES_AT_ONCE + 1  # nothing far past the failure
