"""Compute-equivalent stand-ins for FaceFusion's inswapper_128 and arcface_w600k_r50, with random weights.

inswapper_128's published architecture (the unofficial PyTorch re-implementations reproduce its layer list): a target
encoder (7x7 conv 3->128 at 128 px, 3x3 128->256, stride-2 3x3 256->512 and 512->1024), six residual style blocks at
32x32 (each two 3x3 1024->1024 convs, each followed by AdaIN whose scale and shift come from a 512->2048 linear map of
the source latent), a decoder (bilinear x2, 3x3 1024->512, bilinear x2, 3x3 512->256, 3x3 256->128, 7x7 128->3, tanh,
then (x+1)/2) and the 512x512 emap as the last initializer. That is 138.6 M parameters and 174.6 G multiply-adds per
face, against 138.3 M and about 175 G for the real file. Same input/output names and shapes; the batch is dynamic.

The files are large (553 MB, 277 MB in fp16): they go to a cache folder, never into the repository.

    python bench/make_inswapper_standin.py --out ~/.cache/facefusion-provider/standins [--fp16]
"""

from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9
LATENT = 512
STYLE_BLOCKS = 6


@dataclass
class GraphBuilder:
    """Accumulates nodes and random initializers, and counts parameters and multiply-adds per sample."""

    rng: np.random.Generator
    weight_type: type[np.floating] = np.float32
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    parameters: int = 0
    multiply_adds: int = 0
    _count: int = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def constant(self, array: npt.NDArray[np.generic], prefix: str, *, counted: bool = True) -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(array, name))
        if counted:
            self.parameters += int(array.size)
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int, prefix: str, *, gain: float = 1.0) -> str:
        """He-initialised random weights, times ``gain`` (deep residual stacks take less to keep their values finite)."""
        values = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(gain * np.sqrt(2.0 / fan_in))
        return self.constant(values.astype(self.weight_type), prefix)

    def node(self, op: str, inputs: list[str], prefix: str, **attributes: Any) -> str:
        output = self.name(prefix)
        self.nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def conv(
        self, x: str, in_channels: int, out_channels: int, kernel: int, size: int, *, stride: int = 1, gain: float = 1.0
    ) -> str:
        """A conv on a ``size`` x ``size`` input; 7x7 convs pad by reflection as inswapper does."""
        fan_in = in_channels * kernel * kernel
        weight = self.weight((out_channels, in_channels, kernel, kernel), fan_in, "w", gain=gain)
        bias = self.constant(np.zeros(out_channels, self.weight_type), "b")
        half = kernel // 2
        if kernel == 7:
            pads = self.constant(np.array([0, 0, half, half, 0, 0, half, half], np.int64), "pads", counted=False)
            x = self.node("Pad", [x, pads], "reflect", mode="reflect")
            out = self.node("Conv", [x, weight, bias], "conv", kernel_shape=[kernel, kernel])
        else:
            out = self.node(
                "Conv", [x, weight, bias], "conv", kernel_shape=[kernel, kernel], pads=[half] * 4, strides=[stride] * 2
            )
        out_size = size // stride
        self.multiply_adds += out_size * out_size * out_channels * in_channels * kernel * kernel
        return out

    def leaky(self, x: str) -> str:
        return self.node("LeakyRelu", [x], "lrelu", alpha=0.2)

    def upsample(self, x: str) -> str:
        scales = self.constant(np.array([1, 1, 2, 2], np.float32), "scales", counted=False)
        return self.node("Resize", [x, "", scales], "up", mode="linear", coordinate_transformation_mode="half_pixel")

    def adain(self, x: str, latent: str, channels: int) -> str:
        """Instance norm, then a per-channel scale and shift computed from the source latent."""
        ones = self.constant(np.ones(channels, self.weight_type), "one", counted=False)
        zeros = self.constant(np.zeros(channels, self.weight_type), "zero", counted=False)
        normed = self.node("InstanceNormalization", [x, ones, zeros], "inorm", epsilon=1e-6)
        weight = self.weight((2 * channels, LATENT), LATENT, "style_w")
        bias = self.constant(np.zeros(2 * channels, self.weight_type), "style_b")
        style = self.node("Gemm", [latent, weight, bias], "style", transB=1)
        self.multiply_adds += LATENT * 2 * channels
        shape = self.constant(np.array([-1, 2 * channels, 1, 1], np.int64), "shape", counted=False)
        style = self.node("Reshape", [style, shape], "style4d")
        split = self.constant(np.array([channels, channels], np.int64), "split", counted=False)
        gamma, beta = self.name("gamma"), self.name("beta")
        self.nodes.append(helper.make_node("Split", [style, split], [gamma, beta], axis=1))
        return self.node("Add", [self.node("Mul", [normed, gamma], "scaled"), beta], "adain")


def build_inswapper(rng: np.random.Generator, weight_type: type[np.floating]) -> tuple[onnx.ModelProto, int, int]:
    g = GraphBuilder(rng, weight_type)
    compute_type = TensorProto.FLOAT16 if weight_type is np.float16 else TensorProto.FLOAT
    target = g.node("Cast", ["target"], "target_c", to=compute_type)
    latent = g.node("Cast", ["source"], "source_c", to=compute_type)
    x = g.leaky(g.conv(target, 3, 128, 7, 128))
    x = g.leaky(g.conv(x, 128, 256, 3, 128))
    x = g.leaky(g.conv(x, 256, 512, 3, 128, stride=2))
    x = g.leaky(g.conv(x, 512, 1024, 3, 64, stride=2))
    for _ in range(STYLE_BLOCKS):
        y = g.node("Relu", [g.adain(g.conv(x, 1024, 1024, 3, 32), latent, 1024)], "relu")
        y = g.adain(g.conv(y, 1024, 1024, 3, 32), latent, 1024)
        x = g.node("Add", [x, y], "residual")
    x = g.leaky(g.conv(g.upsample(x), 1024, 512, 3, 64))
    x = g.leaky(g.conv(g.upsample(x), 512, 256, 3, 128))
    x = g.leaky(g.conv(x, 256, 128, 3, 128))
    x = g.node("Tanh", [g.conv(x, 128, 3, 7, 128)], "tanh")
    half = g.constant(np.array(0.5, weight_type), "half", counted=False)
    x = g.node("Add", [g.node("Mul", [x, half], "halved"), half], "to_unit")
    g.nodes.append(helper.make_node("Cast", [x], ["output"], to=TensorProto.FLOAT))
    g.weight((LATENT, LATENT), LATENT, "emap")  # the last initializer, read by the engine, unused by the graph
    graph = helper.make_graph(
        g.nodes,
        "inswapper_128_standin",
        [
            helper.make_tensor_value_info("target", TensorProto.FLOAT, ["batch", 3, 128, 128]),
            helper.make_tensor_value_info("source", TensorProto.FLOAT, ["batch", LATENT]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3, 128, 128])],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    return model, g.parameters, g.multiply_adds


def build_arcface(rng: np.random.Generator) -> onnx.ModelProto:
    """A small random recogniser with arcface_w600k_r50's input and output: 1x3x112x112 in [-1, 1] -> 1x512."""
    g = GraphBuilder(rng)
    x = g.node("Relu", [g.conv("input", 3, 64, 3, 112, stride=2)], "relu")
    x = g.node("Relu", [g.conv(x, 64, 128, 3, 56, stride=2)], "relu")
    x = g.node("Relu", [g.conv(x, 128, 256, 3, 28, stride=2)], "relu")
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flat")
    weight = g.weight((512, 256), 256, "fc_w")
    bias = g.constant(np.zeros(512, np.float32), "fc_b")
    g.nodes.append(helper.make_node("Gemm", [pooled, weight, bias], ["output"], transB=1))
    graph = helper.make_graph(
        g.nodes,
        "arcface_standin",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 112, 112])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 512])],
        initializer=g.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _save(model: onnx.ModelProto, path: Path) -> str:
    """Write atomically; return the sha256."""
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    data = model.SerializeToString()
    temp.write_bytes(data)
    os.replace(temp, path)
    return hashlib.sha256(data).hexdigest()


def ensure_standins(folder: Path, *, fp16: bool = False, seed: int = 0) -> Path:
    """``folder`` holding inswapper_128(_fp16).onnx and arcface_w600k_r50.onnx stand-ins, pinned by SHA256SUMS."""
    folder.mkdir(parents=True, exist_ok=True)
    swapper = folder / ("inswapper_128_fp16.onnx" if fp16 else "inswapper_128.onnx")
    recognizer = folder / "arcface_w600k_r50.onnx"
    sums_path = folder / "SHA256SUMS"
    sums = {}
    if sums_path.exists():
        sums = {name: digest for digest, name in (line.split("  ", 1) for line in sums_path.read_text().splitlines())}
    rng = np.random.default_rng(seed)
    if swapper.name not in sums or not swapper.exists():
        model, parameters, multiply_adds = build_inswapper(rng, np.float16 if fp16 else np.float32)
        print(
            f"{swapper.name}: {parameters / 1e6:.1f} M parameters, {multiply_adds / 1e9:.1f} G multiply-adds per face"
        )
        sums[swapper.name] = _save(model, swapper)
    if recognizer.name not in sums or not recognizer.exists():
        sums[recognizer.name] = _save(build_arcface(rng), recognizer)
    sums_path.write_text("".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items())))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "facefusion-provider" / "standins"
    parser.add_argument("--out", type=Path, default=default, help="folder for the model files (not the repository)")
    parser.add_argument("--fp16", action="store_true", help="write inswapper_128_fp16.onnx (float16 weights)")
    args = parser.parse_args()
    print(ensure_standins(args.out, fp16=args.fp16))


if __name__ == "__main__":
    main()
