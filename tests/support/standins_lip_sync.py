"""Stand-ins for FaceFusion's lip syncers (wav2lip_96, wav2lip_gan_96, edtalk_256) and voice extractors (kim_vocal_1,
kim_vocal_2, uvr_mdxnet: the whole sound kept, or only its lowest frequencies) with the real files' input names
and shapes (``engine.models``): ``source`` the (1, 1, 80, 16) mel window, ``target`` the face (wav2lip: its blanked
and whole copies stacked, 6 channels), edtalk's ``weight`` (1,).

Each returns the whole face (wav2lip: the ``target``'s last three channels) with its lower half darkened by the
voice's loudness: ``face x (1 - k)`` below the middle row, ``k = clip((mean(source) + 4) / 8, 0, 1)`` (x edtalk's
``weight`` x 2). A silent window is all -4 (the log floor, clipped): ``k = 0``, the face comes back as it went in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from standins import save_graph

from facefusion_provider.engine.models import MODELS, lip_sync_facts


def loudness(window: np.ndarray) -> float:
    """The stand-ins' darkening of the lower half for a model ``source`` window (before edtalk's weight)."""
    return float(np.clip((window.mean() + 4.0) / 8.0, 0.0, 1.0))


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def lip_syncer_standin(folder: Path, name: str) -> Path:
    facts = lip_sync_facts(name)
    size, wav2lip = facts.size, facts.kind == "wav2lip"
    lower = np.zeros((1, 1, size, size), np.float32)
    lower[:, :, size // 2 :] = 1.0
    nodes = [
        helper.make_node("ReduceMean", ["source"], ["energy"], keepdims=1),
        helper.make_node("Add", ["energy", "four"], ["lifted"]),
        helper.make_node("Div", ["lifted", "eight"], ["ratio"]),
        helper.make_node("Clip", ["ratio", "zero", "one"], ["loud"]),
    ]
    strength = "loud"
    if not wav2lip:
        nodes += [
            helper.make_node("Mul", ["weight", "two"], ["doubled"]),
            helper.make_node("Mul", ["loud", "doubled"], ["weighted"]),
        ]
        strength = "weighted"
    nodes += [
        helper.make_node("Mul", ["lower", strength], ["shade"]),
        helper.make_node("Sub", ["one", "shade"], ["keep"]),
    ]
    face = "target"
    if wav2lip:
        nodes.append(helper.make_node("Slice", ["target", "starts", "ends", "axes"], ["face"]))
        face = "face"
    nodes.append(helper.make_node("Mul", [face, "keep"], ["output"]))
    initializers = [
        _const("four", np.array(4.0, np.float32)),
        _const("eight", np.array(8.0, np.float32)),
        _const("zero", np.array(0.0, np.float32)),
        _const("one", np.array(1.0, np.float32)),
        _const("two", np.array(2.0, np.float32)),
        _const("lower", lower),
        _const("starts", np.array([3], np.int64)),
        _const("ends", np.array([6], np.int64)),
        _const("axes", np.array([1], np.int64)),
    ]
    spec = MODELS[name]
    inputs = [
        helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(shape)) for input_name, shape in spec.inputs
    ]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, size, size])]
    graph = helper.make_graph(nodes, f"{name}_standin", inputs, outputs, initializer=initializers)
    return save_graph(folder / spec.file_name, graph)


def voice_extractor_standin(folder: Path, name: str, keep_bins: int | None = None) -> Path:
    """A voice extractor (``input`` (N, 4, 3072, 256) -> ``output`` the same): the whole sound is the voice, or with
    ``keep_bins`` only its lowest bins (7680-point bins of 6.25 Hz: 160 keep what lies below 1 kHz)."""
    mask = np.ones((1, 1, 3072, 1), np.float32)
    if keep_bins is not None:
        mask[:, :, keep_bins:] = 0.0
    spec = MODELS[name]
    shape: list[str | int] = ["N", 4, 3072, 256]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["input", "mask"], ["output"])],
        f"{name}_standin",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
        initializer=[_const("mask", mask)],
    )
    return save_graph(folder / spec.file_name, graph)


def write_lip_sync_standins(folder: Path) -> Path:
    """Every lip syncer's stand-in, and every voice extractor's (the whole sound kept)."""
    for name, spec in MODELS.items():
        if spec.role == "lip_sync":
            lip_syncer_standin(folder, name)
        elif spec.role == "voice":
            voice_extractor_standin(folder, name)
    return folder
