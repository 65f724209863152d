"""Faces followed by their face mesh between detections (``face_detector_interval``), on the carphone clip: the followed
mesh stays on the one a detection gives, the detector runs once an interval, and a cut to a picture without the face,
and the face coming back into an empty picture, are each seen on their own frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
import pytest

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.processors import chain
from facefusion_provider.engine.processors.chain import FrameProcessor, build_frame_processor, prepare_identity
from facefusion_provider.options import Options

INTERVAL = 8


def _processor(image_files: dict[str, str], interval: int) -> FrameProcessor:
    options = Options(face_detector_interval=interval, execution_thread_count=1)
    return build_frame_processor(options, prepare_identity([image_files["astronaut"]], None, options, None), None)


@pytest.fixture
def detected_frames(monkeypatch: pytest.MonkeyPatch, carphone_frames: list[Frame]) -> list[int]:
    """Counts the detector's runs on the clip's frames (not on the source photo): one entry per call."""
    detect: Callable[..., list[Face]] = chain.detect_faces
    calls: list[int] = []

    def counted(frame: Frame, *args: Any) -> list[Face]:
        if frame.shape == carphone_frames[0].shape:
            calls.append(frame.shape[0])
        return detect(frame, *args)

    monkeypatch.setattr(chain, "detect_faces", counted)
    return calls


def _size(face: Face) -> float:
    return float(max(face.bbox[2:] - face.bbox[:2]))


def test_a_followed_face_stays_where_detection_puts_it(
    carphone_frames: list[Frame], image_files: dict[str, str], detected_frames: list[int]
) -> None:
    detected, _ = _processor(image_files, 1).analyse_followed(carphone_frames, None)
    assert len(detected_frames) == len(carphone_frames)
    detected_frames.clear()
    followed, state = _processor(image_files, INTERVAL).analyse_followed(carphone_frames, None)
    assert len(detected_frames) == len(carphone_frames) // INTERVAL  # once an interval: the mesh never lost the face
    assert state is not None and state.since_detection == (len(carphone_frames) - 1) % INTERVAL
    for number, (by_detection, by_mesh) in enumerate(zip(detected, followed, strict=True)):
        (reference,), (face,) = by_detection, by_mesh
        assert reference.landmark_dense is not None and face.landmark_dense is not None
        if number % INTERVAL == 0:  # a detection frame: the very faces a detection gives
            assert np.array_equal(face.landmark_dense, reference.landmark_dense)
        # The mesh's own frame-to-frame jitter on this clip is about 1.3 % of the face's size (mean point
        # acceleration): a followed mesh lies within a few times that of the detected one, its box within 10 %.
        distance = np.linalg.norm(face.landmark_dense - reference.landmark_dense, axis=1).mean()
        assert distance < 0.03 * _size(reference), number
        assert np.abs(face.bbox - reference.bbox).max() < 0.1 * _size(reference), number
        assert np.abs(face.landmark_5 - reference.landmark_5).max() < 0.06 * _size(reference), number


def test_a_cut_and_the_face_coming_back_are_each_seen_on_their_own_frame(
    carphone_frames: list[Frame], no_face: Frame, image_files: dict[str, str], detected_frames: list[int]
) -> None:
    height, width = carphone_frames[0].shape[:2]
    empty = np.ascontiguousarray(cv2.resize(no_face, (width, height), interpolation=cv2.INTER_AREA))
    clip = [*carphone_frames[:3], empty, empty, *carphone_frames[3:6]]
    processor = _processor(image_files, INTERVAL)
    faces, _ = processor.analyse_followed(clip, None)
    # Detected: the first frame, the cut (the mesh lost the face), the empty frame after it (nothing to follow), and
    # the face's return; followed on the frames after the first and after the return.
    assert [len(found) for found in faces] == [1, 1, 1, 0, 0, 1, 1, 1]
    assert len(detected_frames) == 4
    (back,) = faces[5]
    (detected,) = processor.analyse_batch([clip[5]])[0]
    assert back.landmark_dense is not None and detected.landmark_dense is not None
    assert np.array_equal(back.landmark_dense, detected.landmark_dense)


def test_under_the_tracker_or_without_a_mesh_every_frame_is_detected(
    carphone_frames: list[Frame], image_files: dict[str, str], detected_frames: list[int]
) -> None:
    options = Options(face_detector_interval=INTERVAL, face_tracker_score=0.3)
    processor = build_frame_processor(options, prepare_identity([image_files["astronaut"]], None, options, None), None)
    processor.analyse_followed(carphone_frames[:4], None)
    assert len(detected_frames) == 4
