"""ArcFace embeddings and GFPGAN enhancement with stand-in models of the real names and shapes."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from facefusion_provider.engine.align import estimate_similarity, template_points
from facefusion_provider.engine.enhance import enhance_face
from facefusion_provider.engine.recognize import embed_face, face_distance
from facefusion_provider.options import Options

from .builders import StoreFactory, face_at, gfpgan_model, mean_colour_model


def test_embedding_is_the_normalised_output_of_an_rgb_minus_one_to_one_crop(
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    mean_colour_model(models_dir / "arcface_w600k_r50.onnx", input_size=112, output_size=512)
    frame = np.zeros((240, 320, 3), np.uint8)
    frame[:, :] = (200, 50, 10)  # RGB

    embedding = embed_face(frame, face_at((160.0, 120.0), 90.0), store_for(models_dir), Options())

    means = np.array([200, 50, 10]) / 127.5 - 1.0
    expected = np.zeros(512)
    expected[:3] = means / np.linalg.norm(means)
    assert embedding.shape == (512,) and embedding.dtype == np.float32
    np.testing.assert_allclose(embedding, expected, atol=1e-4)


def test_embedding_sees_the_face_aligned_to_the_112_template(
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    mean_colour_model(models_dir / "arcface_w600k_r50.onnx", input_size=112, output_size=512)
    face = face_at((160.0, 120.0), 90.0, 30.0)
    # Paint the frame so that exactly the 112 crop's square is white: its mean is then 1 in every channel.
    inverse = cv2.invertAffineTransform(estimate_similarity(face.landmark_5, template_points("arcface_112", 112)))
    frame = np.asarray(cv2.warpAffine(np.full((112, 112, 3), 255, np.uint8), inverse, (320, 240)), np.uint8)
    embedding = embed_face(frame, face, store_for(models_dir), Options())

    np.testing.assert_allclose(embedding[:3], np.full(3, 1 / np.sqrt(3)), atol=0.02)


def test_face_distance_is_one_minus_cosine() -> None:
    a = np.array([1.0, 0.0, 0.0])
    assert face_distance(a, a * 5) == pytest.approx(0.0)
    assert face_distance(a, [0.0, 2.0, 0.0]) == pytest.approx(1.0)
    assert face_distance(a, -a) == pytest.approx(2.0)


@pytest.mark.parametrize("blend", [100, 80, 30])
def test_enhancer_output_is_pasted_back_blended_by_face_enhancer_blend(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    blend: int,
) -> None:
    gfpgan_model(models_dir / "gfpgan_1.4.onnx", kind="flat", colour=(-1.0, 0.0, 1.0))
    face = face_at((160.0, 120.0), 80.0)
    options = Options(processors=["face_enhancer"], face_enhancer_blend=blend, face_mask_blur=0.3)

    result = enhance_face(textured_frame, face, options, store_for(models_dir))

    inverse = cv2.invertAffineTransform(estimate_similarity(face.landmark_5, template_points("ffhq_512", 512)))
    x, y = (inverse @ np.array([256.0, 256.0, 1.0])).round().astype(int)
    enhanced = np.array([0.0, 128.0, 255.0])  # (-1, 0, 1) mapped to 0..255 and rounded, as FaceFusion does
    expected = textured_frame[y, x] * (1 - blend / 100) + enhanced * blend / 100
    np.testing.assert_allclose(result[y, x], expected, atol=1.0)
    np.testing.assert_array_equal(result[:20], textured_frame[:20])  # far from the face: untouched


def test_an_identity_enhancer_leaves_the_face_as_it_was(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    gfpgan_model(models_dir / "gfpgan_1.4.onnx", kind="identity")

    result = enhance_face(
        textured_frame, face_at((160.0, 120.0), 80.0), Options(face_enhancer_blend=100), store_for(models_dir)
    )

    difference = np.abs(result.astype(np.int16) - textured_frame.astype(np.int16))
    assert difference.mean() < 1.0 and np.percentile(difference, 99) <= 12
