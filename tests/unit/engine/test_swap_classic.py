"""The offline classic swap on real faces: identity really moves (per an independent judge), the rest stays.

On video (the demo clip and a graded second clip) see test_swap_classic_look.py.
"""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from skimage.color import rgb2lab

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.landmarks import landmark_face_mesh
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.swap_classic import (
    MESH_INNER_LIPS,
    ClassicSource,
    classic_face_mask,
    classic_source_from_json,
    classic_source_to_json,
    make_classic_source,
    swap_face_classic,
)
from facefusion_provider.options import Options

from .conftest import IdentityJudge, meshed_face

CLEAR_MARGIN = 0.08  # dlib distances: one person's frames differ by ~0.25, different people by 0.6-0.9


def classic_source(frame: Frame, options: Options, store: ModelStore) -> ClassicSource:
    return make_classic_source(frame, meshed_face(frame, options, store))


@pytest.mark.parametrize(("source_name", "target_name"), [("astronaut", "grace_hopper"), ("grace_hopper", "astronaut")])
def test_photo_swap_carries_the_source_identity(
    source_name: str,
    target_name: str,
    request: pytest.FixtureRequest,
    options: Options,
    store: ModelStore,
    judge: IdentityJudge,
) -> None:
    source: Frame = request.getfixturevalue(source_name)
    target: Frame = request.getfixturevalue(target_name)
    swapped = swap_face_classic(
        target, meshed_face(target, options, store), classic_source(source, options, store), options
    )
    result = judge.descriptor(swapped)
    to_source = judge.distance(result, judge.descriptor(source))
    to_original = judge.distance(result, judge.descriptor(target))
    assert to_source < to_original - CLEAR_MARGIN, (
        f"swapped face: {to_source:.3f} from source, {to_original:.3f} from original"
    )


def test_a_target_face_much_larger_than_the_source_is_swapped_too(
    grace_hopper: Frame, astronaut: Frame, options: Options, store: ModelStore, judge: IdentityJudge
) -> None:
    big = np.asarray(cv2.resize(grace_hopper, None, fx=2.5, fy=2.5, interpolation=cv2.INTER_CUBIC))
    face = meshed_face(big, options, store)
    source = classic_source(astronaut, options, store)
    swapped = swap_face_classic(big, face, source, options)
    mask = classic_face_mask(big, face, source, options)
    assert np.array_equal(swapped[mask == 0], big[mask == 0])
    where = judge.locate(big, upsample=0)
    result = judge.descriptor(swapped, where)
    to_source = judge.distance(result, judge.descriptor(astronaut))
    to_original = judge.distance(result, judge.descriptor(big, where))
    assert to_source < to_original - CLEAR_MARGIN, (
        f"swapped face: {to_source:.3f} from source, {to_original:.3f} from original"
    )


@pytest.fixture(scope="module")
def swap_case(
    grace_hopper: Frame, astronaut: Frame, options: Options, store: ModelStore
) -> tuple[Frame, Face, ClassicSource]:
    """Grace Hopper's face onto the astronaut (who smiles with her teeth showing)."""
    return astronaut, meshed_face(astronaut, options, store), classic_source(grace_hopper, options, store)


def test_pixels_outside_the_face_mask_are_unchanged(
    swap_case: tuple[Frame, Face, ClassicSource], options: Options
) -> None:
    target, face, source = swap_case
    swapped = swap_face_classic(target, face, source, options)
    mask = classic_face_mask(target, face, source, options)
    assert np.array_equal(swapped[mask == 0], target[mask == 0])
    assert np.abs(swapped.astype(int) - target.astype(int))[mask > 0.5].mean() > 5, "the face did not change"
    # Independently of the mask: nothing changes outside the box of the target's mesh.
    assert face.landmark_dense is not None
    (x1, y1), (x2, y2) = (
        np.floor(face.landmark_dense.min(axis=0)).astype(int),
        np.ceil(face.landmark_dense.max(axis=0)).astype(int),
    )
    outside = np.ones(target.shape[:2], bool)
    outside[y1 : y2 + 1, x1 : x2 + 1] = False
    assert np.array_equal(swapped[outside], target[outside])


def test_colour_correction_is_on_by_default_and_switchable(swap_case: tuple[Frame, Face, ClassicSource]) -> None:
    target, face, source = swap_case
    on = Options(face_swapper_blend=100)
    off = Options(face_swapper_blend=100, face_swapper_color_correction=False)
    corrected, uncorrected = swap_face_classic(target, face, source, on), swap_face_classic(target, face, source, off)
    mask = classic_face_mask(target, face, source, on)
    assert np.array_equal(mask, classic_face_mask(target, face, source, off)), "the switch changes colours only"
    assert np.array_equal(corrected[mask == 0], uncorrected[mask == 0])
    inside = mask > 0.99

    def mean_chroma(image: Frame) -> np.ndarray:
        return np.asarray(rgb2lab(image[inside][None])[0, :, 1:].mean(axis=0))

    # Grace Hopper's skin is far ruddier than the astronaut's: only the corrected face takes the astronaut's tone.
    wanted = mean_chroma(target)
    assert np.linalg.norm(mean_chroma(corrected) - wanted) < 0.5 * np.linalg.norm(mean_chroma(uncorrected) - wanted)


def test_the_targets_own_mouth_interior_is_kept(swap_case: tuple[Frame, Face, ClassicSource], options: Options) -> None:
    target, face, source = swap_case
    assert face.landmark_dense is not None
    mouth = np.zeros(target.shape[:2], np.uint8)
    cv2.fillPoly(mouth, [np.round(face.landmark_dense[list(MESH_INNER_LIPS)]).astype(np.int32)], 255)
    inside = cv2.erode(mouth, np.ones((3, 3), np.uint8)) > 0
    assert inside.sum() > 50, "the astronaut's mouth is open in a smile"
    swapped = swap_face_classic(target, face, source, options)
    assert np.array_equal(swapped[inside], target[inside])


def test_target_pose_and_expression_stay(
    swap_case: tuple[Frame, Face, ClassicSource], options: Options, store: ModelStore
) -> None:
    target, face, source = swap_case
    swapped = swap_face_classic(target, face, source, options)
    assert face.landmark_dense is not None
    after = landmark_face_mesh(swapped, face, store).landmark_dense
    assert after is not None
    size = float(np.ptp(face.landmark_dense[:, 0]))
    assert np.median(np.linalg.norm(after - face.landmark_dense, axis=1)) < 0.03 * size


def test_blend_ratio_scales_the_change(swap_case: tuple[Frame, Face, ClassicSource]) -> None:
    target, face, source = swap_case
    assert np.array_equal(swap_face_classic(target, face, source, Options(face_swapper_blend=0)), target)
    full = swap_face_classic(target, face, source, Options(face_swapper_blend=100)).astype(float) - target
    half = swap_face_classic(target, face, source, Options(face_swapper_blend=50)).astype(float) - target
    # Where the full change runs into the end of the 0-255 range, half of it is not clipped: those pixels say nothing.
    unclipped = np.all((target.astype(float) + full > 0) & (target.astype(float) + full < 255), axis=2)
    changed = (np.abs(full) > 20) & unclipped[:, :, np.newaxis]
    assert changed.sum() > 1000
    assert np.abs(half[changed] - full[changed] / 2).max() <= 1.0


def test_mask_padding_keeps_that_part_of_the_face(swap_case: tuple[Frame, Face, ClassicSource]) -> None:
    target, face, source = swap_case
    assert face.landmark_dense is not None
    top, bottom = face.landmark_dense[:, 1].min(), face.landmark_dense[:, 1].max()
    swapped = swap_face_classic(target, face, source, Options(face_mask_padding=(50, 0, 0, 0)))
    changed_rows = np.nonzero(np.any(swapped != target, axis=(1, 2)))[0]
    assert changed_rows.size and changed_rows.min() >= top + 0.5 * (bottom - top) - 1


def test_a_softer_mask_blur_changes_fewer_edge_pixels(swap_case: tuple[Frame, Face, ClassicSource]) -> None:
    target, face, source = swap_case
    sharp = classic_face_mask(target, face, source, Options(face_mask_blur=0.0))
    soft = classic_face_mask(target, face, source, Options(face_mask_blur=0.8))
    assert np.unique(sharp).tolist() == [0.0, pytest.approx(0.85)], "no blur: a hard edge at the blend ratio"
    assert ((soft > 0) & (soft < 0.8)).sum() > ((sharp > 0) & (sharp < 0.8)).sum()
    assert np.all(soft[sharp == 0] == 0), "feathering stays inside the face area"


def test_source_survives_the_trip_through_json(grace_hopper: Frame, options: Options, store: ModelStore) -> None:
    source = classic_source(grace_hopper, options, store)
    restored = classic_source_from_json(json.loads(json.dumps(classic_source_to_json(source))))
    assert np.array_equal(restored.image, source.image)
    assert np.allclose(restored.landmarks, source.landmarks, atol=1e-3)
    assert np.array_equal(restored.triangles, source.triangles)
    assert len(source.triangles) > 800, "a dense triangulation of 468 points"


def test_a_face_cut_by_the_frame_edge_is_swapped_inside_the_frame(
    astronaut: Frame, grace_hopper: Frame, options: Options, store: ModelStore
) -> None:
    cut = np.ascontiguousarray(astronaut[:, 215:])  # the left part of her face is outside the frame
    face = meshed_face(cut, options, store)
    assert face.landmark_dense is not None and face.landmark_dense[:, 0].min() < 0, "the mesh reaches past the edge"
    source = classic_source(grace_hopper, options, store)
    swapped = swap_face_classic(cut, face, source, options)
    mask = classic_face_mask(cut, face, source, options)
    assert swapped.shape == cut.shape
    assert np.array_equal(swapped[mask == 0], cut[mask == 0])
    assert (mask > 0).sum() > 1000
