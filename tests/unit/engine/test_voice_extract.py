"""Voice extraction (``engine.voice_extract``) as FaceFusion 3.8.1 runs its MDX-Net models: its transforms are scipy's
(stft and istft with the same window, hop and padding), a model that keeps everything gives the sound back (scaled to
-1..1) across the overlapping chunks of a long voice, one that keeps only low frequencies leaves only them, and the
model sees (N, 4, 3072, 256): both channels' real and imaginary parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.signal
from standins_lip_sync import voice_extractor_standin

from facefusion_provider.engine.processors.lip_syncer import voice_mel_of
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.voice import mel_filter_bank
from facefusion_provider.engine.voice_extract import CHUNK_SAMPLES, FRAME, HOP, extract_voice, hann, istft, stft
from facefusion_provider.options import Options

RATE = 48000


def _tones(seconds: float, *hertz: float) -> np.ndarray:
    times = np.arange(round(seconds * RATE)) / RATE
    mono = sum(np.sin(2 * np.pi * h * times) for h in hertz) * 9000 / len(hertz)
    return np.stack([mono, mono * 0.5], axis=1).astype(np.int16)


def _keep(parts: np.ndarray) -> np.ndarray:
    return parts


def test_the_transforms_are_scipys() -> None:
    rows = np.random.default_rng(1).normal(size=(2, 255 * HOP)).astype(np.float32)
    window = scipy.signal.windows.hann(FRAME)
    np.testing.assert_allclose(hann(FRAME), window, atol=1e-12)
    expected = scipy.signal.stft(rows, nperseg=FRAME, noverlap=FRAME - HOP, window=window)[2]
    found = stft(rows, hann(FRAME))
    assert found.shape == expected.shape == (2, 3841, 256)
    np.testing.assert_allclose(found, expected, atol=1e-6 * np.abs(expected).max())
    back = scipy.signal.istft(expected, nperseg=FRAME, noverlap=FRAME - HOP, window=window)[1]
    np.testing.assert_allclose(istft(expected, hann(FRAME)), back, atol=1e-5)


def test_a_model_that_keeps_everything_gives_a_long_voice_back_across_its_chunks() -> None:
    sound = _tones(3 * CHUNK_SAMPLES / RATE + 0.3, 300.0, 2000.0)  # four overlapping chunks
    seen: list[tuple[int, ...]] = []

    def keep(parts: np.ndarray) -> np.ndarray:
        seen.append(parts.shape)
        return parts

    voice = extract_voice(sound, keep, 256)
    assert voice.shape == sound.shape and voice.dtype == np.float32
    # within 1 % of the tones (the cut bins above 19.2 kHz ring at each chunk's sudden start); a piece laid back
    # in the wrong place would be off by the tones themselves
    np.testing.assert_allclose(voice, sound / 32767.0, atol=2.5e-3)
    assert seen and all(shape[1:] == (4, 3072, 256) for shape in seen)


def test_a_model_that_keeps_the_low_frequencies_leaves_only_them(tmp_path: Path) -> None:
    voice_extractor_standin(tmp_path, "kim_vocal_2", keep_bins=160)  # below 1 kHz
    sound = _tones(1.5, 300.0, 3000.0)
    store = ModelStore(models_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    mel = voice_mel_of(sound, Options(processors=["lip_syncer"]), store)
    voice_extractor_standin(tmp_path / "all", "kim_vocal_2")
    whole = voice_mel_of(sound, Options(processors=["lip_syncer"]), ModelStore(models_dir=str(tmp_path / "all")))
    peaks = mel_filter_bank().argmax(axis=1) * 20.0  # each band's centre, in Hz (bins of 16000 / 800)
    high = (peaks > 2500) & (peaks < 3500)
    middle = slice(40, -40)  # away from the ends' zero padding
    assert whole[high, middle].mean() > 1000 * mel[high, middle].mean()  # the 3 kHz tone gone
    low = (peaks > 250) & (peaks < 350)
    # the 300 Hz tone kept: louder than before, as the voice is peak-normalised and the other tone is gone
    assert mel[low, middle].mean() > 1.5 * whole[low, middle].mean()
