"""FaceFusion's detector decoders on synthetic raw outputs whose boxes and points are known."""

from __future__ import annotations

import numpy as np
import pytest

from facefusion_provider.engine.detect_decoders import decode_scrfd, decode_yoloface, decode_yunet, non_max_suppression


def yolo_output(candidates: dict[int, list[float]]) -> np.ndarray:
    output = np.zeros((1, 20, 8400), np.float32)
    for index, values in candidates.items():
        output[0, :, index] = values
    return output


def test_yoloface_decodes_centre_size_boxes_scores_and_five_points() -> None:
    points = [300, 220, 0.9, 340, 221, 0.9, 320, 245, 0.9, 305, 270, 0.9, 336, 271, 0.9]
    output = yolo_output(
        {
            1234: [320, 240, 100, 120, 0.91, *points],
            4321: [100, 100, 40, 40, 0.30, *([0.0] * 15)],  # below the threshold
        }
    )

    boxes, scores, landmarks = decode_yoloface(output, score_threshold=0.5)

    np.testing.assert_allclose(boxes, [[270, 180, 370, 300]])
    np.testing.assert_allclose(scores, [0.91], rtol=1e-6)
    np.testing.assert_allclose(landmarks[0], np.array(points, np.float32).reshape(5, 3)[:, :2])
    assert boxes.dtype == scores.dtype == landmarks.dtype == np.float32


def test_yoloface_threshold_is_strict_and_nothing_found_is_empty() -> None:
    output = yolo_output({5: [50, 50, 10, 10, 0.5, *([0.0] * 15)]})

    boxes, scores, landmarks = decode_yoloface(output, score_threshold=0.5)

    assert boxes.shape == (0, 4) and scores.shape == (0,) and landmarks.shape == (0, 5, 2)


def scrfd_outputs(width: int, height: int, batch_dim: bool) -> list[np.ndarray]:
    counts = [(height // stride) * (width // stride) * 2 for stride in (8, 16, 32)]
    scores = [np.zeros((count, 1), np.float32) for count in counts]
    bboxes = [np.zeros((count, 4), np.float32) for count in counts]
    kps = [np.zeros((count, 10), np.float32) for count in counts]
    outputs = scores + bboxes + kps
    return [output[None] for output in outputs] if batch_dim else outputs


@pytest.mark.parametrize("batch_dim", [False, True])
@pytest.mark.parametrize(("width", "height"), [(640, 640), (640, 480)])
def test_scrfd_places_anchors_row_major_per_stride(width: int, height: int, batch_dim: bool) -> None:
    outputs = scrfd_outputs(width, height, batch_dim)
    # Stride 16, grid row 10, column 15, second anchor: centre (240, 160).
    columns = width // 16
    index16 = (10 * columns + 15) * 2 + 1
    outputs[1].reshape(-1)[index16] = 0.8
    outputs[4].reshape(-1, 4)[index16] = [2, 3, 4, 5]  # left, top, right, bottom in strides
    offsets = np.array([[-1, -1], [1, -1], [0, 0], [-1, 1], [1, 1]], np.float32)
    outputs[7].reshape(-1, 10)[index16] = offsets.reshape(-1)
    # Stride 32, row 3, column 7, first anchor: centre (224, 96).
    index32 = (3 * (width // 32) + 7) * 2
    outputs[2].reshape(-1)[index32] = 0.6
    outputs[5].reshape(-1, 4)[index32] = [1, 1, 1, 1]
    # Stride 8, below the threshold.
    outputs[0].reshape(-1)[17] = 0.2

    boxes, scores, landmarks = decode_scrfd(outputs, (width, height), score_threshold=0.5)

    np.testing.assert_allclose(
        boxes, [[240 - 32, 160 - 48, 240 + 64, 160 + 80], [224 - 32, 96 - 32, 224 + 32, 96 + 32]]
    )
    np.testing.assert_allclose(scores, [0.8, 0.6], rtol=1e-6)
    np.testing.assert_allclose(landmarks[0], np.array([240, 160]) + offsets * 16)
    np.testing.assert_allclose(landmarks[1], np.tile([224, 96], (5, 1)))


def test_scrfd_rejects_outputs_that_do_not_fit_the_input_size() -> None:
    outputs = scrfd_outputs(640, 640, batch_dim=False)
    outputs[0][0] = 0.9

    with pytest.raises(ValueError, match="anchors"):
        decode_scrfd(outputs, (320, 320), score_threshold=0.5)


def yunet_outputs(width: int, height: int) -> list[np.ndarray]:
    counts = [(height // stride) * (width // stride) for stride in (8, 16, 32)]
    widths = (1, 1, 4, 10)  # cls, obj, bbox, kps
    return [np.zeros((1, count, size), np.float32) for size in widths for count in counts]


@pytest.mark.parametrize(("width", "height"), [(640, 640), (320, 320)])
def test_yunet_scores_class_times_objectness_and_decodes_from_the_cells_corner(width: int, height: int) -> None:
    outputs = yunet_outputs(width, height)
    # Stride 16, grid row 7, column 9 (one anchor a cell): corner (144, 112).
    index16 = 7 * (width // 16) + 9
    outputs[1][0, index16] = 0.9  # class
    outputs[4][0, index16] = 0.8  # objectness: score 0.72
    outputs[7][0, index16] = [0.5, 1.0, np.log(4.0), np.log(5.0)]  # centre (152, 128), size 64 x 80
    offsets = np.array([[-1, -1], [1, -1], [0, 0], [-1, 1], [1, 1]], np.float32)
    outputs[10][0, index16] = offsets.reshape(-1)
    # Stride 8, row 2, column 3: a sure class but no object, below the threshold.
    outputs[0][0, 2 * (width // 8) + 3] = 1.0
    outputs[3][0, 2 * (width // 8) + 3] = 0.4
    # Stride 32, row 1, column 2, corner (64, 32): exactly at the threshold, kept.
    index32 = 1 * (width // 32) + 2
    outputs[2][0, index32] = 0.5
    outputs[5][0, index32] = 1.0
    outputs[8][0, index32] = [0.0, 0.0, 0.0, 0.0]  # centre at the corner, one stride square

    boxes, scores, landmarks = decode_yunet(outputs, (width, height), score_threshold=0.5)

    np.testing.assert_allclose(boxes, [[120, 88, 184, 168], [48, 16, 80, 48]], rtol=1e-6)
    np.testing.assert_allclose(scores, [0.72, 0.5], rtol=1e-6)
    np.testing.assert_allclose(landmarks[0], np.array([144, 112]) + offsets * 16)
    np.testing.assert_allclose(landmarks[1], np.tile([64, 32], (5, 1)))
    assert boxes.dtype == scores.dtype == landmarks.dtype == np.float32


def test_yunet_rejects_outputs_of_another_size_or_count() -> None:
    outputs = yunet_outputs(640, 640)
    outputs[0][0, 0] = outputs[3][0, 0] = 1.0
    with pytest.raises(ValueError, match="anchors"):
        decode_yunet(outputs, (320, 320), score_threshold=0.5)
    with pytest.raises(ValueError, match="expected 12 detector outputs, got 9"):
        decode_yunet(outputs[:9], (640, 640), score_threshold=0.5)
    boxes, scores, landmarks = decode_yunet(yunet_outputs(640, 640), (640, 640), score_threshold=0.5)
    assert boxes.shape == (0, 4) and scores.shape == (0,) and landmarks.shape == (0, 5, 2)


def test_nms_keeps_the_best_of_overlapping_boxes_in_score_order() -> None:
    boxes = np.array(
        [
            [0, 0, 100, 100],
            [5, 5, 105, 105],  # IoU with the first: 0.82
            [200, 200, 260, 260],
            [5, 5, 105, 60],  # IoU with the second: 0.55
        ],
        np.float32,
    )
    scores = np.array([0.7, 0.9, 0.8, 0.6], np.float32)

    assert non_max_suppression(boxes, scores, iou_threshold=0.4).tolist() == [1, 2]
    assert non_max_suppression(boxes, scores, iou_threshold=0.6).tolist() == [1, 2, 3]
    assert non_max_suppression(np.zeros((0, 4)), np.zeros((0,)), 0.4).tolist() == []
