"""MP4/MOV frame times from the moov tables: exactly the demuxer's, read without touching the media data."""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import pytest
from synth import VideoSpec, frame_pts

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media import probe
from facefusion_provider.media.mp4index import first_video_track, read_movie_index, video_frame_times
from facefusion_provider.media.probe import probe_video, select_video_stream, video_timestamps
from facefusion_provider.types import VideoProbe

from .conftest import BFRAMES_LONG_GOP, MakeVideo

FrameTimes = tuple[list[int], Fraction, int]
SHORT_GOP = {"preset": "veryfast", "crf": "20", "bf": "3", "g": "12", "keyint_min": "12", "sc_threshold": "0"}


def _demuxed(path: str) -> FrameTimes:
    """The reference: every video packet demuxed by FFmpeg."""
    with av.open(path) as container:
        video = select_video_stream(container, path)
        pts, last_duration = probe._demux_timestamps(container, video, path)
        assert video.time_base is not None
        return pts, video.time_base, last_duration


def _sample_places(path: str) -> list[tuple[int, int]]:
    """Where the demuxer found each video packet (decode order): file offset and size."""
    with av.open(path) as container:
        return [(p.pos, p.size) for p in container.demux(video=0) if p.size and p.pos is not None]


def _indexed_places(path: str) -> list[tuple[int, int]]:
    movie = read_movie_index(path)
    track = None if movie is None else first_video_track(movie)
    assert track is not None
    return list(zip(track.offsets.tolist(), track.sizes.tolist(), strict=True))


def _demux_probe(path: str, monkeypatch: pytest.MonkeyPatch) -> VideoProbe:
    with monkeypatch.context() as patch:
        patch.setattr(probe, "read_movie_index", lambda source: None)
        return probe_video(path, path)


def _no_demux(*args: object) -> None:
    raise AssertionError("the moov tables should have answered; the packets were demuxed")


def _remux(
    source: str,
    target: str,
    *,
    start_seconds: Fraction = Fraction(0),
    shift_seconds: Fraction = Fraction(0),
    options: dict[str, str] | None = None,
) -> str:
    """A stream copy, as ``ffmpeg [-ss START] [-itsoffset SHIFT] -i SOURCE -c copy [-movflags ...] TARGET`` writes it.

    From the keyframe before ``start_seconds`` on, every time moves back by the start, so the frames before the start
    fall before 0: the MP4 muxer writes an edit list that hides them (the same edit list as ffmpeg 7 writes for that cut).
    """
    with av.open(source) as inp, av.open(target, "w", options=options or {}) as out:
        outputs = {stream.index: out.add_stream_from_template(stream) for stream in inp.streams}
        video = inp.streams.video[0]
        if start_seconds:
            assert video.time_base is not None
            inp.seek(round(start_seconds / video.time_base), stream=video, backward=True)
        for packet in inp.demux():
            if packet.dts is None or packet.pts is None or packet.time_base is None:
                continue
            offset = round((start_seconds - shift_seconds) / packet.time_base)
            packet.pts, packet.dts = packet.pts - offset, packet.dts - offset
            packet.stream = outputs[packet.stream.index]
            out.mux(packet)
    return target


def _constant_with_audio(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(frames=45, audio_rate=48000, codec_options=BFRAMES_LONG_GOP)


def _faststart_with_audio(make_video: MakeVideo, tmp_path: Path) -> str:
    source = make_video(frames=45, audio_rate=44100, codec_options=SHORT_GOP)
    return _remux(source, str(tmp_path / "faststart.mp4"), options={"movflags": "faststart"})


def _ntsc(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(
        frames=20, frame_rate=Fraction(30000, 1001), time_base=Fraction(1, 30000), codec_options=BFRAMES_LONG_GOP
    )


def _variable_rate(make_video: MakeVideo, tmp_path: Path) -> str:
    fields = {"time_base": Fraction(1, 1000), "frame_durations": (33, 50, 17, 40, 61)}
    return make_video(frames=23, codec_options=SHORT_GOP, **fields)


def _variable_rate_no_bframes(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(frames=13, time_base=Fraction(1, 1000), frame_durations=(33, 50, 17))


def _rotated(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(frames=5, rotation=90)


def _one_frame(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(frames=1, codec_options=BFRAMES_LONG_GOP)


def _x264_bframes(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(frames=40, codec_options=SHORT_GOP)


def _h265(make_video: MakeVideo, tmp_path: Path) -> str:
    x265 = {"preset": "ultrafast", "x265-params": "log-level=none:bframes=3:keyint=10"}
    return make_video(frames=20, codec="libx265", codec_options=x265)


def _quicktime(make_video: MakeVideo, tmp_path: Path) -> str:
    return make_video(frames=30, name="clip.mov", audio_rate=48000, codec_options=SHORT_GOP)


def _negative_composition_offsets(make_video: MakeVideo, tmp_path: Path) -> str:
    source = make_video(frames=30, codec_options=SHORT_GOP)
    return _remux(source, str(tmp_path / "negative.mp4"), options={"movflags": "negative_cts_offsets"})


def _cut_mid_gop(make_video: MakeVideo, tmp_path: Path) -> str:
    source = make_video(frames=60, audio_rate=48000, codec_options=SHORT_GOP)
    return _remux(source, str(tmp_path / "cut.mp4"), start_seconds=Fraction(1, 2))


CASES: dict[str, Callable[[MakeVideo, Path], str]] = {
    "30fps-aac-moov-at-end": _constant_with_audio,
    "30fps-aac-faststart": _faststart_with_audio,
    "30000/1001": _ntsc,
    "variable-rate": _variable_rate,
    "variable-rate-no-bframes": _variable_rate_no_bframes,
    "rotation": _rotated,
    "one-frame": _one_frame,
    "x264-bframes": _x264_bframes,
    "h265": _h265,
    "mov": _quicktime,
    "ctts-version-1": _negative_composition_offsets,
    "cut-on-a-non-keyframe": _cut_mid_gop,
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_moov_tables_give_exactly_what_the_demuxer_gives(
    case: str, make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = CASES[case](make_video, tmp_path)
    expected = _demuxed(path)
    assert video_frame_times(path, path) == expected
    assert _indexed_places(path) == _sample_places(path)
    demuxed_probe = _demux_probe(path, monkeypatch)
    monkeypatch.setattr(probe, "_demux_timestamps", _no_demux)
    assert probe_video(path, path) == demuxed_probe
    assert video_timestamps(path, path) == (expected[0], expected[1])


def test_a_cut_on_a_non_keyframe_hides_the_frames_before_the_cut(make_video: MakeVideo, tmp_path: Path) -> None:
    source = make_video(frames=60, codec_options=SHORT_GOP)
    cut = _remux(source, str(tmp_path / "cut.mp4"), start_seconds=Fraction(1, 2))  # frame 15; keyframes 0, 12, 24...
    times = video_frame_times(cut, cut)
    assert times is not None
    pts, time_base, _ = times
    # Frames 15..59 of the source are shown, from 0; frames 12..14 are decoded for reference only.
    assert [p * time_base for p in pts] == [Fraction(i, 30) for i in range(45)]
    with av.open(cut) as container:
        assert container.streams.video[0].frames == 48


def _with_edit(path: str, target: Path, *, segment_duration: int, media_time: int | None = None) -> str:
    """``path`` with its (first) edit changed in place: ``segment_duration`` in the movie's ms, ``media_time`` in ticks."""
    data = bytearray(Path(path).read_bytes())
    entry = data.index(b"elst") + 4 + 8  # version and flags, entry count, then (segment duration, media time, rate)
    struct.pack_into(">I", data, entry, segment_duration)
    if media_time is not None:
        struct.pack_into(">i", data, entry + 4, media_time)
    target.write_bytes(bytes(data))
    return str(target)


def test_an_edit_that_ends_early_hides_the_last_frames(make_video: MakeVideo, tmp_path: Path) -> None:
    # Keyframes at 0, 12 and 24: FFmpeg stops indexing after the second keyframe past the edit's end (there is none,
    # so every sample stays indexed and the last ten are hidden).
    path = make_video(frames=30, codec_options=SHORT_GOP)
    shortened = _with_edit(path, tmp_path / "shortened.mp4", segment_duration=666)  # 20 frames of 1/30 s
    times = video_frame_times(shortened, shortened)
    assert times == _demuxed(shortened)
    assert times is not None and times[0] == [512 * i for i in range(20)]


def test_an_edit_starting_between_a_keyframes_decoding_and_its_showing(make_video: MakeVideo, tmp_path: Path) -> None:
    # The keyframe shown as frame 12 is decoded before frame 11 is shown: FFmpeg still starts its index at the first
    # keyframe (frames 0-10 are decoded and hidden) because that later keyframe is shown after the edit's start.
    path = make_video(frames=30, codec_options=SHORT_GOP)
    with av.open(path) as container:
        assert [p.pts for p in container.demux(video=0) if p.is_keyframe] == [0, 512 * 12, 512 * 24]
    delay = 1024  # the B-frame delay in the track's 1/15360 s, which the written edit skips
    cut = _with_edit(path, tmp_path / "cut.mp4", segment_duration=1000, media_time=delay + 512 * 11)
    times = video_frame_times(cut, cut)
    assert times == _demuxed(cut)
    assert times is not None and times[0] == [512 * i for i in range(19)]


def test_a_cut_into_negative_composition_offsets_keeps_ffmpegs_timeline(make_video: MakeVideo, tmp_path: Path) -> None:
    # With negative offsets a frame can be shown before the first frame decoded in the edit starts: FFmpeg then leaves
    # the timeline unshifted (its running minimum restarts after a negative pts), so the first frames come before 0.
    source = make_video(
        frames=30, time_base=Fraction(1, 1000), frame_durations=(33, 50, 17, 40), codec_options=SHORT_GOP
    )
    negative = _remux(source, str(tmp_path / "negative.mp4"), options={"movflags": "negative_cts_offsets"})
    cut = _with_edit(negative, tmp_path / "cut.mp4", segment_duration=500, media_time=1336)
    times = video_frame_times(cut, cut)
    assert times == _demuxed(cut)
    assert times is not None and times[0][0] < 0


def test_a_fragmented_mp4_is_left_to_the_demuxer(make_video: MakeVideo, tmp_path: Path) -> None:
    source = make_video(frames=30, codec_options=SHORT_GOP)
    fragmented = _remux(source, str(tmp_path / "fragmented.mp4"), options={"movflags": "frag_keyframe+empty_moov"})
    assert video_frame_times(fragmented, fragmented) is None
    probed = probe_video(fragmented, fragmented)
    assert probed.frame_count == 30
    time_base = Fraction(probed.time_base)  # the demuxer starts it after the B-frame delay: no edit list hides it
    assert [(p - probed.pts[0]) * time_base for p in probed.pts] == [Fraction(i, 30) for i in range(30)]


def test_matroska_is_left_to_the_demuxer(make_video: MakeVideo) -> None:
    path = make_video(frames=10, name="clip.mkv")
    assert video_frame_times(path, path) is None
    assert probe_video(path, path).frame_count == 10


def test_an_edit_list_with_an_empty_edit_is_left_to_the_demuxer(make_video: MakeVideo, tmp_path: Path) -> None:
    source = make_video(frames=10)
    delayed = _remux(source, str(tmp_path / "delayed.mp4"), shift_seconds=Fraction(1, 3))
    edits = first_video_track(read_movie_index(delayed) or pytest.fail("no moov")) or pytest.fail("no video")
    assert [edit.media_time for edit in edits.edits] == [-1, 0]
    assert video_frame_times(delayed, delayed) is None
    assert probe_video(delayed, delayed).pts == _demuxed(delayed)[0]


def test_frames_sharing_a_timestamp_fail_as_they_do_when_demuxed(make_video: MakeVideo, tmp_path: Path) -> None:
    source = make_video(frames=8, frame_rate=Fraction(30000, 1001), time_base=Fraction(1, 30000))
    shared = str(tmp_path / "shared.mp4")
    with av.open(source) as inp, av.open(shared, "w") as out:
        video = out.add_stream_from_template(inp.streams.video[0])
        for index, packet in enumerate(p for p in inp.demux(video=0) if p.pts is not None):
            if index == 3 and packet.pts is not None:
                packet.pts += 1001  # frame 3 now shows at frame 4's time
            packet.stream = video
            out.mux(packet)
    message = f"{shared}: 1 video frames share a timestamp; frames cannot be told apart"
    with pytest.raises(InvalidMediaError, match=f"^{re.escape(message)}$"):
        _demuxed(shared)
    with pytest.raises(InvalidMediaError, match=f"^{re.escape(message)}$"):
        video_frame_times(shared, shared)


class CountingReader(io.RawIOBase):
    """A seekable binary file that counts the bytes read from it (an S3 object read by ranges, say)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed with the reader
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        count = self._file.readinto(buffer)
        self.bytes_read += count
        return count

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        super().close()


@pytest.mark.parametrize("movflags", ["", "faststart"])
def test_only_a_small_part_of_a_large_file_is_read(movflags: str, make_video: MakeVideo, tmp_path: Path) -> None:
    lossless = {"preset": "ultrafast", "crf": "0", "g": "15"}
    source = make_video(frames=45, width=640, height=360, audio_rate=48000, codec_options=lossless)
    path = _remux(source, str(tmp_path / f"large{movflags}.mp4"), options={"movflags": movflags} if movflags else None)
    size = Path(path).stat().st_size
    assert size > 5_000_000, "the clip was meant to have a large mdat"
    with CountingReader(path) as reader:
        reader.seek(1234)
        assert video_frame_times(reader, path) == _demuxed(path)  # type: ignore[arg-type]
        assert reader.tell() == 1234, "the reader is left where it was"
        assert reader.bytes_read < 0.05 * size


def test_a_truncated_mp4_fails_fast_naming_the_file(make_video: MakeVideo, tmp_path: Path) -> None:
    source = make_video(frames=30, codec_options=SHORT_GOP)
    whole = _remux(source, str(tmp_path / "whole.mp4"), options={"movflags": "faststart"})
    data = Path(whole).read_bytes()
    cut_at = len(data) // 2
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(data[:cut_at])
    with av.open(whole) as container:
        ends = [p.pos + p.size for p in container.demux(video=0) if p.size and p.pos is not None]
    assert len(ends) == 30
    readable = sum(end <= cut_at for end in ends)
    assert 0 < readable < 30
    name = "s3://bucket/truncated.mp4"
    message = f"{name}: is truncated: the header lists 30 frames, only {readable} can be read"
    with pytest.raises(InvalidMediaError, match=f"^{re.escape(message)}$"):
        video_frame_times(str(truncated), name)
    with pytest.raises(InvalidMediaError, match=f"^{re.escape(message)}$"):
        probe_video(str(truncated), name)


def test_a_file_object_and_a_file_uri_work_like_a_path(
    make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_video(frames=30, audio_rate=48000, codec_options=SHORT_GOP)
    expected, demuxed = probe_video(path, path), _demuxed(path)
    monkeypatch.setattr(probe, "_demux_timestamps", _no_demux)
    with open(path, "rb") as handle:
        assert video_frame_times(handle, path) == demuxed
        assert handle.tell() == 0
        assert probe_video(handle, path) == expected
    with storage.open_input(Path(path).as_uri()) as source:
        assert probe_video(source, path) == expected


# --- box layouts that FFmpeg's own muxer writes only for files over 4 GiB, made here by rewriting small files ---


def _boxes(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """(kind, start, end) of each box in ``data[start:end]``, with 32-bit sizes."""
    found = []
    while start < end:
        size, kind = struct.unpack_from(">I4s", data, start)
        found.append((kind, start, start + size))
        start += size
    return found


def _with_64_bit_chunk_offsets(data: bytes, start: int, end: int) -> bytes:
    """The box tree in ``data[start:end]`` with every stco rewritten as co64 (sizes recomputed)."""
    rewritten = b""
    for kind, box_start, box_end in _boxes(data, start, end):
        if kind in {b"moov", b"trak", b"mdia", b"minf", b"stbl"}:
            payload = _with_64_bit_chunk_offsets(data, box_start + 8, box_end)
        elif kind == b"stco":
            (count,) = struct.unpack_from(">I", data, box_start + 12)
            offsets = struct.unpack_from(f">{count}I", data, box_start + 16)
            payload = data[box_start + 8 : box_start + 16] + struct.pack(f">{count}Q", *offsets)
        else:
            payload = data[box_start + 8 : box_end]
        rewritten += struct.pack(">I4s", len(payload) + 8, b"co64" if kind == b"stco" else kind) + payload
    return rewritten


def _co64(path: str) -> bytes:
    data = Path(path).read_bytes()
    (kind, moov_start, moov_end) = _boxes(data, 0, len(data))[-1]
    assert kind == b"moov" and moov_end == len(data), "moov last: rewriting it moves no sample"
    return data[:moov_start] + _with_64_bit_chunk_offsets(data, moov_start, moov_end)


def _largesize_mdat(path: str) -> bytes:
    data = Path(path).read_bytes()
    boxes = _boxes(data, 0, len(data))
    kinds = [kind for kind, _, _ in boxes]
    free = kinds.index(b"free")
    (_, free_start, free_end), (_, mdat_start, mdat_end) = boxes[free], boxes[free + 1]
    assert kinds[free + 1] == b"mdat" and free_end - free_start == 8
    # The 8-byte free box and the mdat header become one 16-byte header: no sample moves.
    header = struct.pack(">I4sQ", 1, b"mdat", mdat_end - free_start)
    return data[:free_start] + header + data[mdat_start + 8 :]


def _mdat_to_end_of_file(path: str) -> bytes:
    faststart = _remux(path, path.replace(".mp4", "-faststart.mp4"), options={"movflags": "faststart"})
    data = bytearray(Path(faststart).read_bytes())
    (kind, mdat_start, mdat_end) = _boxes(bytes(data), 0, len(data))[-1]
    assert kind == b"mdat" and mdat_end == len(data)
    struct.pack_into(">I", data, mdat_start, 0)  # size 0: the box runs to the end of the file
    return bytes(data)


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", len(payload) + 8, kind) + payload


def _full_box(kind: bytes, payload: bytes) -> bytes:
    return _box(kind, bytes(4) + payload)  # version 0, no flags


def _empty_audio_trak(track_id: int) -> bytes:
    """A track with one sample description and no samples (what a recorder leaves for a muted microphone, say)."""
    tkhd = _full_box(b"tkhd", struct.pack(">III", 0, 0, track_id) + bytes(68))
    mdhd = _full_box(b"mdhd", struct.pack(">IIIIHH", 0, 0, 48000, 0, 0x55C4, 0))
    hdlr = _full_box(b"hdlr", struct.pack(">I4s", 0, b"soun") + bytes(13))
    mp4a = _box(b"mp4a", bytes(6) + struct.pack(">H", 1) + bytes(8) + struct.pack(">HHHHI", 2, 16, 0, 0, 48000 << 16))
    tables = [
        _full_box(b"stsd", struct.pack(">I", 1) + mp4a),
        *(_full_box(kind, bytes(4)) for kind in (b"stts", b"stsc", b"stco")),
        _full_box(b"stsz", bytes(8)),
    ]
    return _box(b"trak", tkhd + _box(b"mdia", mdhd + hdlr + _box(b"minf", _box(b"stbl", b"".join(tables)))))


def test_an_empty_track_before_the_video_is_left_to_the_demuxer(make_video: MakeVideo, tmp_path: Path) -> None:
    # FFmpeg turns its edit-list handling off for every track after an empty one: the cut's hidden frames then show.
    source = make_video(frames=40, codec_options=SHORT_GOP)
    cut = Path(_remux(source, str(tmp_path / "cut.mp4"), start_seconds=Fraction(1, 2)))
    data = cut.read_bytes()
    (kind, moov_start, moov_end) = _boxes(data, 0, len(data))[-1]
    assert kind == b"moov" and moov_end == len(data)
    children = b"".join(data[start:end] for _, start, end in _boxes(data, moov_start + 8, moov_end))
    first_trak = children.index(b"trak") - 4
    with_empty_track = tmp_path / "with-empty-track.mp4"
    with_empty_track.write_bytes(
        data[:moov_start] + _box(b"moov", children[:first_trak] + _empty_audio_trak(9) + children[first_trak:])
    )
    assert video_frame_times(str(with_empty_track), "with-empty-track") is None
    demuxed = _demuxed(str(with_empty_track))
    assert demuxed[0][0] < 0, "FFmpeg showed the frames before the cut"
    assert probe_video(str(with_empty_track), "with-empty-track").pts == demuxed[0]


@pytest.mark.parametrize("rewrite", [_co64, _largesize_mdat, _mdat_to_end_of_file])
def test_64_bit_offsets_and_box_sizes(
    rewrite: Callable[[str], bytes], make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_video(frames=30, audio_rate=48000, codec_options=SHORT_GOP)
    rewritten = tmp_path / "rewritten.mp4"
    rewritten.write_bytes(rewrite(source))
    expected = _demuxed(str(rewritten))
    assert expected == _demuxed(source), "the rewrite kept every frame time"
    assert video_frame_times(str(rewritten), "rewritten") == expected
    assert _indexed_places(str(rewritten)) == _sample_places(str(rewritten))
    monkeypatch.setattr(probe, "_demux_timestamps", _no_demux)
    assert probe_video(str(rewritten), "rewritten").pts == expected[0]


def test_the_written_timestamps_come_back(make_video: MakeVideo) -> None:
    spec = VideoSpec(time_base=Fraction(1, 1000), frame_durations=(33, 50, 17, 40), codec_options=SHORT_GOP)
    path = make_video(
        frames=21, time_base=spec.time_base, frame_durations=spec.frame_durations, codec_options=SHORT_GOP
    )
    times = video_frame_times(path, path)
    assert times is not None
    pts, time_base, _ = times
    written = frame_pts(spec)
    assert [p * time_base for p in pts] == [next(written) * spec.stream_time_base for _ in range(21)]
