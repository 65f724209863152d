"""The masks a face crop is pasted back through (FaceFusion's ``face_mask_types`` box and area), and where its colours
are compared for colour correction: geometry on the crop, from the face's landmarks."""

from __future__ import annotations

import functools

import cv2
import numpy as np

from facefusion_provider.engine.align import Matrix, transform_points
from facefusion_provider.engine.face import Face, FloatArray
from facefusion_provider.engine.face_masks import area_points, face_regions, face_size, feather, hull_mask
from facefusion_provider.options import Options

Padding = tuple[int, int, int, int]  # percent of the crop: top, right, bottom, left
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
