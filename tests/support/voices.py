"""Voices for the lip sync tests, written with PyAV: silence, then loud noise (seeded), at a chosen rate and codec;
and the carphone clip (a face) at a variable frame rate."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import av.audio.stream
import numpy as np
import numpy.typing as npt
from synth import VideoSpec, write_video

from facefusion_provider.media.audio import read_voice_samples

LOUD_LEVEL = 8000.0  # the noise's standard deviation, in 16-bit levels
CODEC_FORMATS = {"pcm_s16le": "s16", "flac": "s16", "aac": "fltp", "libmp3lame": "s16p", "libopus": "flt"}


def voice_samples(silent_seconds: float, loud_seconds: float, rate: int = 48000) -> npt.NDArray[np.int16]:
    """Mono 16-bit samples: ``silent_seconds`` of silence, then ``loud_seconds`` of white noise."""
    silent, loud = round(silent_seconds * rate), round(loud_seconds * rate)
    noise = np.random.default_rng(40).normal(0.0, LOUD_LEVEL, loud)
    return np.concatenate([np.zeros(silent), np.clip(noise, -32768, 32767)]).astype(np.int16)


def tone_samples(seconds: float, rate: int = 48000) -> npt.NDArray[np.int16]:
    """Mono 16-bit samples of three steady tones (what a lossy codec keeps closely, unlike noise)."""
    times = np.arange(round(seconds * rate)) / rate
    mix = sum(np.sin(2 * np.pi * hertz * times) for hertz in (220.0, 660.0, 1250.0))
    return np.asarray(mix * 6000.0, np.int16)


def write_voice(
    path: Path, silent_seconds: float, loud_seconds: float, *, rate: int = 48000, codec: str = "pcm_s16le"
) -> Path:
    """The voice as a sound file of ``codec`` (WAV for PCM; the container follows the extension)."""
    return write_samples(path, voice_samples(silent_seconds, loud_seconds, rate), rate=rate, codec=codec)


def write_samples(path: Path, samples: npt.NDArray[np.int16], *, rate: int = 48000, codec: str = "pcm_s16le") -> Path:
    """Mono 16-bit ``samples`` as a sound file of ``codec``."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        assert isinstance(stream, av.audio.stream.AudioStream)
        stream.layout = "mono"
        resampler = av.AudioResampler(format=CODEC_FORMATS[codec], layout="mono", rate=rate)
        step = 1024
        for first in range(0, len(samples), step):
            frame = av.AudioFrame.from_ndarray(samples[None, first : first + step], format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = rate, first, Fraction(1, rate)
            for resampled in resampler.resample(frame):
                container.mux(stream.encode(resampled))
        for resampled in resampler.resample(None):
            container.mux(stream.encode(resampled))
        container.mux(stream.encode(None))
    return path


def decoded_voice(path: str | Path) -> npt.NDArray[np.float64]:
    """A file's first audio stream as 48 kHz mono samples in 16-bit levels (the channels' mean)."""
    return np.asarray(read_voice_samples(str(path), str(path)).astype(np.float64).mean(axis=1), np.float64)


def carphone_frames(path: str | Path) -> list[npt.NDArray[np.uint8]]:
    with av.open(str(path)) as container:
        return [np.asarray(frame.to_ndarray(format="rgb24"), np.uint8) for frame in container.decode(video=0)]


def write_vfr(path: Path, frames: list[npt.NDArray[np.uint8]], durations: tuple[int, ...]) -> Path:
    """``frames`` at a variable frame rate: each lasts the next of ``durations`` (milliseconds, in turn)."""
    height, width = frames[0].shape[:2]
    spec = VideoSpec(width=width, height=height, time_base=Fraction(1, 1000), frame_durations=durations)
    write_video(str(path), spec, iter(frames))
    return path
