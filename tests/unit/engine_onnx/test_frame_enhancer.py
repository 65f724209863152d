"""The frame enhancer on stand-ins that are a plain bilinear resize: tiled, merged and blended, every output pixel is
OpenCV's resize of the input within one level (the stand-in's float arithmetic rounded against OpenCV's fixed-point
one), tile borders and frame edges included; a model of another scale or inputs is refused when it loads."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from standins import frame_enhancer_standin

from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.frame_tiles import cut_tiles
from facefusion_provider.engine.models import frame_enhance_facts
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.chain import build_frame_processor
from facefusion_provider.engine.processors.frame_enhancer import PROCESSOR, EnhanceFrames
from facefusion_provider.engine.processors.needs import NO_ANALYSIS
from facefusion_provider.engine.processors.registry import analysis_needs, check_chain, output_size
from facefusion_provider.exceptions import InvalidOptionError, ModelIncompatibleError
from facefusion_provider.options import Options

from .builders import StoreFactory

TOLERANCE = 1  # levels


def _noise(height: int, width: int, seed: int = 3) -> Frame:
    """Uniform noise: any seam, shift or dark edge shows as a large error somewhere."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _resized(frame: Frame, scale: int) -> np.ndarray:
    height, width = frame.shape[:2]
    return cv2.resize(frame, (width * scale, height * scale), interpolation=cv2.INTER_LINEAR).astype(int)


def _load(models_dir: Path, store_for: StoreFactory, model: str, blend: int) -> EnhanceFrames:
    options = Options(processors=["frame_enhancer"], frame_enhancer_model=model, frame_enhancer_blend=blend)
    step = PROCESSOR.load(options, {}, store_for(models_dir), FaceStats())
    assert isinstance(step, EnhanceFrames)
    return step


@pytest.mark.parametrize(
    ("model", "height", "width"),
    [
        ("real_esrgan_x2", 300, 530),  # tiles of 256 (240 kept): 3 x 3
        ("real_web_photo_x4", 121, 203),  # tiles of 64 (60 kept): 3 x 4
        ("real_web_photo_x4", 23, 37),  # smaller than one tile
    ],
)
def test_every_output_pixel_is_the_bilinear_resize_tile_borders_included(
    models_dir: Path, model: str, height: int, width: int
) -> None:
    facts = frame_enhance_facts(model)
    frame_enhancer_standin(models_dir, model)
    options = Options(processors=["frame_enhancer"], frame_enhancer_model=model, frame_enhancer_blend=100)
    frames = [_noise(height, width), _noise(height, width, seed=4)]
    processor = build_frame_processor(options, {}, str(models_dir))
    results = processor.process_batch(frames)
    for frame, result in zip(frames, results, strict=True):
        assert result.shape == (height * facts.scale, width * facts.scale, 3)
        error = np.abs(result.astype(int) - _resized(frame, facts.scale))
        assert error.max() <= TOLERANCE, np.unravel_index(error.argmax(), error.shape)
    _, grid = cut_tiles(frames[0], facts)
    assert output_size(options, width, height) == grid.output_size == (width * facts.scale, height * facts.scale)


def test_the_blend_mixes_the_model_frame_with_the_frame_resized(models_dir: Path, store_for: StoreFactory) -> None:
    frame_enhancer_standin(models_dir, "real_esrgan_x2", invert=True)  # the model's frame is 255 - the resize
    frame = _noise(90, 140)
    resized = _resized(frame, 2)
    (kept,) = _load(models_dir, store_for, "real_esrgan_x2", 100)([frame], [[]], None)
    assert np.abs(kept.astype(int) - (255 - resized)).max() <= TOLERANCE
    (original,) = _load(models_dir, store_for, "real_esrgan_x2", 0)([frame], [[]], None)
    np.testing.assert_array_equal(original, resized)
    (half,) = _load(models_dir, store_for, "real_esrgan_x2", 50)([frame], [[]], None)
    assert np.abs(half.astype(float) - 127.5).max() <= TOLERANCE + 0.5


def test_tiles_go_in_batches_where_the_model_allows_with_the_same_frames(
    tmp_path: Path, store_for: StoreFactory
) -> None:
    frame_enhancer_standin(tmp_path / "free", "real_web_photo_x4")
    frame_enhancer_standin(tmp_path / "one", "real_web_photo_x4", batch=1)
    batched = _load(tmp_path / "free", store_for, "real_web_photo_x4", 80)
    single = _load(tmp_path / "one", store_for, "real_web_photo_x4", 80)
    assert (batched.tiles_per_call, single.tiles_per_call) == (128, 1)  # 2**23 output pixels / 256**2 a tile
    frame = _noise(200, 260)
    np.testing.assert_array_equal(batched([frame], [[]], None)[0], single([frame], [[]], None)[0])


def test_a_model_of_another_scale_or_other_inputs_is_refused_when_it_loads(
    tmp_path: Path, store_for: StoreFactory
) -> None:
    frame_enhancer_standin(tmp_path / "scale", "real_esrgan_x4", scale=2)
    with pytest.raises(ModelIncompatibleError, match=r"real_esrgan_x4\.onnx does not look like .*\(x4\)"):
        _load(tmp_path / "scale", store_for, "real_esrgan_x4", 80)
    frame_enhancer_standin(tmp_path / "inputs", "real_esrgan_x2", input_name="image")
    with pytest.raises(ModelIncompatibleError, match=r"expected inputs input \?x3x\?x\?, found image"):
        _load(tmp_path / "inputs", store_for, "real_esrgan_x2", 80)


def test_the_frame_enhancer_reads_no_faces_and_comes_after_the_processors_that_do() -> None:
    assert analysis_needs(Options(processors=["frame_enhancer"])) == NO_ANALYSIS
    check_chain(Options(processors=["face_swapper", "face_enhancer", "frame_enhancer"]))
    with pytest.raises(InvalidOptionError, match=r"face_enhancer reads the faces .* before frame_enhancer"):
        check_chain(Options(processors=["frame_enhancer", "face_enhancer"]))
    tghq = Options(processors=["face_swapper", "frame_enhancer"], frame_enhancer_model="tghq_face_x8")
    assert output_size(tghq, 640, 360) == (5120, 2880)


def test_output_video_scale_multiplies_the_chains_size_with_facefusions_even_rounding() -> None:
    x4 = Options(processors=["frame_enhancer"], frame_enhancer_model="real_esrgan_x4", output_video_scale=0.5)
    assert output_size(x4, 1920, 1080) == (3840, 2160)  # 1080p to 4K
    quarter = Options(processors=[], output_video_scale=0.25)
    assert output_size(quarter, 1366, 767) == (340, 192)  # int(341.5) = 341 and int(191.75) = 191, rounded to even
    assert output_size(Options(processors=[]), 1365, 767) == (1365, 767)  # scale 1: the target's size, odd or not
