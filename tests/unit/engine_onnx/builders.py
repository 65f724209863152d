"""Small ONNX models built with onnx.helper, exact in the real models' input/output names and shapes, and test faces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from facefusion_provider.engine.align import estimate_similarity, template_points
from facefusion_provider.engine.face import Face
from facefusion_provider.engine.store import ModelStore

OPSET = 17
IR_VERSION = 9

Dim = int | str
StoreFactory = Callable[[Path], ModelStore]  # a store over the given models folder


def value_info(name: str, shape: Sequence[Dim], elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def save_model(
    path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: Sequence[np.ndarray] = (),
    initializer_names: Sequence[str] = (),
) -> Path:
    tensors = [
        numpy_helper.from_array(np.asarray(array), name)
        for array, name in zip(initializers, initializer_names, strict=True)
    ]
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializer=tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _zero_of(name: str, prefix: str) -> list[onnx.NodeProto]:
    """Nodes that turn input ``name`` into a scalar 0 (so every input is used)."""
    return [
        helper.make_node("ReduceSum", [name], [f"{prefix}_sum"], keepdims=0),
        helper.make_node("Mul", [f"{prefix}_sum", "zero"], [f"{prefix}_zero"]),
    ]


def inswapper_model(
    path: Path,
    *,
    kind: str,
    emap: np.ndarray | None = None,
    batch: Dim = 1,
    colour: Sequence[float] = (0.25, 0.5, 0.75),
    target_size: int = 128,
    decoy: np.ndarray | None = None,
    source_name: str = "source",
    fp16: bool = False,
) -> Path:
    """An inswapper_128 look-alike: inputs target (Bx3x128x128) and source (Bx512), output ``output``, emap LAST.

    kind: ``identity`` returns target; ``flat`` returns one colour; ``reveal`` paints channel c with source[:, c].
    ``decoy`` is a 512x512 initializer the graph really uses, placed first, so reading the wrong one shows.
    ``fp16`` declares float16 inputs, outputs and weights, as an fp16 export does.
    """
    float_type = np.float16 if fp16 else np.float32
    elem_type = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    emap = np.eye(512, dtype=np.float32) if emap is None else emap
    nodes = [
        helper.make_node("Identity", [source_name], ["src"]),
        *_zero_of("target", "t"),
        *_zero_of("src", "s"),
        helper.make_node("Add", ["t_zero", "s_zero"], ["z"]),
    ]
    initializers: list[np.ndarray] = [np.array(0.0, float_type)]
    names = ["zero"]
    if decoy is not None:
        nodes += [
            helper.make_node("MatMul", ["src", "decoy"], ["decoyed"]),
            helper.make_node("ReduceSum", ["decoyed"], ["decoy_sum"], keepdims=0),
            helper.make_node("Mul", ["decoy_sum", "zero"], ["decoy_zero"]),
            helper.make_node("Add", ["z", "decoy_zero"], ["z2"]),
        ]
        initializers.append(decoy.astype(float_type))
        names.append("decoy")
    else:
        nodes.append(helper.make_node("Identity", ["z"], ["z2"]))
    if kind == "identity":
        nodes.append(helper.make_node("Add", ["target", "z2"], ["output"]))
    elif kind == "flat":
        initializers.append(np.asarray(colour, float_type).reshape(1, 3, 1, 1))
        names.append("colour")
        nodes += [
            helper.make_node("Mul", ["target", "zero"], ["blank"]),
            helper.make_node("Add", ["blank", "colour"], ["coloured"]),
            helper.make_node("Add", ["coloured", "z2"], ["output"]),
        ]
    elif kind == "reveal":
        initializers += [
            np.array([0], np.int64),
            np.array([3], np.int64),
            np.array([1], np.int64),
            np.array([-1, 3, 1, 1], np.int64),
        ]
        names += ["starts", "ends", "axes", "shape"]
        nodes += [
            helper.make_node("Slice", ["src", "starts", "ends", "axes"], ["first3"]),
            helper.make_node("Reshape", ["first3", "shape"], ["per_channel"]),
            helper.make_node("Mul", ["target", "zero"], ["blank"]),
            helper.make_node("Add", ["blank", "per_channel"], ["painted"]),
            helper.make_node("Add", ["painted", "z2"], ["output"]),
        ]
    else:
        raise ValueError(kind)
    initializers.append(emap.astype(float_type))
    names.append("emap")  # the LAST initializer, as in inswapper_128.onnx
    return save_model(
        path,
        nodes,
        [
            value_info("target", [batch, 3, target_size, target_size], elem_type),
            value_info(source_name, [batch, 512], elem_type),
        ],
        [value_info("output", [batch, 3, target_size, target_size], elem_type)],
        initializers,
        names,
    )


def mean_colour_model(path: Path, input_size: int, output_size: int, input_name: str = "input") -> Path:
    """input (1x3xSxS) -> output (1x``output_size``): the three channel means, then zeros (a recogniser stand-in)."""
    return save_model(
        path,
        [
            helper.make_node("GlobalAveragePool", [input_name], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["means"]),
            helper.make_node("Pad", ["means", "pads"], ["output"]),
        ],
        [value_info(input_name, [1, 3, input_size, input_size])],
        [value_info("output", [1, output_size])],
        [np.array([0, 0, 0, output_size - 3], np.int64)],
        ["pads"],
    )


def gfpgan_model(path: Path, *, kind: str, colour: Sequence[float] = (-1.0, 0.0, 1.0)) -> Path:
    """gfpgan_1.4 look-alike: input ``input`` 1x3x512x512 in [-1, 1] -> ``output`` (identity, or one flat colour)."""
    if kind == "identity":
        nodes = [helper.make_node("Identity", ["input"], ["output"])]
        initializers: list[np.ndarray] = []
        names: list[str] = []
    else:
        nodes = [
            helper.make_node("Mul", ["input", "zero"], ["blank"]),
            helper.make_node("Add", ["blank", "colour"], ["output"]),
        ]
        initializers = [np.array(0.0, np.float32), np.asarray(colour, np.float32).reshape(1, 3, 1, 1)]
        names = ["zero", "colour"]
    return save_model(
        path,
        nodes,
        [value_info("input", [1, 3, 512, 512])],
        [value_info("output", [1, 3, 512, 512])],
        initializers,
        names,
    )


def face_at(center: tuple[float, float], size: float, angle_degrees: float = 0.0) -> Face:
    """A face whose five points are the arcface_128 template, scaled to ``size`` pixels, turned, centred at ``center``."""
    points = template_points("arcface_128", 128) - 64.0
    theta = np.deg2rad(angle_degrees)
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    landmarks = (points @ rotation.T) * (size / 128.0) + np.asarray(center)
    x1, y1 = landmarks.min(axis=0) - size * 0.3
    x2, y2 = landmarks.max(axis=0) + size * 0.3
    return Face(bbox=np.array([x1, y1, x2, y2], np.float32), score=0.99, landmark_5=landmarks.astype(np.float32))


def frame_to_crop_matrix(face: Face, crop_size: int) -> np.ndarray:
    return estimate_similarity(face.landmark_5, template_points("arcface_128", crop_size))


def landmarks_68_template() -> np.ndarray:
    """A plausible 68-point face (iBUG layout) in the 128 arcface crop, built around the arcface_128 five points."""
    jaw_angles = np.linspace(np.pi, 0.0, 17)
    jaw = np.stack([64 + 42 * np.cos(jaw_angles), 58 + 54 * np.sin(jaw_angles)], axis=1)
    brows = [[30 + 7 * i, 40 - 2 * min(i, 4 - i)] for i in range(5)] + [
        [70 + 7 * i, 40 - 2 * min(i, 4 - i)] for i in range(5)
    ]
    nose = [[64, 54 + 5 * i] for i in range(4)] + [[54 + 5 * i, 77] for i in range(5)]

    def ring(center: tuple[float, float], rx: float, ry: float, count: int) -> list[list[float]]:
        angles = np.linspace(np.pi, -np.pi, count, endpoint=False)
        return [[center[0] + rx * np.cos(a), center[1] + ry * np.sin(a)] for a in angles]

    eyes = ring((46.3, 51.7), 8, 3.5, 6) + ring((81.5, 51.5), 8, 3.5, 6)
    lips = ring((64.1, 92.3), 15, 7, 12) + ring((64.1, 92.3), 10, 2.5, 8)
    return np.concatenate([jaw, np.asarray(brows + nose + eyes + lips, np.float64)]).astype(np.float32)


def face_with_68(center: tuple[float, float], size: float, angle_degrees: float = 0.0) -> Face:
    """``face_at`` with 68 dense landmarks placed, scaled and turned the same way as its five points."""
    face = face_at(center, size, angle_degrees)
    theta = np.deg2rad(angle_degrees)
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    dense = ((landmarks_68_template() - 64.0) @ rotation.T) * (size / 128.0) + np.asarray(center)
    return face.with_(landmark_dense=dense.astype(np.float32))
