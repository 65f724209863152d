"""Merge: remux without re-encoding, valid decode timestamps across segment joins, other containers, and refusals."""

from __future__ import annotations

import itertools
import logging
from fractions import Fraction
from pathlib import Path

import av
import pytest
from readback import frame_digests, packet_payloads

from facefusion_provider import worker
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.media.probe import probe_video
from facefusion_provider.output.remux import SegmentFile, merge_segments

from .conftest import MakeVideo


def test_joins_stay_valid_when_the_next_segment_reorder_delay_reaches_back(
    make_video: MakeVideo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Short frames before each join and long ones after: B-frame segments would start decoding before the previous
    # segment ends. The merge must keep every pts exact and the decode timestamps strictly increasing.
    bframes = {"preset": "veryfast", "crf": "20", "bf": "3"}
    target = make_video(
        frames=42, time_base=Fraction(1, 1000), frame_durations=(10,) * 7 + (100,) * 7, codec_options=bframes
    )
    output = tmp_path / "out.mp4"
    with caplog.at_level(logging.INFO):
        worker.run(
            [], target, str(output), str(tmp_path / "work"), processors=[], output_video_quality=80, segment_size=7
        )
    with av.open(str(output)) as container:
        packets = [(p.pts or 0, p.dts or 0) for p in container.demux(video=0) if p.size]
    assert any(pts != dts for pts, dts in packets), "the segments were meant to have B-frames"
    assert all(dts <= pts for pts, dts in packets)
    assert all(a[1] < b[1] for a, b in itertools.pairwise(packets))
    assert probe_video(str(output), "out").pts == probe_video(target, "in").pts
    assert len(frame_digests(str(output))) == 42
    # An MP4 is joined from the indexes where it can; these joins would overlap in decode time, so it was remuxed.
    assert "by remuxing" in caplog.text and "a segment would start decoding before the previous one ends" in caplog.text


@pytest.mark.parametrize(("extension", "encoder"), [(".mkv", "libx264"), (".mov", "libx264"), (".mkv", "libvpx-vp9")])
def test_other_containers_and_encoders_keep_frames_and_audio(
    extension: str, encoder: str, make_video: MakeVideo, tmp_path: Path
) -> None:
    target = make_video(frames=10, audio_rate=48000)
    output = str(tmp_path / f"out{extension}")
    worker.run(
        [],
        target,
        output,
        str(tmp_path / "work"),
        processors=[],
        output_video_quality=100,
        segment_size=4,
        output_video_encoder=encoder,
    )
    assert [d.md5 for d in frame_digests(output)] == [d.md5 for d in frame_digests(target)]
    assert [p for _, p in packet_payloads(output)] == [p for _, p in packet_payloads(target)]


def test_a_stream_the_output_format_cannot_hold_is_left_out_with_a_warning(
    make_video: MakeVideo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = make_video(frames=6, audio_rate=48000)
    output = str(tmp_path / "out.webm")
    with caplog.at_level(logging.WARNING):
        worker.run([], target, output, str(tmp_path / "work"), processors=[], output_video_encoder="libvpx-vp9")
    assert "stream 1 (audio aac) is not copied" in caplog.text
    assert len(frame_digests(output)) == 6 and packet_payloads(output) == []


def test_segments_must_be_contiguous(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=6)
    probe = probe_video(target, target)
    with pytest.raises(InvalidWorkError, match="one ends at frame 3, the next starts at 4"):
        merge_segments(
            [SegmentFile(target, 0, 3), SegmentFile(target, 4, 6)], target, probe, str(tmp_path / "o.mp4"), name="t"
        )
    with pytest.raises(InvalidWorkError, match="no segments"):
        merge_segments([], target, probe, str(tmp_path / "o.mp4"), name="t")


def test_a_segment_with_too_few_frames_is_refused(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=8)
    short = make_video(frames=3, name="short.mp4")
    probe = probe_video(target, target)
    with pytest.raises(InvalidWorkError, match=r"short\.mp4: holds 3 frames with other timestamps than frames 0-7"):
        merge_segments([SegmentFile(short, 0, 8)], target, probe, str(tmp_path / "o.mp4"), name="t")


def test_subtitles_are_copied_once(tmp_path: Path) -> None:
    import struct

    import numpy as np

    from facefusion_provider.media.images import rgb_frame

    target = str(tmp_path / "subtitled.mp4")
    with av.open(target, "w") as container:
        video = container.add_stream("libx264", rate=30)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        text = container.add_mux_stream("mov_text")
        text.time_base = Fraction(1, 1000)
        for number in range(30):
            frame = rgb_frame(np.full((48, 64, 3), number * 8, np.uint8)).reformat(format="yuv420p")
            frame.pts = number
            container.mux(video.encode(frame))
            if number % 10 == 0:
                line = f"line {number}".encode()
                cue = av.Packet(struct.pack(">H", len(line)) + line)
                cue.stream, cue.pts, cue.dts, cue.duration = text, number * 1000 // 30, number * 1000 // 30, 300
                cue.time_base = Fraction(1, 1000)
                container.mux(cue)
        container.mux(video.encode(None))
    output = str(tmp_path / "out.mp4")
    worker.run([], target, output, str(tmp_path / "work"), processors=[], segment_size=10)
    assert packet_payloads(output, "subtitle") == packet_payloads(target, "subtitle")
    assert [p for _, p in packet_payloads(output, "subtitle") if len(p) > 2] == [
        b"\x00\x06line 0",
        b"\x00\x07line 10",
        b"\x00\x07line 20",
    ]


def _two_cameras(path: Path, frames: int = 30) -> None:
    """An MKV with two video streams: the one swapped (64x48), then a second camera (32x24, a keyframe every 8)."""
    import numpy as np

    from facefusion_provider.media.images import rgb_frame

    with av.open(str(path), "w") as container:
        main = container.add_stream("libx264", rate=30)
        main.width, main.height, main.pix_fmt = 64, 48, "yuv420p"
        second = container.add_stream("libx264", rate=30, options={"g": "8", "keyint_min": "8", "sc_threshold": "0"})
        second.width, second.height, second.pix_fmt = 32, 24, "yuv420p"
        for number in range(frames):
            for stream in (main, second):
                frame = rgb_frame(np.full((stream.height, stream.width, 3), number * 8, np.uint8))
                frame = frame.reformat(format="yuv420p")
                frame.pts = number
                container.mux(stream.encode(frame))
        for stream in (main, second):
            container.mux(stream.encode(None))


def _second_video(path: str) -> tuple[list[bytes], list[bool], int]:
    """The second video stream's packets (bytes, keyframe flags) and how many frames of it decode."""
    with av.open(path) as container:
        streams = container.streams.video
        assert len(streams) == 2, f"{path}: {len(streams)} video streams"
        packets = [packet for packet in container.demux(streams[1]) if packet.size]
        payloads, keys = [bytes(packet) for packet in packets], [packet.is_keyframe for packet in packets]
    with av.open(path) as container:
        stream = container.streams.video[1]
        assert (stream.codec_context.width, stream.codec_context.height) == (32, 24)
        decoded = sum(1 for _ in container.decode(stream))
    return payloads, keys, decoded


@pytest.mark.parametrize("extension", [".mkv", ".mp4"])
def test_a_second_video_stream_is_kept_untouched(extension: str, tmp_path: Path) -> None:
    target = tmp_path / "two-cameras.mkv"
    _two_cameras(target)
    output = str(tmp_path / f"out{extension}")
    worker.run([], str(target), output, str(tmp_path / "work"), processors=[], segment_size=10)
    assert len(frame_digests(output)) == 30
    kept, _, decoded = _second_video(output)
    original, _, _ = _second_video(str(target))
    assert kept == original and decoded == 30


def test_a_trimmed_output_keeps_the_second_video_from_its_first_keyframe_inside(tmp_path: Path) -> None:
    target = tmp_path / "two-cameras.mkv"
    _two_cameras(target)
    output = str(tmp_path / "out.mkv")
    worker.run([], str(target), output, str(tmp_path / "work"), processors=[], trim_frame_start=10)
    assert len(frame_digests(output)) == 20
    kept, keys, decoded = _second_video(output)
    original, original_keys, _ = _second_video(str(target))
    assert keys[0] and kept == original[16:]  # frames 10-15 follow the keyframe at 8: they would not decode
    assert original_keys[16] and decoded == len(kept) == 14


def test_the_remote_range_plan_fetches_the_second_video_and_not_the_swapped_one(tmp_path: Path) -> None:
    from facefusion_provider.media.mp4index import first_video_track, read_movie_index
    from facefusion_provider.media.mp4ranges import other_sample_ranges

    target = tmp_path / "two-cameras.mkv"
    _two_cameras(target)
    output = str(tmp_path / "out.mp4")  # an MP4 with both video tracks, as a remote target would be
    worker.run([], str(target), output, str(tmp_path / "work"), processors=[], segment_size=10)
    movie = read_movie_index(output) or pytest.fail("no moov")
    swapped = first_video_track(movie) or pytest.fail("no video")
    (second,) = [track for track in movie.tracks if track is not swapped]
    ranges = other_sample_ranges(movie, gap_bytes=0, bytes_per_get=1)  # every gap kept open

    def fetched(offset: int, size: int) -> bool:
        return any(start <= offset and offset + size <= end for start, end in ranges)

    assert all(fetched(int(o), int(s)) for o, s in zip(second.offsets, second.sizes, strict=True))
    assert not any(fetched(int(o), int(s)) for o, s in zip(swapped.offsets, swapped.sizes, strict=True))
