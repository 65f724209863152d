"""Lip sync end to end on its stand-ins (``standins_lip_sync.py``: the mouth darkened by the voice's loudness) over
the carphone clip, with a voice of silence then loud noise: through ``facefusion-worker run`` every frame whose voice
window is silent keeps its mouth, every frame whose window is loud has it changed; spans started at each segment
boundary give the frames of one run from frame 0 (md5 of the decoded frames, lossless), on a constant and on a
variable frame rate clip; bad input is refused before any segment is worked, naming the field and the file."""

from __future__ import annotations

import hashlib
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from committed import work_uri_for
from people import carphone
from readback import frame_digests, rgb_frames
from standins_lip_sync import write_lip_sync_standins
from voices import carphone_frames, write_vfr, write_voice

from facefusion_provider import worker
from facefusion_provider.engine.store import MODELS_DIR_ENV
from facefusion_provider.engine.voice import FRAME_COLUMNS, MEL_HOP, MEL_WINDOW, window_end
from facefusion_provider.exceptions import EXIT_INVALID_MEDIA, EXIT_INVALID_OPTION, EXIT_MODEL_MISSING
from facefusion_provider.media.probe import video_timestamps
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 24, 6
SILENT_SECONDS, LOUD_SECONDS = 0.4, 2.0
VFR_DURATIONS = (33, 50, 17, 40, 66)  # milliseconds
OPTIONS: dict[str, Any] = {
    "processors": ["lip_syncer"],
    "lip_syncer_model": "wav2lip_96",
    "output_video_quality": 100,
    "segment_size": SEGMENT,
}
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("lip-sync")
    target = carphone(folder / "carphone.mp4", frames=FRAMES)
    return {
        "models": write_lip_sync_standins(folder / "models"),
        "voice": write_voice(folder / "voice.wav", SILENT_SECONDS, LOUD_SECONDS),
        "target": target,
        "vfr": write_vfr(folder / "carphone-vfr.mp4", carphone_frames(target), VFR_DURATIONS),
    }


def _run_argv(inputs: dict[str, Path], output: Path, *extra: str) -> list[str]:
    argv = ["run", "--source", str(inputs["voice"]), "--target", str(inputs["target"]), "--output", str(output)]
    argv += ["--work-root", str(output.parent / "work"), "--models-dir", str(inputs["models"])]
    argv += ["--segment-size", str(SEGMENT), "--output-video-quality", "100", "--processors", "lip_syncer"]
    return [*argv, "--lip-syncer-model", "wav2lip_96", *extra]


def _window_columns(target: Path) -> list[range]:
    """The mel columns each frame of ``target`` reads (its own time, the clip's average rate)."""
    pts, time_base = video_timestamps(str(target), str(target))
    with __import__("av").open(str(target)) as container:
        rate = Fraction(container.streams.video[0].average_rate)
    ends = [window_end((p - pts[0]) * time_base, rate) for p in pts]
    return [range(end - FRAME_COLUMNS, end) for end in ends]


def _silent(columns: range) -> bool:
    """Every column's Fourier window (800 samples at 16 kHz, centred on column x 200) inside the silence."""
    return columns[-1] * MEL_HOP + MEL_WINDOW // 2 <= SILENT_SECONDS * 16000


def _loud(columns: range) -> bool:
    return columns[0] * MEL_HOP - MEL_WINDOW // 2 >= SILENT_SECONDS * 16000


def test_worker_run_moves_the_mouth_only_where_the_voice_is_loud(inputs: dict[str, Path], tmp_path: Path) -> None:
    output = tmp_path / "spoken.mp4"
    assert cli.main(_run_argv(inputs, output)) == 0

    original, synced = rgb_frames(inputs["target"]), rgb_frames(output)
    assert len(synced) == len(original) == FRAMES
    columns = _window_columns(inputs["target"])
    silent = [n for n in range(FRAMES) if _silent(columns[n])]
    loud = [n for n in range(FRAMES) if _loud(columns[n])]
    assert len(silent) >= 5 and len(loud) >= 10
    for number in range(FRAMES):
        changed = np.abs(synced[number].astype(int) - original[number]).max(axis=2) > 20
        if number in silent:
            assert changed.sum() == 0, f"frame {number}: the voice is silent there"
        if number in loud:
            rows, cols = np.nonzero(changed)
            assert len(rows) > 1000, f"frame {number}: the voice is loud there"
            assert 130 < rows.mean() < 230 and 130 < cols.mean() < 230  # the driver's lower face


def _md5s(path: Path | str) -> list[str]:
    return [digest.md5 for digest in frame_digests(str(path))]


@pytest.mark.parametrize("clip", ["target", "vfr"])
def test_spans_started_at_each_segment_boundary_give_the_frames_of_a_run_from_frame_0(
    clip: str, inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MODELS_DIR_ENV, str(inputs["models"]))
    sources, target = [str(inputs["voice"])], str(inputs[clip])
    whole = tmp_path / "whole.mp4"
    worker.run(sources, target, str(whole), str(tmp_path / "whole-work"), **OPTIONS)
    expected = _md5s(whole)
    assert len(expected) == FRAMES and len(set(expected)) == FRAMES
    for start in (1, 2, 3):
        work_root = str(tmp_path / f"work-{start}")
        work_uri = work_uri_for(work_root, sources, target, **OPTIONS)
        spec = worker.prepare(work_uri, sources, target, **OPTIONS)
        assert len(spec.segments) == FRAMES // SEGMENT
        worker.swap_span(work_uri, target, start, len(spec.segments), span=1)  # reached by a seek, worked first
        worker.swap_span(work_uri, target, 0, start, span=0)
        pieces = tmp_path / f"from-{start}.mp4"
        worker.merge(work_uri, target, str(pieces))
        assert _md5s(pieces) == expected, f"a span started at segment {start}"


def test_lip_sync_without_a_voice_is_refused_naming_the_field(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    face = tmp_path / "face.png"
    face.write_bytes(hashlib.sha256(b"no voice here").digest())
    argv = _run_argv(inputs, tmp_path / "out.mp4")
    argv[argv.index("--source") + 1] = str(face)

    assert cli.main(argv) == EXIT_INVALID_OPTION
    assert "source: lip_syncer needs a voice among the sources" in capsys.readouterr().err
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").rglob("*.mp4"))


def test_a_voice_that_does_not_decode_is_refused_naming_the_field_and_file(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    voice = tmp_path / "message.mp3"
    voice.write_bytes(b"ID3 but nothing after it" * 40)
    argv = _run_argv(inputs, tmp_path / "out.mp4")
    argv[argv.index("--source") + 1] = str(voice)

    assert cli.main(argv) == EXIT_INVALID_MEDIA
    error = capsys.readouterr().err
    assert "source[0] (" in error and "message.mp3): not a readable audio file" in error
    assert not any((tmp_path / "work").rglob("segments/*.mp4"))


def test_a_missing_voice_extractor_is_refused_before_any_segment_naming_the_model(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _run_argv(inputs, tmp_path / "out.mp4", "--voice-extractor-model", "uvr_mdxnet")
    models = tmp_path / "models"
    write_lip_sync_standins(models)
    (models / "uvr_mdxnet.onnx").unlink()
    argv[argv.index("--models-dir") + 1] = str(models)

    assert cli.main(argv) == EXIT_MODEL_MISSING
    assert "uvr_mdxnet" in capsys.readouterr().err
    assert not any((tmp_path / "work").rglob("segments/*.mp4"))
