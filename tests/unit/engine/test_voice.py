"""The lip syncer's voice (``engine.voice``) against FaceFusion 3.8.1's own formulas, written here with scipy (what
FaceFusion computes them with): the 16 kHz voice, the mel filter bank, the spectrogram, and which 16 columns each video
frame reads at several frame rates; past the voice's end a frame reads silence."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.signal
from voices import write_voice

from facefusion_provider.engine.voice import (
    frame_window,
    mel_filter_bank,
    mel_spectrogram,
    model_window,
    mono_voice,
    voice_mel,
    window_end,
)
from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.audio import read_voice_samples


def _facefusion_voice(samples: np.ndarray) -> np.ndarray:
    """FaceFusion's ``prepare_voice``: resampled to 16 kHz, the channels' mean, peak-normalised, pre-emphasised."""
    audio = scipy.signal.resample(samples, round(len(samples) * 16000 / 48000))
    audio = audio.mean(axis=1)
    audio = audio / np.max(np.abs(audio), axis=0)
    return np.asarray(scipy.signal.lfilter([1.0, -0.97], [1.0], audio))


def _facefusion_bank() -> np.ndarray:
    def to_mel(hertz: float) -> float:
        return float(2595 * np.log10(1 + hertz / 700))

    edges = np.linspace(to_mel(55.0), to_mel(7600.0), 82)
    bins = np.floor(801 * (700 * (10 ** (edges / 2595) - 1)) / 16000).astype(np.int16)
    bank = np.zeros((80, 401))
    for band in range(80):
        bank[band, bins[band] : bins[band + 1]] = scipy.signal.windows.triang(int(bins[band + 1] - bins[band]))
    return bank


def _facefusion_window_ends(columns: int, fps: float) -> np.ndarray:
    """FaceFusion's ``extract_audio_frames``: where each video frame's 16 columns end."""
    ends = np.arange(0, columns, 80 / fps).astype(np.int16)
    return ends[ends >= 16]


@pytest.fixture
def stereo() -> np.ndarray:
    return (np.random.default_rng(3).normal(0, 3000, (48000 * 2 + 7, 2))).astype(np.int16)


def test_the_voice_and_its_spectrogram_are_facefusions(stereo: np.ndarray) -> None:
    expected_voice = _facefusion_voice(stereo)
    np.testing.assert_allclose(mono_voice(stereo), expected_voice, atol=1e-9)
    np.testing.assert_array_equal(mel_filter_bank(), _facefusion_bank())
    spectrum = scipy.signal.stft(expected_voice, nperseg=800, nfft=800, noverlap=600)[2]
    expected = _facefusion_bank() @ np.abs(spectrum)
    mel = voice_mel(stereo)
    assert mel.shape == expected.shape == (80, 162)  # 32002 samples, padded: (32002 + 800 + 198 - 800) / 200 + 1
    np.testing.assert_allclose(mel, expected, rtol=1e-5, atol=1e-7 * expected.max())
    assert mel_spectrogram(expected_voice).dtype == np.float32


@pytest.mark.parametrize("rate", [Fraction(25), Fraction(24), Fraction(30), Fraction(30000, 1001), Fraction(60)])
def test_each_frame_reads_the_window_facefusion_gives_its_frame_number(rate: Fraction) -> None:
    columns = 400
    expected = _facefusion_window_ends(columns, float(rate))
    found = [window_end(Fraction(number) / rate, rate) for number in range(len(expected))]
    assert found == expected.tolist()
    assert window_end(Fraction(len(expected)) / rate, rate) >= columns  # the next frame is past the voice


def test_past_the_voices_end_a_frame_reads_silence_and_the_log_scale_is_clipped() -> None:
    mel = np.full((80, 100), 10.0, np.float32)
    mel[:, 50:] = 0.1
    rate = Fraction(25)
    assert frame_window(mel, Fraction(0), rate).shape == (80, 16)
    np.testing.assert_array_equal(frame_window(mel, Fraction(10), rate), 0)
    silent = model_window(frame_window(mel, Fraction(10), rate))
    assert silent.shape == (1, 1, 80, 16) and np.all(silent == -4.0)  # log10(1e-5) * 1.6 + 3.2 = -4.8, clipped
    np.testing.assert_allclose(model_window(frame_window(mel, Fraction(0), rate)), 4.0)  # 1.6 + 3.2, clipped
    quieter = model_window(frame_window(mel, Fraction(5, 8), rate), scale=0.5)  # columns 50-65
    np.testing.assert_allclose(quieter, (np.log10(0.1) * 1.6 + 3.2) * 0.5, rtol=1e-6)


@pytest.mark.parametrize(("codec", "name"), [("pcm_s16le", "voice.wav"), ("flac", "voice.flac"), ("aac", "v.m4a")])
def test_a_voice_decodes_from_each_format_at_48_khz_stereo(codec: str, name: str, tmp_path: Path) -> None:
    path = write_voice(tmp_path / name, 0.25, 0.5, rate=16000 if codec != "aac" else 44100, codec=codec)
    samples = read_voice_samples(str(path), name)
    assert samples.shape[1] == 2 and abs(len(samples) - 0.75 * 48000) < 2048
    assert np.abs(samples[: 48000 // 5]).max() < 50 and samples[48000 // 2 :].std() > 3000


def test_a_file_that_does_not_decode_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "voice.mp3").write_bytes(b"not a sound at all" * 50)
    with pytest.raises(InvalidMediaError, match=r"^source\[1\] voice\.mp3: not a readable audio file"):
        read_voice_samples(str(tmp_path / "voice.mp3"), "source[1] voice.mp3")
