"""Paste a processed face crop back into its frame: box and area masks, colour match, inverse affine, linear blend.

Only the frame region the crop covers is touched; every pixel outside it keeps its exact value.
"""

from __future__ import annotations

import functools
import math

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.align import Matrix, invert_affine, transform_points
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import area_points, face_regions, face_size, feather, hull_mask
from facefusion_provider.options import Options

Padding = tuple[int, int, int, int]  # percent of the crop: top, right, bottom, left
LAB_STD_RATIO = (0.5, 2.0)  # bounds of the colour-transfer contrast change
AREA_FEATHER_SCALE = 0.4  # the area mask rises from 0 to 1 over its size x face_mask_blur x this, inside its hull
AREA_MIN_FEATHER = 0.02  # of its size: even an unblurred area mask is not cut with a hard edge


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


def create_area_mask(crop_size: int, landmarks: FloatArray, options: Options) -> FloatArray:
    """FaceFusion's area mask in the crop: the hull of the ``face_mask_areas`` landmarks (crop pixels), feathered
    inwards in proportion to that hull's size (the mouth alone gets a shorter ramp) and ``face_mask_blur``."""
    points = area_points(landmarks, options.face_mask_areas)
    ramp = face_size(points) * max(options.face_mask_blur * AREA_FEATHER_SCALE, AREA_MIN_FEATHER)
    return feather(hull_mask((crop_size, crop_size), points), 0.0, ramp)


def create_crop_mask(crop_size: int, face: Face, matrix: Matrix, options: Options) -> FloatArray:
    """The paste-back mask of one face's crop: the minimum of the ``face_mask_types`` masks, as FaceFusion combines
    them. ``area`` needs the face's dense landmarks (468 mesh or 68 points)."""
    masks = []
    if "box" in options.face_mask_types:
        masks.append(create_box_mask(crop_size, options.face_mask_blur, options.face_mask_padding))
    if "area" in options.face_mask_types:
        if face.landmark_dense is None:
            raise ValueError("face_mask_types area needs the face's dense landmarks (face mesh or 2dfan4)")
        masks.append(create_area_mask(crop_size, transform_points(face.landmark_dense, matrix), options))
    return np.asarray(np.minimum.reduce(masks), np.float32)


def color_weight(crop_size: int, face: Face, matrix: Matrix, mask: FloatArray) -> FloatArray:
    """Where colours are compared for colour correction: the face's skin inside ``mask`` when its dense landmarks are
    known (eyes, lips, hair and background left out), else the whole mask."""
    if face.landmark_dense is None:
        return mask
    regions = face_regions((crop_size, crop_size), transform_points(face.landmark_dense, matrix))
    skin = regions.skin.astype(np.float32) * mask
    return skin if float(skin.sum()) >= 1.0 else mask


def lab_statistics(lab: FloatArray, weight: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per-channel mean and standard deviation of ``lab`` (H x W x 3), each pixel counted by its ``weight``."""
    pixels = np.asarray(lab, np.float32).reshape(-1, 3)
    weights = np.asarray(weight, np.float32).reshape(-1)
    total = float(weights.sum(dtype=np.float64))
    mean = (weights @ pixels) / np.float32(total)  # float32 dot products (BLAS): a crop's sums stay exact to ~1e-6
    centred = pixels - mean
    std = np.sqrt((weights @ (centred * centred)) / np.float32(total))
    return np.asarray(mean, np.float32), np.asarray(std, np.float32)


def match_color_statistics(
    image: npt.NDArray[np.floating] | Frame, reference: npt.NDArray[np.floating] | Frame, mask: FloatArray
) -> FloatArray:
    """``image`` (RGB, 0..255) with the LAB mean and spread of ``reference`` inside ``mask`` (Reinhard colour transfer).

    Both images' statistics are taken where ``mask`` (0..1) is above 0, weighted by it; the result is float RGB 0..255.
    """
    weight = np.clip(np.asarray(mask, np.float32), 0.0, 1.0)
    if not np.any(weight > 0):
        return np.asarray(image, np.float32)
    # Float LAB (L 0..100, a and b about -128..127) avoids the rounding of OpenCV's 8-bit LAB.
    lab = np.asarray(cv2.cvtColor(np.asarray(image, np.float32) / 255.0, cv2.COLOR_RGB2LAB), np.float32)
    reference_lab = np.asarray(cv2.cvtColor(np.asarray(reference, np.float32) / 255.0, cv2.COLOR_RGB2LAB), np.float32)
    mean, std = lab_statistics(lab, weight)
    reference_mean, reference_std = lab_statistics(reference_lab, weight)
    ratio = np.clip(reference_std / (std + 1e-3), *LAB_STD_RATIO).astype(np.float32)
    matched = lab * ratio + (reference_mean - mean * ratio)
    return np.asarray(np.clip(cv2.cvtColor(matched, cv2.COLOR_LAB2RGB), 0.0, 1.0) * 255.0, np.float32)


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
    frame: Frame,
    crop: npt.NDArray[np.floating] | Frame,
    crop_mask: FloatArray,
    matrix: Matrix,
    blend: float = 1.0,
    *,
    in_place: bool = False,
) -> Frame:
    """``frame`` with ``crop`` (aligned by ``matrix``) pasted over it: frame x (1 - mask x blend) + crop x mask x blend.

    Only the rectangle the crop lands on is computed: the crop is warped as 8-bit colour (its float values rounded
    once), the mask as float, and OpenCV blends them there; the result is within 1 level of an all-float blend.
    A new array, or ``frame`` itself changed when ``in_place`` (a frame's further faces: no whole-frame copy each).
    """
    crop_size = crop_mask.shape[0]
    inverse = invert_affine(matrix)
    region = paste_region(frame.shape, inverse, crop_size)
    result = frame if in_place else frame.copy()
    if region is None or blend <= 0:
        return result
    x1, y1, x2, y2 = region
    local = inverse.copy()
    local[:, 2] -= (x1, y1)
    size = (x2 - x1, y2 - y1)
    warped: FloatArray = np.asarray(
        cv2.warpAffine(np.asarray(crop_mask, np.float32), local, size, flags=cv2.INTER_LINEAR, borderValue=0.0),
        np.float32,
    )
    weight = np.clip(warped, 0.0, 1.0, out=warped)
    if blend < 1.0:
        weight = np.multiply(weight, np.float32(blend), out=weight)
    pasted = cv2.warpAffine(to_uint8(crop), local, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    original = np.ascontiguousarray(frame[y1:y2, x1:x2])
    result[y1:y2, x1:x2] = cv2.blendLinear(pasted, original, weight, np.subtract(np.float32(1.0), weight))
    return result


def to_uint8(image: npt.NDArray[np.floating] | Frame) -> Frame:
    """``image`` (0..255) rounded to the nearest 8-bit value; an 8-bit image as it is."""
    if image.dtype == np.uint8:
        return np.asarray(image, np.uint8)
    return np.asarray(np.clip(np.rint(image), 0, 255), np.uint8)
