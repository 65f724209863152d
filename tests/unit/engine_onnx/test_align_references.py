"""Every warp template's alignment against public reference implementations: scikit-image's SimilarityTransform
(Umeyama's least squares) fits the same matrix for each template, and its own warp cuts the same crop from it, for the
templates of FaceFusion's newer models (mtcnn_512 HifiFace's, styleganex_384 the age modifier's wider crop,
dfl_whole_face the DeepFaceLab models'); InsightFace's ``face_align`` gives the arcface templates at the sizes the
face classifier (224) and LivePortrait (512) cut them, and the classifier's input is InsightFace's ``norm_crop``."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
from insightface.utils import face_align
from skimage.transform import SimilarityTransform, warp

from facefusion_provider.engine.align import WarpTemplate, estimate_matrix, template_points, warp_face
from facefusion_provider.engine.classify import CLASSIFIER_SIZE, prepare_classifier_input
from facefusion_provider.engine.models import IMAGENET_MEAN, IMAGENET_STD

from .builders import face_at

pytestmark = pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")  # inside insightface

TEMPLATES: tuple[WarpTemplate, ...] = get_args(WarpTemplate)
NEW_TEMPLATES: list[tuple[WarpTemplate, int]] = [("mtcnn_512", 256), ("styleganex_384", 384), ("dfl_whole_face", 224)]
# (centre, size, angle): faces turned either way, the five points moved off the template so no fit is exact
FACES = [((160.0, 120.0), 90.0, 0.0), ((150.0, 130.0), 70.0, 17.0), ((170.0, 110.0), 110.0, -25.0)]


def noisy_points(center: tuple[float, float], size: float, angle: float) -> np.ndarray:
    return face_at(center, size, angle).landmark_5 + np.random.default_rng(5).normal(0, 1.5, (5, 2))


def skimage_matrix(points: np.ndarray, template: WarpTemplate, size: int) -> np.ndarray:
    fitted = SimilarityTransform.from_estimate(points, template_points(template, size))
    assert fitted, fitted
    return np.asarray(fitted.params[:2])


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("size", [112, 256, 384, 512, 1024])
@pytest.mark.parametrize(("center", "face_size", "angle"), FACES)
def test_each_templates_matrix_is_scikit_images_similarity_estimate(
    template: WarpTemplate, size: int, center: tuple[float, float], face_size: float, angle: float
) -> None:
    points = noisy_points(center, face_size, angle)
    np.testing.assert_allclose(
        estimate_matrix(points, template, size), skimage_matrix(points, template, size), atol=1e-4
    )


@pytest.mark.parametrize(("template", "size"), NEW_TEMPLATES)
@pytest.mark.parametrize(("center", "face_size", "angle"), FACES)
def test_the_new_templates_crops_are_scikit_images_warp(
    template: WarpTemplate,
    size: int,
    center: tuple[float, float],
    face_size: float,
    angle: float,
    textured_frame: np.ndarray,
) -> None:
    """Both sample the frame bilinearly at the same points: within the rounding of our 8-bit crop."""
    points = noisy_points(center, face_size, angle)
    crop, _ = warp_face(textured_frame, points, template, size)
    fitted = SimilarityTransform.from_estimate(points, template_points(template, size))
    theirs = warp(textured_frame, fitted.inverse, output_shape=(size, size), order=1, mode="edge", preserve_range=True)
    difference = np.abs(crop.astype(np.float64) - theirs)
    assert difference.max() <= 1.0 and difference.mean() < 0.3  # ours rounded to 8 bits, theirs not


@pytest.mark.parametrize(("template", "size"), [("arcface_112", 224), ("arcface_128", 256), ("arcface_128", 512)])
@pytest.mark.parametrize(("center", "face_size", "angle"), FACES)
def test_the_arcface_templates_at_the_classifiers_and_live_portraits_sizes_are_insightfaces(
    template: WarpTemplate, size: int, center: tuple[float, float], face_size: float, angle: float
) -> None:
    points = noisy_points(center, face_size, angle)
    np.testing.assert_allclose(
        estimate_matrix(points, template, size), face_align.estimate_norm(points, size), rtol=1e-6, atol=1e-5
    )


def test_the_face_classifiers_input_is_insightfaces_norm_crop_normalised(textured_frame: np.ndarray) -> None:
    """fairface's face: InsightFace's ArcFace crop at 224 (the face well inside the frame: InsightFace pads with black
    where this project repeats the edge), RGB / 255 by ImageNet's mean and deviation."""
    face = face_at((160.0, 120.0), 80.0, 12.0)
    crop = face_align.norm_crop(textured_frame, face.landmark_5, CLASSIFIER_SIZE).astype(np.float64)
    expected = ((crop / 255.0 - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None]
    ours = prepare_classifier_input(textured_frame, face)
    assert ours.shape == (1, 3, 224, 224)
    difference = np.abs(ours - expected) * 255.0 * np.asarray(IMAGENET_STD)[:, None, None]  # in levels of the crop
    assert difference.max() <= 1.0 + 1e-4 and (difference > 1e-3).mean() < 0.001
