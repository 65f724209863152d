"""Frame colorizer, background remover, face debugger, age modifier, deep swapper, expression restorer and face editor
benchmark: CPU ms per 720p frame of each on its stand-in (tests/support/standins.py, standins_ageswap.py,
standins_live_portrait.py), one process, the same frames for every row.

The stand-ins are a few arithmetic nodes, so inference costs next to nothing: the figures are what the engine does
around the model (grey and LAB conversions, resizes to and from the model's size, normalisation, the mask, despill
and fill; the debugger's drawing and mask outline; the age modifier's and deep swapper's crops, colour matching, masks
and paste back; LivePortrait's crops, keypoint math, 512 paste and the stand-ins' 8 MB feature volume), the part of the cost this project owns. The face processors' faces come from the offline analysis
(retinaface_mnet and the face mesh), run once before the timing. Input: the carphone clip scaled to 720 px high on a
1280x720 canvas. ``--processors`` keeps the rows of those processors only.

    python bench/bench_frame_processors.py [--frames 8] [--processors NAME ...] [--out bench/results/frame-processors]
"""

from __future__ import annotations

import argparse
import json
import platform
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

# (processor, its options): colorizers at FaceFusion's default size and the largest; removers of each input size.
CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("frame_colorizer", {"frame_colorizer_model": "ddcolor", "frame_colorizer_size": "256x256"}),
    ("frame_colorizer", {"frame_colorizer_model": "ddcolor", "frame_colorizer_size": "512x512"}),
    ("frame_colorizer", {"frame_colorizer_model": "deoldify", "frame_colorizer_size": "256x256"}),
    ("background_remover", {"background_remover_model": "u2netp"}),
    ("background_remover", {"background_remover_model": "modnet"}),
    ("background_remover", {"background_remover_model": "birefnet_general"}),
    ("background_remover", {"background_remover_model": "corridor_key_1024"}),
    (
        "background_remover",
        {"background_remover_model": "modnet", "background_remover_despill_color": (0, 255, 0, 255)},
    ),
    ("face_debugger", {"face_debugger_items": ["bounding-box"]}),
    ("face_debugger", {}),  # FaceFusion's default items: face-landmark-5/68 and face-mask
    (
        "face_debugger",
        {"face_debugger_items": ["bounding-box", "face-landmark-5", "face-landmark-5/68", "face-landmark-68"]},
    ),
    ("age_modifier", {"age_modifier_model": "fran", "age_modifier_direction": 50}),
    ("age_modifier", {"age_modifier_model": "styleganex_age", "age_modifier_direction": 50}),
    ("deep_swapper", {"deep_swapper_model": "iperov/elon_musk_224"}),
    ("deep_swapper", {"deep_swapper_model": "druuzil/henry_cavill_448"}),
    ("expression_restorer", {}),  # alone: the target's frames are the frames it restores
    ("face_editor", {"face_editor_mouth_smile": 0.5, "face_editor_head_yaw": 0.3}),
    ("face_editor", {"face_editor_eye_open_ratio": 0.5, "face_editor_lip_open_ratio": 0.5}),  # the retargeters too
)


def measure(frame_count: int, processors: list[str] | None = None) -> list[dict[str, Any]]:
    from bench_engine import carphone_frames
    from standins import write_standins
    from standins_ageswap import dfm_standin, write_ageswap_standins
    from standins_live_portrait import write_live_portrait_standins

    from facefusion_provider.engine.processors.chain import build_frame_processor
    from facefusion_provider.options import Options

    frames = carphone_frames(frame_count, 1280, 720)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        write_live_portrait_standins(write_ageswap_standins(write_standins(Path(folder))))
        dfm_standin(Path(folder), "druuzil/henry_cavill_448")
        for processor, chosen in CASES:
            if processors and processor not in processors:
                continue
            options = Options(processors=[processor], execution_thread_count=2, **chosen)
            engine = build_frame_processor(options, {}, folder)
            faces = engine.analyse_batch(frames)  # untimed: the analysis is not the processor's
            engine.apply_batch(frames[:1], faces[:1])  # warm up
            began, cpu_began = time.perf_counter(), time.process_time()
            for frame, found in zip(frames, faces, strict=True):
                engine.apply_batch([frame], [found])
            seconds, cpu = time.perf_counter() - began, time.process_time() - cpu_began
            results.append(
                {
                    "processor": processor,
                    "options": {name: value for name, value in chosen.items()},
                    "faces_per_frame": round(sum(map(len, faces)) / frame_count, 2),
                    "ms_per_frame": round(1000 * seconds / frame_count, 1),
                    "cpu_ms_per_frame": round(1000 * cpu / frame_count, 1),
                }
            )
            print(results[-1], flush=True)
    return results


def markdown(results: list[dict[str, Any]], frames: int, processors: list[str] | None = None) -> str:
    names = [name.replace("_", " ") for name in dict.fromkeys(result["processor"] for result in results)]
    title = "The " + (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names))
    flags = f" --processors {' '.join(processors)}" if processors else ""
    lines = [
        f"# {title} on their CPU stand-ins",
        "",
        f"`python bench/bench_frame_processors.py --frames {frames}{flags}` on "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}: {frames} frames of the "
        "carphone clip at 1280x720, the same frames for every row, one process. The stand-ins are a few arithmetic "
        "nodes, so these figures are the engine's work around the model, not a real network's compute. ms/frame is "
        "wall-clock on a shared machine (2 cores, other work running); CPU ms/frame is the steadier figure.",
        "",
        "| processor | options | faces a frame | ms/frame | CPU ms/frame |",
        "| --- | --- | --- | --- | --- |",
    ]
    for result in results:
        shown = ", ".join(f"`{name}` {value}" for name, value in result["options"].items()) or "defaults"
        lines.append(
            f"| {result['processor']} | {shown} | {result['faces_per_frame']} | {result['ms_per_frame']} | "
            f"{result['cpu_ms_per_frame']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--processors", nargs="*", help="only these processors' rows (default: every row)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "frame-processors")
    args = parser.parse_args()
    results = measure(args.frames, args.processors)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"frames": args.frames, "results": results}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results, args.frames, args.processors))


if __name__ == "__main__":
    main()
