"""Frame enhancer benchmark: per tile size, CPU ms per 720p frame and tiles per second of the frame enhancer on its
bilinear stand-ins (tests/support/standins.py), every model x4, each in its own process so its peak RSS is its own.

The stand-ins are a plain resize, so inference costs little next to a real network: the figures measure what the
engine does around the model (cut the tiles, make the tensors, merge the tiles' middles, blend) and the memory of a
frame going to 4x its size, the part of the cost this project owns. Input: the carphone clip scaled to 720 px high on
a 1280x720 canvas.

    python bench/bench_frame_enhancer.py [--frames 4] [--out bench/results/frame-enhancer]
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

MODELS = ("real_web_photo_x4", "span_kendata_x4", "real_esrgan_x4", "ultra_sharp_2_x4")  # tiles of 64, 128, 256, 1024


def measure(model: str, frame_count: int) -> dict[str, Any]:
    """In this process: the stand-in written and loaded, one frame untimed, then ``frame_count`` frames in turn."""
    from bench_engine import carphone_frames
    from standins import frame_enhancer_standin

    from facefusion_provider.engine.frame_tiles import TileGrid
    from facefusion_provider.engine.models import frame_enhance_facts
    from facefusion_provider.engine.processors.base import FaceStats
    from facefusion_provider.engine.processors.frame_enhancer import PROCESSOR
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.options import Options

    options = Options(processors=["frame_enhancer"], frame_enhancer_model=model, execution_thread_count=2)
    facts = frame_enhance_facts(model)
    frames = carphone_frames(frame_count, 1280, 720)
    with tempfile.TemporaryDirectory() as folder:
        frame_enhancer_standin(Path(folder), model)
        store = ModelStore(models_dir=folder, cache_dir=str(Path(folder) / "cache"))
        step = PROCESSOR.load(options, {}, store, FaceStats())
        step(frames[:1], [[]], None)  # warm up
        began, cpu_began = time.perf_counter(), time.process_time()
        for frame in frames:
            step([frame], [[]], None)
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    grid = TileGrid(facts, 720, 1280)
    tiles = grid.rows * grid.columns
    return {
        "model": model,
        "tile": facts.tile,
        "pad": facts.pad,
        "overlap": facts.overlap,
        "scale": facts.scale,
        "tiles_per_frame": tiles,
        "frames": frame_count,
        "ms_per_frame": round(1000 * seconds / frame_count, 1),
        "cpu_ms_per_frame": round(1000 * cpu / frame_count, 1),
        "tiles_per_second": round(tiles * frame_count / seconds, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def markdown(results: list[dict[str, Any]], frames: int) -> str:
    lines = [
        "# The frame enhancer's tiling on its CPU stand-ins",
        "",
        f"`python bench/bench_frame_enhancer.py --frames {frames}` on {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}: {frames} frames of the carphone clip at 1280x720, each to 5120x2880 (x4), "
        "blend 80. The stand-ins are a bilinear resize, so these figures are the engine's work around the model (tiles, "
        "tensors, merge, blend) and a process's memory, not a real network's compute. ms/frame is wall-clock on a "
        "shared machine; CPU ms/frame is the steadier figure.",
        "",
        "| model | tile / pad / overlap | tiles per frame | ms/frame | CPU ms/frame | tiles/s | peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        lines.append(
            f"| `{result['model']}` | {result['tile']} / {result['pad']} / {result['overlap']} | "
            f"{result['tiles_per_frame']} | {result['ms_per_frame']} | {result['cpu_ms_per_frame']} | "
            f"{result['tiles_per_second']} | {result['peak_rss_mib']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "frame-enhancer")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one model in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.frames)))
        return
    results = []
    for model in MODELS:
        command = [sys.executable, __file__, "--one", model, "--frames", str(args.frames)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"frames": args.frames, "results": results}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results, args.frames))


if __name__ == "__main__":
    main()
