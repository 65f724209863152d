"""Probe: exact frame counts and timestamps from packets, exact frame rates, rotation, streams."""

from __future__ import annotations

from fractions import Fraction

from synth import VideoSpec, frame_pts

from facefusion_provider.media.probe import probe_video

from .conftest import BFRAMES_LONG_GOP, MakeVideo


def _expected_pts(spec: VideoSpec, count: int) -> list[int]:
    timestamps = frame_pts(spec)
    return [next(timestamps) for _ in range(count)]


def test_constant_30_fps_with_audio(make_video: MakeVideo) -> None:
    path = make_video(frames=45, audio_rate=48000, codec_options=BFRAMES_LONG_GOP)
    probe = probe_video(path, path)
    assert probe.frame_count == 45
    assert probe.frame_rate == "30/1"
    assert (probe.width, probe.height, probe.pix_fmt, probe.codec) == (64, 48, "yuv420p", "h264")
    time_base = Fraction(probe.time_base)
    assert [Fraction(p) * time_base for p in probe.pts] == [Fraction(i, 30) for i in range(45)]
    assert abs(probe.duration_seconds - 1.5) < 1e-9
    assert [(s.kind, s.codec) for s in probe.streams] == [("audio", "aac")]
    assert probe.rotation == 0


def test_ntsc_rate_stays_an_exact_fraction(make_video: MakeVideo) -> None:
    path = make_video(frames=20, frame_rate=Fraction(30000, 1001), time_base=Fraction(1, 30000))
    probe = probe_video(path, path)
    assert probe.frame_rate == "30000/1001"
    assert probe.time_base == "1/30000"
    assert probe.pts == [1001 * i for i in range(20)]


def test_variable_frame_rate_timestamps_are_exact(make_video: MakeVideo) -> None:
    fields = {"time_base": Fraction(1, 1000), "frame_durations": (33, 50, 17, 40)}
    path = make_video(frames=21, codec_options=BFRAMES_LONG_GOP, **fields)
    probe = probe_video(path, path)
    # The MP4 muxer may pick a finer time base; the timestamps must still be the written ones, exactly.
    seconds = [Fraction(p) * Fraction(probe.time_base) for p in probe.pts]
    assert seconds == [Fraction(p, 1000) for p in _expected_pts(VideoSpec(**fields), 21)]  # type: ignore[arg-type]


def test_rotation_is_read_from_the_display_matrix(make_video: MakeVideo) -> None:
    path = make_video(frames=3, rotation=90)
    assert probe_video(path, path).rotation == 90
    path = make_video(frames=3, rotation=270, name="other.mp4")
    assert probe_video(path, path).rotation == 270


def test_one_frame_video(make_video: MakeVideo) -> None:
    path = make_video(frames=1)
    probe = probe_video(path, path)
    assert probe.frame_count == 1
    assert probe.pts == [0]
