"""Stand-ins for LivePortrait's six networks (``live_portrait_<network>.onnx``), with the real files' input names and
shapes (engine.models.LIVE_PORTRAIT_IO), built with onnx.helper. Simple, exact math, so a test can follow the plumbing:

- feature extractor: the 256 crop itself, packed into the (1, 32, 16, 64, 64) volume (4x4 blocks as channels, the
  rest zero): nothing of the face is lost.
- motion extractor: a fixed pose (``POSE``), ``SCALE``, ``TRANSLATION`` and canonical points (``CANONICAL``); the
  expression is the crop's colour: point k, axis c is (mean of colour channel c - 0.5) x 2 x ``SPAN`` (inside
  LivePortrait's bounds, so clipping leaves it be).
- generator: the crop unpacked from the volume, resized to 512 (bilinear), plus ``GAIN`` x the sum over the 21 points
  of (source - target) on each colour channel: the driving points equal to the own ones redraw the crop as it was.
- stitcher: ``STITCH`` x source + (1 - ``STITCH``) x target.
- eye and lip retargeters: ``input @ EYE_MAP`` / ``LIP_MAP``: only the ratios (the last 3 or 2 values) move points.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from standins import save_graph

from facefusion_provider.engine.live_portrait import EXPRESSION_MAX, EXPRESSION_MIN

POSE = (4.0, -6.0, 2.0)  # pitch, yaw, roll in degrees
SCALE = 1.5
TRANSLATION = (0.01, -0.02, 0.0)
_K = np.arange(21, dtype=np.float32)
CANONICAL = (np.stack([np.sin(_K), np.cos(_K), _K / 21.0], axis=1) * 0.3 + 0.05).astype(np.float32)[None]
SPAN = (0.9 * np.minimum(-EXPRESSION_MIN, EXPRESSION_MAX)).astype(np.float32)  # (1, 21, 3)
GAIN = 2.0
STITCH = 0.75
EYE_MAP = np.zeros((66, 63), np.float32)
EYE_MAP[65, 1::3] = 0.05  # the wanted openness lifts every point
EYE_MAP[63:65, 1::3] = -0.02
LIP_MAP = np.zeros((65, 63), np.float32)
LIP_MAP[64, 0::3] = 0.05
LIP_MAP[63, 0::3] = -0.02


def _value(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _const(name: str, value: object, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _save(
    folder: Path,
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto],
) -> Path:
    graph = helper.make_graph(nodes, f"{name}_standin", inputs, outputs, initializer=initializers)
    return save_graph(folder / f"{name}.onnx", graph)


def feature_extractor_standin(folder: Path, family: str = "live_portrait") -> Path:
    nodes = [
        helper.make_node("SpaceToDepth", ["input"], ["blocks"], blocksize=4),
        helper.make_node("Reshape", ["blocks", "volume_shape"], ["volume"]),
        helper.make_node("Pad", ["volume", "pads"], ["feature_volume"]),
    ]
    initializers = [
        _const("volume_shape", [1, 3, 16, 64, 64], np.int64),
        _const("pads", [0, 0, 0, 0, 0, 0, 29, 0, 0, 0], np.int64),
    ]
    inputs = [_value("input", [1, 3, 256, 256])]
    outputs = [_value("feature_volume", [1, 32, 16, 64, 64])]
    return _save(folder, f"{family}_feature_extractor", nodes, inputs, outputs, initializers)


def motion_extractor_standin(folder: Path, family: str = "live_portrait") -> Path:
    fixed = {
        "pitch": np.float32(POSE[0]),
        "yaw": np.float32(POSE[1]),
        "roll": np.float32(POSE[2]),
        "scale": np.full((1, 1), SCALE, np.float32),
        "translation": np.asarray([TRANSLATION], np.float32),
        "motion_points": CANONICAL,
    }
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["colour"], axes=[2, 3], keepdims=0),
        helper.make_node("Sub", ["colour", "half"], ["centred"]),
        helper.make_node("Reshape", ["centred", "row_shape"], ["row"]),
        helper.make_node("Mul", ["row", "span2"], ["expression"]),
        *(helper.make_node("Identity", [f"{name}_value"], [name]) for name in fixed),
    ]
    initializers = [
        _const("half", 0.5),
        _const("row_shape", [1, 1, 3], np.int64),
        _const("span2", 2.0 * SPAN),
        *(_const(f"{name}_value", value) for name, value in fixed.items()),
    ]
    outputs = [
        _value("pitch", []),
        _value("yaw", []),
        _value("roll", []),
        _value("scale", [1, 1]),
        _value("translation", [1, 3]),
        _value("expression", [1, 21, 3]),
        _value("motion_points", [1, 21, 3]),
    ]
    inputs = [_value("input", [1, 3, 256, 256])]
    return _save(folder, f"{family}_motion_extractor", nodes, inputs, outputs, initializers)


def generator_standin(folder: Path, family: str = "live_portrait") -> Path:
    nodes = [
        helper.make_node("Slice", ["feature_volume", "zero", "three", "one"], ["packed"]),
        helper.make_node("Reshape", ["packed", "blocks_shape"], ["blocks"]),
        helper.make_node("DepthToSpace", ["blocks"], ["crop"], blocksize=4, mode="DCR"),
        helper.make_node("Resize", ["crop", "", "twice"], ["large"], mode="linear"),
        helper.make_node("Sub", ["source", "target"], ["moved"]),
        helper.make_node("ReduceSum", ["moved", "one"], ["moved_sum"], keepdims=0),
        helper.make_node("Mul", ["moved_sum", "gain"], ["shift"]),
        helper.make_node("Reshape", ["shift", "channel_shape"], ["channel_shift"]),
        helper.make_node("Add", ["large", "channel_shift"], ["output"]),
    ]
    initializers = [
        _const("zero", [0], np.int64),
        _const("three", [3], np.int64),
        _const("one", [1], np.int64),
        _const("blocks_shape", [1, 48, 64, 64], np.int64),
        _const("twice", [1.0, 1.0, 2.0, 2.0]),
        _const("gain", GAIN),
        _const("channel_shape", [1, 3, 1, 1], np.int64),
    ]
    points = [1, 21, 3]
    inputs = [_value("feature_volume", [1, 32, 16, 64, 64]), _value("source", points), _value("target", points)]
    return _save(folder, f"{family}_generator", nodes, inputs, [_value("output", [1, 3, 512, 512])], initializers)


def stitcher_standin(folder: Path, family: str = "live_portrait") -> Path:
    nodes = [
        helper.make_node("Mul", ["source", "kept"], ["from_source"]),
        helper.make_node("Mul", ["target", "pulled"], ["from_target"]),
        helper.make_node("Add", ["from_source", "from_target"], ["output"]),
    ]
    initializers = [_const("kept", STITCH), _const("pulled", 1.0 - STITCH)]
    inputs = [_value("source", [1, 21, 3]), _value("target", [1, 21, 3])]
    return _save(folder, f"{family}_stitcher", nodes, inputs, [_value("output", [1, 21, 3])], initializers)


def retargeter_standin(folder: Path, network: str, family: str = "live_portrait") -> Path:
    mapping = EYE_MAP if network == "eye_retargeter" else LIP_MAP
    nodes = [helper.make_node("MatMul", ["input", "map"], ["output"])]
    inputs = [_value("input", [1, mapping.shape[0]])]
    return _save(folder, f"{family}_{network}", nodes, inputs, [_value("output", [1, 63])], [_const("map", mapping)])


def write_live_portrait_standins(folder: Path, family: str = "live_portrait") -> Path:
    """``folder`` with a stand-in for each of the six networks."""
    feature_extractor_standin(folder, family)
    motion_extractor_standin(folder, family)
    generator_standin(folder, family)
    stitcher_standin(folder, family)
    retargeter_standin(folder, "eye_retargeter", family)
    retargeter_standin(folder, "lip_retargeter", family)
    return folder


def standin_expression(crop: np.ndarray) -> np.ndarray:
    """What the motion extractor stand-in reads as the expression of an RGB uint8 crop at 256."""
    colour = crop.reshape(-1, 3).astype(np.float32).mean(axis=0) / 255.0
    return np.asarray((colour - 0.5) * 2.0 * SPAN, np.float32)
