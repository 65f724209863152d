"""Peak memory of a worker enhancing 1080p to 4K: ``facefusion-worker run`` under ``/usr/bin/time`` on the x4
frame enhancer's bilinear stand-in (tests/support/standins.py), ``output_video_scale`` 0.5 taking the x4 frames
(7680x4320) to 3840x2160; beside it, in the same invocation, the same worker passing the 1080p frames through and the
x4 frames kept at 8K.

The stand-in is a plain resize, so the figures are the worker's own memory around the model (decoded frames, tiles and
their tensors, the merged 8K frame, the encoder at the output size), not a real network's activations. Input: the
carphone clip scaled to 1080 px high on a 1920x1080 canvas, with a 48 kHz tone.

    python bench/bench_enhance_memory.py [--frames 16] [--out bench/results/enhance-memory]
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(BENCH_DIR))

from worker_runs import WORKER_PROGRAM, measured_run  # noqa: E402

MODEL = "real_esrgan_x4"  # tiles of 256 (pad 16, overlap 8): 40 a 1080p frame
WIDTH, HEIGHT = 1920, 1080
SEGMENT = 8
CASES: dict[str, list[str]] = {
    "passthrough 1080p": ["--processors"],
    "x4 then 0.5: 3840x2160": ["--processors", "frame_enhancer", "--output-video-scale", "0.5"],
    "x4: 7680x4320": ["--processors", "frame_enhancer"],
}


def measure(folder: Path, target: Path, models: Path, name: str, flags: list[str]) -> dict[str, Any]:
    import av

    output = folder / f"{re.sub(r'[^a-z0-9]+', '-', name)}.mp4"
    command = [WORKER_PROGRAM, "run", "--target", str(target), "--output", str(output)]
    command += ["--work-root", str(folder / "work")]
    command += ["--models-dir", str(models), "--frame-enhancer-model", MODEL, "--frame-enhancer-blend", "100"]
    command += ["--segment-size", str(SEGMENT), "--execution-thread-count", "2", *flags]
    run = measured_run(command, name)
    with av.open(str(output)) as container:
        stream = container.streams.video[0]
        size, frames = f"{stream.width}x{stream.height}", sum(1 for _ in container.decode(stream))
    return {"case": name, "output": size, "frames": frames, "seconds": round(run.seconds, 1)} | {
        "peak_rss_mib": round(run.peak_rss_mib, 1)
    }


def markdown(results: list[dict[str, Any]], frames: int) -> str:
    lines = [
        "# Peak memory of a worker enhancing 1080p to 4K",
        "",
        f"`python bench/bench_enhance_memory.py --frames {frames}` on {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}: `facefusion-worker run` under `/usr/bin/time` (the whole process, "
        f"every thread), {frames} frames of the carphone clip at {WIDTH}x{HEIGHT} with sound, segments of {SEGMENT}, "
        f"`{MODEL}`'s bilinear stand-in, libx264 veryfast at the default quality, 2 threads. The stand-in is a plain "
        "resize: this is the worker's memory around the model, not a real network's. Seconds are wall-clock on 2 "
        "shared cores.",
        "",
        "| case | output | frames | seconds | peak RSS MiB |",
        "| --- | --- | --- | --- | --- |",
    ]
    for result in results:
        lines.append(
            f"| {result['case']} | {result['output']} | {result['frames']} | {result['seconds']} | "
            f"{result['peak_rss_mib']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    from bench_engine import carphone_frames, write_results
    from standins import frame_enhancer_standin
    from synth import VideoSpec, write_video

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "enhance-memory")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        models = folder / "models"
        models.mkdir()
        frame_enhancer_standin(models, MODEL)
        target = folder / "carphone-1080p.mp4"
        write_video(
            str(target),
            VideoSpec(width=WIDTH, height=HEIGHT, audio_rate=48000),
            carphone_frames(args.frames, WIDTH, HEIGHT),
        )
        for name, flags in CASES.items():
            results.append(measure(folder, target, models, name, flags))
            print(results[-1], flush=True)
    write_results(args.out, {"frames": args.frames, "results": results}, markdown(results, args.frames))


if __name__ == "__main__":
    main()
