"""The CPU path as it was before issue 24's cuts (commit 1aedb2d), kept here only so that a bench can run it beside
today's in one process: ``with before_path(): ...`` puts the old functions back, and takes them out again after.

Old, in order of the frame's path: the worker converts every processed frame back whole (RGB array -> frame ->
the encoder's yuv420p), even one without a face; the detector's input is shrunk with INTER_AREA (7x the cost of
FaceFusion's bilinear resize at 1080p); its tensor is built by numpy (a float copy, a
mean subtraction, then a transposed view that onnxruntime copies again); colour correction sums in float64; paste back
warps the crop and the mask in float and blends in numpy; the classic swapper works a large target face at twice the
source face's size, draws its mask again at full resolution, and swaps into a copy of the whole frame (and its analysis detects every frame: the bench gives
the before variant ``face_detector_interval`` 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import av
import cv2
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
Frame = npt.NDArray[np.uint8]


def lab_statistics_before(lab: FloatArray, weight: FloatArray) -> tuple[FloatArray, FloatArray]:
    pixels = lab.reshape(-1, 3).astype(np.float64)
    weights = weight.reshape(-1, 1).astype(np.float64)
    total = weights.sum()
    mean = (pixels * weights).sum(axis=0) / total
    std = np.sqrt(((pixels - mean) ** 2 * weights).sum(axis=0) / total)
    return mean.astype(np.float32), std.astype(np.float32)


def bgr_tensor_before(rgb: Frame, scale: float, mean_bgr: FloatArray) -> FloatArray:
    pixels = (rgb[:, :, ::-1].astype(np.float32) - mean_bgr) * np.float32(scale)
    return pixels.transpose(2, 0, 1)[np.newaxis]  # not contiguous: onnxruntime copies it


def letterbox_before(frame: Frame, size: tuple[int, int]) -> Any:
    from facefusion_provider.engine.detect import Letterbox

    width, height = size
    scale = min(1.0, width / frame.shape[1], height / frame.shape[0])
    resized = frame
    if scale < 1.0:
        target = (max(1, round(frame.shape[1] * scale)), max(1, round(frame.shape[0] * scale)))
        resized = np.asarray(cv2.resize(frame, target, interpolation=cv2.INTER_AREA), np.uint8)
    canvas = np.zeros((height, width, 3), np.uint8)
    canvas[: resized.shape[0], : resized.shape[1]] = resized
    return Letterbox(canvas, scale, (resized.shape[1], resized.shape[0]))


def paste_back_before(
    frame: Frame,
    crop: npt.NDArray[np.floating] | Frame,
    crop_mask: FloatArray,
    matrix: Any,
    blend: float = 1.0,
    *,
    in_place: bool = False,
) -> Frame:
    """The old blend (float, whole region), called as today's paste_back is: ``in_place`` writes into ``frame``, as
    today's swap_faces asks once it has copied the frame (one copy a frame, as before for one face)."""
    from facefusion_provider.engine.align import invert_affine
    from facefusion_provider.engine.paste import paste_region

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
    weight = cv2.warpAffine(crop_mask.astype(np.float32), local, size, flags=cv2.INTER_LINEAR, borderValue=0.0)
    weight = np.clip(weight, 0.0, 1.0) * float(blend)
    pasted = np.asarray(
        cv2.warpAffine(
            np.asarray(crop, np.float32), local, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        ),
        np.float32,
    )
    original = frame[y1:y2, x1:x2].astype(np.float32)
    pasted -= original
    pasted *= weight[:, :, None]
    pasted += original
    result[y1:y2, x1:x2] = np.clip(np.rint(pasted, out=pasted), 0, 255, out=pasted).astype(np.uint8)
    return result


def classic_swap_before(frame: Frame, face: Any, source: Any, options: Any) -> Any:
    """The old swap of one face: worked at up to twice the source face's size; the mask drawn at full resolution."""
    from facefusion_provider.engine import swap_classic as sc
    from facefusion_provider.engine.blend import band_levels
    from facefusion_provider.engine.face_masks import face_regions

    face_size = sc.mesh_size(face.landmark_dense)
    region = sc.face_region(face.landmark_dense, sc.ROI_MARGIN)
    points = (face.landmark_dense - [region.x1, region.y1]).astype(np.float32)
    target = sc.crop_region(frame, region)
    levels = band_levels(face_size)
    scale = min(1.0, 2.0 * sc.mesh_size(source.landmarks) / max(face_size, 1.0))
    work_size = (max(1, round(region.size[0] * scale)), max(1, round(region.size[1] * scale)))
    work_points = ((points + 0.5) * [work_size[0] / region.size[0], work_size[1] / region.size[1]] - 0.5).astype(
        np.float32
    )
    warped, covered = sc.warp_source(source, work_points, work_size)
    work_area = sc.face_area_mask(work_points, covered, options)
    if not np.any(work_area):
        return sc.ClassicSwap(region, target, target, np.zeros(target.shape[:2], np.float32), levels)
    work_regions = face_regions(work_area.shape, work_points)
    surround = sc.work_surround(frame, region, max(1, round(face_size * sc.SKIN_RING)), work_size)
    swapped, visibility = sc.recolor_source(
        warped, surround, work_area, work_regions, options.face_swapper_color_correction
    )
    regions = work_regions
    if scale < 1.0:
        swapped = np.asarray(cv2.resize(swapped, region.size, interpolation=cv2.INTER_LINEAR), np.uint8)
        visibility = np.asarray(cv2.resize(visibility, region.size, interpolation=cv2.INTER_LINEAR), np.float32)
        covered = cv2.resize(covered.astype(np.uint8), region.size, interpolation=cv2.INTER_NEAREST) > 0
        regions = face_regions(target.shape[:2], points)
    area = sc.face_area_mask(points, covered, options)
    alpha = sc.blend_alpha(area, regions, options.face_mask_blur)
    if options.face_mask_blur > 0:
        alpha *= visibility
    alpha *= np.float32(options.face_swapper_blend / 100.0)
    return sc.ClassicSwap(region, target, swapped, alpha, levels)


def swap_classic_before(self: Any, frame: Frame, faces: list[Any]) -> Frame:
    """The old classic swap of a frame's faces: each swapped into a new copy of the whole frame."""
    from facefusion_provider.engine.landmarks import mesh_found
    from facefusion_provider.engine.swap_classic import swap_face_classic

    for face in faces:
        if mesh_found(face):
            frame = swap_face_classic(frame, face, self.source, self.options)
            self.stats.add(swapped=1)
    return frame


def write_back_before(result: Any, image: Frame, original: av.VideoFrame) -> av.VideoFrame:
    """Every processed frame converted back whole, changed or not (crops left to paste pasted in RGB first, by the
    old paste back while the before path is in place)."""
    from facefusion_provider.engine.paste import as_rgb
    from facefusion_provider.media.images import rgb_frame
    from facefusion_provider.media.planes import described_like

    return described_like(rgb_frame(as_rgb(result)), original)


def encoder_input_before(result: Frame, image: Frame, original: av.VideoFrame, pix_fmt: str) -> av.VideoFrame:
    """What the encoder got before, in the format it encodes (its own reformat included)."""
    return write_back_before(result, image, original).reformat(format=pix_fmt)


def encoder_input_after(result: Any, image: Frame, original: av.VideoFrame, pix_fmt: str) -> av.VideoFrame:
    from facefusion_provider.worker.write_back import write_back

    frame = write_back(result, image, original)
    return frame if frame.format.name == pix_fmt else frame.reformat(format=pix_fmt)


def _replacements() -> list[tuple[ModuleType | type[Any], str, Any]]:
    from facefusion_provider.engine import detect, paste, swap_classic
    from facefusion_provider.engine.processors.face_swapper import ClassicSwap
    from facefusion_provider.worker import write_back

    return [
        (paste, "lab_statistics", lab_statistics_before),
        (detect, "_bgr_tensor", bgr_tensor_before),
        (detect, "letterbox", letterbox_before),
        (paste, "paste_back", paste_back_before),
        (write_back, "write_back", write_back_before),
        (swap_classic, "classic_swap", classic_swap_before),
        (ClassicSwap, "swap", swap_classic_before),
    ]


@contextmanager
def before_path() -> Iterator[None]:
    """The old functions in place of today's, in this process, while the block runs."""
    originals = []
    try:
        for module, name, replacement in _replacements():
            originals.append((module, name, getattr(module, name)))
            setattr(module, name, replacement)
        yield
    finally:
        for module, name, original in reversed(originals):
            setattr(module, name, original)
