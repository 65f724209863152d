"""The CPU path as it was before issue 24's cuts (commit 1aedb2d), kept here only so that a bench can run it beside
today's in one process: ``with before_path(): ...`` puts the old functions back, and takes them out again after.

Old, in order of the frame's path: the worker converts every processed frame back whole (RGB array -> frame ->
the encoder's yuv420p), even one without a face; the detector's input is shrunk with INTER_AREA (7x the cost of
FaceFusion's bilinear resize at 1080p); its tensor is built by numpy (a float copy, a
mean subtraction, then a transposed view that onnxruntime copies again); colour correction sums in float64; paste back
warps the crop and the mask in float and blends in numpy.
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
    from facefusion_provider.worker.pipeline import write_back

    frame = write_back(result, image, original)
    return frame if frame.format.name == pix_fmt else frame.reformat(format=pix_fmt)


def _replacements() -> list[tuple[ModuleType, str, Any]]:
    from facefusion_provider.engine import detect, paste
    from facefusion_provider.worker import pipeline

    return [
        (paste, "lab_statistics", lab_statistics_before),
        (detect, "_bgr_tensor", bgr_tensor_before),
        (detect, "letterbox", letterbox_before),
        (paste, "paste_back", paste_back_before),
        (pipeline, "write_back", write_back_before),
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
