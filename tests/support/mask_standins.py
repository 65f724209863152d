"""Stand-ins for FaceFusion's mask models, with the real files' input and output names, shapes and dtypes, whose
answers a test can predict.

- ``xseg_1/2/3`` (occluder): input ``input`` (1, 256, 256, 3) float32 0..1 in BGR order, output ``output``
  (1, 256, 256, 1): 0 (covered) where a pixel is strongly blue, 1 (face shows) elsewhere. Blue is tested on channel 0,
  so the mask is right only when the crop is fed in BGR order, as FaceFusion feeds it.
- ``bisenet_resnet_18/34`` (parser): input ``input`` (1, 3, 512, 512) float32 RGB with ImageNet mean and std, output
  ``output`` (1, 19, 512, 512) logits: class 11 (mouth) where a pixel is strongly red, class 1 (skin) elsewhere. Red is
  tested on channel 0, so the classes are right only when the crop is fed in RGB order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from standins import save_graph

PARSER_CLASSES = 19
OCCLUDER_NAMES = ("xseg_1", "xseg_2", "xseg_3")
PARSER_NAMES = ("bisenet_resnet_34", "bisenet_resnet_18")
COVERING_RGB = (0, 0, 255)  # the colour the occluder stand-in calls covering (pure blue)
MOUTH_RGB = (255, 0, 0)  # the colour the parser stand-in calls mouth (pure red)
MOUTH_CLASS = 11
SKIN_CLASS = 1
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def occluder_standin(path: Path, batch: int | str = 1) -> Path:
    """An xseg look-alike: 1 - [channel 0 - max(channel 1, channel 2) > 0.5], shape (B, 256, 256, 1)."""
    constants = {
        "c0": np.array([0], np.int64),
        "c1": np.array([1], np.int64),
        "c2": np.array([2], np.int64),
        "c3": np.array([3], np.int64),
        "axis": np.array([3], np.int64),
        "half": np.array(0.5, np.float32),
        "one": np.array(1.0, np.float32),
    }
    nodes = [
        helper.make_node("Slice", ["input", "c0", "c1", "axis"], ["blue"]),
        helper.make_node("Slice", ["input", "c1", "c2", "axis"], ["green"]),
        helper.make_node("Slice", ["input", "c2", "c3", "axis"], ["red"]),
        helper.make_node("Max", ["green", "red"], ["others"]),
        helper.make_node("Sub", ["blue", "others"], ["blueness"]),
        helper.make_node("Greater", ["blueness", "half"], ["covered_bool"]),
        helper.make_node("Cast", ["covered_bool"], ["covered"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "covered"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 256, 256, 3])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 256, 256, 1])],
        initializer=[numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    return save_graph(path, graph)


def parser_standin(path: Path, batch: int | str = 1) -> Path:
    """A BiSeNet look-alike: a 1x1 convolution whose logits make strongly red pixels mouth and the rest skin."""
    weights = np.zeros((PARSER_CLASSES, 3, 1, 1), np.float32)
    bias = np.full(PARSER_CLASSES, -10.0, np.float32)
    bias[SKIN_CLASS] = 0.0
    # Mouth logit = R' - G' - B' - 3 on the normalised channels: about +3 for pure red, below 0 for any face colour.
    weights[MOUTH_CLASS, :, 0, 0] = (1.0, -1.0, -1.0)
    bias[MOUTH_CLASS] = -3.0
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "weight", "bias"], ["output"], kernel_shape=[1, 1])],
        path.stem,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 512, 512])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, PARSER_CLASSES, 512, 512])],
        initializer=[numpy_helper.from_array(weights, "weight"), numpy_helper.from_array(bias, "bias")],
    )
    return save_graph(path, graph)


def write_mask_standins(models_dir: Path) -> list[Path]:
    """Every occluder and parser stand-in into ``models_dir``, under the real file names."""
    return [occluder_standin(models_dir / f"{name}.onnx") for name in OCCLUDER_NAMES] + [
        parser_standin(models_dir / f"{name}.onnx") for name in PARSER_NAMES
    ]
