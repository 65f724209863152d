"""Paste a processed face crop back into its frame: box mask, inverse affine, linear blend.

Only the frame region the crop covers is touched; every pixel outside it keeps its exact value.
"""

from __future__ import annotations

import functools
import math

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.align import Matrix, invert_affine
from facefusion_provider.engine.face import FloatArray, Frame

Padding = tuple[int, int, int, int]  # percent of the crop: top, right, bottom, left


@functools.lru_cache(maxsize=32)
def create_box_mask(crop_size: int, face_mask_blur: float, face_mask_padding: Padding) -> FloatArray:
    """FaceFusion's box mask: 1 inside the padded crop, 0 at the edges, feathered by a Gaussian of the blur amount."""
    blur_amount = int(crop_size * 0.5 * face_mask_blur)
    blur_area = max(blur_amount // 2, 1)
    top, right, bottom, left = (max(blur_area, int(crop_size * percent / 100)) for percent in face_mask_padding)
    mask = np.ones((crop_size, crop_size), np.float32)
    mask[:top, :] = 0
    mask[crop_size - bottom :, :] = 0
    mask[:, :left] = 0
    mask[:, crop_size - right :] = 0
    if blur_amount > 0:
        mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), blur_amount * 0.25), np.float32)
    mask.flags.writeable = False
    return mask


def paste_region(frame_shape: tuple[int, ...], inverse: Matrix, crop_size: int) -> tuple[int, int, int, int] | None:
    """The frame rectangle (x1, y1, x2, y2) that the crop lands on, clipped to the frame; None when it misses it."""
    corners = np.array([[0, 0], [crop_size, 0], [0, crop_size], [crop_size, crop_size]], np.float64)
    landed = corners @ inverse[:, :2].T + inverse[:, 2]
    x1, y1 = (max(0, math.floor(v)) for v in landed.min(axis=0))
    x2 = min(frame_shape[1], math.ceil(landed[:, 0].max()) + 1)
    y2 = min(frame_shape[0], math.ceil(landed[:, 1].max()) + 1)
    if x1 >= x2 or y1 >= y2:
        return None
    return x1, y1, x2, y2


def paste_back(
    frame: Frame, crop: npt.NDArray[np.floating] | Frame, crop_mask: FloatArray, matrix: Matrix, blend: float = 1.0
) -> Frame:
    """``frame`` with ``crop`` (aligned by ``matrix``) pasted over it: frame x (1 - mask x blend) + crop x mask x blend."""
    crop_size = crop_mask.shape[0]
    inverse = invert_affine(matrix)
    region = paste_region(frame.shape, inverse, crop_size)
    result = frame.copy()
    if region is None or blend <= 0:
        return result
    x1, y1, x2, y2 = region
    local = inverse.copy()
    local[:, 2] -= (x1, y1)
    size = (x2 - x1, y2 - y1)
    weight = cv2.warpAffine(crop_mask.astype(np.float32), local, size, flags=cv2.INTER_LINEAR, borderValue=0.0)
    weight = np.clip(weight, 0.0, 1.0) * float(blend)
    pasted = cv2.warpAffine(
        np.asarray(crop, np.float32), local, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    original = frame[y1:y2, x1:x2].astype(np.float32)
    mixed = original + (pasted - original) * weight[:, :, None]
    touched = weight > 0
    result[y1:y2, x1:x2][touched] = np.clip(np.rint(mixed[touched]), 0, 255).astype(np.uint8)
    return result
