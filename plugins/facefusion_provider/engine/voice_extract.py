"""The voice separated from music and noise before the lip syncer hears it, as FaceFusion 3.8.1's ``voice_extractor``
runs kim_vocal_1, kim_vocal_2 and uvr_mdxnet (MDX-Net models), in numpy.

The 48 kHz stereo voice goes in chunks of 240 x 1024 samples every 180 x 1024 (overlapping chunks averaged). A chunk,
scaled to -1..1, padded by 3840 samples at each end (and to a whole number of steps), is cut into pieces of the model's
length (255 x 1024 samples: its 256 frames) that overlap by 2 x 3840; each piece of each channel goes through a
short-time Fourier transform (symmetric Hann window of 7680, hop 1024, half a window of zeros at each end); the model
sees the real and imaginary parts of both channels, (N, 4, 3072, 256): the lowest 3072 of 3841 bins, the window's
sum undone; its answer goes back through the inverse transform (overlap-add divided by the squared window's sum) and
the pieces' trimmed middles are laid end to end again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

CHUNK_SAMPLES = 240 * 1024  # FaceFusion's voice_chunk_size
STEP_SAMPLES = 180 * 1024  # its voice_step_size
TRIM = 3840  # samples padded (and trimmed) at each end of a piece: half the Fourier window
FRAME = 7680  # the Fourier window
HOP = 1024  # 7680 - 6656
BINS = 3072  # of the window's 3841, the ones the model sees
Signal = npt.NDArray[np.floating[Any]]


def hann(size: int) -> npt.NDArray[np.float64]:
    """The symmetric Hann window (its last point equals its first)."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(size) / (size - 1))


def stft(rows: Signal, window: npt.NDArray[np.float64]) -> npt.NDArray[np.complex128]:
    """(rows, n) -> (rows, FRAME // 2 + 1, frames): half a window of zeros at each end, zeros to a whole hop, each
    frame windowed and transformed, scaled by 1 / the window's sum."""
    half = FRAME // 2
    padded = np.pad(rows, ((0, 0), (half, half)))
    padded = np.pad(padded, ((0, 0), (0, (-(padded.shape[1] - FRAME)) % HOP)))
    starts = np.arange(0, padded.shape[1] - FRAME + 1, HOP)
    frames = padded[:, starts[:, None] + np.arange(FRAME)] * window  # (rows, frames, FRAME)
    return np.asarray(np.fft.rfft(frames, axis=2) / window.sum()).transpose(0, 2, 1)


def istft(spectra: npt.NDArray[np.complexfloating[Any, Any]], window: npt.NDArray[np.float64]) -> Signal:
    """The inverse of ``stft``: each frame transformed back and windowed, overlapped and added, divided by the
    overlapping squared windows, the half windows of padding cut off."""
    frames = np.fft.irfft(spectra, n=FRAME, axis=1)[:, :FRAME, :] * window.sum()  # (rows, FRAME, frames)
    count = spectra.shape[2]
    length = FRAME + (count - 1) * HOP
    signal = np.zeros((spectra.shape[0], length))
    norm = np.zeros(length)
    for index in range(count):
        signal[:, index * HOP : index * HOP + FRAME] += frames[:, :, index] * window
        norm[index * HOP : index * HOP + FRAME] += window**2
    signal, norm = signal[:, FRAME // 2 : -(FRAME // 2)], norm[FRAME // 2 : -(FRAME // 2)]
    return np.asarray(signal / np.where(norm > 1e-10, norm, 1.0))


def extract_chunk(chunk: npt.NDArray[np.int16], run: Any, piece: int) -> npt.NDArray[np.float32]:
    """One chunk (n, 2) of 16-bit stereo through the model ``run`` (``input`` (N, 4, 3072, 256) -> the same), whose
    pieces are ``piece`` samples long: the voice, (n, 2), -1..1."""
    window = hann(FRAME)
    step = piece - 2 * TRIM
    pad = step - chunk.shape[0] % step  # FaceFusion pads a whole step where the chunk fits exactly
    audio = np.pad(chunk.T.astype(np.float32) / np.float32(np.iinfo(np.int16).max), ((0, 0), (TRIM, TRIM + pad)))
    rows = np.concatenate([audio[:, start : start + piece] for start in range(0, chunk.shape[0] + pad, step)])
    spectra = stft(rows, window)  # (2 x pieces, 3841, 256): piece 0's two channels, then piece 1's, ...
    parts = np.stack([spectra.real, spectra.imag], axis=1).reshape(-1, 4, TRIM + 1, spectra.shape[2])
    voice = run(np.ascontiguousarray(parts[:, :, :BINS] * window.sum(), np.float32))
    voice = np.pad(np.asarray(voice, np.float64), ((0, 0), (0, 0), (0, TRIM + 1 - BINS), (0, 0)))
    voice = voice.reshape(-1, 2, TRIM + 1, voice.shape[3])
    signal = istft(voice[:, 0] + 1j * voice[:, 1], window) / window.sum()
    middles = signal.reshape(-1, 2, piece)[:, :, TRIM:-TRIM].transpose(1, 0, 2).reshape(2, -1)
    return np.ascontiguousarray(middles[:, :-pad].T, np.float32)


def extract_voice(samples: npt.NDArray[np.int16], run: Any, frames: int) -> npt.NDArray[np.float32]:
    """The voice of ``samples`` (n, 2), 48 kHz 16-bit stereo, through a model of ``frames`` frames (its input's last
    dimension): chunks of 240 x 1024 samples every 180 x 1024, where they overlap the mean."""
    piece = (frames - 1) * HOP
    voice = np.zeros(samples.shape, np.float32)
    covered = np.zeros(samples.shape, np.float32)
    for start in range(0, samples.shape[0], STEP_SAMPLES):
        end = min(start + CHUNK_SAMPLES, samples.shape[0])
        voice[start:end] += extract_chunk(samples[start:end], run, piece)
        covered[start:end] += 1
    return voice / covered
