"""The GPU check's frame enhancer step (issue 38): a real_esrgan_x4 compute-equivalent network through the worker's
frame enhancer over 1080p frames, in tiles, on the GPU.

The network is Real-ESRGAN x4's published RRDBNet layer list with random weights, built with onnx.helper (nothing is
downloaded): a 3x3 conv 3->64, 23 residual-in-residual dense blocks (each three dense blocks of five 3x3 convs, 32
channels of growth, LeakyReLU 0.2, residuals scaled by 0.2), a 3x3 conv 64->64 added to the first, two nearest x2
upsamplings each followed by a 3x3 conv 64->64, then 3x3 64->64 and 64->3 at x4. That is 16,697,987 parameters, as
the real file, and 17.9 M multiply-adds per input pixel: 1.18 T per 256 px tile. Its input and output are
real_esrgan_x4's (``input`` N x 3 x H x W in 0..1, ``output`` N x 3 x 4H x 4W), so the worker's frame enhancer
(engine/processors/frame_enhancer.py: tiles of 256, pad 16, overlap 8, batches of 8 tiles) runs it as it would run
FaceFusion's file: its speed is the real model's, its pixels are noise.

Figures: through onnxruntime (CUDA where this onnxruntime has it; the tiny network on the CPU otherwise) the whole
frame enhancer step, tiles per second and frames per second at 1080p -> 4320p, peak GPU memory from nvidia-smi; where
PyTorch sees a CUDA device (this workplace's GPU machines, whose onnxruntime has no CUDA provider), the same graph
through PyTorch's CUDA operators (bench/onnx_on_torch.py), fp32 and fp16, batches of 1 and 8 tiles, inference alone,
peak memory from PyTorch's allocator. ``--tiny`` runs a network of the same shape but 1 block and 8 channels on two
small frames, so the step runs on a CPU in seconds (the unit test's mode).

    python bench/gpu_frame_enhancer.py [--tiny] [--out PATH]     # also step 5 of bash bench/gpu_check.sh
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

MODEL = "real_esrgan_x4"
OPSET = 17
IR_VERSION = 9
RESIDUAL = 0.2  # RRDBNet scales each dense block's and each RRDB's residual by this
WEIGHT_GAIN = 0.1  # RRDBNet's own initialisation: He-normal times 0.1, which keeps 23 blocks' values finite in fp16
FRAME_SIZE, TINY_FRAME_SIZE = (1920, 1080), (320, 180)
TIMED_FRAMES, TINY_FRAMES = 3, 1
TORCH_TILE_BATCHES = (1, 8)  # one tile, and the frame enhancer's batch for 256 px tiles at x4 (TILE_BATCH_PIXELS)
TORCH_MIN_SECONDS = 1.0
TORCH_TOLERANCE = 1e-3  # of the largest output value: the interpreter's fp32 against onnxruntime's
COMPARE_SIZE = 32  # the tile side the interpreter is checked on against onnxruntime on the CPU (cheap there)
GPU_SOURCE = (
    "the GPU figures come from `bash bench/gpu_check.sh` on a machine with an NVIDIA GPU: onnxruntime-gpu's CUDA "
    "provider where it is installed (the script installs it where it can), and PyTorch's CUDA operators running the "
    "same graph where onnxruntime has no CUDA provider (this workplace's GPU machines)"
)


@dataclass(frozen=True)
class Network:
    """RRDBNet's size: residual-in-residual dense blocks, feature channels, growth channels per dense layer."""

    blocks: int
    features: int
    growth: int


FULL = Network(23, 64, 32)  # Real-ESRGAN x4's (RealESRGAN_x4plus)
TINY = Network(1, 4, 4)


def build_network(network: Network, seed: int = 0) -> tuple[onnx.ModelProto, int, int]:
    """(model, parameters, multiply-adds per input pixel) of RRDBNet x4 at ``network``'s size, random weights."""
    from make_inswapper_standin import GraphBuilder

    g = GraphBuilder(np.random.default_rng(seed))
    features, growth = network.features, network.growth

    def conv(x: str, in_channels: int, out_channels: int, scale: int) -> str:
        """A 3x3 conv at ``scale`` times the input's resolution (multiply-adds counted per input pixel)."""
        out: str = g.conv(x, in_channels, out_channels, 3, scale, gain=WEIGHT_GAIN)
        return out

    def leaky(x: str) -> str:
        out: str = g.node("LeakyRelu", [x], "lrelu", alpha=0.2)
        return out

    def residual(x: str, y: str) -> str:
        scale = g.constant(np.array(RESIDUAL, np.float32), "residual_scale", counted=False)
        out: str = g.node("Add", [x, g.node("Mul", [y, scale], "scaled")], "residual")
        return out

    def dense_block(x: str) -> str:
        layers = [x]
        for layer in range(4):
            joined = layers[0] if layer == 0 else g.node("Concat", layers, "concat", axis=1)
            layers.append(leaky(conv(joined, features + layer * growth, growth, 1)))
        return residual(x, conv(g.node("Concat", layers, "concat", axis=1), features + 4 * growth, features, 1))

    def nearest_x2(x: str) -> str:
        scales = g.constant(np.array([1, 1, 2, 2], np.float32), "scales", counted=False)
        out: str = g.node(
            "Resize",
            [x, "", scales],
            "up",
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
        return out

    first = conv("input", 3, features, 1)
    body = first
    for _ in range(network.blocks):
        body = residual(body, dense_block(dense_block(dense_block(body))))
    x = g.node("Add", [first, conv(body, features, features, 1)], "trunk")
    x = leaky(conv(nearest_x2(x), features, features, 2))
    x = leaky(conv(nearest_x2(x), features, features, 4))
    last = conv(leaky(conv(x, features, features, 4)), features, 3, 4)
    g.nodes.append(helper.make_node("Identity", [last], ["output"]))
    graph = helper.make_graph(
        g.nodes,
        f"{MODEL}_compute_equivalent",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3, "output_height", "output_width"])],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    return model, g.parameters, g.multiply_adds


class GpuMemory:
    """The most memory nvidia-smi reports in use on GPU 0 while the block runs, sampled every 0.2 s (None without
    nvidia-smi): the whole device's, as onnxruntime has no allocator statistics of its own."""

    def __init__(self, nvidia_smi: str | None) -> None:
        self.nvidia_smi = nvidia_smi
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _read(self) -> int | None:
        if self.nvidia_smi is None:
            return None
        try:
            line = subprocess.run(
                [self.nvidia_smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                check=True,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.split()[0]
            return int(line)
        except (OSError, subprocess.SubprocessError, IndexError, ValueError):
            return None

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            used = self._read()
            if used is not None:
                self.samples.append(used)

    def __enter__(self) -> GpuMemory:
        before = self._read()
        self.before = before
        if before is not None:
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def figures(self) -> dict[str, int | None]:
        peak = max(self.samples, default=None)
        grown = None if peak is None or self.before is None else peak - self.before
        return {"peak_gpu_memory_mib": peak, "gpu_memory_grown_mib": grown}


def onnxruntime_figures(folder: Path, *, tiny: bool, nvidia_smi: str | None) -> dict[str, Any]:
    """The worker's frame enhancer (its tiling, batching and merge) with the network, ``cuda`` then ``cpu`` as the
    execution providers: one frame to warm up, then the timed frames."""
    import onnxruntime

    from facefusion_provider.engine.processors.base import FaceStats
    from facefusion_provider.engine.processors.frame_enhancer import PROCESSOR, EnhanceFrames
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.options import Options

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers() and not tiny:
        return {"error": "not run: this onnxruntime has no CUDA provider, and on the CPU a frame takes minutes"}
    width, height = TINY_FRAME_SIZE if tiny else FRAME_SIZE
    count = TINY_FRAMES if tiny else TIMED_FRAMES
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (height, width, 3), np.uint8) for _ in range(count)]
    options = Options(
        processors=["frame_enhancer"],
        frame_enhancer_model=MODEL,
        frame_enhancer_blend=100,
        execution_providers=["cuda", "cpu"],
    )
    store = ModelStore(models_dir=str(folder), cache_dir=str(folder / "cache"))
    with GpuMemory(nvidia_smi) as memory:
        step = PROCESSOR.load(options, {}, store, FaceStats())
        assert isinstance(step, EnhanceFrames)
        step(frames[:1], [[]], None)  # warm-up: CUDA's kernels and cuDNN's choices are made on the first frames
        began = time.perf_counter()
        outputs = step(frames, [[] for _ in frames], None)
        wall = time.perf_counter() - began
    enhanced = outputs[0]
    assert isinstance(enhanced, np.ndarray)  # the frame enhancer's frames are ready arrays
    tiles = len(frames) * tiles_per_frame(width, height)
    return {
        "providers": step.session.get_providers(),
        "frames": len(frames),
        "tiles": tiles,
        "tiles_per_call": step.tiles_per_call,
        "output_size": f"{enhanced.shape[1]}x{enhanced.shape[0]}",
        "seconds": round(wall, 3),
        "tiles_per_second": round(tiles / wall, 2),
        "frames_per_second": round(len(frames) / wall, 3),
        **memory.figures(),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def torch_figures(path: Path, tiles_in_frame: int) -> dict[str, Any]:
    """The graph through PyTorch's CUDA operators: checked against onnxruntime's CPU output on a small tile, then
    tiles per second (inference alone, tiles already on the GPU) per precision and batch, and the allocator's peak."""
    import torch
    from onnx_on_torch import TorchGraph, compare_with_onnxruntime, time_graph

    if not torch.cuda.is_available():
        return {"error": f"PyTorch {torch.__version__} sees no CUDA device"}
    torch.backends.cudnn.benchmark = True
    rng = np.random.default_rng(0)
    small = rng.uniform(0.0, 1.0, (1, 3, COMPARE_SIZE, COMPARE_SIZE)).astype(np.float32)
    agreement = compare_with_onnxruntime(path, {"input": small}, "cuda")
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "vs_onnxruntime_cpu": agreement, "runs": []}
    if agreement["max_relative_difference"] > TORCH_TOLERANCE:
        result["error"] = f"the interpreter's output differs from onnxruntime's ({agreement}): no figures"
        return result
    from facefusion_provider.engine.models import frame_enhance_facts

    tile = frame_enhance_facts(MODEL).tile
    for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        graph = TorchGraph.load(path, "cuda", dtype)
        for batch in TORCH_TILE_BATCHES:
            tiles = graph.input(rng.uniform(0.0, 1.0, (batch, 3, tile, tile)).astype(np.float32))
            torch.cuda.reset_peak_memory_stats()
            once = time_graph(graph, {"input": tiles}, 1, warmup=1)
            repeats = max(2, min(50, int(TORCH_MIN_SECONDS / max(once, 1e-4))))
            seconds = time_graph(graph, {"input": tiles}, repeats, warmup=0)
            result["runs"].append(
                {
                    "precision": precision,
                    "tiles_per_call": batch,
                    "tiles_per_second": round(batch / seconds, 2),
                    "frames_per_second": round(batch / seconds / tiles_in_frame, 3),
                    "peak_gpu_memory_mib": torch.cuda.max_memory_allocated() // 2**20,
                    "repeats": repeats,
                }
            )
        del graph
        torch.cuda.empty_cache()
    return result


def tiles_per_frame(width: int, height: int) -> int:
    from facefusion_provider.engine.frame_tiles import TileGrid
    from facefusion_provider.engine.models import frame_enhance_facts

    grid = TileGrid(frame_enhance_facts(MODEL), height, width)
    return grid.rows * grid.columns


def frame_enhancer_figures(folder: Path, *, tiny: bool = False, nvidia_smi: str | None = None) -> dict[str, Any]:
    """The step's report: the network written to ``folder`` as real_esrgan_x4.onnx, then its onnxruntime and PyTorch
    figures (each the error that stopped it, if one did)."""
    from gpu_check import guarded

    from facefusion_provider.engine.models import MODELS, frame_enhance_facts

    network = TINY if tiny else FULL
    model, parameters, multiply_adds = build_network(network)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MODELS[MODEL].file_name
    onnx.save(model, str(path))
    facts = frame_enhance_facts(MODEL)
    width, height = TINY_FRAME_SIZE if tiny else FRAME_SIZE
    report: dict[str, Any] = {
        "network": {
            "blocks": network.blocks,
            "features": network.features,
            "growth": network.growth,
            "parameters": parameters,
            "multiply_adds_per_pixel": multiply_adds,
            "tera_multiply_adds_per_tile": round(multiply_adds * facts.tile**2 / 1e12, 4),
        },
        "tiny": tiny,
        "frame_size": f"{width}x{height}",
        "tile": facts.tile,
        "tiles_per_frame": tiles_per_frame(width, height),
        "onnxruntime": guarded(lambda: onnxruntime_figures(folder, tiny=tiny, nvidia_smi=nvidia_smi)),
    }
    if importlib.util.find_spec("torch") is None:
        report["torch"] = {"error": "PyTorch is not installed here"}
    else:
        report["torch"] = guarded(lambda: torch_figures(path, report["tiles_per_frame"]))
    on_gpu = "CUDAExecutionProvider" in report["onnxruntime"].get("providers", []) or bool(report["torch"].get("runs"))
    if not on_gpu:
        report["gpu_figures"] = f"none measured here: {GPU_SOURCE}"
    return report


def markdown(report: dict[str, Any] | None) -> list[str]:
    """The step's section of the GPU check's report."""
    if not report:
        return []
    if "network" not in report:
        return ["", f"## Frame enhancer, {MODEL} compute-equivalent: failed: {report.get('error')}"]
    network = report["network"]
    tiny = " (tiny network, the CPU test's mode)" if report["tiny"] else ""
    speed = (
        "A tiny network of the same shape: its figures only show the step runs."
        if report["tiny"]
        else "Its speed is the real model's; its pixels are noise."
    )
    lines = [
        "",
        f"## Frame enhancer, {MODEL} compute-equivalent{tiny}: {report['frame_size']} frames in "
        f"{report['tiles_per_frame']} tiles of {report['tile']} px, x4",
        "",
        f"RRDBNet x4 (blocks {network['blocks']}, channels {network['features']}, growth {network['growth']}), random "
        f"weights: {network['parameters']:,} parameters, {network['multiply_adds_per_pixel'] / 1e6:.2f} M "
        f"multiply-adds per input pixel, {network['tera_multiply_adds_per_tile']} T per tile "
        f"(bench/gpu_frame_enhancer.py). {speed}",
        "",
        "| runs on | precision | tiles per call | tiles/s | frames/s | peak GPU memory (MiB) | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    run = report["onnxruntime"]
    if "error" in run:
        lines.append(f"| worker's frame enhancer, onnxruntime | - | - | - | - | - | {run['error']} |")
    else:
        memory = run["peak_gpu_memory_mib"]
        shown = "-" if memory is None else f"{memory} ({run['gpu_memory_grown_mib']:+} during the step)"
        lines.append(
            f"| worker's frame enhancer, onnxruntime ({run['providers'][0]}) | fp32 | {run['tiles_per_call']} "
            f"| {run['tiles_per_second']} | {run['frames_per_second']} | {shown} | {run['frames']} frames to "
            f"{run['output_size']}, tiling and merge included; worker RSS {run['peak_rss_mib']} MiB |"
        )
    torch_run = report["torch"]
    if "error" in torch_run:
        lines.append(f"| PyTorch CUDA operators | - | - | - | - | - | {torch_run['error']} |")
    for row in torch_run.get("runs", []):
        agreement = torch_run["vs_onnxruntime_cpu"]["max_relative_difference"]
        lines.append(
            f"| PyTorch CUDA operators ({torch_run['device']}) | {row['precision']} | {row['tiles_per_call']} "
            f"| {row['tiles_per_second']} | {row['frames_per_second']} | {row['peak_gpu_memory_mib']} | inference "
            f"alone; fp32 within {agreement:.1e} of onnxruntime |"
        )
    if report.get("gpu_figures"):
        lines += ["", f"GPU figures: {report['gpu_figures']}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the small network on small frames (runs on a CPU)")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--out", type=Path, help="also write OUT.json and OUT.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-frame-enhancer-") as folder:
        report = frame_enhancer_figures(Path(folder), tiny=args.tiny, nvidia_smi=args.nvidia_smi)
    text = "\n".join(markdown(report)).strip() + "\n"
    print(json.dumps(report))
    print(text)
    if args.out:
        from bench_engine import write_results

        write_results(args.out, report, text)


if __name__ == "__main__":
    main()
