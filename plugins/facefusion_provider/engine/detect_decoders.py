"""Pure decoders for the raw outputs of FaceFusion's face detectors, and non-maximum suppression.

Coordinates stay in detector-input pixels: the caller (detect.py) undoes its own letterbox scaling.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# boxes (N, 4) x1 y1 x2 y2 float32, scores (N,) float32, landmarks (N, 5, 2) float32
Detections = tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]

SCRFD_STRIDES = (8, 16, 32)
SCRFD_ANCHORS_PER_CELL = 2
YUNET_STRIDES = (8, 16, 32)  # one anchor per cell


def empty_detections() -> Detections:
    return (
        np.zeros((0, 4), np.float32),
        np.zeros((0,), np.float32),
        np.zeros((0, 5, 2), np.float32),
    )


def decode_yoloface(output: npt.NDArray[np.floating], score_threshold: float) -> Detections:
    """yoloface_8n's (1, 20, 8400) output: per candidate cx, cy, w, h, score, then 5 x (x, y, visibility)."""
    candidates = np.asarray(output, np.float32).reshape(20, -1).T
    keep = candidates[:, 4] > score_threshold
    if not np.any(keep):
        return empty_detections()
    kept = candidates[keep]
    centers, sizes = kept[:, 0:2], kept[:, 2:4]
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1)
    landmarks = kept[:, 5:20].reshape(-1, 5, 3)[:, :, :2]
    return boxes.astype(np.float32), kept[:, 4].copy(), np.ascontiguousarray(landmarks, np.float32)


@functools.lru_cache(maxsize=32)
def anchor_centers(stride: int, grid_height: int, grid_width: int, anchors_per_cell: int) -> npt.NDArray[np.float32]:
    """(x, y) of every anchor, row-major over the stride's grid, each cell repeated once per anchor."""
    ys, xs = np.mgrid[:grid_height, :grid_width]
    centers = np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float32) * stride
    centers = np.repeat(centers, anchors_per_cell, axis=0)
    centers.flags.writeable = False
    return centers


def stride_anchors(
    stride: int, input_size: tuple[int, int], anchors_per_cell: int, score_count: int
) -> npt.NDArray[np.float32]:
    """``anchor_centers`` of the stride's grid over an input of ``input_size`` (width, height), checked to be one for
    each of the stride's ``score_count`` scores."""
    width, height = input_size
    centers = anchor_centers(stride, height // stride, width // stride, anchors_per_cell)
    if centers.shape[0] != score_count:
        raise ValueError(
            f"stride {stride}: {score_count} scores do not match {centers.shape[0]} anchors of a {width}x{height} input"
        )
    return centers


def joined_detections(
    boxes: list[npt.NDArray[np.floating]],
    scores: list[npt.NDArray[np.floating]],
    landmarks: list[npt.NDArray[np.floating]],
) -> Detections:
    """The strides' kept detections as one set (empty where no stride kept any)."""
    if not scores:
        return empty_detections()
    return (
        np.concatenate(boxes).astype(np.float32),
        np.concatenate(scores).astype(np.float32),
        np.concatenate(landmarks).astype(np.float32),
    )


def decode_scrfd(
    outputs: Sequence[npt.NDArray[np.floating]], input_size: tuple[int, int], score_threshold: float
) -> Detections:
    """retinaface_10g / scrfd_2.5g: 9 outputs, scores then box distances then landmark offsets, for strides 8, 16, 32.

    ``input_size`` is (width, height) of the detector input. Distances are in stride units.
    """
    if len(outputs) != 3 * len(SCRFD_STRIDES):
        raise ValueError(f"expected {3 * len(SCRFD_STRIDES)} detector outputs, got {len(outputs)}")
    all_boxes, all_scores, all_landmarks = [], [], []
    for level, stride in enumerate(SCRFD_STRIDES):
        scores = np.asarray(outputs[level], np.float32).reshape(-1)
        keep = scores >= score_threshold
        if not np.any(keep):
            continue
        centers = stride_anchors(stride, input_size, SCRFD_ANCHORS_PER_CELL, scores.shape[0])
        distances = np.asarray(outputs[level + 3], np.float32).reshape(-1, 4)[keep] * stride
        offsets = np.asarray(outputs[level + 6], np.float32).reshape(-1, 5, 2)[keep] * stride
        kept_centers = centers[keep]
        all_boxes.append(np.concatenate([kept_centers - distances[:, :2], kept_centers + distances[:, 2:]], axis=1))
        all_scores.append(scores[keep])
        all_landmarks.append(kept_centers[:, None, :] + offsets)
    return joined_detections(all_boxes, all_scores, all_landmarks)


def decode_yunet(
    outputs: Sequence[npt.NDArray[np.floating]], input_size: tuple[int, int], score_threshold: float
) -> Detections:
    """yunet_2023_mar: 12 outputs, class scores, objectness, boxes and points for strides 8, 16, 32, one anchor a cell.

    A face's score is class x objectness; its box a centre offset and a log size, its five points offsets, all in
    stride units from the cell's top-left corner. ``input_size`` is (width, height) of the detector input.
    """
    if len(outputs) != 4 * len(YUNET_STRIDES):
        raise ValueError(f"expected {4 * len(YUNET_STRIDES)} detector outputs, got {len(outputs)}")
    levels = len(YUNET_STRIDES)
    all_boxes, all_scores, all_landmarks = [], [], []
    for level, stride in enumerate(YUNET_STRIDES):
        classes = np.asarray(outputs[level], np.float32).reshape(-1)
        scores = classes * np.asarray(outputs[level + levels], np.float32).reshape(-1)
        keep = scores >= score_threshold
        if not np.any(keep):
            continue
        centers = stride_anchors(stride, input_size, 1, scores.shape[0])
        kept_centers = centers[keep]
        boxes = np.asarray(outputs[level + 2 * levels], np.float32).reshape(-1, 4)[keep]
        box_centers = boxes[:, :2] * stride + kept_centers
        half_sizes = np.exp(boxes[:, 2:4]) * stride / 2
        points = np.asarray(outputs[level + 3 * levels], np.float32).reshape(-1, 5, 2)[keep]
        all_boxes.append(np.concatenate([box_centers - half_sizes, box_centers + half_sizes], axis=1))
        all_scores.append(scores[keep])
        all_landmarks.append(points * stride + kept_centers[:, None, :])
    return joined_detections(all_boxes, all_scores, all_landmarks)


def box_iou(box: npt.NDArray[np.floating], boxes: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """Intersection over union of one x1y1x2y2 box with each of ``boxes``."""
    top_left = np.maximum(box[:2], boxes[:, :2])
    bottom_right = np.minimum(box[2:], boxes[:, 2:])
    intersection = np.prod(np.clip(bottom_right - top_left, 0, None), axis=1)
    area = np.prod(np.clip(box[2:] - box[:2], 0, None))
    areas = np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=1)
    union = area + areas - intersection
    return np.where(union > 0, intersection / np.maximum(union, 1e-12), 0.0).astype(np.float32)


def non_max_suppression(
    boxes: npt.NDArray[np.floating], scores: npt.NDArray[np.floating], iou_threshold: float
) -> npt.NDArray[np.int64]:
    """Indices of the boxes kept by greedy NMS, best score first."""
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    boxes = np.asarray(boxes, np.float64)
    kept: list[int] = []
    while order.size:
        best = int(order[0])
        kept.append(best)
        rest = order[1:]
        order = rest[box_iou(boxes[best], boxes[rest]) <= iou_threshold]
    return np.asarray(kept, np.int64)
