"""A worker's frames per second on this machine before and after issue 24's CPU cuts, same input, same process.

``facefusion_provider.worker.run.run`` (what ``facefusion-worker run`` calls) over one short close-up clip at 720p and at
1080p, the offline default swapper (``classic``) with the default encoder settings, twice per size: ``before``
with the old functions put back (bench/cpu_path_before.py) and the detector on every frame, then ``after``. Wall-clock fps (the worker's own threads
on this machine's cores, which other work shares: compare the two runs of one size) and CPU ms per frame of the whole
process. It also compares the two outputs: their sizes and the PSNR of after's frames against before's.

    python bench/bench_worker_fps.py                 # writes bench/results/worker-fps.json and .md
    python bench/bench_worker_fps.py --frames 12 --out /tmp/worker-fps
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

from bench_engine import carphone_frames, machine, write_results, write_source_image  # noqa: E402
from cpu_path_before import before_path  # noqa: E402

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
VARIANTS = ("before", "after")
SWAPPERS = ("classic", "inswapper_128")
STANDINS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "facefusion-provider" / "standins"


def write_clip(path: Path, width: int, height: int, frames: int) -> None:
    """The carphone close-up at ``width`` x ``height``, 30 fps, H.264 at high quality (the target)."""
    from facefusion_provider.media.encode import EncoderSettings, VideoEncoder
    from facefusion_provider.media.images import rgb_frame

    settings = EncoderSettings(codec="libx264", pix_fmt="yuv420p", options={"crf": "12", "preset": "veryfast"})
    rate = Fraction(30)
    with VideoEncoder(str(path), settings, width=width, height=height, frame_rate=rate, time_base=1 / rate) as encoder:
        for number, image in enumerate(carphone_frames(frames, width, height)):
            encoder.encode(rgb_frame(image).reformat(format="yuv420p"), number)
        encoder.close()


@contextmanager
def swapper_inference_replayed() -> Iterator[None]:
    """The swapper's inference replaced by its input with red and blue exchanged (a changed face, no model time):
    the stand-in's 2 s per face on this CPU would hide every other cost; a GPU does it in about 8 ms."""
    from facefusion_provider.engine import swap_models

    real = getattr(swap_models, "run_session")  # noqa: B009 - replaced below, as the module looks it up

    def replay(session: Any, feeds: dict[str, Any]) -> list[Any]:
        if "target" not in feeds:
            return list(real(session, feeds))
        return [np.ascontiguousarray(feeds["target"][:, ::-1])]

    setattr(swap_models, "run_session", replay)  # noqa: B010
    try:
        yield
    finally:
        setattr(swap_models, "run_session", real)  # noqa: B010


def run_worker(
    source: str, target: Path, output: Path, work_root: Path, *, swapper: str, models_dir: str | None, before: bool
) -> dict[str, Any]:
    from facefusion_provider.worker.run import run

    # Before issue 24 the detector ran on every frame; today the face mesh follows the faces between its runs.
    interval: dict[str, Any] = {"face_detector_interval": 1} if before else {}

    began_wall, began_cpu = time.perf_counter(), time.process_time()
    with swapper_inference_replayed() if swapper != "classic" else nullcontext():
        result = run(
            [source],
            str(target),
            str(output),
            str(work_root),
            models_dir=models_dir,
            face_swapper_model=swapper,
            **interval,
        )
    wall, cpu = time.perf_counter() - began_wall, time.process_time() - began_cpu
    return {
        "frames": result.frame_count,
        "wall_s": round(wall, 2),
        "swap_s": result.timings["swap_s"],
        "fps_swap": round(result.frame_count / result.timings["swap_s"], 2),
        "fps_whole_run": round(result.frame_count / wall, 2),
        "cpu_ms_per_frame": round(1000 * cpu / result.frame_count, 1),
        "output_bytes": output.stat().st_size,
    }


def psnr_between(first: Path, second: Path) -> float:
    """Mean PSNR (dB, RGB) of ``second``'s frames against ``first``'s."""
    import av
    import numpy as np

    errors = []
    with av.open(str(first)) as one, av.open(str(second)) as two:
        for a, b in zip(one.decode(video=0), two.decode(video=0), strict=True):
            difference = a.to_ndarray(format="rgb24").astype(np.float64) - b.to_ndarray(format="rgb24")
            errors.append(float(np.mean(difference**2)))
    error = float(np.mean(errors))
    return float("inf") if error == 0 else round(10 * float(np.log10(255.0**2 / error)), 2)


def ensure_standin(cache: Path) -> Path:
    """The inswapper stand-in (and ArcFace's), built in its own process, as bench_cpu_stages does."""
    subprocess.run([sys.executable, str(BENCH_DIR / "make_inswapper_standin.py"), "--out", str(cache)], check=True)
    return cache


def measure_swapper(
    args: argparse.Namespace, folder: Path, source: str, swapper: str, models_dir: str | None
) -> dict[str, Any]:
    """Every size, ``args.repeats`` runs of each variant alternating, the fastest kept; outputs compared."""
    sizes: dict[str, Any] = {}
    for size in args.sizes:
        width, height = SIZES[size]
        target = folder / f"target-{size}.mp4"
        if not target.exists():
            write_clip(target, width, height, args.frames)
        entry: dict[str, Any] = {}
        kept = {variant: folder / f"kept-{swapper}-{size}-{variant}.mp4" for variant in VARIANTS}
        for repeat in range(args.repeats):  # before, after, before, after
            for variant in VARIANTS:
                output = folder / f"out-{swapper}-{size}-{variant}-{repeat}.mp4"
                work_root = folder / f"work-{swapper}-{size}-{variant}-{repeat}"
                with before_path() if variant == "before" else nullcontext():
                    run = run_worker(
                        source,
                        target,
                        output,
                        work_root,
                        swapper=swapper,
                        models_dir=models_dir,
                        before=variant == "before",
                    )
                output.replace(kept[variant])
                print(json.dumps({swapper: {size: {variant: run}}}), flush=True)
                if variant not in entry or run["fps_swap"] > entry[variant]["fps_swap"]:
                    entry[variant] = run
        entry["psnr_after_vs_before_db"] = psnr_between(kept["before"], kept["after"])
        entry["psnr_vs_target_db"] = {variant: psnr_between(target, kept[variant]) for variant in VARIANTS}
        sizes[size] = entry
    return sizes


def markdown(report: dict[str, Any]) -> str:
    from facefusion_provider.options import Options

    defaults = Options()
    lines = [
        "# A worker's fps before and after issue 24's CPU cuts",
        "",
        f"Command: `{report['command']}`. Machine: {report['machine']['cpu']}, {report['machine']['cpu_count']} cores "
        f"shared with other work (load average at the start {report['load_average_start']}, at the end "
        f"{report['machine']['load_average_1_5_15']}): compare the two runs of one size, made one after the other.",
        "",
        "Each run is `facefusion_provider.worker.run.run` (what `facefusion-worker run` calls) in this process over "
        f"the same {report['frames']}-frame close-up clip (carphone scaled to the frame's height, one face in every "
        f"frame), encoder {defaults.output_video_encoder} preset {defaults.output_video_preset} quality "
        f"{defaults.output_video_quality}, default options otherwise. `before` puts the old functions back "
        "(bench/cpu_path_before.py) and runs the detector on every frame (`face_detector_interval` 1). Swappers: the offline default `classic`, and `inswapper_128` (the stand-in) with "
        "its inference replayed (its input with red and blue exchanged), so the run shows the CPU work around a "
        "GPU's inference: on this CPU the stand-in takes 2 s per face. fps: frames / the swap phase's wall time "
        f"(prepare and merge apart); {report['repeats']} runs of each variant, alternating, the fastest kept.",
        "",
        "| swapper | size | variant | fps (swap phase) | fps (whole run) | CPU ms/frame (whole process) | output bytes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for swapper, sizes in report["swappers"].items():
        for size, entry in sizes.items():
            for variant in VARIANTS:
                run = entry[variant]
                lines.append(
                    f"| {swapper} | {size} | {variant} | {run['fps_swap']:.2f} | {run['fps_whole_run']:.2f} | "
                    f"{run['cpu_ms_per_frame']:.1f} | {run['output_bytes']} |"
                )
    lines.append("")
    for swapper, sizes in report["swappers"].items():
        for size, entry in sizes.items():
            before, after = entry["before"], entry["after"]
            lines.append(
                f"- {swapper} {size}: after / before fps {after['fps_swap'] / before['fps_swap']:.2f}x, CPU per frame "
                f"{after['cpu_ms_per_frame'] / before['cpu_ms_per_frame']:.0%}; after's output against before's: "
                f"PSNR {entry['psnr_after_vs_before_db']} dB, size {after['output_bytes'] / before['output_bytes']:.3f}x; "
                f"each against the target: before {entry['psnr_vs_target_db']['before']} dB, after "
                f"{entry['psnr_vs_target_db']['after']} dB (the swapped face included)."
            )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant, alternating; the best is kept")
    parser.add_argument("--swappers", nargs="+", choices=SWAPPERS, default=list(SWAPPERS))
    parser.add_argument("--models-cache", default=str(STANDINS), help="where the inswapper stand-in is written")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "worker-fps"), help="writes OUT.json, OUT.md")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "command": shlex.join(["python", "bench/bench_worker_fps.py", *(argv if argv is not None else sys.argv[1:])]),
        "load_average_start": [round(value, 2) for value in os.getloadavg()],
        "frames": args.frames,
        "repeats": args.repeats,
        "swappers": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-worker-fps-") as temp:
        folder = Path(temp)
        source = write_source_image(folder)
        write_clip(folder / "warm-up.mp4", 320, 240, 2)  # imports and model loads, untimed, before either variant
        for swapper in args.swappers:
            models_dir = None if swapper == "classic" else str(ensure_standin(Path(args.models_cache)))
            warm_out = folder / f"warm-up-{swapper}.mp4"
            warm_root = folder / f"work-warm-up-{swapper}"
            run_worker(
                source,
                folder / "warm-up.mp4",
                warm_out,
                warm_root,
                swapper=swapper,
                models_dir=models_dir,
                before=False,
            )
            report["swappers"][swapper] = measure_swapper(args, folder, source, swapper, models_dir)
    report["machine"] = machine()
    write_results(Path(args.out), report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
