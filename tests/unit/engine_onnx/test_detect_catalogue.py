"""The detectors around the processors through ``detect_faces`` on stand-ins whose raw outputs are set
(``standins_catalogue.py``): yunet_2023_mar fed BGR 0..255 and its faces brought back to frame pixels, and ``many``,
FaceFusion's three detectors pooled and suppressed together at IoU 0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from standins_catalogue import constant_standin, scrfd_raw, yoloface_raw, yunet_raw

from facefusion_provider.engine import detect
from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.options import Options

from .builders import StoreFactory

POINTS = np.array([[-20, -15], [20, -15], [0, 5], [-15, 25], [15, 25]], np.float32)  # around a box's centre


def points_in(box: tuple[float, float, float, float]) -> np.ndarray:
    return POINTS + np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2], np.float32)


def test_yunet_gets_the_letterboxed_frame_in_bgr_0_to_255_and_its_face_comes_back_in_frame_pixels(
    models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = (200.0, 150.0, 296.0, 270.0)
    constant_standin(models_dir, "yunet_2023_mar", yunet_raw(box, points_in(box), 0.8))
    frame = np.empty((960, 1280, 3), np.uint8)  # shrunk by half to 640x480
    frame[:] = (10, 120, 240)
    feeds: list[np.ndarray] = []
    run = detect.run_session

    def record(session: Any, given: dict[str, np.ndarray]) -> Any:
        feeds.extend(given.values())
        return run(session, given)

    monkeypatch.setattr(detect, "run_session", record)

    (face,) = detect_faces(frame, Options(face_detector_model="yunet_2023_mar"), store_for(models_dir))

    np.testing.assert_allclose(face.bbox, np.asarray(box) * 2, atol=1e-3)
    np.testing.assert_allclose(face.landmark_5, points_in(box) * 2, atol=1e-3)
    assert face.score == pytest.approx(0.8)
    (fed,) = feeds
    assert fed.shape == (1, 3, 640, 640) and fed.dtype == np.float32
    np.testing.assert_array_equal(fed[0, :, :480].reshape(3, -1).T, np.tile([240, 120, 10], (480 * 640, 1)))
    assert fed[0, :, 480:].max() == 0, "black below the content"


def test_many_pools_facefusions_three_detectors_and_suppresses_at_a_tenth(
    models_dir: Path, store_for: StoreFactory
) -> None:
    left, right = (100.0, 100.0, 200.0, 220.0), (400.0, 120.0, 480.0, 220.0)
    near_left = (150.0, 130.0, 250.0, 250.0)  # IoU with ``left`` 0.23: kept at 0.4, suppressed at 0.1
    constant_standin(models_dir, "retinaface_10g", scrfd_raw(left, points_in(left), 0.9))
    constant_standin(models_dir, "scrfd_2.5g", scrfd_raw(left, points_in(left), 0.0))  # finds nothing
    yolo = yoloface_raw([(right, points_in(right), 0.8), (near_left, points_in(near_left), 0.7)])
    constant_standin(models_dir, "yoloface_8n", yolo)
    store = store_for(models_dir)
    frame = np.zeros((640, 640, 3), np.uint8)

    pooled = detect_faces(frame, Options(face_detector_model="many"), store)
    yolo_alone = detect_faces(frame, Options(face_detector_model="yoloface_8n"), store)
    retinaface_alone = detect_faces(frame, Options(face_detector_model="retinaface_10g"), store)

    assert [face.score for face in pooled] == pytest.approx([0.9, 0.8])
    np.testing.assert_allclose([face.bbox for face in pooled], [left, right], atol=1e-3)
    np.testing.assert_allclose(pooled[0].landmark_5, points_in(left), atol=1e-3)
    np.testing.assert_allclose(pooled[1].landmark_5, points_in(right), atol=1e-3)
    np.testing.assert_allclose([face.bbox for face in yolo_alone], [right, near_left], atol=1e-3)
    np.testing.assert_allclose([face.bbox for face in retinaface_alone], [left], atol=1e-3)
