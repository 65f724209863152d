"""Frame-exact decoding of [start, end) by seeking: same frames as a full decode, at a cost independent of the offset."""

from __future__ import annotations

import hashlib
from fractions import Fraction

import pytest
from readback import frame_digests

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.decode import DecodeStats, decode_frame, decode_frames
from facefusion_provider.media.probe import probe_video

from .conftest import BFRAMES_LONG_GOP, MakeVideo


def _digests(frames: object) -> list[tuple[int, str]]:
    return [(f.pts, hashlib.md5(f.to_ndarray().tobytes()).hexdigest()) for f in frames]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fields", "ranges"),
    [
        ({"codec_options": BFRAMES_LONG_GOP}, [(0, 1), (0, 7), (7, 14), (13, 60), (59, 60), (0, 60)]),
        (
            {"codec_options": BFRAMES_LONG_GOP, "time_base": Fraction(1, 1000), "frame_durations": (33, 50, 17, 40)},
            [(1, 8), (30, 31), (52, 60)],
        ),
        ({"frame_rate": Fraction(30000, 1001), "time_base": Fraction(1, 30000)}, [(5, 6), (20, 45)]),
    ],
    ids=["bframes-gop250", "vfr-bframes", "ntsc"],
)
def test_segment_frames_equal_the_full_decode(
    make_video: MakeVideo, fields: dict[str, object], ranges: list[tuple[int, int]]
) -> None:
    path = make_video(frames=60, **fields)
    probe = probe_video(path, path)
    full = [(d.pts, d.md5) for d in frame_digests(path)]
    assert len(full) == 60
    for start, end in ranges:
        assert _digests(decode_frames(path, probe, start, end, path)) == full[start:end], (start, end)


def test_seeking_decodes_from_the_nearest_keyframe_not_from_the_start(make_video: MakeVideo) -> None:
    gop = {"preset": "veryfast", "bf": "2", "g": "10", "keyint_min": "10", "sc_threshold": "0"}
    path = make_video(frames=120, codec_options=gop)
    probe = probe_video(path, path)
    costs = []
    for start in (3, 55, 113):
        stats = DecodeStats()
        frames = list(decode_frames(path, probe, start, start + 5, path, stats=stats))
        assert [f.pts for f in frames] == probe.pts[start : start + 5]
        costs.append(stats.decoded)
        assert stats.seeks == 1
    # At most one GOP of pre-roll (plus the decoder's reorder delay), wherever the segment lies.
    assert max(costs) <= 5 + 10 + 3, costs


def test_decode_frame_returns_one_frame(make_video: MakeVideo) -> None:
    path = make_video(frames=12, codec_options=BFRAMES_LONG_GOP)
    probe = probe_video(path, path)
    frame = decode_frame(path, probe, 11, path)
    assert frame.pts == probe.pts[11]
    assert hashlib.md5(frame.to_ndarray().tobytes()).hexdigest() == frame_digests(path)[11].md5


def test_a_range_outside_the_video_is_refused(make_video: MakeVideo) -> None:
    path = make_video(frames=3)
    probe = probe_video(path, path)
    with pytest.raises(ValueError, match=r"outside"):
        list(decode_frames(path, probe, 2, 4, path))


def test_a_frame_the_file_no_longer_holds_is_a_media_error(make_video: MakeVideo) -> None:
    path = make_video(frames=10)
    probe = probe_video(path, path)
    other = make_video(frames=5, name="shorter.mp4")  # the target was replaced by a shorter video after probing
    with pytest.raises(InvalidMediaError, match=r"shorter.mp4"):
        list(decode_frames(other, probe, 3, 10, "shorter.mp4"))


def test_open_gop_frames_before_a_keyframe_are_found_by_seeking_further_back(make_video: MakeVideo) -> None:
    # With open GOPs, the B-frames decoded right after a keyframe are shown before it and need the previous GOP:
    # seeking to the keyframe cannot yield them, so the decoder seeks again, further back.
    open_gop = {"preset": "veryfast", "bf": "3", "x264-params": "open-gop=1:keyint=12:min-keyint=12:scenecut=0"}
    path = make_video(frames=36, codec_options=open_gop)
    probe = probe_video(path, path)
    full = [(d.pts, d.md5) for d in frame_digests(path)]
    extra_seeks = []
    for start in range(36):
        stats = DecodeStats()
        assert (
            _digests(decode_frames(path, probe, start, min(36, start + 3), path, stats=stats))
            == full[start : start + 3]
        )
        if stats.seeks > 1:
            extra_seeks.append(start)
    assert extra_seeks == [9, 10, 11, 21, 22, 23]  # the leading B-frames of the GOPs at 12 and 24
