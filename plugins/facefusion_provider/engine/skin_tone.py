"""The target's skin tone and light on a swapped face, measured on skin only.

Colour moves in LAB at low frequency: the swapped face keeps its own features (its detail) and takes the target face's
local skin colour and shading (its low band). Both low bands are weighted means over pixels that are skin in both
faces, so eyes, brows, lips, hair and background never pull the tone and an opening mouth changes nothing. The
transfer depends on one frame alone, so frames that parallel workers process apart still agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import FloatArray

BoolMask = npt.NDArray[np.bool_]

LOW_BAND_WORK_SIGMA = 4.0  # the low band is blurred on a copy shrunk until its sigma is this many pixels
SKIN_SPREAD_FLOOR = (8.0, 2.5, 2.5)  # L, a, b: the tightest spread a face's skin colour is judged by (shading moves L)
SKIN_WIDTH = 2.0  # spreads from the face's typical skin colour at which a pixel still counts 0.6 as skin
SKIN_SAMPLE_STEP = 4  # every 4th pixel of the skin region is plenty for its median colour
MIN_SKIN_SAMPLES = 16
DETAIL_RATIO_LIMITS = (0.5, 1.5)  # how far the swapped face's fine skin contrast may move towards the target's
FEATURE_TINT = 0.3  # the share of the skin's colour shift that eyes, teeth and other non-skin take (the light's cast)


def _srgb_to_linear_table() -> FloatArray:
    levels = np.arange(256, dtype=np.float64) / 255.0
    linear = np.where(levels <= 0.04045, levels / 12.92, ((levels + 0.055) / 1.055) ** 2.4)
    return np.asarray(linear, np.float32)


SRGB_TO_LINEAR = _srgb_to_linear_table()  # 8-bit sRGB -> linear light, exact


def rgb_to_lab(image: npt.NDArray[np.generic]) -> FloatArray:
    """RGB 0..255 -> float LAB (L 0..100): float avoids the rounding of OpenCV's 8-bit LAB."""
    if image.dtype == np.uint8:  # a table lookup for the gamma: about twice as fast as OpenCV's float sRGB path
        linear = cv2.LUT(np.asarray(image, np.uint8), SRGB_TO_LINEAR)
        return np.asarray(cv2.cvtColor(linear, cv2.COLOR_LRGB2LAB), np.float32)
    return np.asarray(cv2.cvtColor(np.asarray(image, np.float32) / 255.0, cv2.COLOR_RGB2LAB), np.float32)


def lab_to_rgb(lab: FloatArray) -> FloatArray:
    """Float LAB -> RGB 0..255 (float), clipped to the RGB cube."""
    return np.asarray(np.clip(cv2.cvtColor(lab, cv2.COLOR_LAB2RGB), 0.0, 1.0) * 255.0, np.float32)


def masked_blur(pixels: FloatArray, weight: FloatArray, sigma: float) -> FloatArray:
    """The Gaussian low band of ``pixels`` (H x W x C) counting each pixel by ``weight`` (normalised convolution).

    Where no weighted pixel is near, the result is the mean of the nearest ones; a low band holds nothing finer than
    sigma, so it is computed on a copy shrunk until sigma is a few pixels.
    """
    height, width = weight.shape[:2]
    factor = min(1.0, LOW_BAND_WORK_SIGMA / sigma)
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    weighted = pixels * weight[:, :, np.newaxis]
    small_pixels = cv2.resize(weighted, size, interpolation=cv2.INTER_AREA) if factor < 1.0 else weighted
    small_weight = cv2.resize(weight, size, interpolation=cv2.INTER_AREA) if factor < 1.0 else weight
    blurred = cv2.GaussianBlur(small_pixels, (0, 0), sigma * factor).reshape(size[1], size[0], -1)
    support = np.maximum(cv2.GaussianBlur(small_weight, (0, 0), sigma * factor), 1e-6)[:, :, np.newaxis]
    low = np.asarray(blurred / support, np.float32)
    if factor == 1.0:
        return low
    return np.asarray(cv2.resize(low, (width, height), interpolation=cv2.INTER_LINEAR), np.float32).reshape(
        height, width, -1
    )


@dataclass(frozen=True)
class Surround:
    """A reference image reaching ``inset`` pixels past the image it is compared with on every side, and the weight of
    each of its pixels: its low band near the edge is then read from what lies beyond the edge, not extrapolated."""

    lab: FloatArray
    weight: FloatArray
    inset: int

    def low_band(self, sigma: float, shape: tuple[int, ...]) -> FloatArray:
        """The weighted low band (masked_blur) over the whole surround, cut to the inner image of ``shape``."""
        low = masked_blur(self.lab, self.weight, sigma)
        return low[self.inset : self.inset + shape[0], self.inset : self.inset + shape[1]]


@dataclass(frozen=True)
class SkinColor:
    """A face's typical skin colour in LAB and its robust spread, from the median of a skin region."""

    typical: FloatArray  # (3,)
    spread: FloatArray  # (3,), at least SKIN_SPREAD_FLOOR

    def likelihood(self, lab: FloatArray) -> FloatArray:
        """How much each pixel looks like this skin (0..1): by its chroma, and by lightness only where it is darker
        (hair, a hat's shadow); brighter skin is a highlight or a lit forehead, still skin."""
        red = (lab[:, :, 1] - self.typical[1]) / self.spread[1]
        yellow = (lab[:, :, 2] - self.typical[2]) / self.spread[2]
        darker = np.minimum(lab[:, :, 0] - self.typical[0], 0.0) / self.spread[0]
        distance = red * red + yellow * yellow + darker * darker
        return np.asarray(np.exp(distance * np.float32(-0.5 / SKIN_WIDTH**2)), np.float32)


def skin_color(lab: FloatArray, region: BoolMask) -> SkinColor | None:
    """The typical skin colour of ``region``: the median and its robust spread, so hair, glasses or background inside
    the region change it little. None when the region is (nearly) empty."""
    samples = lab[region][::SKIN_SAMPLE_STEP]
    if len(samples) < MIN_SKIN_SAMPLES:
        return None
    typical = np.median(samples, axis=0)
    spread = np.maximum(1.4826 * np.median(np.abs(samples - typical), axis=0), SKIN_SPREAD_FLOOR)
    return SkinColor(typical.astype(np.float32), spread.astype(np.float32))


def detail_ratios(detail: FloatArray, reference_detail: FloatArray, weight: FloatArray) -> FloatArray:
    """Per LAB channel, the reference's fine contrast over the image's on the weighted skin (clipped): a soft video
    frame makes a sharp photo's skin softer, a pale target calms a ruddy source, so the face does not stand out."""
    total = float(weight.sum())
    spread = np.sqrt(np.einsum("ij,ijk,ijk->k", weight, detail, detail) / total)
    reference_spread = np.sqrt(np.einsum("ij,ijk,ijk->k", weight, reference_detail, reference_detail) / total)
    return np.asarray(np.clip(reference_spread / np.maximum(spread, 1e-3), *DETAIL_RATIO_LIMITS), np.float32)


def transfer_skin_tone(
    lab: FloatArray,
    reference_lab: FloatArray,
    weight: FloatArray,
    skin: FloatArray,
    sigma: float,
    *,
    surround: Surround | None = None,
    rim: tuple[float, FloatArray] | None = None,
) -> FloatArray:
    """``lab`` with the low band (skin tone, light, shading) of ``reference_lab`` and its own detail above ``sigma``.

    Both low bands are means weighted by ``weight`` (skin in both images). With ``surround`` the reference's low band
    comes from it instead (the reference's skin around ``lab``'s edge too, by its own weight). ``rim`` (a finer sigma
    and its share, H x W, 0..1) takes the tone shift at that finer scale where the share is high (near the face's
    edge), so the shift meets the reference's skin there without a step. ``skin`` (0..1) says how much each pixel of
    ``lab`` is skin: skin takes the whole shift and the reference skin's contrast; eyes, brows and lips take the
    lightness shift but only FEATURE_TINT of the colour shift, and keep their contrast, so a warm target does not tint
    the whites of the eyes. Returns ``lab`` unchanged when there is no skin to measure.
    """
    if float(weight.sum()) < MIN_SKIN_SAMPLES:
        return lab
    reference = surround or Surround(reference_lab, weight, 0)
    low = masked_blur(lab, weight, sigma)
    reference_low = reference.low_band(sigma, lab.shape)
    shift = reference_low - low
    if rim is not None:
        rim_sigma, rim_share = rim
        rim_shift = reference.low_band(rim_sigma, lab.shape) - masked_blur(lab, weight, rim_sigma)
        shift += rim_share[:, :, np.newaxis] * (rim_shift - shift)
    detail = lab - low
    ratios = detail_ratios(detail, reference_lab - reference_low, weight)
    skin3 = skin[:, :, np.newaxis]
    shift[:, :, 1:] *= FEATURE_TINT + (1.0 - FEATURE_TINT) * skin3  # lightness moves everywhere, colour on skin
    moved = low + shift
    moved += (1.0 + skin3 * (ratios - 1.0)) * detail
    return np.asarray(moved, np.float32)
