"""Multi-band (Laplacian pyramid) blending of a face into its frame region.

Each frequency band of the change is blended by the mask blurred to that band's scale: coarse bands (tone, shading)
fade in over a wide rim, fine ones (texture, edges) over a narrow one, so no band leaves a seam. It runs on the face's
rectangle only, so its cost follows the face's size, not the frame's.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import FloatArray

BAND_SCALE = 0.15  # the coarsest band's pixel is about this x face size: coarser would reach outside the face


def band_levels(face_size: float) -> int:
    """Pyramid levels for a face of ``face_size`` pixels (at least 1)."""
    return max(1, int(math.log2(max(2.0, face_size * BAND_SCALE))))


def blend_bands(
    base: npt.NDArray[np.generic], overlay: npt.NDArray[np.generic], alpha: FloatArray, levels: int
) -> FloatArray:
    """The change to add to ``base`` (H x W x 3) to blend ``overlay`` in by ``alpha`` (H x W, 0..1), band by band.

    Linear in ``alpha`` (half the mask, half the change) and exactly 0 wherever ``alpha`` is 0.
    """
    height, width = alpha.shape
    step = 1 << levels
    padded = (-height % step, -width % step)
    # One pass each, in place where a band is no longer needed: this runs on every face of every frame.
    change = np.asarray(overlay, np.float32) - np.asarray(base, np.float32)
    bands: list[FloatArray] = [_float(cv2.copyMakeBorder(change, 0, padded[0], 0, padded[1], cv2.BORDER_REPLICATE))]
    masks: list[FloatArray] = [
        _float(
            cv2.copyMakeBorder(np.asarray(alpha, np.float32), 0, padded[0], 0, padded[1], cv2.BORDER_CONSTANT, value=0)
        )
    ]
    for _ in range(levels):
        bands.append(_float(cv2.pyrDown(bands[-1])))
        masks.append(_float(cv2.pyrDown(masks[-1])))
    for level in range(levels):  # each band less the next one up: its own frequencies (in place, finest first)
        size = (bands[level].shape[1], bands[level].shape[0])
        bands[level] -= _float(cv2.pyrUp(bands[level + 1], dstsize=size))
    blended = bands[-1] * masks[-1][:, :, np.newaxis]
    for level in range(levels - 1, -1, -1):
        size = (bands[level].shape[1], bands[level].shape[0])
        bands[level] *= masks[level][:, :, np.newaxis]
        blended = _float(cv2.pyrUp(blended, dstsize=size))
        blended += bands[level]
    result = np.asarray(blended[:height, :width], np.float32)
    # The coarse bands' masks reach a little past alpha's edge; nothing may change where the mask says nothing does.
    result[alpha <= 0] = 0.0
    return result


def _float(image: npt.NDArray[np.generic]) -> FloatArray:
    """OpenCV's float32 result as what it is (no copy)."""
    return np.asarray(image, np.float32)
