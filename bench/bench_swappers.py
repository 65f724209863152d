"""Swapper families benchmark: frames per second of ``swap_faces`` and peak memory (RSS) per family of FaceFusion's
catalogue, on the CPU stand-ins of tests/support/standins.py, with the same input for every family.

The stand-ins are tiny graphs with the real files' interfaces, so inference costs next to nothing: the figures measure
what the engine does around the model (alignment to the family's template and size, pixel-boost tiling, normalisation,
masks, colour correction, paste back) and the process's memory with onnxruntime and the frames loaded, not the real
networks' compute. Input: the carphone clip's first frames, scaled to 720 px high on a 1280x720 canvas, its faces
found once; source: skimage's astronaut. Each family runs in its own process so its peak RSS is its own.

    python bench/bench_swappers.py [--frames 48] [--out bench/results/swappers]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(BENCH_DIR))

FAMILIES = {
    "inswapper": "inswapper_128",
    "hyperswap": "hyperswap_1a_256",
    "simswap": "simswap_256",
    "simswap_512": "simswap_unofficial_512",
    "ghost": "ghost_1_256",
    "blendswap": "blendswap_256",
    "uniface": "uniface_256",
}


def measure(model: str, models_dir: str, frame_count: int, pixel_boost: str | None) -> dict[str, Any]:
    """In this process: identity, faces, then ``swap_faces`` over the frames one at a time (as on a CPU worker)."""
    from bench_engine import carphone_frames
    from skimage import data

    from facefusion_provider.engine.detect import detect_faces
    from facefusion_provider.engine.processors.face_swapper import _swap_identity
    from facefusion_provider.engine.sources import source_faces
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.engine.swap_models import swap_faces
    from facefusion_provider.options import Options

    values: dict[str, Any] = {"face_swapper_model": model, "execution_thread_count": 2}
    if pixel_boost:
        values["face_swapper_pixel_boost"] = pixel_boost
    options = Options.model_validate(values)
    store = ModelStore(models_dir=models_dir, cache_dir=str(Path(models_dir) / "cache"))
    with tempfile.TemporaryDirectory() as folder:
        import cv2

        source = str(Path(folder) / "astronaut.png")
        cv2.imwrite(source, data.astronaut()[:, :, ::-1])  # type: ignore[no-untyped-call]
        identity = _swap_identity(source_faces([source], options, store), options, store)
    frames = carphone_frames(frame_count, 1280, 720)
    faces = [detect_faces(frame, options, store)[:1] for frame in frames]
    swap_faces(frames[:1], faces[:1], identity, options, store)  # warm up: sessions, cached masks
    timings: dict[str, float] = {}
    began, cpu_began = time.perf_counter(), time.process_time()
    for frame, frame_faces in zip(frames, faces, strict=True):
        swap_faces([frame], [frame_faces], identity, options, store, timings=timings)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    return {
        "model": model,
        "pixel_boost": options.face_swapper_pixel_boost,
        "frames": len(frames),
        "faces": sum(map(len, faces)),
        "fps": round(len(frames) / seconds, 1),
        "cpu_ms_per_frame": round(1000 * cpu / len(frames), 2),
        "ms_per_frame": {stage: round(1000 * value / len(frames), 2) for stage, value in sorted(timings.items())},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def markdown(results: list[dict[str, Any]], frames: int) -> str:
    lines = [
        "# Swapper families on the CPU stand-ins",
        "",
        f"`python bench/bench_swappers.py --frames {frames}` on {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}. Same input for every family: {frames} frames of the carphone clip at "
        "1280x720 (one face each, found once), the astronaut as the source; `swap_faces` one frame at a time. The "
        "stand-ins are tiny graphs with the real files' inputs, so these figures are the engine's work around the model "
        "(align, tile, normalise, mask, colour-correct, paste back) and the process's memory, not the real networks. "
        "fps is wall-clock on a shared machine; CPU ms/frame is the steadier figure.",
        "",
        "| family | model | pixel boost | fps | CPU ms/frame | align ms | model ms | paste ms | peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for family, result in zip(FAMILIES, results, strict=True):
        stages = result["ms_per_frame"]
        lines.append(
            f"| {family} | `{result['model']}` | {result['pixel_boost']} | {result['fps']} | "
            f"{result['cpu_ms_per_frame']} | {stages.get('swap_align', 0)} | {stages.get('swap_infer', 0)} | "
            f"{stages.get('swap_paste', 0)} | {result['peak_rss_mib']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--pixel-boost", default=None, help="one pixel boost for every family (default: its own size)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "swappers")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one model in this process
    parser.add_argument("--models-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.models_dir, args.frames, args.pixel_boost)))
        return
    from standins import write_standins

    results = []
    with tempfile.TemporaryDirectory() as folder:
        models = str(write_standins(Path(folder) / "models"))
        for model in FAMILIES.values():
            command = [sys.executable, __file__, "--one", model, "--models-dir", models, "--frames", str(args.frames)]
            if args.pixel_boost:
                command += ["--pixel-boost", args.pixel_boost]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(output.strip().splitlines()[-1]))
            print(results[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"frames": args.frames, "results": results}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results, args.frames))


if __name__ == "__main__":
    main()
