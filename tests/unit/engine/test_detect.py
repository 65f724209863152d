"""Face detection on real photos (the offline RetinaFace) and the wiring of FaceFusion's detectors (stand-in models)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from engine_onnx.builders import save_model, value_info
from onnx import helper

from facefusion_provider.engine.detect import decode_retinaface, detect_faces, letterbox, retinaface_priors
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import ModelMissingError
from facefusion_provider.options import Options

from .conftest import IdentityJudge


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    low, high = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(high - low, 0, None)))
    union = float(np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2])) - inter
    return inter / union


def assert_points_in_order(face: Face) -> None:
    """Five points inside the box: image-left eye, image-right eye, nose, image-left and image-right mouth corner."""
    (eye_l, eye_r, nose, mouth_l, mouth_r), (x1, y1, x2, y2) = face.landmark_5, face.bbox
    assert np.all((face.landmark_5 >= [x1, y1]) & (face.landmark_5 <= [x2, y2]))
    assert eye_l[0] < nose[0] < eye_r[0]
    assert mouth_l[0] < mouth_r[0]
    assert max(eye_l[1], eye_r[1]) < nose[1] < min(mouth_l[1], mouth_r[1])


@pytest.mark.parametrize("photo", ["astronaut", "grace_hopper"])
def test_finds_the_one_face_in_each_photo_with_its_five_points(
    photo: str, request: pytest.FixtureRequest, options: Options, store: ModelStore, judge: IdentityJudge
) -> None:
    frame: Frame = request.getfixturevalue(photo)
    faces = detect_faces(frame, options, store)
    assert len(faces) == 1
    (face,) = faces
    assert face.score > 0.9
    assert_points_in_order(face)
    rect = judge.locate(frame)
    assert rect is not None
    dlib_box = np.array([rect.left(), rect.top(), rect.right(), rect.bottom()], np.float32)
    assert box_iou(face.bbox, dlib_box) > 0.4, "the box is not where dlib sees the face"


def test_frames_larger_than_the_detector_size_are_shrunk_and_mapped_back(
    astronaut: Frame, options: Options, store: ModelStore
) -> None:
    (small,) = detect_faces(astronaut, options, store)
    big_frame = cv2.resize(astronaut, (1536, 1536), interpolation=cv2.INTER_CUBIC)
    (big,) = detect_faces(big_frame, options, store)
    size = float(small.bbox[2] - small.bbox[0])
    assert np.allclose(big.bbox / 3, small.bbox, atol=0.06 * size)
    assert np.allclose(big.landmark_5 / 3, small.landmark_5, atol=0.06 * size)


def test_a_frame_without_a_face_gives_no_face(no_face: Frame, options: Options, store: ModelStore) -> None:
    assert detect_faces(no_face, options, store) == []


def test_two_people_give_two_faces_one_box_each(
    astronaut: Frame, grace_hopper: Frame, options: Options, store: ModelStore
) -> None:
    pair = np.hstack([astronaut, grace_hopper[:512]])
    faces = detect_faces(pair, options, store)
    assert len(faces) == 2
    centers = sorted(float(face.bbox[0] + face.bbox[2]) / 2 for face in faces)
    assert centers[0] < 512 < centers[1]
    for face in faces:
        assert_points_in_order(face)


def test_score_threshold_drops_faces_below_it(astronaut: Frame, store: ModelStore) -> None:
    (face,) = detect_faces(astronaut, Options(), store)
    assert detect_faces(astronaut, Options(face_detector_score=min(1.0, face.score + 1e-6)), store) == []


@pytest.mark.parametrize(("width", "height"), [(640, 640), (352, 288), (160, 160)])
def test_priors_match_the_offline_model_outputs(width: int, height: int, store: ModelStore, options: Options) -> None:
    session = store.session_for("retinaface_mnet", options)
    loc, conf, landmarks = session.run(None, {"input": np.zeros((1, 3, height, width), np.float32)})
    priors = retinaface_priors(width, height)
    assert priors.shape == (loc.shape[1], 4) == (conf.shape[1], 4) == (landmarks.shape[1], 4)


def test_retinaface_decoding_of_known_offsets() -> None:
    priors = retinaface_priors(640, 640)
    count = len(priors)
    loc = np.zeros((count, 4), np.float32)
    conf = np.tile([1.0, 0.0], (count, 1)).astype(np.float32)
    points = np.zeros((count, 10), np.float32)
    chosen = 12345  # a prior of the middle level
    cx, cy, size, _ = priors[chosen]
    conf[chosen] = [0.1, 0.9]
    loc[chosen] = [1.0, -1.0, np.log(2.0) / 0.2, 0.0]  # centre moves by 0.1 x size, width doubles
    points[chosen, :2] = [2.0, 3.0]
    boxes, scores, landmarks = decode_retinaface(loc, conf, points, (640, 640), 0.5)
    assert scores.tolist() == pytest.approx([0.9])
    center_x, center_y = cx + 0.1 * size, cy - 0.1 * size
    assert boxes[0] == pytest.approx([center_x - size, center_y - size / 2, center_x + size, center_y + size / 2])
    assert landmarks[0, 0] == pytest.approx([cx + 0.2 * size, cy + 0.3 * size])
    assert landmarks[0, 1] == pytest.approx([cx, cy])


def test_letterbox_shrinks_only_and_keeps_the_aspect() -> None:
    frame = np.full((720, 1280, 3), 200, np.uint8)
    view = letterbox(frame, (640, 640))
    assert view.scale == 0.5 and view.content == (640, 360)
    assert view.canvas.shape == (640, 640, 3)
    assert np.all(view.canvas[:360] == 200) and np.all(view.canvas[360:] == 0)
    small = letterbox(frame[:100, :100], (640, 640))
    assert small.scale == 1.0 and small.content == (100, 100)


# --- FaceFusion's detectors, with stand-ins that answer with known raw outputs ------------------------------------


def constant_model(path: Path, input_shape: list[int | str], outputs: dict[str, np.ndarray]) -> Path:
    """A model with FaceFusion's input ``input`` whose outputs are fixed arrays (plus 0 x the input, so it is used)."""
    nodes = [
        helper.make_node("ReduceSum", ["input"], ["input_sum"], keepdims=0),
        helper.make_node("Mul", ["input_sum", "zero"], ["input_zero"]),
    ]
    nodes += [helper.make_node("Add", [f"{name}_value", "input_zero"], [name]) for name in outputs]
    return save_model(
        path,
        nodes,
        [value_info("input", input_shape)],
        [value_info(name, list(array.shape)) for name, array in outputs.items()],
        [np.array(0.0, np.float32), *outputs.values()],
        ["zero", *(f"{name}_value" for name in outputs)],
    )


def test_yoloface_boxes_come_back_in_frame_pixels(tmp_path: Path) -> None:
    raw = np.zeros((1, 20, 8400), np.float32)
    raw[0, :5, 100] = [320, 200, 100, 120, 0.9]  # cx, cy, w, h, score in the 640x640 input
    raw[0, 5:, 100] = np.array([[300, 180, 1], [340, 180, 1], [320, 200, 1], [305, 230, 1], [335, 230, 1]]).ravel()
    raw[0, :5, 200] = [50, 50, 20, 20, 0.3]  # below the score threshold
    constant_model(tmp_path / "yoloface_8n.onnx", [1, 3, 640, 640], {"output0": raw})
    store = ModelStore(models_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    frame = np.zeros((720, 1280, 3), np.uint8)  # shrunk by 2 into the detector's input
    (face,) = detect_faces(frame, Options(face_detector_model="yoloface_8n"), store)
    assert face.bbox == pytest.approx([540, 280, 740, 520])
    assert face.landmark_5[0] == pytest.approx([600, 360])
    assert face.score == pytest.approx(0.9)


@pytest.mark.parametrize("model", ["retinaface_10g", "scrfd_2.5g"])
def test_scrfd_family_boxes_come_back_in_frame_pixels(model: str, tmp_path: Path) -> None:
    width = height = 320
    outputs: dict[str, np.ndarray] = {}
    for kind, columns in (("score", 1), ("bbox", 4), ("kps", 10)):
        for stride in (8, 16, 32):
            outputs[f"{kind}_{stride}"] = np.zeros(((height // stride) * (width // stride) * 2, columns), np.float32)
    row, column, stride = 5, 7, 16
    anchor = (row * (width // stride) + column) * 2  # first of the cell's two anchors, at (112, 80)
    outputs["score_16"][anchor] = 0.8
    outputs["bbox_16"][anchor] = [2, 1, 3, 4]  # distances in strides: left, top, right, bottom
    outputs["kps_16"][anchor, :2] = [-1, -1]
    constant_model(tmp_path / f"{model}.onnx", [1, 3, "height", "width"], outputs)
    store = ModelStore(models_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    frame = np.zeros((480, 480, 3), np.uint8)  # shrunk by 2/3 into the 320x320 input
    options = Options(face_detector_model=model, face_detector_size="320x320")
    (face,) = detect_faces(frame, options, store)
    scale = 480 / 320
    assert face.bbox == pytest.approx(np.array([112 - 32, 80 - 16, 112 + 48, 80 + 64]) * scale)
    assert face.landmark_5[0] == pytest.approx(np.array([112 - 16, 80 - 16]) * scale)


def test_a_user_detector_model_that_is_missing_is_named(tmp_path: Path) -> None:
    store = ModelStore(models_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ModelMissingError, match=r"scrfd_2\.5g\.onnx"):
        detect_faces(np.zeros((64, 64, 3), np.uint8), Options(face_detector_model="scrfd_2.5g"), store)
