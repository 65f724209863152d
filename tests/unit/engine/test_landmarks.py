"""Dense landmarks: the 468-point mesh on real faces (upright and tilted) and the 2dfan4 wiring with a stand-in model."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from engine_onnx.builders import save_model, value_info
from onnx import helper

from facefusion_provider.engine.align import transform_points
from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.landmarks import (
    crop_matrix,
    detect_landmarks,
    landmark_5_from_mesh,
    landmark_68,
    landmark_face_mesh,
)
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options


def face_size(face: Face) -> float:
    return float(max(face.bbox[2] - face.bbox[0], face.bbox[3] - face.bbox[1]))


@pytest.mark.parametrize("photo", ["astronaut", "grace_hopper"])
def test_mesh_lands_on_the_face(
    photo: str, request: pytest.FixtureRequest, options: Options, store: ModelStore
) -> None:
    frame: Frame = request.getfixturevalue(photo)
    (face,) = detect_faces(frame, options, store)
    meshed = landmark_face_mesh(frame, face, store)
    assert meshed.landmark_dense is not None and meshed.landmark_dense.shape == (468, 2)
    assert meshed.extras["landmark_dense_score"] > 0.9
    # The mesh's own eyes, nose and mouth corners agree with the detector's five points.
    error = np.linalg.norm(landmark_5_from_mesh(meshed.landmark_dense) - face.landmark_5, axis=1)
    assert error.max() < 0.08 * face_size(face)
    # And the mesh covers the face: its extent is about the face box.
    extent = meshed.landmark_dense.max(axis=0) - meshed.landmark_dense.min(axis=0)
    assert 0.7 < extent[0] / (face.bbox[2] - face.bbox[0]) < 1.5


def test_mesh_follows_a_tilted_head(grace_hopper: Frame, options: Options, store: ModelStore) -> None:
    (upright,) = detect_faces(grace_hopper, options, store)
    upright_mesh = landmark_face_mesh(grace_hopper, upright, store).landmark_dense
    center = (float(upright.bbox[0] + upright.bbox[2]) / 2, float(upright.bbox[1] + upright.bbox[3]) / 2)
    turn = cv2.getRotationMatrix2D(center, 35, 1.0)  # 35 degrees counter-clockwise about the face centre
    tilted = np.asarray(cv2.warpAffine(grace_hopper, turn, grace_hopper.shape[1::-1], borderMode=cv2.BORDER_REFLECT))
    (face,) = detect_faces(tilted, options, store)
    meshed = landmark_face_mesh(tilted, face, store)
    assert meshed.landmark_dense is not None and upright_mesh is not None
    expected = transform_points(upright_mesh, turn)
    error = np.linalg.norm(meshed.landmark_dense - expected, axis=1)
    assert np.median(error) < 0.03 * face_size(upright)
    assert np.percentile(error, 95) < 0.06 * face_size(upright)


def test_crop_matrix_levels_the_eyes_and_centres_the_face() -> None:
    eyes = np.array([[100.0, 100.0], [140.0, 130.0]])  # a tilted eye line
    angle = float(np.arctan2(30.0, 40.0))
    matrix = crop_matrix((120.0, 115.0), angle, 100.0, 200)
    mapped = transform_points(eyes, matrix)
    assert mapped[0, 1] == pytest.approx(mapped[1, 1])  # level
    assert mapped.mean(axis=0) == pytest.approx([100.0, 100.0])  # the centre goes to the crop's centre
    assert float(np.linalg.norm(mapped[1] - mapped[0])) == pytest.approx(50.0 * 2)  # 50 px apart, 2x scale


def fan_model(path: Path, points_64: np.ndarray, peak: float) -> Path:
    """A 2dfan4 stand-in: input 1x3x256x256, outputs (1, 68, 3) points on its 64 heatmap grid and (1, 68, 64, 64)."""
    landmarks = np.concatenate([points_64, np.ones((68, 1))], axis=1).reshape(1, 68, 3).astype(np.float32)
    heatmaps = np.zeros((1, 68, 64, 64), np.float32)
    heatmaps[0, :, 0, 0] = peak
    return save_model(
        path,
        [
            helper.make_node("ReduceSum", ["input"], ["input_sum"], keepdims=0),
            helper.make_node("Mul", ["input_sum", "zero"], ["input_zero"]),
            helper.make_node("Add", ["landmarks_value", "input_zero"], ["landmarks_xyscore"]),
            helper.make_node("Add", ["heatmaps_value", "input_zero"], ["heatmaps"]),
        ],
        [value_info("input", [1, 3, 256, 256])],
        [value_info("landmarks_xyscore", [1, 68, 3]), value_info("heatmaps", [1, 68, 64, 64])],
        [np.array(0.0, np.float32), landmarks, heatmaps],
        ["zero", "landmarks_value", "heatmaps_value"],
    )


def level_face() -> Face:
    """A face box of 195 px (2dfan4's face size in its 256 crop) centred at (300, 200), eyes level."""
    points = np.array([[270, 180], [330, 180], [300, 210], [275, 240], [325, 240]], np.float32)
    return Face(bbox=np.array([202.5, 102.5, 397.5, 297.5], np.float32), score=0.9, landmark_5=points)


def test_2dfan4_points_map_back_to_the_frame_and_refine_the_five_points(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    points_64 = rng.uniform(8, 56, (68, 2))
    fan_model(tmp_path / "2dfan4.onnx", points_64, peak=0.9)
    store = ModelStore(models_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    options = Options(face_landmarker_model="2dfan4")
    face = level_face()
    result = detect_landmarks(np.zeros((400, 600, 3), np.uint8), face, options, store)
    # The 256 crop shows the 195 px box at 1:1 around the box centre, so a point at p/64*256 is at p*4 - 128 + centre.
    expected = points_64 * 4 - 128 + [300, 200]
    assert result.landmark_dense == pytest.approx(expected, abs=1e-3)
    assert result.extras["landmark_dense_score"] == pytest.approx(1.0)
    assert result.landmark_5[0] == pytest.approx(expected[36:42].mean(axis=0), abs=1e-3)
    assert result.landmark_5[2] == pytest.approx(expected[30], abs=1e-3)
    np.testing.assert_array_equal(result.extras["landmark_5_detector"], face.landmark_5)  # the debugger's "5"


def test_2dfan4_keeps_the_detector_points_when_unsure(tmp_path: Path) -> None:
    fan_model(tmp_path / "2dfan4.onnx", np.full((68, 2), 32.0), peak=0.2)
    store = ModelStore(models_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    face = level_face()
    result = landmark_68(np.zeros((400, 600, 3), np.uint8), face, Options(face_landmarker_model="2dfan4"), store)
    assert result.landmark_dense is not None and result.landmark_dense.shape == (68, 2)
    assert np.array_equal(result.landmark_5, face.landmark_5)


def test_default_landmarker_is_the_mesh(astronaut: Frame, options: Options, store: ModelStore) -> None:
    (face,) = detect_faces(astronaut, options, store)
    result = detect_landmarks(astronaut, face, options, store)
    assert result.landmark_dense is not None and result.landmark_dense.shape == (468, 2)


def test_a_worker_without_litert_builds_a_processor_that_needs_no_face_mesh() -> None:
    """LiteRT is imported where the face mesh is loaded, so a machine without it (a GPU machine carrying only the
    wheels it needs) runs the model swappers; asking for the mesh there names the missing module."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['ai_edge_litert'] = None\n"
        "from facefusion_provider.engine import landmarks\n"
        "from facefusion_provider.engine.processors import chain\n"
        "try:\n"
        "    landmarks.tflite_interpreter('face_landmark.tflite')\n"
        "except ImportError as error:\n"
        "    print('refused:', error)\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "refused:" in completed.stdout and "ai_edge_litert" in completed.stdout
