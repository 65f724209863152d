"""The frame colorizer on stand-ins whose colours are known: ddcolor's a and b a flat COLORIZER_AB over the frame's
own LAB lightness; deoldify's frame the grey plus DEOLDIFY_TINT, its 8-bit LAB chroma over the frame's blue channel
(FaceFusion's merge). Every pixel is computed here from the input frame alone; the blend mixes with the input."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from standins import COLORIZER_AB, DEOLDIFY_TINT, colorizer_standin

from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.chain import build_frame_processor
from facefusion_provider.engine.processors.frame_colorizer import PROCESSOR, ColorizeFrames
from facefusion_provider.engine.processors.needs import NO_ANALYSIS
from facefusion_provider.engine.processors.registry import analysis_needs, output_size
from facefusion_provider.exceptions import ModelIncompatibleError
from facefusion_provider.options import Options

from .builders import StoreFactory


def _noise(height: int, width: int, seed: int = 5) -> Frame:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _grey(height: int, width: int) -> Frame:
    levels = np.random.default_rng(9).integers(0, 256, (height, width), dtype=np.uint8)
    return np.repeat(levels[:, :, None], 3, axis=2)


def _load(models_dir: Path, store_for: StoreFactory, model: str, **options: object) -> ColorizeFrames:
    chosen = Options(processors=["frame_colorizer"], frame_colorizer_model=model, **options)  # type: ignore[arg-type]
    step = PROCESSOR.load(chosen, {}, store_for(models_dir), FaceStats())
    assert isinstance(step, ColorizeFrames)
    return step


def test_ddcolor_puts_its_a_and_b_over_the_frames_own_lightness(models_dir: Path) -> None:
    colorizer_standin(models_dir, "ddcolor")
    frame = _noise(90, 160)
    options = Options(processors=["frame_colorizer"], frame_colorizer_model="ddcolor", frame_colorizer_size="192x192")

    (coloured,) = build_frame_processor(options, {}, str(models_dir)).process_batch([frame])

    lightness = cv2.cvtColor(frame.astype(np.float32) / 255, cv2.COLOR_RGB2LAB)[:, :, 0]
    lab = np.stack([lightness, *(np.full_like(lightness, value) for value in COLORIZER_AB)], axis=2)
    expected = np.clip(np.round(cv2.cvtColor(lab, cv2.COLOR_LAB2RGB) * 255), 0, 255)
    assert coloured.shape == frame.shape
    assert np.abs(coloured.astype(int) - expected).max() <= 1
    assert coloured[:, :, 0].mean() > coloured[:, :, 1].mean() + 10  # a > 0: redder than green


def test_deoldify_keeps_its_chroma_over_the_frames_blue_channel(models_dir: Path, store_for: StoreFactory) -> None:
    colorizer_standin(models_dir, "deoldify_stable")
    frame = _grey(256, 256)  # at the model's size: the resizes change nothing, so every pixel is computable
    step = _load(models_dir, store_for, "deoldify_stable", frame_colorizer_size="256x256")

    (coloured,) = step([frame], [[]], None)

    tinted = np.clip(frame.astype(np.float32) + np.asarray(DEOLDIFY_TINT, np.float32), 0, 255).astype(np.uint8)
    lab = cv2.cvtColor(tinted, cv2.COLOR_RGB2LAB)
    lab[:, :, 0] = frame[:, :, 2]
    np.testing.assert_array_equal(coloured, cv2.cvtColor(lab, cv2.COLOR_LAB2RGB))
    assert coloured[:, :, 0].mean() > coloured[:, :, 2].mean() + 10  # the tint: warmer than the grey


def test_the_blend_mixes_the_coloured_frame_with_the_input(models_dir: Path, store_for: StoreFactory) -> None:
    colorizer_standin(models_dir, "ddcolor_artistic")
    frame = _noise(64, 96)
    (full,) = _load(models_dir, store_for, "ddcolor_artistic")([frame], [[]], None)
    (none,) = _load(models_dir, store_for, "ddcolor_artistic", frame_colorizer_blend=0)([frame], [[]], None)
    (half,) = _load(models_dir, store_for, "ddcolor_artistic", frame_colorizer_blend=50)([frame], [[]], None)
    np.testing.assert_array_equal(none, frame)
    assert np.abs(half.astype(float) - (frame.astype(float) + full) / 2).max() <= 1


def test_the_model_sees_the_frame_at_the_chosen_size(models_dir: Path, store_for: StoreFactory) -> None:
    """deoldify's output scaled back: a frame of two grey halves keeps its halves' colours away from the seam."""
    colorizer_standin(models_dir, "deoldify")
    frame = np.full((120, 200, 3), 60, np.uint8)
    frame[:, 100:] = 190
    for size in ("192x192", "512x512"):
        (coloured,) = _load(models_dir, store_for, "deoldify", frame_colorizer_size=size)([frame], [[]], None)
        left, right = coloured[:, :90].reshape(-1, 3), coloured[:, 110:].reshape(-1, 3)
        assert np.ptp(left, axis=0).max() == 0 and np.ptp(right, axis=0).max() == 0
        assert left[0, 0] > left[0, 2] and right[0, 0] > right[0, 2]


def test_a_colorizer_with_other_inputs_or_outputs_is_refused_when_it_loads(
    tmp_path: Path, store_for: StoreFactory
) -> None:
    colorizer_standin(tmp_path / "inputs", "ddcolor", input_name="image")
    with pytest.raises(ModelIncompatibleError, match=r"ddcolor\.onnx .* expected inputs input \?x3x\?x\?, found image"):
        _load(tmp_path / "inputs", store_for, "ddcolor")
    colorizer_standin(tmp_path / "kind", "deoldify")
    (tmp_path / "kind" / "deoldify.onnx").rename(tmp_path / "kind" / "ddcolor.onnx")
    with pytest.raises(ModelIncompatibleError, match=r"expected \(1, 2, 256, 256\) \(ddcolor\)"):
        _load(tmp_path / "kind", store_for, "ddcolor")


def test_the_colorizer_reads_no_faces_and_keeps_the_size() -> None:
    options = Options(processors=["frame_colorizer"])
    assert analysis_needs(options) == NO_ANALYSIS
    assert output_size(options, 640, 360) == (640, 360)
