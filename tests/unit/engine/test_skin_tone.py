"""The skin tone transfer's pieces on synthetic images: the fast LAB conversion, and the tone at a face's edge taken
from the skin around it."""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_provider.engine.skin_tone import Surround, lab_to_rgb, rgb_to_lab, transfer_skin_tone


def test_the_fast_lab_conversion_agrees_with_opencvs_float_path_and_round_trips() -> None:
    image = np.random.default_rng(7).integers(0, 256, (64, 48, 3)).astype(np.uint8)
    fast = rgb_to_lab(image)
    reference = cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    assert np.abs(fast - reference).max() < 0.5
    assert np.array_equal(np.rint(lab_to_rgb(fast)).astype(np.uint8), image)


def vertical_ramp(height: int, width: int, top: float, bottom: float) -> np.ndarray:
    """A LAB skin-like image whose lightness runs from ``top`` to ``bottom``."""
    lab = np.empty((height, width, 3), np.float32)
    lab[:, :, 0] = np.linspace(top, bottom, height, dtype=np.float32)[:, np.newaxis]
    lab[:, :, 1], lab[:, :, 2] = 12.0, 16.0
    return lab


def test_with_a_surround_the_edge_takes_the_tone_of_the_skin_beyond_it() -> None:
    """A face lit evenly (L 70) goes onto a target whose skin darkens towards the top (a forehead under hair): the
    swapped face's top row should end near the target's lightness there, not at the face's middle."""
    inset, size = 12, 60
    face = vertical_ramp(size, size, 70.0, 70.0)
    target_surround = vertical_ramp(size + 2 * inset, size + 2 * inset, 40.0, 65.0)
    target = target_surround[inset:-inset, inset:-inset]
    weight = np.ones((size, size), np.float32)
    skin = np.ones((size, size), np.float32)
    rim_share = np.zeros((size, size), np.float32)
    rim_share[:8] = 1.0
    sigma = size * 0.2
    without = transfer_skin_tone(face, target, weight, skin, sigma)
    surround = Surround(target_surround, np.ones(target_surround.shape[:2], np.float32), inset)
    with_surround = transfer_skin_tone(face, target, weight, skin, sigma, surround=surround, rim=(2.0, rim_share))
    top_gap_without = abs(float(without[0, :, 0].mean() - target[0, :, 0].mean()))
    top_gap_with = abs(float(with_surround[0, :, 0].mean() - target[0, :, 0].mean()))
    assert top_gap_with < 0.5, f"top row {with_surround[0, :, 0].mean():.1f} against the target's {target[0, 0, 0]:.1f}"
    assert top_gap_with < top_gap_without / 4, f"gap at the top: {top_gap_with:.2f} with, {top_gap_without:.2f} without"
    middle = slice(size // 2 - 2, size // 2 + 2)
    assert abs(float(with_surround[middle, :, 0].mean() - target[middle, :, 0].mean())) < 1.0
