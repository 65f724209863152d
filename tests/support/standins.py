"""Tiny stand-ins for every catalogue swapper, crossface converter, enhancer, colorizer and background remover (and the
ArcFace recogniser and fan_68_5), with the
real files' input names, shapes and dtypes (from engine.models), built with onnx.helper. Each does something a test
can check:

- swappers, ``echo``: return the target crop in the model's own output space (normalised space where the engine
  de-normalises the output, else 0..1), so the whole path reproduces the face; the source is read but unused.
- swappers, ``paint``: one flat colour from the source: sigmoid(GAIN x its first 3 values) for embeddings, the channel
  means for source images; so the swapped face's colour shows which source the model was given.
- converters: ``output = input @ converter_matrix(name)``.
- enhancers, ``echo`` or ``paint`` (flat ENHANCER_COLOUR in [-1, 1]); CodeFormer blends input and result by its
  float64 ``weight``: output = input x (1 - weight) + result x weight.
- colorizers: ddcolor's a and b a flat COLORIZER_AB; deoldify's frame its grey input plus DEOLDIFY_TINT.
- background removers: the foreground is where the (de-normalised) red is above one half, a 0/1 mask (u2net_cloth:
  two class scores, background and class 1); corridor_key's mask is its fourth input (the coarse key) and its
  foreground colours are 1 - the input's.
- fan_68_5: ``output = input (1, 10) @ FAN_68_5_MAP``, as (1, 68, 2).
- frame enhancers: a bilinear resize by the model's scale with half-pixel centres (OpenCV's INTER_LINEAR), or ``1 -``
  that with ``invert``; the tile's height and width free, as in FaceFusion's exports.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from facefusion_provider.engine.models import MODELS, SwapFacts

OPSET = 17
IR_VERSION = 9
GAIN = 20.0
ENHANCER_COLOUR = (0.6, -0.2, -0.6)
BATCH = "N"
COLORIZER_AB = (20.0, -30.0)  # LAB a and b, float LAB units
DEOLDIFY_TINT = (40.0, 0.0, -40.0)  # RGB levels added to the grey
FOREGROUND_RED = 0.5  # the background remover stand-ins' foreground: red (0..1) above this


def _dims(shape: tuple[int | None, ...]) -> list[int | str]:
    return [BATCH if dim is None else dim for dim in shape]


def _save(path: Path, model: onnx.ModelProto) -> Path:
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def save_graph(path: Path, graph: onnx.GraphProto) -> Path:
    """``graph`` as a checked model at ``path`` (its folder made), at this module's opset and IR version."""
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION))


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    output_shape: list[int | str],
    initializers: list[onnx.TensorProto],
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        f"{name}_standin",
        inputs,
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, output_shape)],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _channels(values: tuple[float, float, float]) -> np.ndarray:
    return np.asarray(values, np.float32).reshape(1, 3, 1, 1)


def output_space(facts: SwapFacts) -> tuple[np.ndarray, np.ndarray]:
    """(scale, offset) taking a 0..1 image into what the model outputs: normalised where the engine de-normalises."""
    if facts.denormalize_output:
        scale: np.ndarray = 1.0 / _channels(facts.std)
        return scale, -_channels(facts.mean) * scale
    return np.ones((1, 3, 1, 1), np.float32), np.zeros((1, 3, 1, 1), np.float32)


def paint_colour(source: np.ndarray, facts: SwapFacts) -> np.ndarray:
    """The 0..1 colour the ``paint`` stand-in gives a face for one fed ``source`` tensor (1, 512) or (1, 3, S, S)."""
    values = np.asarray(source, np.float32)
    colour: np.ndarray = (
        values.mean(axis=(2, 3))[0] if facts.source == "image" else 1 / (1 + np.exp(-GAIN * values[0, :3]))
    )
    return colour


def swapper_standin(folder: Path, name: str, kind: str = "echo", emap: np.ndarray | None = None) -> Path:
    spec = MODELS[name]
    facts = spec.swap
    assert facts is not None
    (_, target_shape), (_, source_shape) = spec.inputs
    scale, offset = output_space(facts)
    initializers = [_const("zero", np.array(0.0, np.float32)), _const("scale", scale), _const("offset", offset)]
    nodes = [
        helper.make_node("ReduceSum", ["source"], ["source_sum"], keepdims=0),
        helper.make_node("Mul", ["source_sum", "zero"], ["source_zero"]),
    ]
    if kind == "echo":
        # target (normalised by mean/std) back to 0..1, then into the model's output space
        initializers += [_const("mean", _channels(facts.mean)), _const("std", _channels(facts.std))]
        nodes += [
            helper.make_node("Mul", ["target", "std"], ["unit_scaled"]),
            helper.make_node("Add", ["unit_scaled", "mean"], ["unit"]),
        ]
    elif kind == "paint":
        if facts.source == "image":
            nodes.append(helper.make_node("ReduceMean", ["source"], ["colour4"], axes=[2, 3], keepdims=1))
        else:
            initializers += [
                _const("starts", np.array([0], np.int64)),
                _const("ends", np.array([3], np.int64)),
                _const("axes", np.array([1], np.int64)),
                _const("gain", np.array(GAIN, np.float32)),
                _const("shape", np.array([-1, 3, 1, 1], np.int64)),
            ]
            nodes += [
                helper.make_node("Slice", ["source", "starts", "ends", "axes"], ["first3"]),
                helper.make_node("Mul", ["first3", "gain"], ["gained"]),
                helper.make_node("Sigmoid", ["gained"], ["colour"]),
                helper.make_node("Reshape", ["colour", "shape"], ["colour4"]),
            ]
        nodes += [
            helper.make_node("Mul", ["target", "zero"], ["blank"]),
            helper.make_node("Add", ["blank", "colour4"], ["unit"]),
        ]
    else:
        raise ValueError(kind)
    nodes += [
        helper.make_node("Mul", ["unit", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "offset"], ["spaced"]),
        helper.make_node("Add", ["spaced", "source_zero"], ["output"]),
    ]
    if facts.source == "emap":  # the LAST initializer, as in inswapper_128.onnx
        initializers.append(_const("emap", np.eye(512, dtype=np.float32) if emap is None else emap))
    inputs = [
        helper.make_tensor_value_info("target", TensorProto.FLOAT, _dims(target_shape)),
        helper.make_tensor_value_info("source", TensorProto.FLOAT, _dims(source_shape)),
    ]
    return _save(folder / spec.file_name, _model(name, nodes, inputs, _dims(target_shape), initializers))


def converter_matrix(name: str) -> np.ndarray:
    """The fixed 512x512 map of a crossface stand-in (seeded by the name, so simswap's and ghost's differ)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    matrix: np.ndarray = (rng.standard_normal((512, 512)) / np.sqrt(512)).astype(np.float32)
    return matrix


def converter_standin(folder: Path, name: str) -> Path:
    spec = MODELS[name]
    nodes = [helper.make_node("MatMul", ["input", "map"], ["output"])]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, _dims(spec.inputs[0][1]))]
    model = _model(name, nodes, inputs, _dims(spec.outputs[0][1]), [_const("map", converter_matrix(name))])
    return _save(folder / spec.file_name, model)


def enhancer_standin(folder: Path, name: str, kind: str = "echo") -> Path:
    spec = MODELS[name]
    (_, crop_shape) = spec.inputs[0]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, _dims(crop_shape))]
    initializers = [_const("zero", np.array(0.0, np.float32)), _const("colour", _channels(ENHANCER_COLOUR))]
    if kind == "echo":
        nodes = [helper.make_node("Identity", ["input"], ["result"])]
    elif kind == "paint":
        nodes = [
            helper.make_node("Mul", ["input", "zero"], ["blank"]),
            helper.make_node("Add", ["blank", "colour"], ["result"]),
        ]
    else:
        raise ValueError(kind)
    if "weight" in spec.input_names:
        inputs.append(helper.make_tensor_value_info("weight", TensorProto.DOUBLE, [1]))
        initializers.append(_const("one", np.array(1.0, np.float32)))
        nodes += [
            helper.make_node("Cast", ["weight"], ["w"], to=TensorProto.FLOAT),
            helper.make_node("Sub", ["one", "w"], ["keep"]),
            helper.make_node("Mul", ["input", "keep"], ["kept"]),
            helper.make_node("Mul", ["result", "w"], ["restored"]),
            helper.make_node("Add", ["kept", "restored"], ["output"]),
        ]
    else:
        nodes.append(helper.make_node("Add", ["result", "zero"], ["output"]))
    return _save(folder / spec.file_name, _model(name, nodes, inputs, _dims(crop_shape), initializers))


def frame_enhancer_standin(
    folder: Path,
    name: str,
    *,
    invert: bool = False,
    batch: int | str = BATCH,
    input_name: str = "input",
    scale: int | None = None,
) -> Path:
    """``name``'s stand-in, by its catalogue scale unless ``scale`` says otherwise (a mismatched file)."""
    facts = MODELS[name].frame_enhance
    assert facts is not None, f"{name} is not a frame enhancer"
    factor = float(scale or facts.scale)
    nodes = [
        helper.make_node(
            "Resize",
            [input_name, "", "scales"],
            ["resized"],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("Sub", ["one", "resized"], ["output"])
        if invert
        else helper.make_node("Identity", ["resized"], ["output"]),
    ]
    initializers = [
        _const("scales", np.array([1.0, 1.0, factor, factor], np.float32)),
        _const("one", np.array(1.0, np.float32)),
    ]
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, 3, "H", "W"])]
    model = _model(name, nodes, inputs, [batch, 3, "OH", "OW"], initializers)
    return _save(folder / MODELS[name].file_name, model)


def _slice(
    source: str, first: int, last: int, result: str, prefix: str
) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """Channels ``first``..``last`` (exclusive) of an NCHW tensor."""
    names = [f"{prefix}_starts", f"{prefix}_ends", f"{prefix}_axes"]
    values = [np.array([first], np.int64), np.array([last], np.int64), np.array([1], np.int64)]
    return helper.make_node("Slice", [source, *names], [result]), [
        _const(n, v) for n, v in zip(names, values, strict=True)
    ]


def colorizer_standin(folder: Path, name: str, *, input_name: str = "input") -> Path:
    facts = MODELS[name].colorize
    assert facts is not None, f"{name} is not a colorizer"
    initializers = [_const("zero", np.array(0.0, np.float32))]
    if facts.kind == "ddcolor":
        first, slices = _slice(input_name, 0, 2, "two", "ab")
        initializers += [*slices, _const("ab", np.asarray(COLORIZER_AB, np.float32).reshape(1, 2, 1, 1))]
        nodes = [
            first,
            helper.make_node("Mul", ["two", "zero"], ["blank"]),
            helper.make_node("Add", ["blank", "ab"], ["output"]),
        ]
        channels = 2
    else:
        initializers.append(_const("tint", _channels(DEOLDIFY_TINT)))
        nodes = [helper.make_node("Add", [input_name, "tint"], ["output"])]
        channels = 3
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 3, "H", "W"])]
    return _save(folder / MODELS[name].file_name, _model(name, nodes, inputs, [1, channels, "H", "W"], initializers))


def background_remover_standin(folder: Path, name: str, *, input_name: str = "input") -> Path:
    facts = MODELS[name].matte
    assert facts is not None, f"{name} is not a background remover"
    red, slices = _slice(input_name, 0, 1, "red_normal", "red")
    initializers = [
        *slices,
        _const("std_red", np.array(facts.std[0], np.float32)),
        _const("mean_red", np.array(facts.mean[0], np.float32)),
        _const("threshold", np.array(FOREGROUND_RED, np.float32)),
        _const("steep", np.array(1e4, np.float32)),
        _const("low", np.array(0.0, np.float32)),
        _const("high", np.array(1.0, np.float32)),
    ]
    nodes = [
        red,
        helper.make_node("Mul", ["red_normal", "std_red"], ["red_scaled"]),
        helper.make_node("Add", ["red_scaled", "mean_red"], ["red_unit"]),
        helper.make_node("Sub", ["red_unit", "threshold"], ["above"]),
        helper.make_node("Mul", ["above", "steep"], ["steep_above"]),
        helper.make_node("Clip", ["steep_above", "low", "high"], ["mask"]),
    ]
    size: list[int | str] = [BATCH, 1, "H", "W"]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, size)]
    if facts.kind == "plain":
        nodes.append(helper.make_node("Identity", ["mask"], ["output"]))
    elif facts.kind == "classes":
        nodes += [
            helper.make_node("Sub", ["high", "mask"], ["background"]),
            helper.make_node("Concat", ["background", "mask"], ["output"], axis=1),
        ]
        outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [BATCH, 2, "H", "W"])]
    else:
        key, key_slices = _slice(input_name, 3, 4, "output", "key")
        rgb, rgb_slices = _slice(input_name, 0, 3, "rgb_normal", "rgb")
        initializers += [
            *key_slices,
            *rgb_slices,
            _const("std", _channels(facts.std)),
            _const("mean", _channels(facts.mean)),
        ]
        nodes = [
            key,
            rgb,
            helper.make_node("Mul", ["rgb_normal", "std"], ["rgb_scaled"]),
            helper.make_node("Add", ["rgb_scaled", "mean"], ["rgb_unit"]),
            helper.make_node("Sub", ["high", "rgb_unit"], ["foreground"]),
        ]
        outputs.append(helper.make_tensor_value_info("foreground", TensorProto.FLOAT, [BATCH, 3, "H", "W"]))
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH, facts.channels, "H", "W"])]
    graph = helper.make_graph(nodes, f"{name}_standin", inputs, outputs, initializer=initializers)
    return save_graph(folder / MODELS[name].file_name, graph)


def fan_68_5_map() -> np.ndarray:
    """The fan_68_5 stand-in's fixed (10, 136) map, seeded."""
    matrix: np.ndarray = np.random.default_rng(68).uniform(0.0, 0.2, (10, 136)).astype(np.float32)
    return matrix


def fan_68_5_standin(folder: Path) -> Path:
    nodes = [
        helper.make_node("Reshape", ["input", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "map"], ["points"]),
        helper.make_node("Reshape", ["points", "out_shape"], ["output"]),
    ]
    initializers = [
        _const("flat_shape", np.array([1, 10], np.int64)),
        _const("out_shape", np.array([1, 68, 2], np.int64)),
        _const("map", fan_68_5_map()),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 5, 2])]
    return _save(folder / "fan_68_5.onnx", _model("fan_68_5", nodes, inputs, [1, 68, 2], initializers))


def recognizer_standin(folder: Path) -> Path:
    """arcface_w600k_r50: 1x3x112x112 -> 1x512, a fixed projection of the crop's 4x4 colour layout (plus an offset, so
    its raw output is not unit length)."""
    projection = np.random.default_rng(11).normal(size=(48, 512)).astype(np.float32)
    nodes = [
        helper.make_node("AveragePool", ["input"], ["pooled"], kernel_shape=[28, 28], strides=[28, 28]),
        helper.make_node("Flatten", ["pooled"], ["layout"]),
        helper.make_node("MatMul", ["layout", "projection"], ["output"]),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 112, 112])]
    model = _model("arcface_w600k_r50", nodes, inputs, [1, 512], [_const("projection", projection)])
    return _save(folder / "arcface_w600k_r50.onnx", model)


def write_standins(folder: Path, *, swapper_kind: str = "paint", enhancer_kind: str = "paint") -> Path:
    """``folder`` with a stand-in for every catalogue swapper, converter, face and frame enhancer, and the recogniser."""
    for name, spec in MODELS.items():
        if spec.role == "swap":
            swapper_standin(folder, name, swapper_kind)
        elif spec.role == "convert":
            converter_standin(folder, name)
        elif spec.role == "enhance":
            enhancer_standin(folder, name, enhancer_kind)
        elif spec.role == "upscale":
            frame_enhancer_standin(folder, name)
        elif spec.role == "colorize":
            colorizer_standin(folder, name)
        elif spec.role == "matte":
            background_remover_standin(folder, name)
    fan_68_5_standin(folder)
    recognizer_standin(folder)
    return folder
