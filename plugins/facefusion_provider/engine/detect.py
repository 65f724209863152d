"""Face detection: the offline RetinaFace (MobileNet) and FaceFusion's yoloface_8n, retinaface_10g, scrfd_2.5g and
yunet_2023_mar, or ``many``: FaceFusion's three (retinaface_10g, scrfd_2.5g, yoloface_8n) on the same view, their
detections pooled and suppressed together at a lower overlap.

Every detector sees the frame letterboxed into ``options.face_detector_size`` (shrunk to fit, never enlarged, placed
top-left on a black canvas, as FaceFusion does); boxes and points come back in frame pixels, best score first.
The offline RetinaFace takes any input size, so it is given only the canvas's content (the size is then an upper bound).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.detect_decoders import (
    Detections,
    decode_scrfd,
    decode_yoloface,
    decode_yunet,
    empty_detections,
    non_max_suppression,
)
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

NMS_IOU_THRESHOLD = 0.4
MANY_NMS_IOU_THRESHOLD = 0.1  # FaceFusion's for many: two detectors' boxes of one face overlap less than one's own
MANY_DETECTORS = ("retinaface_10g", "scrfd_2.5g", "yoloface_8n")  # FaceFusion's many (yunet is not among them)

# RetinaFace (Pytorch_Retinaface, MobileNet-0.25): BGR input minus the ImageNet means, three levels of two priors per cell.
RETINAFACE_MEAN_BGR = np.array([104.0, 117.0, 123.0], np.float32)
RETINAFACE_STEPS = (8, 16, 32)
RETINAFACE_MIN_SIZES = ((16, 32), (64, 128), (256, 512))
RETINAFACE_VARIANCES = (0.1, 0.2)


@dataclass(frozen=True)
class Letterbox:
    """The detector's view of a frame: shrunk by ``scale`` into the top-left ``content`` (w, h) of ``canvas``."""

    canvas: Frame
    scale: float
    content: tuple[int, int]


Detector = Callable[[str, Letterbox, Options, ModelStore], Detections]  # model name, view, options, store


def detector_size(options: Options) -> tuple[int, int]:
    """(width, height) of the detector input."""
    width, height = options.face_detector_size.split("x")
    return int(width), int(height)


def letterbox(frame: Frame, size: tuple[int, int]) -> Letterbox:
    """The frame shrunk to fit ``size`` (never enlarged) on a black canvas of that size, and the scale applied."""
    width, height = size
    scale = min(1.0, width / frame.shape[1], height / frame.shape[0])
    resized = frame
    if scale < 1.0:
        # FaceFusion's resize (and InsightFace's): sizes truncated, bilinear; INTER_AREA cost 7x more at 1080p.
        target = (max(1, int(frame.shape[1] * scale)), max(1, int(frame.shape[0] * scale)))
        resized = np.asarray(cv2.resize(frame, target, interpolation=cv2.INTER_LINEAR), np.uint8)
    canvas = np.zeros((height, width, 3), np.uint8)
    canvas[: resized.shape[0], : resized.shape[1]] = resized
    return Letterbox(canvas, scale, (resized.shape[1], resized.shape[0]))


@functools.lru_cache(maxsize=8)
def retinaface_priors(width: int, height: int) -> npt.NDArray[np.float32]:
    """Prior boxes (cx, cy, w, h) in input pixels, in the network's order: level, row, column, min size."""
    levels = []
    for step, min_sizes in zip(RETINAFACE_STEPS, RETINAFACE_MIN_SIZES, strict=True):
        rows, columns = -(-height // step), -(-width // step)
        ys, xs = np.mgrid[:rows, :columns]
        centers = (np.stack([xs, ys], axis=-1).reshape(-1, 1, 2) + 0.5) * step
        sizes = np.array(min_sizes, np.float32).reshape(1, -1, 1).repeat(2, axis=2)
        centers, sizes = np.broadcast_arrays(centers, sizes)
        levels.append(np.concatenate([centers, sizes], axis=2).reshape(-1, 4))
    priors = np.concatenate(levels).astype(np.float32)
    priors.flags.writeable = False
    return priors


def decode_retinaface(
    loc: npt.NDArray[np.float32],
    conf: npt.NDArray[np.float32],
    landmarks: npt.NDArray[np.float32],
    input_size: tuple[int, int],
    score_threshold: float,
) -> Detections:
    """RetinaFace's (N, 4) box offsets, (N, 2) softmax scores and (N, 10) point offsets against the priors."""
    priors = retinaface_priors(*input_size)
    if priors.shape[0] != loc.shape[0]:
        raise ValueError(f"{loc.shape[0]} detector outputs do not match {priors.shape[0]} priors of {input_size}")
    scores = conf[:, 1]
    keep = scores >= score_threshold
    if not np.any(keep):
        return empty_detections()
    prior, loc, points = priors[keep], loc[keep], landmarks[keep].reshape(-1, 5, 2)
    centers = prior[:, :2] + loc[:, :2] * RETINAFACE_VARIANCES[0] * prior[:, 2:]
    sizes = prior[:, 2:] * np.exp(loc[:, 2:] * RETINAFACE_VARIANCES[1])
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1)
    points = prior[:, None, :2] + points * RETINAFACE_VARIANCES[0] * prior[:, None, 2:]
    return boxes.astype(np.float32), scores[keep].astype(np.float32), points.astype(np.float32)


def _detect_retinaface_mnet(model: str, view: Letterbox, options: Options, store: ModelStore) -> Detections:
    # This network takes any input size: it sees only the content, rounded up to its coarsest stride (less work).
    stride = RETINAFACE_STEPS[-1]
    canvas_width, canvas_height = detector_size(options)
    width = min(canvas_width, -(-view.content[0] // stride) * stride)
    height = min(canvas_height, -(-view.content[1] // stride) * stride)
    pixels = _bgr_tensor(view.canvas[:height, :width], 1.0, RETINAFACE_MEAN_BGR)
    session = store.session_for(model, options)
    loc, conf, landmarks = run_session(session, {session.get_inputs()[0].name: pixels})
    return decode_retinaface(loc[0], conf[0], landmarks[0], (width, height), options.face_detector_score)


def _facefusion_tensor(canvas: Frame, value_range: tuple[int, int]) -> npt.NDArray[np.float32]:
    """FaceFusion feeds its detectors BGR frames, scaled to [-1, 1] or [0, 1]."""
    if value_range == (-1, 1):
        return _bgr_tensor(canvas, 1.0 / 128.0, np.full(3, 127.5, np.float32))
    return _bgr_tensor(canvas, 1.0 / 255.0, np.zeros(3, np.float32))


def _bgr_tensor(rgb: Frame, scale: float, mean_bgr: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """(1, 3, H, W) float32 BGR of an RGB image, (pixel - mean) x scale, in one pass (OpenCV's blob, no copies)."""
    mean = tuple(float(value) for value in mean_bgr)  # blobFromImage subtracts it after swapping the channels
    size = (rgb.shape[1], rgb.shape[0])  # its own size: no resize
    blob = cv2.dnn.blobFromImage(np.ascontiguousarray(rgb), scale, size, mean, swapRB=True, crop=False)
    return np.asarray(blob, np.float32)


def _detect_scrfd_family(model: str, view: Letterbox, options: Options, store: ModelStore) -> Detections:
    session = store.session_for(model, options)
    outputs = run_session(session, {session.get_inputs()[0].name: _facefusion_tensor(view.canvas, (-1, 1))})
    return decode_scrfd(outputs, detector_size(options), options.face_detector_score)


def _detect_yoloface(model: str, view: Letterbox, options: Options, store: ModelStore) -> Detections:
    session = store.session_for(model, options)
    (output, *_) = run_session(session, {session.get_inputs()[0].name: _facefusion_tensor(view.canvas, (0, 1))})
    return decode_yoloface(output, options.face_detector_score)


def _detect_yunet(model: str, view: Letterbox, options: Options, store: ModelStore) -> Detections:
    session = store.session_for(model, options)
    pixels = _bgr_tensor(view.canvas, 1.0, np.zeros(3, np.float32))  # FaceFusion feeds yunet BGR 0..255 as it is
    outputs = run_session(session, {session.get_inputs()[0].name: pixels})
    return decode_yunet(outputs, detector_size(options), options.face_detector_score)


DETECTORS: dict[str, Detector] = {
    "retinaface_mnet": _detect_retinaface_mnet,
    "retinaface_10g": _detect_scrfd_family,
    "scrfd_2.5g": _detect_scrfd_family,
    "yoloface_8n": _detect_yoloface,
    "yunet_2023_mar": _detect_yunet,
}


def detector_models(options: Options) -> tuple[str, ...]:
    """The catalogue detectors ``face_detector_model`` runs: ``many`` is FaceFusion's three."""
    return MANY_DETECTORS if options.face_detector_model == "many" else (options.face_detector_model,)


def detect_faces(frame: Frame, options: Options, store: ModelStore) -> list[Face]:
    """Every face in the frame above ``options.face_detector_score``, after NMS (over all of ``many``'s detections
    pooled), best score first."""
    view = letterbox(frame, detector_size(options))
    found = [DETECTORS[model](model, view, options, store) for model in detector_models(options)]
    boxes, scores, landmarks = (np.concatenate(parts) for parts in zip(*found, strict=True))
    if scores.size == 0:
        return []
    many = options.face_detector_model == "many"
    kept = non_max_suppression(boxes, scores, MANY_NMS_IOU_THRESHOLD if many else NMS_IOU_THRESHOLD)
    return [
        Face(
            bbox=_to_frame(boxes[index], view.scale, frame.shape),
            score=float(scores[index]),
            landmark_5=(landmarks[index] / view.scale).astype(np.float32),
        )
        for index in kept
    ]


def _to_frame(box: FloatArray, scale: float, shape: tuple[int, ...]) -> FloatArray:
    """A detector-input box in frame pixels, clipped to the frame."""
    height, width = shape[:2]
    limits = np.array([width, height, width, height], np.float32)
    return np.asarray(np.clip(box / scale, 0, limits), np.float32)
