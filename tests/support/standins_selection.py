"""A stand-in for FaceFusion's face classifier (fairface), built with onnx.helper, with the real file's input name and
shape (engine.models) and three id outputs in the real order: race, gender, age.

It answers by the face crop's colour: a crop whose (normalised) red is above its blue on average is ``warm`` (a face
in colour, as the astronaut's), else ``cool`` (a grey face, as the Labeled Faces in the Wild crops). ``WARM`` and
``COOL`` are the classes the engine should read from each answer (FaceFusion's mapping of the ids).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from standins import save_graph

from facefusion_provider.engine.face import FaceClasses
from facefusion_provider.engine.models import MODELS

# (race id, gender id, age id) the stand-in answers, and the classes they mean in FaceFusion's reading.
WARM_IDS, COOL_IDS = (0, 1, 3), (1, 0, 6)
WARM = FaceClasses("female", "white", range(20, 29))
COOL = FaceClasses("male", "black", range(50, 59))


def classifier_standin(
    folder: Path,
    *,
    input_name: str = "input",
    outputs: int = 3,
    warm_ids: tuple[int, int, int] = WARM_IDS,
    cool_ids: tuple[int, int, int] = COOL_IDS,
) -> Path:
    """``folder``/fairface.onnx: (N, 3, 224, 224) -> race_id, gender_id, age_id, each (N,) int64: ``warm_ids`` for a
    warm crop, ``cool_ids`` for a cool one (``outputs`` fewer: a file that does not answer as fairface)."""
    spec = MODELS["fairface"]
    ((_, shape),) = spec.inputs
    ids = np.asarray([warm_ids, cool_ids], np.int64)  # row 0: warm, row 1: cool
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["means"], axes=[2, 3], keepdims=0),  # (N, 3)
        helper.make_node("MatMul", ["means", "red_minus_blue"], ["warmth"]),  # (N, 1)
        helper.make_node("Reshape", ["warmth", "flat"], ["warmth_flat"]),  # (N,)
        helper.make_node("LessOrEqual", ["warmth_flat", "zero"], ["cool"]),
        helper.make_node("Cast", ["cool"], ["row"], to=TensorProto.INT64),  # 0 warm, 1 cool
    ]
    graph_outputs = []
    for column, (name, _) in enumerate(spec.outputs[:outputs]):
        nodes += [
            helper.make_node("Gather", [f"ids_{column}", "row"], [name], axis=0),
        ]
        graph_outputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["N"]))
    initializers = [
        numpy_helper.from_array(np.asarray([[1.0], [0.0], [-1.0]], np.float32), "red_minus_blue"),
        numpy_helper.from_array(np.asarray([-1], np.int64), "flat"),
        numpy_helper.from_array(np.asarray(0.0, np.float32), "zero"),
        *(numpy_helper.from_array(ids[:, column], f"ids_{column}") for column in range(outputs)),
    ]
    if input_name != "input":
        nodes.insert(0, helper.make_node("Identity", [input_name], ["input"]))
    dims: list[int | str] = ["N" if dim is None else dim for dim in shape]
    graph = helper.make_graph(
        nodes,
        "fairface_standin",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, dims)],
        graph_outputs,
        initializer=initializers,
    )
    return save_graph(folder / "fairface.onnx", graph)
