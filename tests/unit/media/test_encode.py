"""Encoder settings: FaceFusion's quality scale, lossless at 100, the input's pixel format kept where possible."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from readback import frame_digests

from facefusion_provider.media.encode import VideoEncoder, codec_options, encoder_settings, output_pix_fmt
from facefusion_provider.media.probe import probe_video
from facefusion_provider.options import Options

from .conftest import MakeVideo


@pytest.mark.parametrize(
    ("codec", "quality", "expected"),
    [
        ("libx264", 100, {"preset": "veryfast", "qp": "0"}),
        ("libx264", 80, {"preset": "veryfast", "crf": "10"}),
        ("libx264", 0, {"preset": "veryfast", "crf": "51"}),
        ("libx265", 100, {"preset": "veryfast", "x265-params": "log-level=error:lossless=1"}),
        ("libx265", 50, {"preset": "veryfast", "x265-params": "log-level=error", "crf": "26"}),
    ],
)
def test_quality_maps_onto_the_encoder_scale(codec: str, quality: int, expected: dict[str, str]) -> None:
    assert codec_options(codec, quality, "veryfast") == expected


def test_vp9_and_nvenc_settings() -> None:
    assert codec_options("libvpx-vp9", 100, "veryslow")["lossless"] == "1"
    assert codec_options("libvpx-vp9", 0, "ultrafast")["crf"] == "63"
    assert codec_options("h264_nvenc", 80, "ultrafast") == {"preset": "p1", "rc": "vbr", "cq": "10", "b": "0"}
    assert codec_options("hevc_nvenc", 100, "veryslow") == {"preset": "p7", "tune": "lossless"}


def test_pixel_format_is_kept_when_the_encoder_takes_it() -> None:
    assert output_pix_fmt("libx264", "yuv444p", 853, 481) == "yuv444p"
    assert output_pix_fmt("libx264", "yuv420p10le", 64, 48) == "yuv420p10le"
    assert output_pix_fmt("libx264", "rgb24", 64, 48) == "yuv420p"
    assert output_pix_fmt("libx264", "bgra", 853, 481) == "yuv444p"  # 4:2:0 needs even sizes


def test_encoder_keeps_each_frame_timestamp_relative_to_the_offset(make_video: MakeVideo, tmp_path: Path) -> None:
    import av

    source = make_video(frames=8, time_base=Fraction(1, 1000), frame_durations=(33, 50))
    probe = probe_video(source, source)
    settings = encoder_settings(Options(processors=[], output_video_quality=100), probe)
    output = str(tmp_path / "segment.mp4")
    with av.open(source) as container:
        frames = list(container.decode(video=0))
    with VideoEncoder(
        output,
        settings,
        width=probe.width,
        height=probe.height,
        frame_rate=Fraction(probe.frame_rate),
        time_base=Fraction(probe.time_base),
        pts_offset=probe.pts[3],
    ) as encoder:
        for frame in frames[3:]:
            assert frame.pts is not None
            encoder.encode(frame, frame.pts)
        assert encoder.close() == 5
    written = frame_digests(output)
    time_base = Fraction(probe.time_base)
    assert [Fraction(d.seconds).limit_denominator(10**6) for d in written] == [
        (p - probe.pts[3]) * time_base for p in probe.pts[3:]
    ]
    assert [d.md5 for d in written] == [d.md5 for d in frame_digests(source)[3:]]
