"""A voice source read whole: decoded by PyAV (WAV, MP3, AAC, Opus, FLAC, ...) and resampled by FFmpeg's own
resampler to what FaceFusion reads its voices as (48 kHz, 16-bit, stereo), so the mel spectrogram starts from the same
samples."""

from __future__ import annotations

import av
import av.audio.stream
import numpy as np
import numpy.typing as npt

from facefusion_provider.exceptions import InvalidMediaError

VOICE_SAMPLE_RATE = 48000
VOICE_LAYOUT = "stereo"
Samples = npt.NDArray[np.int16]  # (n, 2): interleaved stereo, 16-bit


def read_voice_samples(path: str, name: str) -> Samples:
    """Every sample of the first audio stream of ``path`` at 48 kHz, 16-bit stereo; ``name`` (what the user gave)
    appears in every error: a file that does not open, has no audio, or holds no sound at all."""
    try:
        with av.open(path, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise InvalidMediaError(f"{name}: has no audio stream; a voice source must be a sound file")
            stream: av.audio.stream.AudioStream = container.streams.audio[0]
            resampler = av.AudioResampler(format="s16", layout=VOICE_LAYOUT, rate=VOICE_SAMPLE_RATE)
            chunks = [
                resampled.to_ndarray().reshape(-1, 2)
                for frame in container.decode(stream)
                for resampled in resampler.resample(frame)
            ]
            chunks += [resampled.to_ndarray().reshape(-1, 2) for resampled in resampler.resample(None)]
    except av.FFmpegError as error:
        reason = str(getattr(error, "strerror", None) or error).strip()
        raise InvalidMediaError(
            f"{name}: not a readable audio file ({reason}); it may be truncated or corrupt"
        ) from None
    samples = np.concatenate(chunks) if chunks else np.zeros((0, 2), np.int16)
    if not samples.size:
        raise InvalidMediaError(f"{name}: holds no sound (no audio samples decode)")
    return np.ascontiguousarray(samples, np.int16)
