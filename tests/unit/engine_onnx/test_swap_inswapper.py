"""The inswapper path end to end with stand-in models: emap projection, pixel boost, paste-back geometry, batching."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage.color import rgb2lab

from facefusion_provider.engine.face import Face
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.swap_models import (
    explode_pixel_boost,
    implode_pixel_boost,
    load_emap,
    source_latent,
    swap_face,
    swap_faces,
)
from facefusion_provider.options import Options

from .builders import StoreFactory, face_at, frame_to_crop_matrix, inswapper_model

COLOUR = (0.25, 0.5, 0.75)


def swap_options(**changes: object) -> Options:
    return Options.model_validate({"face_swapper_model": "inswapper_128", **changes})


def reference_box_mask(size: int, blur: float, padding: tuple[int, int, int, int]) -> np.ndarray:
    """FaceFusion's box mask, written out again here so the test does not reuse the code under test."""
    blur_amount = int(size * 0.5 * blur)
    blur_area = max(blur_amount // 2, 1)
    mask = np.ones((size, size), np.float32)
    mask[: max(blur_area, int(size * padding[0] / 100)), :] = 0
    mask[-max(blur_area, int(size * padding[2] / 100)) :, :] = 0
    mask[:, : max(blur_area, int(size * padding[3] / 100))] = 0
    mask[:, -max(blur_area, int(size * padding[1] / 100)) :] = 0
    if blur_amount > 0:
        mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), blur_amount * 0.25), np.float32)
    return mask


@pytest.mark.parametrize(
    ("blend", "blur", "padding", "angle"),
    [(100, 0.0, (0, 0, 0, 0), 0.0), (60, 0.3, (10, 0, 20, 5), 12.0), (85, 0.6, (0, 15, 0, 0), -20.0)],
)
def test_a_flat_colour_swapper_paints_exactly_the_masked_region_blended_by_the_ratio(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    blend: int,
    blur: float,
    padding: tuple[int, int, int, int],
    angle: float,
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=COLOUR)
    face = face_at((150.0, 125.0), 100.0, angle)
    options = swap_options(
        face_swapper_blend=blend, face_mask_blur=blur, face_mask_padding=padding, face_swapper_color_correction=False
    )

    result = swap_face(textured_frame, face, np.ones(512), options, store_for(models_dir))

    inverse = cv2.invertAffineTransform(frame_to_crop_matrix(face, 128))
    weight = cv2.warpAffine(reference_box_mask(128, blur, padding), inverse, (320, 240)).clip(0, 1) * blend / 100
    colour = np.array(COLOUR, np.float32) * 255
    expected = textured_frame * (1 - weight[..., None]) + colour * weight[..., None]
    assert np.abs(result.astype(np.float32) - expected).max() <= 1.0
    outside = weight == 0
    np.testing.assert_array_equal(result[outside], textured_frame[outside])
    assert (weight > 0.5 * blend / 100).sum() > 2000  # a real face-sized region was painted
    assert result.dtype == np.uint8 and result.shape == textured_frame.shape


def test_the_source_input_is_the_normalised_embedding_through_the_last_initializer(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    rng = np.random.default_rng(11)
    embedding = rng.uniform(0.1, 1.0, 512) * 3.0  # not normalised: its norm is about 38
    unit = embedding / np.linalg.norm(embedding)
    wanted = np.array([0.2, 0.6, 0.8])  # the first three latent values: painted as the face colour
    emap = rng.normal(0, 0.01, (512, 512)).astype(np.float32)
    emap[:, :3] = np.outer(unit, wanted)
    decoy = np.full((512, 512), 0.9, np.float32)
    path = inswapper_model(models_dir / "inswapper_128.onnx", kind="reveal", emap=emap, decoy=decoy)
    face = face_at((160.0, 120.0), 120.0, 5.0)

    options = swap_options(face_swapper_blend=100, face_swapper_color_correction=False)
    result = swap_face(textured_frame, face, embedding, options, store_for(models_dir))

    np.testing.assert_allclose(source_latent(embedding, load_emap(str(path)))[0, :3], wanted, atol=1e-5)
    inverse = cv2.invertAffineTransform(frame_to_crop_matrix(face, 128))
    x, y = (inverse @ np.array([64.0, 64.0, 1.0])).round().astype(int)
    np.testing.assert_allclose(result[y, x], wanted * 255, atol=1.0)


def test_pixel_boost_tiles_interleave_like_facefusion_and_round_trip() -> None:
    rng = np.random.default_rng(5)
    for size, total in ((256, 2), (512, 4)):
        crop = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)

        tiles = implode_pixel_boost(crop, total)

        assert tiles.shape == (total * total, 128, 128, 3)
        np.testing.assert_array_equal(tiles[total + 1], crop[1::total, 1::total])  # tile (a=1, b=1)
        np.testing.assert_array_equal(explode_pixel_boost(tiles, total), crop)


@pytest.mark.parametrize("boost", ["128x128", "256x256", "512x512"])
def test_pixel_boost_through_a_model_that_returns_its_input_reproduces_the_face(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    boost: str,
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="identity", batch="N")
    face = face_at((160.0, 120.0), 110.0, 8.0)
    options = swap_options(face_swapper_pixel_boost=boost, face_swapper_blend=100, face_mask_blur=0.0)

    result = swap_face(textured_frame, face, np.ones(512), options, store_for(models_dir))

    size = int(boost.partition("x")[0])
    inverse = cv2.invertAffineTransform(frame_to_crop_matrix(face, size))
    inside = cv2.warpAffine(reference_box_mask(size, 0.0, (0, 0, 0, 0)), inverse, (320, 240)) > 0.999
    difference = np.abs(result.astype(np.int16) - textured_frame.astype(np.int16))[inside]
    assert inside.sum() > 3000
    assert difference.mean() < 2.5  # only the two warps' interpolation
    assert np.percentile(difference, 99) <= 12


def test_batched_swap_matches_one_by_one_and_leaves_frames_without_faces_alone(
    textured_frame: np.ndarray,
    tmp_path: Path,
) -> None:
    fixed_dir, dynamic_dir = tmp_path / "fixed", tmp_path / "dynamic"
    inswapper_model(fixed_dir / "inswapper_128.onnx", kind="identity", batch=1)
    inswapper_model(dynamic_dir / "inswapper_128.onnx", kind="identity", batch="N")
    fixed = ModelStore(models_dir=str(fixed_dir), cache_dir=str(tmp_path / "cache"))
    dynamic = ModelStore(models_dir=str(dynamic_dir), cache_dir=str(tmp_path / "cache"))
    frames = [textured_frame, textured_frame[::-1].copy(), np.ascontiguousarray(textured_frame[:, ::-1])]
    faces = [[face_at((90.0, 120.0), 70.0), face_at((230.0, 110.0), 60.0, 15.0)], [], [face_at((160.0, 120.0), 90.0)]]
    options = swap_options(face_swapper_pixel_boost="256x256")

    timings: dict[str, float] = {}
    batched = swap_faces(frames, faces, np.ones(512), options, dynamic, batch_size=4, timings=timings)
    one_by_one = swap_faces(frames, faces, np.ones(512), options, fixed)

    assert batched[1] is frames[1]
    for got, want in zip(batched, one_by_one, strict=True):
        np.testing.assert_allclose(got, want, atol=1)
    assert not np.array_equal(batched[0], frames[0]) and not np.array_equal(batched[2], frames[2])
    assert set(timings) == {"swap_align", "swap_infer", "swap_paste"} and all(v > 0 for v in timings.values())


def test_fp16_model_variant_runs_with_float16_inputs(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    inswapper_model(models_dir / "inswapper_128_fp16.onnx", kind="flat", colour=COLOUR, fp16=True)
    options = Options(
        face_swapper_model="inswapper_128_fp16",
        face_swapper_blend=100,
        face_mask_blur=0.0,
        face_swapper_color_correction=False,
    )
    face = face_at((160.0, 120.0), 100.0)

    result = swap_face(textured_frame, face, np.ones(512), options, store_for(models_dir))

    inverse = cv2.invertAffineTransform(frame_to_crop_matrix(face, 128))
    x, y = (inverse @ np.array([64.0, 64.0, 1.0])).round().astype(int)
    np.testing.assert_allclose(result[y, x], np.array(COLOUR) * 255, atol=1.0)


def test_a_face_partly_outside_the_frame_is_clipped_not_an_error(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=COLOUR)
    face = face_at((10.0, 230.0), 120.0)

    options = swap_options(face_swapper_blend=100, face_swapper_color_correction=False)
    result = swap_face(textured_frame, face, np.ones(512), options, store_for(models_dir))

    assert result.shape == textured_frame.shape
    np.testing.assert_allclose(result[235, 5], np.array(COLOUR) * 255, atol=1.0)
    np.testing.assert_array_equal(result[:100, 150:], textured_frame[:100, 150:])


def painted_region(face: Face) -> np.ndarray:
    """Frame pixels the unblurred box mask covers fully: there the swapped crop alone decides the colour."""
    inverse = cv2.invertAffineTransform(frame_to_crop_matrix(face, 128))
    return cv2.warpAffine(reference_box_mask(128, 0.0, (0, 0, 0, 0)), inverse, (320, 240)) > 0.999


def flat_frame(colour: tuple[int, int, int]) -> np.ndarray:
    return np.broadcast_to(np.array(colour, np.uint8), (240, 320, 3)).copy()


@pytest.mark.parametrize("correction", [True, False])
def test_colour_correction_paints_the_flat_face_in_the_targets_colour_only_when_on(
    models_dir: Path, store_for: StoreFactory, correction: bool
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=COLOUR)
    face = face_at((160.0, 120.0), 100.0, 10.0)
    frame = flat_frame((200, 90, 40))
    options = swap_options(face_swapper_blend=100, face_mask_blur=0.0, face_swapper_color_correction=correction)

    result = swap_face(frame, face, np.ones(512), options, store_for(models_dir))

    inside = painted_region(face)
    assert inside.sum() > 3000
    wanted = frame[0, 0] if correction else np.array(COLOUR) * 255
    assert np.abs(result[inside].astype(np.float32) - wanted).max() <= 1.0


def test_colour_correction_moves_the_face_to_the_targets_mean_lab_colour(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=COLOUR)
    face = face_at((150.0, 125.0), 100.0, -12.0)
    options = swap_options(face_swapper_blend=100, face_mask_blur=0.0)

    result = swap_face(textured_frame, face, np.ones(512), options, store_for(models_dir))

    inside = painted_region(face)
    target_lab = rgb2lab(textured_frame[inside][None]).reshape(-1, 3).mean(axis=0)
    painted_lab = rgb2lab(result[inside][None]).reshape(-1, 3).mean(axis=0)
    flat_lab = rgb2lab(np.array([[COLOUR]]))[0, 0]
    assert np.linalg.norm(flat_lab - target_lab) > 20, "the flat colour is far from the target's"
    assert np.linalg.norm(painted_lab - target_lab) < 2.0
    assert rgb2lab(result[inside][None]).reshape(-1, 3).std(axis=0).max() < 1.0, "a flat face stays flat"


def test_batched_colour_correction_matches_each_face_to_its_own_frame(tmp_path: Path) -> None:
    inswapper_model(tmp_path / "models" / "inswapper_128.onnx", kind="flat", colour=COLOUR, batch="N")
    store = ModelStore(models_dir=str(tmp_path / "models"), cache_dir=str(tmp_path / "cache"))
    frames = [flat_frame((200, 90, 40)), flat_frame((30, 60, 180))]
    faces = [[face_at((100.0, 120.0), 80.0)], [face_at((200.0, 110.0), 90.0, 15.0)]]
    options = swap_options(face_swapper_blend=100, face_mask_blur=0.0)

    results = swap_faces(frames, faces, np.ones(512), options, store, batch_size=4)

    for frame, (face,), result in zip(frames, faces, results, strict=True):
        inside = painted_region(face)
        assert inside.sum() > 2000
        assert np.abs(result[inside].astype(np.float32) - frame[0, 0]).max() <= 1.0


def test_a_frames_faces_are_pasted_in_turn_into_one_copy_and_the_input_frame_is_left_alone(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    """Two overlapping faces: the second is pasted over the first as two separate swaps would do it, into one copy of
    the frame (no whole-frame copy per face), and the caller's frame keeps every pixel."""
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=COLOUR)
    store = store_for(models_dir)
    first, second = face_at((130.0, 120.0), 90.0), face_at((185.0, 125.0), 80.0, 10.0)
    options = swap_options(face_swapper_blend=70, face_swapper_color_correction=False)
    original = textured_frame.copy()

    (together,) = swap_faces([textured_frame], [[first, second]], np.ones(512), options, store)
    one_then_other = swap_face(
        swap_face(textured_frame, first, np.ones(512), options, store), second, np.ones(512), options, store
    )

    np.testing.assert_array_equal(together, one_then_other)
    np.testing.assert_array_equal(textured_frame, original)
    assert together is not textured_frame and not np.array_equal(together, original)
