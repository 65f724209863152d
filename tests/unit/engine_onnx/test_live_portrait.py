"""The expression restorer and the face editor on LivePortrait stand-ins whose math is known
(``standins_live_portrait.py``): the extractors read a crop's colour as its expression, the generator redraws the
crop and shifts each colour channel by GAIN x the sum of (driving - own) keypoints, the stitcher pulls the driving
points a quarter back to the own. On a flat frame every pixel in the middle of the face is computable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from standins_live_portrait import (
    CANONICAL,
    EYE_MAP,
    GAIN,
    POSE,
    SCALE,
    STITCH,
    standin_expression,
    write_live_portrait_standins,
)

from facefusion_provider.engine.align import warp_face
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.live_portrait import (
    CROP_SIZE,
    EXPRESSION_MAX,
    EXPRESSION_MIN,
    LivePortrait,
    crop_input,
    limit_angles,
    rotation_matrix,
)
from facefusion_provider.engine.models import LIVE_PORTRAIT_IO, MODELS, LivePortraitNetwork
from facefusion_provider.engine.processors import expression_restorer, face_editor
from facefusion_provider.engine.processors.base import FaceStats, TargetFramesStep
from facefusion_provider.engine.processors.registry import analysis_needs
from facefusion_provider.exceptions import ModelMissingError
from facefusion_provider.options import Options

from .builders import StoreFactory

FLAT = (200, 120, 90)
# A face in a 400 x 400 frame: eyes, nose tip, mouth corners (image left to right).
LANDMARK_5 = np.array([[160, 170], [240, 170], [200, 215], [168, 260], [232, 260]], np.float32)


def _face(dense: np.ndarray | None = None) -> Face:
    return Face(np.array([120, 110, 280, 310], np.float32), 0.9, LANDMARK_5, landmark_dense=dense)


def _flat(colour: tuple[int, int, int] = FLAT) -> Frame:
    return np.full((400, 400, 3), colour, np.uint8)


def _textured() -> Frame:
    ys, xs = np.mgrid[:400, :400].astype(np.float32)
    frame = np.stack([128 + 90 * np.sin(xs / 9), 128 + 90 * np.cos(ys / 7), 100 + 60 * np.sin((xs - ys) / 13)], 2)
    return np.asarray(frame, np.uint8)


def _step(models_dir: Path, store_for: StoreFactory, processor: str, **chosen: Any) -> Any:
    write_live_portrait_standins(models_dir)
    options = Options(processors=[processor], **chosen)
    module = expression_restorer if processor == "expression_restorer" else face_editor
    return module.PROCESSOR.load(options, {}, store_for(models_dir), FaceStats())


def _middle(frame: Frame) -> np.ndarray:
    """The face's middle, well inside the box mask: its mean colour."""
    return np.asarray(frame[200:230, 185:215].reshape(-1, 3).mean(axis=0))


def test_the_rotation_is_scipys_extrinsic_xyz_in_degrees() -> None:
    for angles in [(10.0, 20.0, 30.0), (-25.0, 50.0, -5.0), POSE]:
        expected = Rotation.from_euler("xyz", angles, degrees=True).as_matrix()
        np.testing.assert_allclose(rotation_matrix(*angles), expected, atol=1e-6)


def test_an_edited_pose_stays_in_facefusions_limits_widened_to_the_face_s_own() -> None:
    assert limit_angles((0.0, 0.0, 0.0), (45.0, -70.0, 25.0)) == (30.0, -60.0, 20.0)
    assert limit_angles((-40.0, 65.0, 0.0), (-50.0, 80.0, 5.0)) == (-40.0, 65.0, 5.0)


@pytest.mark.parametrize("processor", ["expression_restorer", "face_editor"])
def test_each_network_gets_the_catalogues_names_and_shapes(
    processor: str, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed: list[tuple[LivePortraitNetwork, dict[str, tuple[int, ...]]]] = []
    run = LivePortrait._run

    def recording(self: LivePortrait, network: LivePortraitNetwork, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        fed.append((network, {name: value.shape for name, value in feeds.items()}))
        assert all(value.dtype == np.float32 for value in feeds.values())
        return run(self, network, feeds)

    monkeypatch.setattr(LivePortrait, "_run", recording)
    sliders = {"face_editor_eye_open_ratio": 0.5, "face_editor_lip_open_ratio": -0.5, "face_editor_head_yaw": 0.3}
    step = _step(models_dir, store_for, processor, **(sliders if processor == "face_editor" else {}))
    step([_textured()], [[_face(np.tile(LANDMARK_5, (14, 1))[:68])]], None)

    called = [network for network, _ in fed]
    expected_calls = {
        "expression_restorer": ["feature_extractor", "motion_extractor", "motion_extractor", "generator"],
        "face_editor": [
            "feature_extractor",
            "motion_extractor",
            "eye_retargeter",
            "lip_retargeter",
            "stitcher",
            "generator",
        ],
    }
    assert called == expected_calls[processor]
    for network, shapes in fed:
        inputs, _ = LIVE_PORTRAIT_IO[network]
        assert shapes == {name: tuple(1 if dim is None else dim for dim in shape) for name, shape in inputs}
        assert MODELS[f"live_portrait_{network}"].input_names == tuple(shapes)


def test_the_restorer_drives_the_face_towards_the_target_frames_expression(
    models_dir: Path, store_for: StoreFactory
) -> None:
    target, swapped = _textured(), _flat()
    face = _face()
    target_crop, _ = warp_face(target, LANDMARK_5, "arcface_128", CROP_SIZE)
    wanted = standin_expression(crop_input_image(target_crop))
    own = standin_expression(np.full((256, 256, 3), FLAT, np.uint8))

    for factor, areas in [(50, ["upper-face", "lower-face"]), (50, ["lower-face"]), (100, ["upper-face"])]:
        step = _step(
            models_dir,
            store_for,
            "expression_restorer",
            expression_restorer_factor=factor,
            expression_restorer_areas=areas,
        )
        assert isinstance(step, TargetFramesStep)
        (restored,) = step.with_targets([target], [swapped], [[face]], None)
        points = [point for area in areas for point in expression_restorer.AREA_POINTS[area]]
        mixed = np.clip(wanted * factor / 100 * 1.2 + own * (1 - factor / 100 * 1.2), EXPRESSION_MIN, EXPRESSION_MAX)[
            0, points
        ]
        shift = GAIN * SCALE * (mixed - own[0, points]).sum(axis=0) * 255
        expected = np.clip(np.asarray(FLAT) + shift, 0, 255)
        assert np.abs(_middle(restored) - expected).max() <= 1.5, (factor, areas)
        assert np.abs(_middle(restored) - FLAT).max() > 5, "the face moved"
        np.testing.assert_array_equal(restored[:40], swapped[:40])  # away from the face: untouched


def test_the_restorer_at_factor_0_or_alone_leaves_the_face_as_it_was(models_dir: Path, store_for: StoreFactory) -> None:
    frame, face = _textured(), _face()
    alone = _step(models_dir, store_for, "expression_restorer")
    none = _step(models_dir, store_for, "expression_restorer", expression_restorer_factor=0)
    for result in (alone([frame], [[face]], None)[0], none.with_targets([_flat()], [frame], [[face]], None)[0]):
        # the stand-in redraws the crop from its 256 half: the texture comes back, slightly blurred
        assert np.abs(result.astype(int) - frame)[150:280, 150:250].mean() < 6
        assert np.abs(_middle(result) - _middle(frame)).max() < 2


def test_the_face_editor_at_zero_leaves_the_face_and_each_slider_moves_it(
    models_dir: Path, store_for: StoreFactory
) -> None:
    frame, face = _flat(), _face()
    (unchanged,) = _step(models_dir, store_for, "face_editor")([frame], [[face]], None)
    assert np.abs(unchanged.astype(int) - frame).max() <= 1

    own = standin_expression(np.full((256, 256, 3), FLAT, np.uint8))
    for slider in face_editor.EXPRESSION_EDITS:
        for value in (-1.0, 0.5):
            options = Options(processors=["face_editor"], **{slider: value})
            edited = face_editor.edited_expression(own, options)
            shift = GAIN * STITCH * SCALE * (edited - own)[0].sum(axis=0) * 255
            (result,) = _step(models_dir, store_for, "face_editor", **{slider: value})([frame], [[face]], None)
            assert np.abs(_middle(result) - np.clip(np.asarray(FLAT) + shift, 0, 255)).max() <= 1.5, (slider, value)
            assert np.abs(_middle(result) - FLAT).max() > 0.4, (slider, value)


def test_a_smile_moves_the_expression_values_facefusion_names() -> None:
    options = Options(processors=["face_editor"], face_editor_mouth_smile=0.5)
    edited = face_editor.edited_expression(np.zeros((1, 21, 3), np.float32), options)
    changed = {(int(point), int(axis)): float(edited[0, point, axis]) for point, axis in np.argwhere(edited[0])}
    expected = {(20, 1): -0.0075, (14, 1): -0.0125, (17, 1): 0.005, (17, 2): 0.002, (3, 1): -0.00225, (7, 1): -0.00225}
    assert changed.keys() == expected.keys()
    for key, value in expected.items():
        assert changed[key] == pytest.approx(value, abs=1e-7)


def test_the_head_sliders_turn_the_keypoints_within_the_limits(models_dir: Path, store_for: StoreFactory) -> None:
    frame, face = _flat(), _face()
    own_rotation = rotation_matrix(*POSE)
    for yaw in (1.0, -0.25):
        turned = rotation_matrix(*limit_angles(POSE, (POSE[0], POSE[1] - 60 * yaw, POSE[2])))
        moved = SCALE * (CANONICAL[0] @ turned.T - CANONICAL[0] @ own_rotation.T)
        shift = GAIN * STITCH * moved.sum(axis=0) * 255
        (result,) = _step(models_dir, store_for, "face_editor", face_editor_head_yaw=yaw)([frame], [[face]], None)
        assert np.abs(_middle(result) - np.clip(np.asarray(FLAT) + shift, 0, 255)).max() <= 1.5, yaw


def test_the_eye_and_lip_sliders_read_the_face_s_open_ratios(models_dir: Path, store_for: StoreFactory) -> None:
    frame = _flat()
    dense = np.zeros((68, 2), np.float32)
    dense[[36, 39, 42, 45, 48, 54]] = [[150, 170], [180, 170], [220, 170], [250, 170], [170, 260], [230, 260]]
    dense[[37, 40, 43, 46, 62, 66]] = [[160, 164], [170, 176], [230, 164], [240, 176], [200, 255], [200, 265]]
    ratios = [np.hypot(10, 12) / 30, np.hypot(10, 12) / 30, 10 / 60]
    step = _step(models_dir, store_for, "face_editor", face_editor_eye_open_ratio=0.8)

    (opened,) = step([frame], [[_face(dense)]], None)
    (without,) = step([frame], [[_face()]], None)  # no dense landmarks: no ratios to read, the eyes left

    eye_offset = (0.6 * EYE_MAP[65] + ratios[0] * EYE_MAP[63] + ratios[1] * EYE_MAP[64]) * 0.8
    shift = GAIN * STITCH * eye_offset.reshape(21, 3).sum(axis=0) * 255
    assert np.abs(_middle(opened) - np.clip(np.asarray(FLAT) + shift, 0, 255)).max() <= 1.5
    assert np.abs(without.astype(int) - frame).max() <= 1
    assert analysis_needs(Options(processors=["face_editor"], face_editor_eye_open_ratio=0.8)).landmarks == "mesh"
    assert (
        analysis_needs(
            Options(processors=["face_editor"], face_landmarker_model="2dfan4", face_editor_lip_open_ratio=1.0)
        ).landmarks
        == "2dfan4"
    )
    assert analysis_needs(Options(processors=["face_editor"], face_editor_mouth_smile=1.0)).landmarks == "none"


def test_a_missing_network_is_named_when_the_processor_loads(models_dir: Path, store_for: StoreFactory) -> None:
    write_live_portrait_standins(models_dir)
    (models_dir / "live_portrait_stitcher.onnx").unlink()
    options = Options(processors=["face_editor"])
    with pytest.raises(ModelMissingError, match="live_portrait_stitcher"):
        face_editor.PROCESSOR.prepare([], options, store_for(models_dir))
    expression_restorer.PROCESSOR.prepare([], Options(processors=["expression_restorer"]), store_for(models_dir))


def crop_input_image(crop: Frame) -> Frame:
    """The 256 RGB image the extractors see of a 512 crop (``crop_input`` before its scaling to 0..1)."""
    return np.asarray(np.rint(crop_input(crop)[0].transpose(1, 2, 0) * 255), np.uint8)


def test_live_portrait_networks_are_in_the_catalogue_as_user_models() -> None:
    for network in LIVE_PORTRAIT_IO:
        spec = MODELS[f"live_portrait_{network}"]
        assert spec.file_name == f"live_portrait_{network}.onnx" and spec.role == "animate" and spec.licence == "MIT"
        assert spec.live_portrait is not None and spec.live_portrait.network == network
