"""Paste a processed face crop back into its frame: colour match, inverse affine, linear blend (its masks:
``crop_masks``).

Only the frame region the crop's mask reaches is touched; every pixel outside it keeps its exact value. A paste can
also wait as data (``Paste``, ``PendingFrame``) and go straight into the encoder's YUV 4:2:0 planes
(``paste_into_yuv420``), so a swapped frame is never converted to and from RGB whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.align import Matrix, invert_affine
from facefusion_provider.engine.face import FloatArray, Frame

LAB_STD_RATIO = (0.5, 2.0)  # bounds of the colour-transfer contrast change
# Mask values below this move no pixel by half a level (255 x 1/512 < 0.5): the paste leaves them out of its region.
MASK_SUPPORT = 1.0 / 512.0
CropBox = tuple[int, int, int, int]  # x1, y1 inclusive, x2, y2 exclusive, in crop pixels


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


def mask_support(crop_mask: FloatArray) -> CropBox | None:
    """The crop's rectangle where ``crop_mask`` reaches ``MASK_SUPPORT``; None when it reaches it nowhere."""
    rows = np.flatnonzero((crop_mask >= MASK_SUPPORT).any(axis=1))
    if rows.size == 0:
        return None
    columns = np.flatnonzero((crop_mask[rows[0] : rows[-1] + 1] >= MASK_SUPPORT).any(axis=0))
    return int(columns[0]), int(rows[0]), int(columns[-1]) + 1, int(rows[-1]) + 1


def paste_region(
    frame_shape: tuple[int, ...], inverse: Matrix, crop_size: int, support: CropBox | None = None
) -> tuple[int, int, int, int] | None:
    """The frame rectangle (x1, y1, x2, y2) that the crop lands on, clipped to the frame; None when it misses it.

    With ``support`` (``mask_support``), only where that part of the crop lands: a frame pixel outside it samples
    (bilinearly) no crop pixel of the support, so its mask is below ``MASK_SUPPORT`` and the blend leaves it as it was.
    """
    low, high = (0, 0), (crop_size, crop_size)
    if support is not None:  # grown by the one pixel that bilinear sampling reaches
        low = (max(0, support[0] - 1), max(0, support[1] - 1))
        high = (min(crop_size, support[2]), min(crop_size, support[3]))
    corners = np.array([low, (high[0], low[1]), (low[0], high[1]), high], np.float64)
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

    Only the rectangle the mask reaches is computed: the crop is warped as 8-bit colour (its float values rounded
    once), the mask as float, and OpenCV blends them there; the result is within 1 level of an all-float blend.
    A new array, or ``frame`` itself changed when ``in_place`` (a frame's further faces: no whole-frame copy each).
    """
    result = frame if in_place else frame.copy()
    if blend > 0:
        blend_into([result], to_uint8(crop), crop_mask, invert_affine(matrix), blend)
    return result


def blend_into(
    planes: Sequence[npt.NDArray[np.uint8]], crop: Frame, crop_mask: FloatArray, inverse: Matrix, blend: float
) -> None:
    """Blend ``crop`` (8-bit, aligned to the planes by the crop-to-plane affine ``inverse``) into ``planes`` (of one
    size) where ``crop_mask`` x ``blend`` says, in place: plane x (1 - weight) + crop x weight. One plane takes the
    whole crop; several take one channel of it each."""
    support = mask_support(crop_mask)
    region = None if support is None else paste_region(planes[0].shape, inverse, crop_mask.shape[0], support)
    if region is not None:
        _blend_region(planes, crop, inverse, region, landed_weight(crop_mask, inverse, region, blend))


def landed_weight(
    crop_mask: FloatArray, inverse: Matrix, region: tuple[int, int, int, int], blend: float
) -> FloatArray:
    """``crop_mask`` x ``blend`` where it lands in ``region`` (x1, y1, x2, y2) of a plane, clipped to 0..1."""
    x1, y1, x2, y2 = region
    warped: FloatArray = np.asarray(
        cv2.warpAffine(
            np.asarray(crop_mask, np.float32), _shifted(inverse, x1, y1), (x2 - x1, y2 - y1), borderValue=0.0
        ),
        np.float32,
    )
    weight = np.clip(warped, 0.0, 1.0, out=warped)
    return np.multiply(weight, np.float32(blend), out=weight) if blend < 1.0 else weight


def _blend_region(
    planes: Sequence[npt.NDArray[np.uint8]],
    crop: Frame,
    inverse: Matrix,
    region: tuple[int, int, int, int],
    weight: FloatArray,
) -> None:
    x1, y1, x2, y2 = region
    rest = np.subtract(np.float32(1.0), weight)
    pasted = cv2.warpAffine(
        crop, _shifted(inverse, x1, y1), (x2 - x1, y2 - y1), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    for plane, layer in zip(planes, [pasted] if len(planes) == 1 else cv2.split(pasted), strict=True):
        original = np.ascontiguousarray(plane[y1:y2, x1:x2])
        plane[y1:y2, x1:x2] = np.asarray(cv2.blendLinear(layer, original, weight, rest), np.uint8).reshape(
            original.shape
        )


def _shifted(inverse: Matrix, x: int, y: int) -> Matrix:
    """``inverse`` landing in a region whose top-left corner is (x, y) of the plane."""
    local = inverse.copy()
    local[:, 2] -= (x, y)
    return local


def to_uint8(image: npt.NDArray[np.floating] | Frame) -> Frame:
    """``image`` (0..255) rounded to the nearest 8-bit value; an 8-bit image as it is."""
    if image.dtype == np.uint8:
        return np.asarray(image, np.uint8)
    return np.asarray(np.clip(np.rint(image), 0, 255), np.uint8)


@dataclass(frozen=True)
class Paste:
    """One processed face crop waiting to be pasted: its 8-bit RGB pixels, mask (0..1), aligning matrix and blend."""

    crop: Frame
    mask: FloatArray
    matrix: Matrix
    blend: float


@dataclass(frozen=True)
class Patch:
    """Pixels that replace a rectangle of the frame, its top-left corner at (x, y): a classic swap's face."""

    x: int
    y: int
    pixels: Frame

    @property
    def box(self) -> CropBox:
        return self.x, self.y, self.x + self.pixels.shape[1], self.y + self.pixels.shape[0]

    def changed_part(self, frame: Frame) -> Patch | None:
        """The part of this patch holding every pixel that differs from ``frame``'s; None if none does."""
        x1, y1, x2, y2 = self.box
        box = changed_box(frame[y1:y2, x1:x2], self.pixels)
        if box is None:
            return None
        left, top, right, bottom = box
        return Patch(x1 + left, y1 + top, self.pixels[top:bottom, left:right])

    def write(self, frame: Frame, x: int = 0, y: int = 0) -> None:
        """Into ``frame``, whose top-left pixel is (x, y) of the whole frame and which holds the whole patch."""
        frame[self.y - y : self.y - y + self.pixels.shape[0], self.x - x : self.x - x + self.pixels.shape[1]] = (
            self.pixels
        )


def changed_box(before: Frame, after: Frame) -> tuple[int, int, int, int] | None:
    """The rectangle (x1, y1, x2, y2) holding every pixel that differs between the two images; None if none does."""
    height, channels = before.shape[0], before.shape[2]
    row_bytes = before.shape[1] * channels
    word = 8 if row_bytes % 8 == 0 and before.flags.c_contiguous and after.flags.c_contiguous else 1
    # Compared 8 bytes at a time (one pass, no difference image), then narrowed to the bytes of the edge words.
    differs = before.reshape(height, -1).view(f"u{word}") != after.reshape(height, -1).view(f"u{word}")
    rows = np.flatnonzero(differs.any(axis=1))
    if rows.size == 0:
        return None
    words = np.flatnonzero(differs[rows[0] : rows[-1] + 1].any(axis=0))
    first = words[0] * word + _first_difference(before, after, rows, words[0] * word, word)
    last = words[-1] * word + word - 1 - _first_difference(before, after, rows, words[-1] * word, word, reverse=True)
    return int(first // channels), int(rows[0]), int(last // channels) + 1, int(rows[-1]) + 1


def _first_difference(
    before: Frame, after: Frame, rows: npt.NDArray[np.intp], start: int, word: int, *, reverse: bool = False
) -> int:
    """How many bytes of the ``word`` bytes at ``start`` (from its end when ``reverse``) are equal in every row."""
    height = before.shape[0]
    chunk = slice(start, start + word)
    differs = (before.reshape(height, -1)[rows, chunk] != after.reshape(height, -1)[rows, chunk]).any(axis=0)
    positions = np.flatnonzero(differs[::-1] if reverse else differs)
    return int(positions[0])


def patch_in_frame(x: int, y: int, pixels: Frame, shape: tuple[int, ...]) -> Patch | None:
    """The part of ``pixels`` (top-left at (x, y), perhaps reaching past the frame's edges) inside a frame of
    ``shape``; None when no part is."""
    left, top = max(0, -x), max(0, -y)
    right, bottom = min(pixels.shape[1], shape[1] - x), min(pixels.shape[0], shape[0] - y)
    if right <= left or bottom <= top:
        return None
    return Patch(x + left, y + top, pixels[top:bottom, left:right])


@dataclass(frozen=True)
class PendingFrame:
    """A frame whose processed faces are not yet in it: patches to write (the classic swapper's) and face crops to
    paste (a model swapper's). The pipeline writes them into the encoder's YUV planes, so nothing is converted whole;
    anything else takes ``rgb()``."""

    image: Frame
    pastes: tuple[Paste, ...] = ()
    patches: tuple[Patch, ...] = ()

    def rgb(self) -> Frame:
        """The frame with its patches written and then its crops pasted, in turn (a new array)."""
        frame = self.image.copy()
        for patch in self.patches:
            patch.write(frame)
        for paste in self.pastes:
            paste_back(frame, paste.crop, paste.mask, paste.matrix, paste.blend, in_place=True)
        return frame

    def patched_region(self) -> tuple[CropBox, Frame] | None:
        """The even-aligned box (x1, y1, x2, y2) holding every patch, and the frame's pixels there with the patches
        written: what a 4:2:0 frame converts back (its chroma samples cover 2 x 2 pixels). None without patches."""
        if not self.patches:
            return None
        boxes = np.array([patch.box for patch in self.patches])
        height, width = self.image.shape[:2]
        x1, y1 = int(boxes[:, 0].min()) & ~1, int(boxes[:, 1].min()) & ~1
        x2, y2 = min(width, int(boxes[:, 2].max() + 1) & ~1), min(height, int(boxes[:, 3].max() + 1) & ~1)
        region = self.image[y1:y2, x1:x2].copy()
        for patch in self.patches:
            patch.write(region, x1, y1)
        return (x1, y1, x2, y2), region


def as_rgb(frame: Frame | PendingFrame) -> Frame:
    """A processed frame's RGB pixels, its pending crops pasted."""
    return frame if isinstance(frame, np.ndarray) else frame.rgb()


@dataclass(frozen=True)
class YuvMatrix:
    """How a YUV frame's code values relate to RGB: the luma weights of red and blue, and full or limited range."""

    kr: float
    kb: float
    full_range: bool

    def from_rgb(self) -> FloatArray:
        """The 3 x 4 matrix taking 8-bit [R, G, B, 1] to 8-bit [Y, U, V] (before rounding)."""
        kg = 1.0 - self.kr - self.kb
        luma, chroma, low = (255.0, 255.0, 0.0) if self.full_range else (219.0, 224.0, 16.0)
        y = np.array([self.kr, kg, self.kb]) * luma / 255.0
        u = (np.array([0.0, 0.0, 1.0]) - [self.kr, kg, self.kb]) / (2.0 * (1.0 - self.kb)) * chroma / 255.0
        v = (np.array([1.0, 0.0, 0.0]) - [self.kr, kg, self.kb]) / (2.0 * (1.0 - self.kr)) * chroma / 255.0
        return np.array([[*y, low], [*u, 128.0], [*v, 128.0]], np.float32)


def paste_into_yuv420(
    luma: npt.NDArray[np.uint8], chroma: Sequence[npt.NDArray[np.uint8]], paste: Paste, yuv: YuvMatrix
) -> None:
    """``paste`` blended into a 4:2:0 frame's planes, in place: ``luma``, and ``chroma`` as its U and V planes or as
    one two-channel plane (NV12). The crop is converted to YUV at its own size; luma is blended at full resolution,
    chroma at half (a chroma sample sits at the centre of its 2 x 2 luma pixels). Blending is linear, so this equals
    pasting in RGB and converting back, but for rounding and the chroma samples' filter. The mask is warped once, at
    chroma resolution, and scaled up for luma: it is smooth, and a warp costs 4x a resize.
    """
    inverse = invert_affine(paste.matrix)
    support = mask_support(paste.mask)
    region = None if support is None else paste_region(luma.shape, inverse, paste.mask.shape[0], support)
    if region is None or paste.blend <= 0:
        return
    x1, y1, x2, y2 = (region[0] & ~1, region[1] & ~1, region[2] + (region[2] & 1), region[3] + (region[3] & 1))
    half = inverse / 2.0
    half[:, 2] = (inverse[:, 2] - 0.5) / 2.0
    chroma_region = (x1 // 2, y1 // 2, x2 // 2, y2 // 2)
    chroma_weight = landed_weight(paste.mask, half, chroma_region, paste.blend)
    luma_weight = np.asarray(cv2.resize(chroma_weight, (x2 - x1, y2 - y1), interpolation=cv2.INTER_LINEAR), np.float32)
    crop_yuv = to_uint8(np.asarray(cv2.transform(np.asarray(paste.crop, np.float32), yuv.from_rgb()), np.float32))
    _blend_region([luma], np.ascontiguousarray(crop_yuv[:, :, 0]), inverse, (x1, y1, x2, y2), luma_weight)
    _blend_region(chroma, np.ascontiguousarray(crop_yuv[:, :, 1:]), half, chroma_region, chroma_weight)
