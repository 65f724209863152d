"""The face debugger draws, on a flat grey frame, each item where the face's geometry puts it and in FaceFusion's
colours (RGB here): the box red with a thicker light-red top, the detector's five red, the 5/68 green (cyan where
they are the detector's), the 68 green, the 68/5 (fan_68_5's stand-in, a fixed linear map) cyan, the mask's outline
around the face, a face the tracker filled in orange; nothing else changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from mask_standins import COVERING_RGB, occluder_standin
from standins import fan_68_5_map, fan_68_5_standin

from facefusion_provider.engine.align import estimate_matrix, invert_affine, transform_points
from facefusion_provider.engine.face import Face, Frame, detector_5, pack_faces, unpack_faces
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.face_debugger import (
    BOX_TOP,
    CYAN,
    GREEN,
    ORANGE,
    PROCESSOR,
    RED,
    DebugFaces,
    line_scale,
)
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.processors.registry import analysis_needs
from facefusion_provider.options import Options

from .builders import StoreFactory, face_at, face_with_68

GREY = 128
HEIGHT, WIDTH = 540, 720  # two pixels a line and dot radius


def _frame() -> Frame:
    return np.full((HEIGHT, WIDTH, 3), GREY, np.uint8)


def _draw(
    models_dir: Path,
    store_for: StoreFactory,
    items: list[str],
    face: Face,
    frame: Frame | None = None,
    **options: object,
) -> Frame:
    chosen = Options(processors=["face_debugger"], face_debugger_items=items, **options)  # type: ignore[arg-type]
    step = PROCESSOR.load(chosen, {}, store_for(models_dir), FaceStats())
    assert isinstance(step, DebugFaces)
    (drawn,) = step([_frame() if frame is None else frame], [[face]], None)
    return drawn


def _colour_at(frame: Frame, point: np.ndarray) -> tuple[int, ...]:
    x, y = (int(v) for v in point.astype(np.int32))
    return tuple(int(v) for v in frame[y, x])


def test_the_box_is_red_with_a_thicker_light_red_top(models_dir: Path, store_for: StoreFactory) -> None:
    face = face_at((360, 270), 160)
    drawn = _draw(models_dir, store_for, ["bounding-box"], face)
    x1, y1, x2, y2 = (int(v) for v in face.bbox.astype(np.int32))
    middle_y, middle_x = (y1 + y2) // 2, (x1 + x2) // 2
    assert tuple(drawn[middle_y, x1]) == RED and tuple(drawn[middle_y, x2]) == RED
    assert tuple(drawn[y2, middle_x]) == RED and tuple(drawn[y1, middle_x]) == BOX_TOP
    assert line_scale(drawn) == 2
    changed = (drawn != GREY).any(axis=2)
    assert not changed[middle_y, x1 + 5 : x2 - 5].any() and not changed[: y1 - 5].any()


def test_the_detectors_five_are_red_and_the_five_from_the_68_green_or_cyan(
    models_dir: Path, store_for: StoreFactory
) -> None:
    face = face_with_68((360, 270), 200)
    drawn = _draw(models_dir, store_for, ["face-landmark-5"], face)
    assert all(_colour_at(drawn, point) == RED for point in face.landmark_5)
    fell_back = _draw(models_dir, store_for, ["face-landmark-5/68"], face)  # the five are the detector's
    assert all(_colour_at(fell_back, point) == CYAN for point in face.landmark_5)
    detected = face.landmark_5 + np.float32(6.0)
    found = face.with_(extras={"landmark_5_detector": detected, "landmark_dense_score": 0.9})
    drawn = _draw(models_dir, store_for, ["face-landmark-5", "face-landmark-5/68"], found)
    assert all(_colour_at(drawn, point) == GREEN for point in face.landmark_5)
    assert all(_colour_at(drawn, point) == RED for point in detected)  # 8 pixels off: clear of the green dots


def test_a_face_the_tracker_filled_in_is_drawn_orange(models_dir: Path, store_for: StoreFactory) -> None:
    face = face_with_68((360, 270), 200).with_(extras={"filled": True, "track": 1})
    drawn = _draw(models_dir, store_for, ["bounding-box", "face-landmark-5", "face-landmark-68"], face)
    assert all(_colour_at(drawn, point) == ORANGE for point in face.landmark_5)
    assert tuple(drawn[int(face.bbox[3]), int(face.bbox[0] + face.bbox[2]) // 2]) == RED  # the box keeps its colour


def test_the_68_are_green_and_the_68_from_the_five_cyan(models_dir: Path, store_for: StoreFactory) -> None:
    face = face_with_68((360, 270), 220)
    drawn = _draw(models_dir, store_for, ["face-landmark-68"], face)
    assert all(_colour_at(drawn, point) == GREEN for point in face.landmark_dense)  # type: ignore[union-attr]
    fan_68_5_standin(models_dir)
    drawn = _draw(models_dir, store_for, ["face-landmark-68/5"], face)
    matrix = estimate_matrix(face.landmark_5, "ffhq_512", 1)
    unit = transform_points(face.landmark_5, matrix).reshape(1, 10) @ fan_68_5_map()
    expected = transform_points(unit.reshape(68, 2), invert_affine(matrix))
    inside = [point for point in expected if 0 <= point[0] < WIDTH and 0 <= point[1] < HEIGHT]
    assert len(inside) > 30
    assert all(_colour_at(drawn, point) == CYAN for point in inside)


def test_the_mask_outline_surrounds_the_face(models_dir: Path, store_for: StoreFactory) -> None:
    face = face_at((360, 270), 160)
    drawn = _draw(models_dir, store_for, ["face-mask"], face, face_mask_types=["box"])
    changed = (drawn != GREY).any(axis=2)
    assert {tuple(int(v) for v in pixel) for pixel in drawn[changed]} == {CYAN}  # no 68: the five are the detector's
    row = np.flatnonzero(changed[270])
    column = np.flatnonzero(changed[:, 360])
    assert row.min() < 300 < 420 < row.max() and column.min() < 230 < 320 < column.max()
    assert not changed[250:290, 330:390].any()  # inside the outline: untouched
    padded = _draw(models_dir, store_for, ["face-mask"], face, face_mask_types=["box"], face_mask_padding=(20, 0, 0, 0))
    assert np.flatnonzero((padded != GREY).any(axis=2)[:, 360]).min() > column.min() + 10  # the top comes down


def test_the_mask_outline_leaves_out_what_the_occluder_says_covers_the_face(
    models_dir: Path, store_for: StoreFactory
) -> None:
    occluder_standin(models_dir / "xseg_1.onnx")
    face = face_at((360, 270), 160)
    frame = _frame()
    frame[290:, :] = COVERING_RGB  # the lower part of the face covered
    box = _draw(models_dir, store_for, ["face-mask"], face, frame, face_mask_types=["box"])
    occluded = _draw(models_dir, store_for, ["face-mask"], face, frame, face_mask_types=["box", "occlusion"])
    outline = (occluded != frame).any(axis=2)[:, 360]
    assert np.flatnonzero(outline).max() < np.flatnonzero((box != frame).any(axis=2)[:, 360]).max() - 20
    assert abs(int(np.flatnonzero(outline).max()) - 290) <= 12  # the outline's bottom follows the cover's edge


def test_the_debugger_reads_faces_and_the_dense_landmarks_only_for_items_that_draw_them() -> None:
    box = Options(processors=["face_debugger"], face_debugger_items=["bounding-box", "face-landmark-5"])
    assert analysis_needs(box) == AnalysisNeeds(faces=True)
    assert analysis_needs(Options(processors=["face_debugger"])) == AnalysisNeeds(faces=True, landmarks="mesh")
    fan = Options(processors=["face_debugger"], face_landmarker_model="2dfan4")
    assert analysis_needs(fan) == AnalysisNeeds(faces=True, landmarks="2dfan4")


def test_a_stored_analysis_keeps_the_detectors_five() -> None:
    face = face_with_68((360, 270), 200)
    found = face.with_(extras={"landmark_5_detector": face.landmark_5 + np.float32(6.0), "landmark_dense_score": 0.9})
    (kept, plain), empty = unpack_faces(pack_faces([[found, face], []]))
    np.testing.assert_array_equal(detector_5(kept), face.landmark_5 + np.float32(6.0))
    np.testing.assert_array_equal(detector_5(plain), face.landmark_5)
    assert "landmark_5_detector" not in plain.extras and empty == []
