"""Synthetic media for the demo, the benchmark and the tests: videos with known frames, timestamps and audio."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import av
import av.audio.stream
import av.video.stream
import numpy as np

from facefusion_provider.media.images import RgbImage, rgb_frame

AUDIO_FRAME_SAMPLES = 1024


@dataclass(frozen=True)
class VideoSpec:
    """How to write a synthetic video. ``frame_durations`` (in ``time_base`` ticks) makes the frame rate variable."""

    width: int = 64
    height: int = 48
    frame_rate: Fraction = Fraction(30)
    time_base: Fraction | None = None
    frame_durations: tuple[int, ...] | None = None
    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    codec_options: dict[str, str] = field(default_factory=lambda: {"preset": "ultrafast", "crf": "18"})
    rotation: int = 0
    audio_rate: int | None = None  # samples per second of an AAC tone track; None: no audio
    container_format: str | None = None

    @property
    def stream_time_base(self) -> Fraction:
        return self.time_base or 1 / self.frame_rate


def pattern_frames(count: int, width: int, height: int, seed: int = 0) -> Iterator[RgbImage]:
    """Distinct frames: a moving gradient (compressible, like video) with per-frame noise (no two frames alike)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    for index in range(count):
        base = (x * 3 + y * 2 + index * 5) % 256
        image = np.stack([base, (base + 85) % 256, (255 - base) % 256], axis=-1).astype(np.int16)
        image += rng.integers(-12, 13, size=image.shape, dtype=np.int16)
        yield np.clip(image, 0, 255).astype(np.uint8)


def frame_pts(spec: VideoSpec) -> Iterator[int]:
    """The pts of each frame in turn, in ``spec.stream_time_base`` units."""
    now, index = 0, 0
    ticks = 1 / (spec.frame_rate * spec.stream_time_base)
    while True:
        if spec.frame_durations is None:
            yield round(index * ticks)
        else:
            yield now
            now += spec.frame_durations[index % len(spec.frame_durations)]
        index += 1


def write_video(path: str, spec: VideoSpec, frames: Iterable[RgbImage]) -> int:
    """Encode ``frames`` into ``path`` (plus a tone track when ``spec.audio_rate`` is set); returns the frame count."""
    try:
        return _write_video(path, spec, frames)
    finally:
        # SVT-AV1, run as root, leaves the calling thread on SCHED_FIFO 99: every thread and child process started
        # after it would inherit a real-time policy, and one busy loop among them starves the machine.
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _write_video(path: str, spec: VideoSpec, frames: Iterable[RgbImage]) -> int:
    with av.open(path, mode="w", format=spec.container_format) as container:
        video = container.add_stream(spec.codec, rate=spec.frame_rate, options=dict(spec.codec_options))
        assert isinstance(video, av.video.stream.VideoStream)
        video.pix_fmt = spec.pix_fmt
        video.codec_context.time_base = spec.stream_time_base
        if spec.rotation:
            video.set_display_rotation(spec.rotation)
        tone = _Tone(container, spec.audio_rate) if spec.audio_rate else None
        count = 0
        timestamps = frame_pts(spec)
        pts = next(timestamps)
        for count, image in enumerate(frames, start=1):
            if count == 1:
                video.height, video.width = image.shape[:2]
            frame = rgb_frame(image).reformat(format=spec.pix_fmt)
            frame.pts, frame.time_base = pts, spec.stream_time_base
            container.mux(video.encode(frame))
            pts = next(timestamps)
            if tone is not None:
                tone.write_until(float(pts * spec.stream_time_base))
        if count == 0:
            raise ValueError("a video needs at least one frame")
        container.mux(video.encode(None))
        if tone is not None:
            tone.finish()
    return count


class _Tone:
    """A mono AAC track: a 440 Hz tone that warbles once a second, written alongside the video."""

    def __init__(self, container: av.container.OutputContainer, rate: int) -> None:
        stream = container.add_stream("aac", rate=rate)
        assert isinstance(stream, av.audio.stream.AudioStream)
        stream.layout = "mono"
        self._container, self._stream, self._rate, self._written = container, stream, rate, 0

    def write_until(self, seconds: float) -> None:
        total = round(seconds * self._rate)
        while self._written < total:
            count = min(AUDIO_FRAME_SAMPLES, total - self._written)
            t = np.arange(self._written, self._written + count) / self._rate
            wave = 0.3 * np.sin(2 * math.pi * (440 + 60 * np.sin(2 * math.pi * t)) * t)
            frame = av.AudioFrame.from_ndarray(wave.astype(np.float32)[None, :], format="fltp", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = self._rate, self._written, Fraction(1, self._rate)
            self._container.mux(self._stream.encode(frame))
            self._written += count

    def finish(self) -> None:
        self._container.mux(self._stream.encode(None))
