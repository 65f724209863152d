"""Tiny stand-ins for the age modifier's models (fran, styleganex_age) and DeepFaceLab models (``.dfm``), with the real
files' input names, shapes and dtypes (from engine.models), built with onnx.helper. Each makes a change that shows the
option's value reached the model:

- fran: its ``target`` brightened by (wanted age - age) / 100, the second ``direction`` value less the first (0..1
  space): older is brighter, younger darker, direction 0 unchanged.
- styleganex_age: its ``target_with_background`` (in [-1, 1]) plus STYLEGANEX_STRIPES x -``direction`` in horizontal
  bands of STRIPE_ROWS rows, alternately + and -, answered at 4 x its size (1536): stripes across the face, their
  strength the direction (bands, not a uniform shift: FaceFusion's colour matching after styleganex undoes a shift).
- DeepFaceLab models: the person's face is ``in_face:0`` x (1 - morph) + DFM_PAINT x morph (BGR 0..1; without a
  ``morph_value:0`` input, DFM_PAINT), both masks 1 everywhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from standins import IR_VERSION, OPSET, _const, _save
from standins_selection import classifier_standin

from facefusion_provider.engine.models import DFM_FACE_INPUT, DFM_MORPH_INPUT, MODELS, model_spec

STYLEGANEX_STRIPES = 0.2  # per unit of direction (2.5 at the ends): 0.5 in [-1, 1], 64 levels
STRIPE_ROWS = (
    12  # rows of the 384 crop per band: a period of 64 rows at 1024, which the coarsest colour match averages out
)
DFM_PAINT = (0.1, 0.9, 0.2)  # BGR 0..1: a green face
DFM_OUTPUT_NAMES = ("out_face_mask:0", "out_celeb_face:0", "out_celeb_face_mask:0")


def _graph_model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto],
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, f"{name}_standin", inputs, outputs, initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def fran_standin(folder: Path) -> Path:
    spec = MODELS["fran"]
    nodes = [
        helper.make_node("Slice", ["direction", "zero", "one"], ["age"]),
        helper.make_node("Slice", ["direction", "one", "two"], ["wanted"]),
        helper.make_node("Sub", ["wanted", "age"], ["change"]),
        helper.make_node("Add", ["target", "change"], ["output"]),
    ]
    initializers = [_const(key, np.array([value], np.int64)) for key, value in (("zero", 0), ("one", 1), ("two", 2))]
    inputs = [
        helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 1024, 1024]),
        helper.make_tensor_value_info("direction", TensorProto.FLOAT, [2]),
    ]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 1024, 1024])]
    return _save(folder / spec.file_name, _graph_model("fran", nodes, inputs, outputs, initializers))


def stripes(size: int = 384) -> np.ndarray:
    """(1, 1, size, 1): +1 on the first STRIPE_ROWS rows of every 2 x STRIPE_ROWS, -1 on the rest."""
    rows = np.where((np.arange(size) // STRIPE_ROWS) % 2 == 0, 1.0, -1.0)
    return rows.astype(np.float32).reshape(1, 1, size, 1)


def styleganex_standin(folder: Path) -> Path:
    spec = MODELS["styleganex_age"]
    nodes = [
        helper.make_node("ReduceMean", ["target"], ["target_mean"], keepdims=0),
        helper.make_node("Mul", ["target_mean", "nothing"], ["unused"]),
        helper.make_node("Mul", ["direction", "strength"], ["scaled"]),
        helper.make_node("Mul", ["scaled", "stripes"], ["banded"]),
        helper.make_node("Add", ["target_with_background", "banded"], ["changed"]),
        helper.make_node("Add", ["changed", "unused"], ["kept"]),
        helper.make_node("Resize", ["kept", "", "scales"], ["output"], mode="nearest"),
    ]
    initializers = [
        _const("nothing", np.array(0.0, np.float32)),
        _const("strength", np.array(-STYLEGANEX_STRIPES, np.float32)),
        _const("stripes", stripes()),
        _const("scales", np.array([1.0, 1.0, 4.0, 4.0], np.float32)),
    ]
    inputs = [
        helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 256, 256]),
        helper.make_tensor_value_info("target_with_background", TensorProto.FLOAT, [1, 3, 384, 384]),
        helper.make_tensor_value_info("direction", TensorProto.FLOAT, []),
    ]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 1536, 1536])]
    return _save(folder / spec.file_name, _graph_model("styleganex_age", nodes, inputs, outputs, initializers))


def dfm_standin(folder: Path, name: str, size: int | None = None, *, morph: bool = True) -> Path:
    """``name``'s ``.dfm`` (its catalogue size, else ``size``): the face painted DFM_PAINT by the morph value."""
    spec = model_spec(name)
    side = size or (spec.deep_swap.size if spec.deep_swap else None)
    assert side is not None, f"{name}: give its size"
    paint = _const("paint", np.asarray(DFM_PAINT, np.float32).reshape(1, 1, 1, 3))
    initializers = [paint, _const("ones", np.ones((1, side, side, 1), np.float32))]
    inputs = [helper.make_tensor_value_info(DFM_FACE_INPUT, TensorProto.FLOAT, [1, side, side, 3])]
    if morph:
        inputs.append(helper.make_tensor_value_info(DFM_MORPH_INPUT, TensorProto.FLOAT, [1]))
        initializers.append(_const("unit", np.array([1.0], np.float32)))
        nodes = [
            helper.make_node("Sub", ["unit", DFM_MORPH_INPUT], ["keep"]),
            helper.make_node("Mul", [DFM_FACE_INPUT, "keep"], ["kept"]),
            helper.make_node("Mul", ["paint", DFM_MORPH_INPUT], ["painted"]),
            helper.make_node("Add", ["kept", "painted"], [DFM_OUTPUT_NAMES[1]]),
        ]
    else:
        initializers.append(_const("nothing", np.array(0.0, np.float32)))
        nodes = [
            helper.make_node("Mul", [DFM_FACE_INPUT, "nothing"], ["blank"]),
            helper.make_node("Add", ["blank", "paint"], [DFM_OUTPUT_NAMES[1]]),
        ]
    nodes += [
        helper.make_node("Identity", ["ones"], [DFM_OUTPUT_NAMES[0]]),
        helper.make_node("Identity", ["ones"], [DFM_OUTPUT_NAMES[2]]),
    ]
    outputs = [
        helper.make_tensor_value_info(DFM_OUTPUT_NAMES[0], TensorProto.FLOAT, [1, side, side, 1]),
        helper.make_tensor_value_info(DFM_OUTPUT_NAMES[1], TensorProto.FLOAT, [1, side, side, 3]),
        helper.make_tensor_value_info(DFM_OUTPUT_NAMES[2], TensorProto.FLOAT, [1, side, side, 1]),
    ]
    return _save(folder / spec.file_name, _graph_model("dfm", nodes, inputs, outputs, initializers))


def mismatched_dfm(folder: Path, name: str) -> Path:
    """A file under ``name``'s ``.dfm`` name that is another kind of model: NCHW ``input``, one output."""
    nodes = [helper.make_node("Identity", ["input"], ["output"])]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 224, 224])]
    return _save(folder / model_spec(name).file_name, _graph_model("other", nodes, inputs, outputs, []))


def write_ageswap_standins(folder: Path) -> Path:
    """``folder`` with fran, the face classifier fran reads each face's age from (``standins_selection``'s, taking a
    face in colour for 20-29), styleganex_age and FaceFusion's default deep swapper model (iperov/elon_musk_224)."""
    fran_standin(folder)
    classifier_standin(folder)
    styleganex_standin(folder)
    dfm_standin(folder, "iperov/elon_musk_224")
    return folder
