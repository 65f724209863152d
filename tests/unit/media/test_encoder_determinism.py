"""The encoder's output depends on the frames and the options only: not on how many CPUs the process may use, nor on what
it had in memory. And an encoder this machine cannot open is a bad option, named, before any frame is encoded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from synth import pattern_frames

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.media import encode
from facefusion_provider.media.encode import (
    ALPHA_ENCODINGS,
    EncoderSettings,
    VideoEncoder,
    check_encoder,
    codec_options,
    judged_here,
)
from facefusion_provider.media.images import rgb_frame, rgba_frame

WIDTH, HEIGHT, FRAMES = 176, 144, 12
RATE = Fraction(25)
# A child process that encodes the frames of an .npy file on the CPUs given, as a segment is encoded, and prints the
# md5 of every packet.
ENCODE_IN_CHILD = """
import hashlib, json, os, sys
from fractions import Fraction
import av, numpy as np
from facefusion_provider.media.encode import EncoderSettings, VideoEncoder, codec_options
from facefusion_provider.media.images import rgb_frame
frames, path, cpus = np.load(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
os.sched_setaffinity(0, cpus)
rate = Fraction(25)
settings = EncoderSettings("libx264", "yuv420p", codec_options("libx264", 80, "veryfast"))
size = {"width": frames.shape[2], "height": frames.shape[1], "frame_rate": rate, "time_base": 1 / rate}
with VideoEncoder(path, settings, **size) as encoder:
    for index, image in enumerate(frames):
        encoder.encode(rgb_frame(image), index)
    encoder.close()
with av.open(path) as container:
    print(json.dumps([hashlib.md5(bytes(packet)).hexdigest() for packet in container.demux(video=0) if packet.size]))
"""


def _encode(path: Path, codec: str) -> bytes:
    """The pattern frames encoded as a segment is; "<codec> alpha": as a transparent background's segments are, with a
    horizontal ramp of alpha."""
    codec, _, alpha = codec.partition(" ")
    settings = EncoderSettings(codec, "yuv420p", codec_options(codec, 80, "veryfast"))
    if alpha:
        encoding = ALPHA_ENCODINGS[codec]
        settings = EncoderSettings(
            codec, encoding.pix_fmt, {**settings.options, **encoding.options}, encoding.container
        )
    ramp = np.broadcast_to(np.linspace(0, 255, WIDTH).astype(np.uint8), (HEIGHT, WIDTH))
    with VideoEncoder(str(path), settings, width=WIDTH, height=HEIGHT, frame_rate=RATE, time_base=1 / RATE) as encoder:
        for index, image in enumerate(pattern_frames(FRAMES, WIDTH, HEIGHT)):
            encoder.encode(rgba_frame(np.dstack((image, ramp))) if alpha else rgb_frame(image), index)
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


@pytest.mark.parametrize("codec", ["libx264", "libx265", "libvpx-vp9", "prores_ks alpha", "libvpx-vp9 alpha"])
def test_the_bitstream_does_not_depend_on_the_cpus_the_encoder_may_use(tmp_path: Path, codec: str) -> None:
    every_cpu = _encode(tmp_path / "every-cpu.mp4", codec)
    assert _encode(tmp_path / "again.mp4", codec) == every_cpu
    for attempt in range(3):  # x264 once gave other bytes from encode to encode (AVX-512 macroblock tree, below)
        assert _encode_on_one_cpu(tmp_path / f"one-cpu-{attempt}.mp4", codec) == every_cpu, attempt


def _packets_in_child(folder: Path, frames: Path, cpus: set[int], leftover_byte: int) -> list[str]:
    """The packets' md5s of the child's encode; glibc fills the memory it hands out with ``leftover_byte`` (0: as left)."""
    environment = {**os.environ, "MALLOC_PERTURB_": str(leftover_byte)}
    argv = [
        sys.executable,
        "-c",
        ENCODE_IN_CHILD,
        str(frames),
        str(folder / f"{leftover_byte}.mp4"),
        json.dumps(sorted(cpus)),
    ]
    child = subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=120, check=True)
    packets: list[str] = json.loads(child.stdout)
    return packets


def test_x264_bytes_depend_neither_on_the_cpus_nor_on_what_the_process_had_in_memory(tmp_path: Path) -> None:
    # 176 pixels are 11 macroblocks, no multiple of 8: x264's AVX-512 macroblock tree read past a row's end there, and
    # the same frames gave other packets when other bytes were left in memory (on a CPU with AVX-512).
    frames = tmp_path / "frames.npy"
    np.save(frames, np.stack(list(pattern_frames(FRAMES, WIDTH, HEIGHT))))
    every_cpu = os.sched_getaffinity(0)
    reference = _packets_in_child(tmp_path, frames, every_cpu, 85)
    assert len(reference) == FRAMES
    assert _packets_in_child(tmp_path, frames, {min(every_cpu)}, 170) == reference
    assert _packets_in_child(tmp_path, frames, {min(every_cpu)}, 0) == reference


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
