"""Peak memory of a worker with the largest chain loaded: ``facefusion-worker run`` under ``/usr/bin/time`` at 720p
with face_swapper (inswapper_128), expression_restorer, face_editor, age_modifier (styleganex_age), deep_swapper and
face_enhancer, the faces chosen by gender (the face classifier); beside it, in the same invocation, the default swap
(the packaged classic swapper) for comparison.

The chain runs twice: once on the tiny stand-ins of tests/support (a few arithmetic nodes each: the worker's own memory
around the models, the analysis, crops, LivePortrait's feature volume, the encoder), once with the compute-equivalent
inswapper_128 stand-in of bench/make_inswapper_standin.py (554 MB of random weights, the real file's size, 175 G
multiply-adds a face) and its arcface_w600k_r50 in place of the tiny ones. The other models' weights are the
stand-ins', not the real networks': add their file sizes for a real deployment. ``changed %`` (pixels the output
changed by more than 8 levels) shows the chosen face was processed. Input: the carphone clip at 1280x720 with a 48 kHz tone.

    python bench/bench_chain_memory.py [--frames 16] [--out bench/results/chain-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

WIDTH, HEIGHT = 1280, 720
SEGMENT = 8
STANDINS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "facefusion-provider" / "standins"
CHAIN = ["face_swapper", "expression_restorer", "face_editor", "age_modifier", "deep_swapper", "face_enhancer"]
CHAIN_FLAGS = [
    *("--processors", *CHAIN),
    *("--face-swapper-model", "inswapper_128", "--face-enhancer-model", "gfpgan_1.4"),
    *("--age-modifier-model", "styleganex_age", "--age-modifier-direction", "50"),
    *("--deep-swapper-model", "iperov/elon_musk_224"),
    *("--face-editor-mouth-smile", "0.5", "--face-editor-head-yaw", "0.3"),
    # the classifier stand-in takes carphone's face (in colour) for a woman: the filter keeps it
    *("--face-selector-mode", "many", "--face-selector-gender", "female"),
]
CHANGED_LEVELS = 8  # a pixel further than this from the input's was changed by a processor, not by the encoder


def changed_share(target: Path, output: Path) -> float:
    """Percent of the output's pixels more than ``CHANGED_LEVELS`` from the target's (any channel)."""
    import numpy as np
    from readback import rgb_frames

    changed = [
        float((np.abs(after.astype(np.int16) - before).max(axis=2) > CHANGED_LEVELS).mean())
        for before, after in zip(rgb_frames(str(target)), rgb_frames(str(output)), strict=True)
    ]
    return round(100 * float(np.mean(changed)), 2)


Case = tuple[str, Path | None, list[str]]  # (name, models folder (None: the packaged ones), worker flags)


def measure(folder: Path, source: Path, target: Path, case: Case) -> dict[str, Any]:
    name, models, flags = case
    output = folder / f"case-{len(list(folder.glob('case-*.mp4')))}.mp4"
    command = [WORKER_PROGRAM, "run", "--source", str(source), "--target", str(target), "--output", str(output)]
    command += ["--work-root", str(folder / "work"), "--segment-size", str(SEGMENT), "--execution-thread-count", "2"]
    command += [*(["--models-dir", str(models)] if models is not None else []), *flags]
    run = measured_run(command, name)
    frames = json.loads(run.stdout.strip().splitlines()[-1])["frame_count"]
    return {
        "case": name,
        "frames": frames,
        "seconds": round(run.seconds, 1),
        "changed_percent": changed_share(target, output),
        "peak_rss_mib": round(run.peak_rss_mib, 1),
    }


def standin_folders(folder: Path) -> tuple[Path, Path]:
    """(tiny stand-ins, the same with the compute-equivalent inswapper and recognizer linked in their place)."""
    from make_inswapper_standin import ensure_standins
    from standins import write_standins
    from standins_ageswap import write_ageswap_standins
    from standins_live_portrait import write_live_portrait_standins

    tiny = write_live_portrait_standins(write_ageswap_standins(write_standins(folder / "tiny")))
    heavy = folder / "heavy"
    heavy.mkdir()
    for path in tiny.iterdir():
        (heavy / path.name).symlink_to(path)
    cache = ensure_standins(STANDINS)
    for name in ("inswapper_128.onnx", "arcface_w600k_r50.onnx"):
        (heavy / name).unlink()
        (heavy / name).symlink_to(cache / name)
    return tiny, heavy


def markdown(results: list[dict[str, Any]], frames: int) -> str:
    lines = [
        "# Peak memory of a worker with the largest chain loaded",
        "",
        f"`python bench/bench_chain_memory.py --frames {frames}` on {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}: `facefusion-worker run` under `/usr/bin/time` (the whole process, "
        f"every thread), {frames} frames of the carphone clip at {WIDTH}x{HEIGHT} with sound, segments of "
        f"{SEGMENT}, 2 threads, the CPU provider. The chain: {', '.join(CHAIN)} (inswapper_128, styleganex_age, "
        "iperov/elon_musk_224, gfpgan_1.4), faces chosen by `face_selector_gender`. Every model but the "
        "compute-equivalent inswapper_128 (554 MB, the real file's size; last row) is a tiny stand-in: "
        "add the real networks' weights and activations for a deployment. changed % is the share of pixels the "
        "output moved by more than 8 levels (the face processed). Seconds are wall-clock on 2 shared cores.",
        "",
        "| case | frames | seconds | changed % | peak RSS MiB |",
        "| --- | --- | --- | --- | --- |",
    ]
    for result in results:
        lines.append(
            f"| {result['case']} | {result['frames']} | {result['seconds']} | {result['changed_percent']} | "
            f"{result['peak_rss_mib']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    from bench_engine import carphone_frames, write_results
    from people import person_file
    from synth import VideoSpec, write_video

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "chain-memory")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        tiny, heavy = standin_folders(folder)
        source = person_file(folder / "astronaut.png")
        target = folder / "carphone-720p.mp4"
        spec = VideoSpec(width=WIDTH, height=HEIGHT, audio_rate=48000)
        write_video(str(target), spec, carphone_frames(args.frames, WIDTH, HEIGHT))
        cases: list[Case] = [
            ("default swap (classic)", None, ["--processors", "face_swapper"]),
            ("largest chain, tiny stand-ins", tiny, CHAIN_FLAGS),
            ("largest chain, compute-equivalent inswapper", heavy, CHAIN_FLAGS),
        ]
        for case in cases:
            results.append(measure(folder, source, target, case))
            print(results[-1], flush=True)
    write_results(args.out, {"frames": args.frames, "results": results}, markdown(results, args.frames))


if __name__ == "__main__":
    main()
