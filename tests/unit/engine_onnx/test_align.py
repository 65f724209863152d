"""Five-point alignment onto FaceFusion's templates."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from facefusion_provider.engine.align import (
    estimate_similarity,
    invert_affine,
    template_points,
    transform_points,
    warp_face,
)

from .builders import face_at


def dot_centroids(crop: np.ndarray, expected: np.ndarray, radius: int = 6) -> np.ndarray:
    """The brightness-weighted centre of the dot nearest each expected point."""
    weights = crop[:, :, 0].astype(np.float64)
    found = []
    for x, y in expected:
        x0, y0 = round(x), round(y)
        window = weights[y0 - radius : y0 + radius + 1, x0 - radius : x0 + radius + 1]
        ys, xs = np.mgrid[y0 - radius : y0 + radius + 1, x0 - radius : x0 + radius + 1]
        found.append([(window * xs).sum() / window.sum(), (window * ys).sum() / window.sum()])
    return np.array(found)


@pytest.mark.parametrize(("angle", "size", "crop_size"), [(0.0, 90.0, 128), (25.0, 150.0, 128), (-15.0, 60.0, 256)])
def test_a_known_face_lands_on_the_128_template_within_a_pixel(angle: float, size: float, crop_size: int) -> None:
    face = face_at((160.0, 120.0), size, angle)
    frame = np.zeros((240, 320, 3), np.uint8)
    for x, y in face.landmark_5:
        # A dot drawn with sub-pixel precision (shift=4) at each landmark of the face.
        cv2.circle(frame, (round(x * 16), round(y * 16)), 2 * 16, (255, 255, 255), -1, cv2.LINE_AA, shift=4)

    crop, matrix = warp_face(frame, face.landmark_5, "arcface_128", crop_size)

    assert crop.shape == (crop_size, crop_size, 3)
    expected = template_points("arcface_128", crop_size)
    np.testing.assert_allclose(transform_points(face.landmark_5, matrix), expected, atol=1e-3)
    assert np.abs(dot_centroids(crop, expected) - expected).max() < 1.0


def test_similarity_fit_recovers_a_known_transform_and_inverts() -> None:
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 200, (5, 2))
    angle, scale, shift = np.deg2rad(33.0), 1.7, np.array([12.5, -40.0])
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    moved = points @ rotation.T * scale + shift

    matrix = estimate_similarity(points, moved)

    np.testing.assert_allclose(matrix[:, :2], scale * rotation, atol=1e-9)
    np.testing.assert_allclose(matrix[:, 2], shift, atol=1e-9)
    np.testing.assert_allclose(transform_points(moved, invert_affine(matrix)), points, atol=1e-3)


def test_templates_are_facefusions_pixel_values() -> None:
    np.testing.assert_allclose(
        template_points("arcface_128", 128),
        [[46.29, 51.70], [81.53, 51.50], [64.03, 71.74], [49.55, 92.37], [78.73, 92.20]],
        atol=0.01,
    )
    np.testing.assert_allclose(template_points("arcface_112", 112)[0], [38.2946, 51.6963], atol=1e-3)
