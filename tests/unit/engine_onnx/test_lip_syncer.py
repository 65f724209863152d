"""The lip syncer on its stand-ins (``standins_lip_sync.py``: the lower half of the face the model sees darkened by
the voice window's loudness), on a flat grey frame with one face: a silent window leaves the frame as it was (within
FaceFusion's truncation to whole levels), a loud one darkens the mouth by the amount the window computes, inside the
lower face (wav2lip) or the box (edtalk) only; the voice is read by each frame's own time; a damaged stored voice, a
model of another kind and a chain without the frames' times are refused."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from standins_lip_sync import lip_syncer_standin, loudness

from facefusion_provider import storage
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.chain import build_frame_processor
from facefusion_provider.engine.processors.lip_syncer import PROCESSOR, SyncLips, voice_identity
from facefusion_provider.engine.voice import frame_window, model_window, pack_mel
from facefusion_provider.exceptions import InvalidWorkError, ModelIncompatibleError
from facefusion_provider.options import Options

from .builders import StoreFactory, face_with_68, mean_colour_model

GREY = 160
RATE = Fraction(25)
LOUD_UNTIL = 60  # mel columns: loud before, silent after
LOUD_AT, SILENT_AT = Fraction(0), Fraction(2)  # seconds: a frame in each


def _frame() -> Frame:
    return np.full((360, 480, 3), GREY, np.uint8)


def _face() -> Face:
    return face_with_68((240.0, 170.0), 160.0)


def _identity(tmp_path: Path) -> dict[str, object]:
    mel = np.zeros((80, 400), np.float32)
    mel[:, :LOUD_UNTIL] = 3.0
    data = pack_mel(mel)
    uri = storage.normalize_uri(str(tmp_path / "voice_mel.npy"))
    (tmp_path / "voice_mel.npy").write_bytes(data)
    return voice_identity(uri, data, RATE)


def _sync(models_dir: Path, store_for: StoreFactory, tmp_path: Path, model: str, **options: object) -> SyncLips:
    lip_syncer_standin(models_dir, model)
    chosen = Options(processors=["lip_syncer"], lip_syncer_model=model, **options)  # type: ignore[arg-type]
    step = PROCESSOR.load(chosen, _identity(tmp_path), store_for(models_dir), FaceStats())
    assert isinstance(step, SyncLips)
    return step


def _mouth(face: Face) -> tuple[int, int]:
    x, y = face.landmark_dense[60:68].mean(axis=0)  # type: ignore[index]
    return int(y), int(x)


@pytest.mark.parametrize("model", ["wav2lip_96", "wav2lip_gan_96"])
def test_wav2lip_darkens_the_mouth_by_the_voices_loudness_and_leaves_silence_alone(
    model: str, models_dir: Path, store_for: StoreFactory, tmp_path: Path
) -> None:
    step = _sync(models_dir, store_for, tmp_path, model, lip_syncer_weight=0.5)
    face = _face()
    silent, loud = step.at_times([_frame(), _frame()], [[face], [face]], None, [SILENT_AT, LOUD_AT])

    assert np.abs(silent.astype(int) - GREY).max() <= 1  # 160/255 x 255 truncates to 159 at most
    k = loudness(model_window(frame_window(step.mel, LOUD_AT, RATE), scale=1.0))  # wav2lip: 2 x weight 0.5
    assert k > 0.5
    assert abs(int(loud[_mouth(face)][0]) - GREY * (1 - k)) <= 3
    changed = np.abs(loud.astype(int) - GREY).max(axis=2) > 2
    rows = np.nonzero(changed)[0]
    eyes_y = int(face.landmark_dense[36:48, 1].mean())  # type: ignore[index]
    assert rows.min() > eyes_y  # the lower face only: nothing at the eyes or above
    assert not changed[:, :100].any() and not changed[:, 380:].any()  # nothing outside the face


def test_edtalk_darkens_the_boxs_lower_half_by_its_weight(
    models_dir: Path, store_for: StoreFactory, tmp_path: Path
) -> None:
    face = _face()
    (strong,) = _sync(models_dir, store_for, tmp_path, "edtalk_256", lip_syncer_weight=0.5).at_times(
        [_frame()], [[face]], None, [LOUD_AT]
    )
    (none,) = _sync(models_dir, store_for, tmp_path, "edtalk_256", lip_syncer_weight=0.0).at_times(
        [_frame()], [[face]], None, [LOUD_AT]
    )
    assert np.abs(none.astype(int) - GREY).max() <= 1
    k = loudness(model_window(np.full((80, 16), 3.0, np.float32)))  # x weight 0.5 x 2
    assert abs(int(strong[_mouth(face)][0]) - GREY * (1 - k)) <= 3


def test_each_frame_reads_the_voice_at_its_own_time_whatever_its_batch(
    models_dir: Path, store_for: StoreFactory, tmp_path: Path
) -> None:
    step = _sync(models_dir, store_for, tmp_path, "wav2lip_96")
    face = _face()
    times = [Fraction(n, 25) for n in range(0, 40, 3)]
    together = step.at_times([_frame()] * len(times), [[face]] * len(times), None, times)
    one_by_one = [step.at_times([_frame()], [[face]], None, [time])[0] for time in reversed(times)][::-1]
    for a, b in zip(together, one_by_one, strict=True):
        np.testing.assert_array_equal(a, b)
    darkness = [GREY - int(frame[_mouth(face)][0]) for frame in together]
    assert darkness[0] > 50 and darkness[-1] <= 1  # loud at 0 s, silent from 0.56 s on (column 60)


def test_a_damaged_stored_voice_is_refused(models_dir: Path, store_for: StoreFactory, tmp_path: Path) -> None:
    lip_syncer_standin(models_dir, "wav2lip_96")
    identity = _identity(tmp_path)
    (tmp_path / "voice_mel.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(InvalidWorkError, match="stored voice is damaged"):
        PROCESSOR.load(Options(processors=["lip_syncer"]), identity, store_for(models_dir), FaceStats())
    with pytest.raises(InvalidWorkError, match="no voice"):
        PROCESSOR.load(Options(processors=["lip_syncer"]), {}, store_for(models_dir), FaceStats())


def test_a_model_of_another_kind_is_refused_naming_the_inputs_it_expects(
    models_dir: Path, store_for: StoreFactory
) -> None:
    mean_colour_model(models_dir / "wav2lip_gan_96.onnx", 96, 96)
    with pytest.raises(
        ModelIncompatibleError,
        match=r"wav2lip_gan_96\.onnx .*does not look like wav2lip_gan_96: expected inputs source 1x1x80x16",
    ):
        PROCESSOR.prepare([], Options(processors=["lip_syncer"]), store_for(models_dir))


def test_the_chain_gives_the_lip_syncer_each_frames_time(models_dir: Path, tmp_path: Path) -> None:
    lip_syncer_standin(models_dir, "wav2lip_96")
    options = Options(processors=["lip_syncer"], lip_syncer_model="wav2lip_96")
    processor = build_frame_processor(options, _identity(tmp_path), str(models_dir))
    face = _face()
    (loud,) = processor.apply_batch([_frame()], [[face]], times=[LOUD_AT])
    assert GREY - int(loud[_mouth(face)][0]) > 50
    with pytest.raises(ValueError, match="each frame's time"):
        processor.apply_batch([_frame()], [[face]])
