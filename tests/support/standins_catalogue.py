"""Stand-ins for the catalogue around the processors (detectors, landmarkers), with the real files' input and output
names and shapes (from engine.models), built with onnx.helper; what each answers is set by the test:

- detectors: the raw outputs given, whatever the frame (each is a constant plus zero times the input's sum), so a
  test places faces at known anchors; ``scrfd_raw``, ``yoloface_raw`` and ``yunet_raw`` lay one face out in each
  family's raw form at a 640x640 input.
- ``peppa_wutz``: (1, 68 x 3) of (x, y, score) in its 64-unit heatmap space, a fixed layout with one score for all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from standins import save_graph

from facefusion_provider.engine.models import MODELS

SIZE = 640  # the detector input these raw outputs fit
STRIDES = (8, 16, 32)
Box = tuple[float, float, float, float]  # x1, y1, x2, y2 in detector-input pixels


def constant_standin(folder: Path, name: str, outputs: Sequence[np.ndarray]) -> Path:
    """``name``'s interface answering ``outputs`` (in the catalogue's output order) for any input."""
    spec = MODELS[name]
    (input_name, input_shape), *_ = spec.inputs
    assert len(outputs) == len(spec.outputs), f"{name} has {len(spec.outputs)} outputs"
    nodes = [
        helper.make_node("ReduceSum", [input_name], ["input_sum"], keepdims=0),
        helper.make_node("Mul", ["input_sum", "zero"], ["input_zero"]),
    ]
    initializers = [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    graph_outputs = []
    for (output_name, _), value in zip(spec.outputs, outputs, strict=True):
        initializers.append(numpy_helper.from_array(np.asarray(value, np.float32), f"{output_name}_value"))
        nodes.append(helper.make_node("Add", [f"{output_name}_value", "input_zero"], [output_name]))
        graph_outputs.append(helper.make_tensor_value_info(output_name, TensorProto.FLOAT, list(np.shape(value))))
    dims: list[int | str] = ["N" if dim is None else dim for dim in input_shape]
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, dims)]
    graph = helper.make_graph(nodes, f"{name}_standin", inputs, graph_outputs, initializer=initializers)
    return save_graph(folder / spec.file_name, graph)


def _cell(box: Box, stride: int) -> tuple[int, float, float]:
    """The index of the grid cell of ``stride`` holding the box's centre at a SIZE input, and that cell's corner."""
    columns = SIZE // stride
    row, column = int((box[1] + box[3]) / 2 // stride), int((box[0] + box[2]) / 2 // stride)
    return row * columns + column, column * stride, row * stride


def scrfd_raw(box: Box, points: np.ndarray, score: float, stride: int = 16) -> list[np.ndarray]:
    """retinaface_10g / scrfd_2.5g's nine outputs with one face: distances and offsets from the first anchor of the
    cell holding its centre."""
    counts = [(SIZE // level) ** 2 * 2 for level in STRIDES]
    scores = [np.zeros((count, 1), np.float32) for count in counts]
    boxes = [np.zeros((count, 4), np.float32) for count in counts]
    kps = [np.zeros((count, 10), np.float32) for count in counts]
    level = STRIDES.index(stride)
    cell, x, y = _cell(box, stride)
    index = cell * 2
    scores[level][index] = score
    boxes[level][index] = np.array([x - box[0], y - box[1], box[2] - x, box[3] - y]) / stride
    kps[level][index] = ((np.asarray(points, np.float32) - [x, y]) / stride).reshape(-1)
    return scores + boxes + kps


def yoloface_raw(faces: Sequence[tuple[Box, np.ndarray, float]]) -> list[np.ndarray]:
    """yoloface_8n's (1, 20, 8400) with one candidate per face: centre, size, score, five (x, y, 1)."""
    output = np.zeros((1, 20, 8400), np.float32)
    for index, (box, points, score) in enumerate(faces):
        centre = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
        size = [box[2] - box[0], box[3] - box[1]]
        visible = np.concatenate([np.asarray(points, np.float32), np.ones((5, 1), np.float32)], axis=1)
        output[0, :, 100 + index] = [*centre, *size, score, *visible.reshape(-1)]
    return [output]


def yunet_raw(box: Box, points: np.ndarray, score: float, stride: int = 16) -> list[np.ndarray]:
    """yunet_2023_mar's twelve outputs with one face in the cell holding its centre: class score ``score``,
    objectness 1, centre offset and log size, point offsets, in strides from the cell's corner."""
    counts = [(SIZE // level) ** 2 for level in STRIDES]
    classes = [np.zeros((1, count, 1), np.float32) for count in counts]
    objectness = [np.zeros((1, count, 1), np.float32) for count in counts]
    boxes = [np.zeros((1, count, 4), np.float32) for count in counts]
    kps = [np.zeros((1, count, 10), np.float32) for count in counts]
    level = STRIDES.index(stride)
    cell, x, y = _cell(box, stride)
    centre = np.array([(box[0] + box[2]) / 2 - x, (box[1] + box[3]) / 2 - y]) / stride
    size = np.log(np.array([box[2] - box[0], box[3] - box[1]]) / stride)
    classes[level][0, cell] = score
    objectness[level][0, cell] = 1.0
    boxes[level][0, cell] = [*centre, *size]
    kps[level][0, cell] = ((np.asarray(points, np.float32) - [x, y]) / stride).reshape(-1)
    return classes + objectness + boxes + kps
