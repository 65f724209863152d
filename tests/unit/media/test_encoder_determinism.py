"""The encoder's output depends on the frames and the options only: not on how many CPUs the process may use. And an
encoder this machine cannot open is a bad option, named, before any frame is encoded."""

from __future__ import annotations

import os
import threading
from fractions import Fraction
from pathlib import Path

import pytest
from synth import pattern_frames

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.media import encode
from facefusion_provider.media.encode import EncoderSettings, VideoEncoder, check_encoder, codec_options, judged_here
from facefusion_provider.media.images import rgb_frame

WIDTH, HEIGHT, FRAMES = 176, 144, 12
RATE = Fraction(25)


def _encode(path: Path, codec: str) -> bytes:
    settings = EncoderSettings(codec, "yuv420p", codec_options(codec, 80, "veryfast"))
    with VideoEncoder(str(path), settings, width=WIDTH, height=HEIGHT, frame_rate=RATE, time_base=1 / RATE) as encoder:
        for index, image in enumerate(pattern_frames(FRAMES, WIDTH, HEIGHT)):
            encoder.encode(rgb_frame(image), index)
        encoder.close()
    return path.read_bytes()


def _encode_on_one_cpu(path: Path, codec: str) -> bytes:
    """Encoded by a thread that may use one CPU: FFmpeg's and x264's "auto" thread counts would say one."""
    encoded: list[bytes] = []

    def pinned() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # this thread and the encoder threads it starts
        encoded.append(_encode(path, codec))

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()
    assert encoded, "the pinned encode failed"
    return encoded[0]


@pytest.mark.parametrize("codec", ["libx264", "libx265", "libvpx-vp9"])
def test_the_bitstream_does_not_depend_on_the_cpus_the_encoder_may_use(tmp_path: Path, codec: str) -> None:
    every_cpu = _encode(tmp_path / "every-cpu.mp4", codec)
    assert _encode(tmp_path / "again.mp4", codec) == every_cpu
    for attempt in range(3):  # starved of CPU, x264's threaded macroblock tree used to differ from encode to encode
        assert _encode_on_one_cpu(tmp_path / f"one-cpu-{attempt}.mp4", codec) == every_cpu, attempt


def test_an_encoder_that_cannot_open_here_is_refused_naming_the_option_and_why() -> None:
    # No machine of this project has NVENC (the H100/H200 GPU nodes have none), so the refusal is real here.
    settings = EncoderSettings("h264_nvenc", "yuv420p", codec_options("h264_nvenc", 80, "veryfast"))
    with pytest.raises(InvalidOptionError) as refused:
        check_encoder(settings, WIDTH, HEIGHT, RATE)
    message = str(refused.value)
    assert message.startswith("output_video_encoder: h264_nvenc cannot be opened on this machine")
    assert "NVENC" in message and "use libx264" in message
    assert not refused.value.retryable


@pytest.mark.parametrize("codec", ["libx264", "libx265", "libvpx-vp9"])
def test_software_encoders_open(codec: str) -> None:
    check_encoder(EncoderSettings(codec, "yuv420p", codec_options(codec, 100, "medium")), WIDTH, HEIGHT, RATE)


def test_nvenc_is_judged_at_prepare_except_by_a_pod_without_a_gpu_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert judged_here("libx264", pod) and judged_here("h264_nvenc", {})  # software anywhere; NVENC off Kubernetes
    monkeypatch.setattr(encode, "_has_nvidia_driver", lambda: False)
    assert not judged_here("h264_nvenc", pod)  # a CPU pod off the GPU pool: the spans judge it
    monkeypatch.setattr(encode, "_has_nvidia_driver", lambda: True)
    assert judged_here("h264_nvenc", pod)


def test_a_segment_encoder_that_cannot_open_is_a_bad_option_not_a_crash(tmp_path: Path) -> None:
    settings = EncoderSettings("hevc_nvenc", "yuv420p", codec_options("hevc_nvenc", 80, "veryfast"))
    with pytest.raises(InvalidOptionError, match=r"^output_video_encoder: hevc_nvenc cannot be opened"):
        VideoEncoder(
            str(tmp_path / "segment.mp4"), settings, width=WIDTH, height=HEIGHT, frame_rate=RATE, time_base=1 / RATE
        )
    assert not (tmp_path / "segment.mp4").exists()
