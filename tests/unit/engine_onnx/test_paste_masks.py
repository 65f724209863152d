"""The inswapper path's paste-back masks (face_mask_types box / area, face_mask_areas) and its colour correction on
skin, with a flat-colour stand-in swapper: what it paints shows exactly where the mask let it through."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from facefusion_provider.engine.face import Face
from facefusion_provider.engine.swap_models import swap_face
from facefusion_provider.options import Options

from .builders import StoreFactory, face_at, face_with_68, inswapper_model

COLOUR = (0.25, 0.5, 0.75)
PAINT = np.array(COLOUR) * 255


def swap_options(**changes: object) -> Options:
    base = {"face_swapper_model": "inswapper_128", "face_swapper_blend": 100, "face_swapper_color_correction": False}
    return Options.model_validate({**base, **changes})


def hull(shape: tuple[int, int], points: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    return mask > 0


def grown(mask: np.ndarray, pixels: int) -> np.ndarray:
    return cv2.dilate(mask.astype(np.uint8), np.ones((2 * pixels + 1,) * 2, np.uint8)) > 0


def shrunk(mask: np.ndarray, pixels: int) -> np.ndarray:
    return cv2.erode(mask.astype(np.uint8), np.ones((2 * pixels + 1,) * 2, np.uint8)) > 0


@pytest.fixture
def flat_store(models_dir: Path, store_for: StoreFactory) -> object:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=COLOUR)
    return store_for(models_dir)


def painted(result: np.ndarray, frame: np.ndarray) -> np.ndarray:
    return np.any(result != frame, axis=2)


def test_an_area_mask_paints_the_landmark_hull_only(textured_frame: np.ndarray, flat_store: object) -> None:
    face = face_with_68((160.0, 120.0), 110.0, 10.0)
    assert face.landmark_dense is not None
    result = swap_face(textured_frame, face, np.ones(512), swap_options(face_mask_types=["area"]), flat_store)  # type: ignore[arg-type]

    face_hull = hull(textured_frame.shape[:2], face.landmark_dense)
    assert not np.any(painted(result, textured_frame) & ~grown(face_hull, 2)), "paint outside the landmarks' hull"
    core = shrunk(face_hull, 12)  # past the feathered rim
    assert core.sum() > 800
    assert np.abs(result[core].astype(float) - PAINT).max() <= 1.5


def test_box_and_area_combine_by_their_minimum(textured_frame: np.ndarray, flat_store: object) -> None:
    face = face_with_68((160.0, 120.0), 110.0)
    assert face.landmark_dense is not None
    both = swap_options(face_mask_types=["box", "area"], face_mask_padding=(60, 0, 0, 0), face_mask_blur=0.0)
    result = swap_face(textured_frame, face, np.ones(512), both, flat_store)  # type: ignore[arg-type]
    box_only = swap_face(
        textured_frame,
        face,
        np.ones(512),
        swap_options(face_mask_padding=(60, 0, 0, 0), face_mask_blur=0.0),
        flat_store,  # type: ignore[arg-type]
    )

    face_hull = hull(textured_frame.shape[:2], face.landmark_dense)
    in_box = painted(box_only, textured_frame)
    assert np.all(painted(result, textured_frame) <= (in_box & grown(face_hull, 2)))
    assert (in_box & ~grown(face_hull, 2)).sum() > 500, "the box alone reaches past the face"
    brows_y = face.landmark_dense[17:27, 1].max()
    assert not np.any(painted(result, textured_frame)[: int(brows_y)]), "the top padding of the box still holds"


def test_the_mouth_area_alone_paints_around_the_lips(textured_frame: np.ndarray, flat_store: object) -> None:
    face = face_with_68((160.0, 120.0), 110.0)
    assert face.landmark_dense is not None
    options = swap_options(face_mask_types=["area"], face_mask_areas=["mouth"])
    result = swap_face(textured_frame, face, np.ones(512), options, flat_store)  # type: ignore[arg-type]

    lips = hull(textured_frame.shape[:2], face.landmark_dense[48:60])
    changed = painted(result, textured_frame)
    assert not np.any(changed & ~grown(lips, 2))
    assert changed[lips].mean() > 0.8


def test_upper_and_lower_face_areas_split_at_the_nose(textured_frame: np.ndarray, flat_store: object) -> None:
    face = face_with_68((160.0, 120.0), 110.0)
    assert face.landmark_dense is not None
    nose_base_y = face.landmark_dense[31:36, 1].mean()
    upper = painted(
        swap_face(
            textured_frame,
            face,
            np.ones(512),
            swap_options(face_mask_types=["area"], face_mask_areas=["upper-face"]),
            flat_store,
        ),  # type: ignore[arg-type]
        textured_frame,
    )
    lower = painted(
        swap_face(
            textured_frame,
            face,
            np.ones(512),
            swap_options(face_mask_types=["area"], face_mask_areas=["lower-face"]),
            flat_store,
        ),  # type: ignore[arg-type]
        textured_frame,
    )
    rows = np.arange(textured_frame.shape[0])[:, np.newaxis]
    assert upper.sum() > 1000 and lower.sum() > 1000
    assert not np.any(upper & (rows > nose_base_y + 3)), "upper-face ends at the nose base"
    assert not np.any(lower & (rows < nose_base_y - 14)), "lower-face starts at the nose base (the jaw's top points)"


def test_an_area_mask_without_landmarks_is_a_clear_error(textured_frame: np.ndarray, flat_store: object) -> None:
    face = face_at((160.0, 120.0), 110.0)
    with pytest.raises(ValueError, match="dense landmarks"):
        swap_face(textured_frame, face, np.ones(512), swap_options(face_mask_types=["area"]), flat_store)  # type: ignore[arg-type]


def two_tone_face(face: Face) -> np.ndarray:
    """A grey background, a skin-coloured face hull, and very dark eyes and lips."""
    assert face.landmark_dense is not None
    frame = np.full((240, 320, 3), (90, 110, 130), np.uint8)
    cv2.fillConvexPoly(frame, cv2.convexHull(np.round(face.landmark_dense).astype(np.int32)), (200, 140, 110))
    for indices in (range(36, 42), range(42, 48), range(48, 60)):
        cv2.fillPoly(frame, [np.round(face.landmark_dense[list(indices)]).astype(np.int32)], (20, 10, 10))
    return frame


def test_colour_correction_is_measured_on_skin_when_the_landmarks_are_known(flat_store: object) -> None:
    face = face_with_68((160.0, 120.0), 110.0)
    frame = two_tone_face(face)
    options = swap_options(face_swapper_color_correction=True, face_mask_blur=0.0)
    on_skin = swap_face(frame, face, np.ones(512), options, flat_store)  # type: ignore[arg-type]
    on_box = swap_face(frame, face.with_(landmark_dense=None), np.ones(512), options, flat_store)  # type: ignore[arg-type]

    assert face.landmark_dense is not None
    cheeks = shrunk(hull(frame.shape[:2], face.landmark_dense), 14)
    for indices in (range(36, 42), range(42, 48), range(48, 60)):
        cheeks &= ~grown(hull(frame.shape[:2], face.landmark_dense[list(indices)]), 8)
    skin = np.array((200, 140, 110), float)
    # The flat stand-in has no spread of its own: the corrected face is the measured mean colour.
    assert np.abs(on_skin[cheeks].astype(float).mean(axis=0) - skin).max() <= 3
    assert np.abs(on_box[cheeks].astype(float).mean(axis=0) - skin).max() > 15, "the box mixes in eyes and background"
