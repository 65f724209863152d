"""A voice as the lip syncer hears it: FaceFusion 3.8.1's mel spectrogram, in numpy, and each video frame's window of it.

The voice (48 kHz stereo, ``media.audio``) is resampled to 16 kHz by FFT, mixed to mono, peak-normalised and
pre-emphasised (``1 - 0.97 z^-1``); a short-time Fourier transform (800-sample periodic Hann window, hop 200, zero
padding of half a window at both ends, magnitudes scaled by the window's sum) goes through 80 triangular mel bands
(55-7600 Hz): 80 columns a second. A frame at ``t`` seconds from the first frame worked reads the 16 columns that end at
``floor(80 t + ceil(fps / 5) * 80 / fps)``, which is FaceFusion's frame ``n = t * fps`` exactly on a constant frame rate
and the frame's own time on a variable one; past the voice's end it reads silence. The window goes to a model as
``clip(log10(max(x, 1e-5)) * 1.6 + 3.2, -4, 4)``.
"""

from __future__ import annotations

import functools
import io
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from facefusion_provider.media.audio import VOICE_SAMPLE_RATE

MEL_SAMPLE_RATE = 16000
MEL_BANDS = 80
MEL_WINDOW = 800  # samples of one Fourier transform (50 ms)
MEL_HOP = 200  # samples between two columns: 80 columns a second
MEL_MIN_HERTZ, MEL_MAX_HERTZ = 55.0, 7600.0
MEL_COLUMNS_PER_SECOND = MEL_SAMPLE_RATE // MEL_HOP
FRAME_COLUMNS = 16  # mel columns one video frame reads (0.2 s)
PRE_EMPHASIS = 0.97
LOG_FLOOR = 1e-5
LOG_SCALE, LOG_OFFSET, LOG_CLIP = 1.6, 3.2, 4.0
Mel = npt.NDArray[np.float32]  # (80, columns): mel magnitudes, before the log
Sound = npt.NDArray[np.int16] | npt.NDArray[np.float32]  # (n, 2) at 48 kHz: as decoded, or the extracted voice


def mono_voice(samples: Sound) -> npt.NDArray[np.float64]:
    """48 kHz stereo to 16 kHz mono as FaceFusion prepares a voice: FFT resampling, the channels' mean, the peak scaled
    to 1 (a silent file stays silent), then pre-emphasis."""
    resampled = fft_resample(samples.astype(np.float64), round(len(samples) * MEL_SAMPLE_RATE / VOICE_SAMPLE_RATE))
    mono = resampled.mean(axis=1)
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak > 0:
        mono = mono / peak
    emphasised = np.asarray(mono, np.float64).copy()
    emphasised[1:] -= PRE_EMPHASIS * mono[:-1]
    return emphasised


def fft_resample(signal: npt.NDArray[np.float64], count: int) -> npt.NDArray[np.float64]:
    """``signal`` (samples on axis 0) resampled to ``count`` samples by its Fourier series: the spectrum cut (or padded)
    to the new length, an even cut's Nyquist bin split as the full spectrum would hold it, scaled by the length ratio."""
    length = len(signal)
    spectrum = np.fft.rfft(signal, axis=0)
    kept = min(count, length)
    resized = np.zeros((count // 2 + 1, *signal.shape[1:]), spectrum.dtype)
    resized[: kept // 2 + 1] = spectrum[: kept // 2 + 1]
    if kept % 2 == 0 and count != length:
        resized[kept // 2] *= 2.0 if count < length else 0.5
    return np.asarray(np.fft.irfft(resized, count, axis=0) * (count / length), np.float64)


def _triangle(width: int) -> npt.NDArray[np.float64]:
    """A triangular window of ``width`` points that never reaches zero (its ends are 1/width or 2/(width+1))."""
    half = np.arange(1, (width + 1) // 2 + 1, dtype=np.float64)
    if width % 2 == 0:
        rising = (2 * half - 1) / width
        return np.concatenate([rising, rising[::-1]])
    rising = 2 * half / (width + 1)
    return np.concatenate([rising, rising[-2::-1]])


def _hertz_to_mel(hertz: float) -> float:
    return 2595.0 * math.log10(1.0 + hertz / 700.0)


@functools.cache
def mel_filter_bank() -> npt.NDArray[np.float64]:
    """(80, 401): triangles between 82 points equally spaced in mel from 55 to 7600 Hz, on the 800-point FFT's bins."""
    edges = np.linspace(_hertz_to_mel(MEL_MIN_HERTZ), _hertz_to_mel(MEL_MAX_HERTZ), MEL_BANDS + 2)
    hertz = 700.0 * (10.0 ** (edges / 2595.0) - 1.0)
    bins = np.floor((MEL_WINDOW + 1) * hertz / MEL_SAMPLE_RATE).astype(np.int64)
    bank = np.zeros((MEL_BANDS, MEL_WINDOW // 2 + 1))
    for band in range(MEL_BANDS):
        start, end = int(bins[band]), int(bins[band + 1])
        bank[band, start:end] = _triangle(end - start)
    bank.flags.writeable = False
    return bank


def mel_spectrogram(voice: npt.NDArray[np.float64]) -> Mel:
    """The mel magnitudes of a 16 kHz voice, 80 columns a second (half a window of zeros padded at each end)."""
    half = MEL_WINDOW // 2
    padded = np.concatenate([np.zeros(half), voice, np.zeros(half)])
    padded = np.concatenate([padded, np.zeros((-(len(padded) - MEL_WINDOW)) % MEL_HOP)])
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(MEL_WINDOW) / MEL_WINDOW)  # periodic Hann
    starts = np.arange(0, len(padded) - MEL_WINDOW + 1, MEL_HOP)
    columns = []
    for first in range(0, len(starts), 4096):  # a few thousand columns at once: memory stays flat for long voices
        frames = padded[starts[first : first + 4096, None] + np.arange(MEL_WINDOW)] * window
        columns.append(mel_filter_bank() @ np.abs(np.fft.rfft(frames, axis=1) / window.sum()).T)
    return np.ascontiguousarray(np.concatenate(columns, axis=1), np.float32)


def voice_mel(samples: Sound) -> Mel:
    """A voice's mel spectrogram, from its 48 kHz stereo samples."""
    return mel_spectrogram(mono_voice(samples))


def window_end(seconds: Fraction, frame_rate: Fraction) -> int:
    """The mel column a frame ``seconds`` after the first frame worked reads up to (exclusive)."""
    step = Fraction(MEL_COLUMNS_PER_SECOND) / frame_rate
    lead = math.ceil(FRAME_COLUMNS / step) * step  # FaceFusion's first window ends at its first step past 16 columns
    return math.floor(MEL_COLUMNS_PER_SECOND * seconds + lead)


def frame_window(mel: Mel, seconds: Fraction, frame_rate: Fraction) -> Mel:
    """The (80, 16) mel window of a frame at ``seconds``; zeros (silence) past the voice's end or before its start."""
    end = window_end(seconds, frame_rate)
    if end < FRAME_COLUMNS or end >= mel.shape[1]:
        return np.zeros((MEL_BANDS, FRAME_COLUMNS), np.float32)
    return mel[:, end - FRAME_COLUMNS : end]


def model_window(window: Mel, scale: float = 1.0) -> npt.NDArray[np.float32]:
    """A mel window as a lip sync model's ``source``, (1, 1, 80, 16): the log scaling, clipped, times ``scale``
    (wav2lip's is twice ``lip_syncer_weight``)."""
    logged = np.log10(np.maximum(window, LOG_FLOOR)) * LOG_SCALE + LOG_OFFSET
    scaled = np.clip(logged, -LOG_CLIP, LOG_CLIP).astype(np.float32) * np.float32(scale)
    return np.ascontiguousarray(scaled[None, None], np.float32)


def pack_mel(mel: Mel) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(mel, np.float32), allow_pickle=False)
    return buffer.getvalue()


def unpack_mel(data: bytes) -> Mel:
    mel = np.load(io.BytesIO(data), allow_pickle=False)
    if mel.ndim != 2 or mel.shape[0] != MEL_BANDS or mel.dtype != np.float32:
        raise ValueError(f"a voice's mel spectrogram is (80, n) float32, not {mel.shape} {mel.dtype}")
    return np.asarray(mel, np.float32)
