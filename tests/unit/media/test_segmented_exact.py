"""The segmented path (prepare, every segment, merge) at quality 100 returns the input exactly: every frame's pixels, the
frame count, every timestamp (within one tick), the audio packets byte for byte, and the rotation."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from readback import frame_digests, packet_payloads

from facefusion_provider import worker
from facefusion_provider.media.probe import probe_video
from facefusion_provider.storage import local_path

from .conftest import BFRAMES_LONG_GOP, MakeVideo

NTSC = {"frame_rate": Fraction(30000, 1001), "time_base": Fraction(1, 30000)}
VFR = {"time_base": Fraction(1, 1000), "frame_durations": (33, 50, 17, 40, 66)}

CASES: dict[str, tuple[int, dict[str, Any], list[int]]] = {
    # name: (frames, video fields, segment sizes)
    "cfr30-aac-bframes": (40, {"audio_rate": 48000, "codec_options": BFRAMES_LONG_GOP}, [1, 7, 64, 1000]),
    "ntsc-aac": (30, {**NTSC, "audio_rate": 44100}, [7]),
    "vfr-bframes": (40, {**VFR, "codec_options": BFRAMES_LONG_GOP}, [7]),
    "rotation-90": (12, {"rotation": 90, "audio_rate": 48000}, [5]),
    "no-audio": (20, {}, [7]),
    "odd-size-yuv444": (4, {"width": 853, "height": 481, "pix_fmt": "yuv444p"}, [2]),
    "gop250-300-frames": (300, {"codec_options": BFRAMES_LONG_GOP, "audio_rate": 48000}, [64]),
    "one-frame": (1, {"audio_rate": 48000}, [1, 64]),
    "three-frames": (3, {}, [1, 7]),
}


def assert_exact_copy(target: str, output: str, start: int = 0, end: int | None = None) -> None:
    source_probe, output_probe = probe_video(target, target), probe_video(output, output)
    expected = frame_digests(target)[start:end]
    produced = frame_digests(output)
    assert len(produced) == len(expected) == output_probe.frame_count
    assert [d.md5 for d in produced] == [d.md5 for d in expected], "a frame's pixels changed"
    tick = Fraction(source_probe.time_base)
    shift = (source_probe.pts[start] - source_probe.pts[0]) * tick
    source_times = [Fraction(p) * tick - shift for p in source_probe.pts[start:end]]
    output_times = [Fraction(p) * Fraction(output_probe.time_base) for p in output_probe.pts]
    assert max(abs(a - b) for a, b in zip(source_times, output_times, strict=True)) <= tick
    assert output_probe.rotation == source_probe.rotation
    assert (output_probe.width, output_probe.height, output_probe.pix_fmt) == (
        source_probe.width,
        source_probe.height,
        source_probe.pix_fmt,
    )


@pytest.mark.parametrize("case", list(CASES))
def test_segmented_passthrough_is_exact(case: str, make_video: MakeVideo, tmp_path: Path) -> None:
    frames, fields, segment_sizes = CASES[case]
    target = make_video(frames=frames, **fields)
    for segment_size in segment_sizes:
        output = str(tmp_path / f"out-{segment_size}.mp4")
        result = worker.run(
            [],
            target,
            output,
            str(tmp_path / "work"),
            processors=[],
            output_video_quality=100,
            segment_size=segment_size,
        )
        assert result.frame_count == frames
        assert result.segment_count == max(
            1,
            len(range(0, frames, segment_size))
            - (1 if frames % segment_size and frames % segment_size < segment_size / 4 else 0),
        )
        assert_exact_copy(target, output)
        assert [p for _, p in packet_payloads(output)] == [p for _, p in packet_payloads(target)], "audio changed"
        assert local_path(result.preview_uri) is not None


def test_trimmed_output_holds_exactly_the_trimmed_frames_and_their_audio(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=60, audio_rate=48000, codec_options=BFRAMES_LONG_GOP)
    output = str(tmp_path / "trimmed.mp4")
    result = worker.run(
        [],
        target,
        output,
        str(tmp_path / "work"),
        processors=[],
        output_video_quality=100,
        segment_size=10,
        trim_frame_start=15,
        trim_frame_end=45,
    )
    assert result.frame_count == 30
    assert_exact_copy(target, output, 15, 45)
    audio_in, audio_out = packet_payloads(target), packet_payloads(output)
    # Audio packets that overlap frames 15-44 (0.5 s - 1.5 s), shifted to start with the video, bytes untouched.
    kept = [(t, p) for t, p in audio_in if t + 1024 / 48000 > 0.5 and t < 1.5]
    assert [p for _, p in audio_out] == [p for _, p in kept]
    assert abs(audio_out[0][0] - (kept[0][0] - 0.5)) < 1e-6
