"""The output's sound through ``facefusion-worker run``: with lip sync the output carries the voice, not the target's
sound, cut to the video's duration (FaceFusion's ``-t``); a voice shorter than the video stays shorter (FaceFusion pads
nothing) and the frames past its end read silence, so their mouths are left alone. ``output_audio_encoder``,
``output_audio_quality`` and ``output_audio_volume`` apply to every run: the sound is encoded once per work. The MP4
is still joined from the segments' indexes (its video never encoded twice); a trimmed or .mkv output is remuxed with
the same sound; a container that cannot hold the encoder is refused naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
from people import carphone
from readback import frame_digests, rgb_frames
from standins_lip_sync import write_lip_sync_standins
from voices import decoded_voice, tone_samples, write_samples, write_voice

from facefusion_provider import storage
from facefusion_provider.exceptions import EXIT_INVALID_OPTION
from facefusion_provider.work.layout import output_marker_uri
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 24, 8
RATE = 48000
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("lip-sync-sound")
    return {
        "models": write_lip_sync_standins(folder / "models"),
        "voice": write_voice(folder / "voice.wav", 0.2, 1.8),  # longer than the clip's 0.8 s
        "short": write_voice(folder / "short.wav", 0.1, 0.3),  # ends at 0.4 s, mid-clip
        "tones": write_samples(folder / "tones.wav", tone_samples(2.0)),
        "target": carphone(folder / "carphone.mp4", frames=FRAMES, audio_rate=RATE),  # with its own tone track
    }


def _run(inputs: dict[str, Path], output: Path, voice: str | None, *extra: str) -> int:
    argv = ["run", "--target", str(inputs["target"]), "--output", str(output), "--work-root", str(output.parent / "w")]
    argv += ["--models-dir", str(inputs["models"]), "--segment-size", str(SEGMENT), "--output-video-quality", "100"]
    if voice is not None:
        argv += ["--source", str(inputs[voice]), "--processors", "lip_syncer", "--lip-syncer-model", "wav2lip_96"]
    else:
        argv += ["--processors"]
    return cli.main([*argv, *extra])


def _video_seconds(path: Path) -> float:
    digests = frame_digests(str(path))
    with av.open(str(path)) as container:
        rate = container.streams.video[0].average_rate
    assert rate is not None
    return digests[-1].seconds - digests[0].seconds + 1 / float(rate)


def _sound(path: Path) -> tuple[str, np.ndarray]:
    with av.open(str(path)) as container:
        codecs = [stream.codec_context.name for stream in container.streams.audio]
    assert len(codecs) == 1, f"{path.name} holds {len(codecs)} sound streams"
    return codecs[0], decoded_voice(path)


def _method(output: Path) -> str:
    marker = storage.local_path(output_marker_uri(str(output)))
    return str(json.loads(Path(marker or "").read_text())["method"])


def test_the_output_carries_the_voice_losslessly_cut_to_the_videos_duration(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "spoken.mp4"
    assert _run(inputs, output, "voice", "--output-audio-encoder", "flac") == 0

    codec, sound = _sound(output)
    seconds = _video_seconds(output)
    assert codec == "flac"
    assert len(sound) == round(seconds * RATE)  # the voice's 2 s cut to the video's
    np.testing.assert_array_equal(sound, decoded_voice(inputs["voice"])[: len(sound)])  # the voice, not the target's
    assert _method(output) == "index"  # joined from the segments' indexes: the video is never encoded again


def test_the_default_aac_sound_decodes_to_the_voice_within_the_codecs_tolerance(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "spoken.mp4"
    assert _run(inputs, output, "tones") == 0

    codec, sound = _sound(output)
    assert codec == "aac"
    assert abs(len(sound) / RATE - _video_seconds(output)) < 1024 / RATE  # within one AAC frame
    expected = decoded_voice(inputs["tones"])[: len(sound)]
    middle = slice(2048, len(sound) - 2048)  # the encoder's first and last frames ramp
    error = np.sqrt(np.mean((sound[middle] - expected[middle]) ** 2)) / np.sqrt(np.mean(expected[middle] ** 2))
    assert error < 0.05


def test_a_voice_shorter_than_the_video_stays_shorter_and_its_silence_leaves_the_mouth(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    output = tmp_path / "short.mp4"
    assert _run(inputs, output, "short", "--output-audio-encoder", "pcm_s16le", "--output", str(output)) != 0  # mp4
    output = tmp_path / "short.mkv"
    assert _run(inputs, output, "short", "--output-audio-encoder", "pcm_s16le") == 0

    codec, sound = _sound(output)
    assert codec == "pcm_s16le" and _method(output) == "remux"
    np.testing.assert_array_equal(sound, decoded_voice(inputs["short"]))  # all of it, nothing padded
    original, synced = rgb_frames(inputs["target"]), rgb_frames(output)
    late = [n for n in range(FRAMES) if n / 29.97 > 0.45]  # windows past the voice's end (0.4 s): silence
    for number in late:
        assert (np.abs(synced[number].astype(int) - original[number]).max(axis=2) > 20).sum() == 0


def test_a_trimmed_output_speaks_from_its_first_frame(inputs: dict[str, Path], tmp_path: Path) -> None:
    output = tmp_path / "trimmed.mp4"
    assert _run(inputs, output, "voice", "--output-audio-encoder", "flac", "--trim-frame-start", "8") == 0

    _, sound = _sound(output)
    assert _method(output) == "remux"
    assert abs(len(sound) / RATE - _video_seconds(output)) < 2 / RATE
    np.testing.assert_array_equal(sound, decoded_voice(inputs["voice"])[: len(sound)])  # the voice from its start


def test_volume_and_encoder_apply_to_a_run_without_lip_sync(inputs: dict[str, Path], tmp_path: Path) -> None:
    full, half, silent = tmp_path / "full.mkv", tmp_path / "half.mkv", tmp_path / "silent.mp4"
    assert _run(inputs, full, None, "--output-audio-encoder", "pcm_s16le") == 0
    assert _run(inputs, half, None, "--output-audio-encoder", "pcm_s16le", "--output-audio-volume", "50") == 0
    assert _run(inputs, silent, None, "--output-audio-volume", "0") == 0

    (_, loud), (_, quiet) = _sound(full), _sound(half)
    target_tone = decoded_voice(inputs["target"])
    assert np.abs(loud - target_tone[: len(loud)]).max() <= 1  # the target's sound, decoded and stored as PCM
    assert np.abs(quiet - loud / 2).max() <= 1
    with av.open(str(silent)) as container:
        assert not container.streams.audio
    assert len(rgb_frames(silent)) == FRAMES


def test_a_container_that_cannot_hold_the_sound_is_refused_naming_the_option(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "spoken.webm"
    argv = ["--output-video-encoder", "libvpx-vp9"]
    assert _run(inputs, output, "voice", *argv) == EXIT_INVALID_OPTION
    assert "options.output_audio_encoder: aac (the voice's default) cannot be stored in a .webm file" in (
        capsys.readouterr().err
    )
    assert _run(inputs, output, "voice", *argv, "--output-audio-encoder", "libopus") == 0
    codec, _ = _sound(output)
    assert codec == "opus"
