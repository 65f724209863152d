"""Run an ONNX graph with PyTorch's operators, for the GPU check on a machine whose onnxruntime has no CUDA provider.

This workplace's GPU machines have PyTorch with CUDA but no network and carry at most 64 MiB, and onnxruntime-gpu is
a 250 MB wheel: it cannot get there. The check then times our models through this interpreter instead: the same graph
file, node by node, each ONNX operator mapped to the PyTorch call that computes it (convolutions through cuDNN, as
onnxruntime's CUDA provider does). Its figures are PyTorch's speed for the graph, labelled as such, and every run is
checked against onnxruntime's own output on the CPU first (``compare_with_onnxruntime``).

Operators: those of the inswapper stand-in (bench/make_inswapper_standin.py) and of the packaged RetinaFace; any other
is refused by name. Float tensors live on the device in the chosen dtype (so ``Cast`` to a float type keeps that
dtype: the fp16 run is fp16 throughout); integer tensors (shapes, indices) stay on the CPU, as onnxruntime keeps them.

    graph = TorchGraph.load("inswapper_128.onnx", device="cuda", dtype=torch.float16)
    (output,) = graph.run({"target": target, "source": source})
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

Tensor = Any  # torch.Tensor (PyTorch is not in the project's environment: no stubs for mypy)
Operator = Callable[[list[Tensor], dict[str, Any]], list[Tensor]]  # an absent optional input is None

ONNX_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
ONNX_INTEGERS = {onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32}


def _integers(tensor: Tensor | None) -> list[int]:
    return [] if tensor is None else [int(value) for value in tensor.reshape(-1).tolist()]


def _conv(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    x, weight, bias = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    if attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise ValueError("Conv with auto_pad is not supported")
    pads = attributes.get("pads", [0, 0, 0, 0])
    if pads[:2] != pads[2:]:
        raise ValueError(f"Conv with asymmetric pads {pads} is not supported")
    return [
        F.conv2d(
            x,
            weight,
            bias,
            stride=tuple(attributes.get("strides", [1, 1])),
            padding=tuple(pads[:2]),
            dilation=tuple(attributes.get("dilations", [1, 1])),
            groups=attributes.get("group", 1),
        )
    ]


def _gemm(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    a, b, c = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    a = a.transpose(0, 1) if attributes.get("transA", 0) else a
    b = b.transpose(0, 1) if attributes.get("transB", 0) else b
    result = attributes.get("alpha", 1.0) * (a @ b)
    return [result if c is None else result + attributes.get("beta", 1.0) * c]


def _pad(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    x, pads = inputs[0], _integers(inputs[1])
    mode = attributes.get("mode", b"constant").decode()
    rank = x.dim()
    begins, ends = pads[:rank], pads[rank:]
    # F.pad takes (begin, end) pairs from the last dimension backwards.
    torch_pads = [value for axis in reversed(range(rank)) for value in (begins[axis], ends[axis])]
    while len(torch_pads) > 2 and torch_pads[-1] == 0 and torch_pads[-2] == 0:
        torch_pads = torch_pads[:-2]
    value = float(inputs[2].item()) if len(inputs) > 2 and inputs[2] is not None else 0.0
    padding_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[mode]
    return [F.pad(x, torch_pads, mode=padding_mode, value=value if mode == "constant" else None)]


def _resize(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    x = inputs[0]
    scales = inputs[2] if len(inputs) > 2 and inputs[2] is not None and inputs[2].numel() else None
    sizes = inputs[3] if len(inputs) > 3 and inputs[3] is not None and inputs[3].numel() else None
    mode = attributes.get("mode", b"nearest").decode()
    transform = attributes.get("coordinate_transformation_mode", b"half_pixel").decode()
    if sizes is not None:
        size = tuple(_integers(sizes)[2:])
    else:
        assert scales is not None
        size = tuple(
            int(dimension * float(scale)) for dimension, scale in zip(x.shape[2:], scales.tolist()[2:], strict=True)
        )
    if mode == "nearest":
        if transform != "asymmetric" or attributes.get("nearest_mode", b"round_prefer_floor") != b"floor":
            raise ValueError(f"Resize nearest with {transform} is not supported")
        return [F.interpolate(x, size=size, mode="nearest")]
    if mode == "linear" and transform in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        return [F.interpolate(x, size=size, mode="bilinear", align_corners=transform == "align_corners")]
    raise ValueError(f"Resize {mode} with {transform} is not supported")


def _split(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    x, axis = inputs[0], attributes.get("axis", 0)
    parts = _integers(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else attributes.get("split")
    if not parts:
        raise ValueError("Split without its sizes is not supported")
    return list(torch.split(x, parts, dim=axis))


def _slice(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    x, starts, ends = inputs[0], _integers(inputs[1]), _integers(inputs[2])
    axes = _integers(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
    steps = _integers(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * x.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step < 1:
            raise ValueError("Slice with a negative step is not supported")
        size = x.shape[axis]
        index[axis] = slice(max(-size, min(start, size)), max(-size, min(end, size)), step)
    return [x[tuple(index)]]


def _unsqueeze(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    x = inputs[0]
    axes = _integers(inputs[1]) if len(inputs) > 1 else attributes["axes"]
    for axis in sorted(axis % (x.dim() + len(axes)) for axis in axes):
        x = x.unsqueeze(axis)
    return [x]


def _concat(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    return [torch.cat([value for value in inputs if value is not None], dim=attributes["axis"])]


def _cast(inputs: list[Tensor], attributes: dict[str, Any], float_dtype: Any) -> list[Tensor]:
    target = attributes["to"]
    if target in ONNX_FLOATS:
        return [inputs[0].to(float_dtype)]
    if target in ONNX_INTEGERS:
        return [inputs[0].to("cpu", ONNX_INTEGERS[target])]
    raise ValueError(f"Cast to ONNX type {target} is not supported")


def _operators(float_dtype: Any) -> dict[str, Operator]:
    def unary(function: Callable[[Tensor], Tensor]) -> Operator:
        return lambda inputs, _: [function(inputs[0])]

    return {
        "Conv": _conv,
        "Gemm": _gemm,
        "Pad": _pad,
        "Resize": _resize,
        "Split": _split,
        "Slice": _slice,
        "Unsqueeze": _unsqueeze,
        "Concat": _concat,
        "Cast": lambda inputs, attributes: _cast(inputs, attributes, float_dtype),
        "Add": lambda inputs, _: [inputs[0] + inputs[1]],
        "Mul": lambda inputs, _: [inputs[0] * inputs[1]],
        "Relu": unary(F.relu),
        "Tanh": unary(torch.tanh),
        "Identity": unary(lambda x: x),
        "LeakyRelu": lambda inputs, attributes: [F.leaky_relu(inputs[0], attributes.get("alpha", 0.01))],
        "Softmax": lambda inputs, attributes: [torch.softmax(inputs[0], dim=attributes.get("axis", -1))],
        "Transpose": lambda inputs, attributes: [inputs[0].permute(*attributes["perm"])],
        "Reshape": lambda inputs, _: [_reshape(inputs[0], _integers(inputs[1]))],
        "Shape": lambda inputs, _: [torch.tensor(list(inputs[0].shape), dtype=torch.int64)],
        "Gather": _gather,
        "InstanceNormalization": lambda inputs, attributes: [
            F.instance_norm(inputs[0], weight=inputs[1], bias=inputs[2], eps=attributes.get("epsilon", 1e-5))
        ],
    }


def _gather(inputs: list[Tensor], attributes: dict[str, Any]) -> list[Tensor]:
    data, indices, axis = inputs[0], inputs[1], attributes.get("axis", 0)
    flat = indices.reshape(-1).to(data.device) % data.shape[axis]  # ONNX allows negative indices
    picked = torch.index_select(data, axis, flat)
    return [picked.reshape((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]))]


def _reshape(x: Tensor, shape: list[int]) -> Tensor:
    # ONNX's 0 copies the input's dimension (allowzero unset); -1 is inferred, as in PyTorch.
    return x.reshape([x.shape[axis] if value == 0 else value for axis, value in enumerate(shape)])


# Inputs that are arguments, not data (Resize's scales, Pad's amounts, ...): kept on the CPU, so reading their values
# never waits for the GPU.
ARGUMENT_INPUTS: dict[str, tuple[int, ...]] = {
    "Resize": (1, 2, 3),
    "Pad": (1, 2),
    "Reshape": (1,),
    "Split": (1,),
    "Slice": (1, 2, 3, 4),
    "Unsqueeze": (1,),
}


@dataclass
class TorchGraph:
    """An ONNX graph's nodes, its initializers as tensors on ``device``, and the operator table they run with."""

    graph: onnx.GraphProto
    values: dict[str, Tensor]
    device: str
    dtype: Any
    operators: dict[str, Operator]

    @classmethod
    def load(cls, path: str | Path, device: str, dtype: Any) -> TorchGraph:
        """The graph with its initializers and Constant nodes made tensors once (data on ``device`` in ``dtype``,
        arguments on the CPU)."""
        model = onnx.load(str(path))
        operators = _operators(dtype)
        missing = sorted({node.op_type for node in model.graph.node} - operators.keys() - {"Constant"})
        if missing:
            raise ValueError(f"{Path(path).name}: operators this interpreter does not run: {', '.join(missing)}")
        arguments = {
            node.input[position]
            for node in model.graph.node
            for position in ARGUMENT_INPUTS.get(node.op_type, ())
            if position < len(node.input)
        }
        arrays = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant":
                arrays[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        values = {
            name: _tensor(array, "cpu", torch.float32) if name in arguments else _tensor(array, device, dtype)
            for name, array in arrays.items()
        }
        return cls(model.graph, values, device, dtype, operators)

    def input(self, array: npt.NDArray[Any]) -> Tensor:
        """A numpy input as this graph's tensors are kept (floats on the device in its dtype)."""
        return _tensor(array, self.device, self.dtype)

    def run(self, feeds: dict[str, Tensor]) -> list[Tensor]:
        values = {**self.values, **feeds, "": None}
        for node in self.graph.node:
            if node.op_type == "Constant":  # made once, in load
                continue
            attributes = {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}
            outputs = self.operators[node.op_type]([values[name] for name in node.input], attributes)
            values.update(zip(node.output, outputs, strict=False))
        return [values[output.name] for output in self.graph.output]


def _tensor(array: npt.NDArray[Any], device: str, dtype: Any) -> Tensor:
    copy = np.array(array, np.float32 if np.issubdtype(array.dtype, np.floating) else array.dtype)  # keeps 0-d
    if np.issubdtype(array.dtype, np.floating):
        return torch.from_numpy(copy).to(device, dtype)
    return torch.from_numpy(copy)  # shapes and indices stay on the CPU


def compare_with_onnxruntime(path: str | Path, feeds: dict[str, npt.NDArray[Any]], device: str) -> dict[str, float]:
    """The largest difference between this interpreter's fp32 outputs and onnxruntime's (CPU) on the same feeds,
    absolute and relative to the largest output value: the check refuses figures from a graph it runs wrongly."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    graph = TorchGraph.load(path, device, torch.float32)
    # Full fp32 for the comparison: cuDNN would otherwise run fp32 convolutions in TF32 (10-bit mantissas).
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.inference_mode():
            actual = graph.run({name: graph.input(value) for name, value in feeds.items()})
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    worst = {"max_abs_difference": 0.0, "max_relative_difference": 0.0}
    for want, got in zip(expected, actual, strict=True):
        difference = float(np.abs(got.float().cpu().numpy() - want).max())
        scale = max(float(np.abs(want).max()), 1e-12)
        worst["max_abs_difference"] = max(worst["max_abs_difference"], difference)
        worst["max_relative_difference"] = max(worst["max_relative_difference"], difference / scale)
    return worst


def time_graph(graph: TorchGraph, feeds: dict[str, Tensor], repeats: int, warmup: int = 3) -> float:
    """Seconds per ``run`` of the graph on ``feeds`` (already on the device), after ``warmup`` runs; on a GPU each
    timing waits for the device to finish."""

    def synchronize() -> None:
        if graph.device.startswith("cuda"):
            torch.cuda.synchronize()

    with torch.inference_mode():
        for _ in range(warmup):
            graph.run(feeds)
        synchronize()
        began = time.perf_counter()
        for _ in range(repeats):
            graph.run(feeds)
        synchronize()
    return (time.perf_counter() - began) / repeats


def batch_of(array: npt.NDArray[Any], batch: int) -> npt.NDArray[Any]:
    """``array`` (batch 1) repeated to ``batch`` along its first axis."""
    return np.repeat(array, batch, axis=0)
