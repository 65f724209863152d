"""Decode CPU per 1080p frame against the input's bitrate: the figure that decides a GPU pod's cores.

bench_cpu_stages.py decodes a file the worker itself would write (libx264 at the default quality 80, crf 10): about
27 Mbit/s at 1080p30 with ``mbtree=0`` (about 0.6x that with the macroblock tree, back on since issue 41), far above
what people feed in. H.264's decode cost grows with the bits it entropy-decodes, so this bench encodes the same frames
(carphone's face upscaled to a 1080p close-up, as there) at that quality and at fixed bitrates that inputs have (a
phone camera records 1080p30 at about 17 Mbit/s, streaming services deliver 5-8), then decodes each with the worker's
``decode_frames`` on one core, the file opened once, and reports CPU ms per frame.

    python bench/bench_decode_rates.py [--frames 90] [--out bench/results/decode-rates]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

from bench_cpu_stages import bitrate_options, encoder_settings_for, pin_to_one_core  # noqa: E402
from bench_engine import carphone_frames, machine, write_results  # noqa: E402

SIZE = (1920, 1080)
RATE = Fraction(30)
BITRATES_MBIT = (17, 8, 5)  # phone camera, streaming 1080p high, streaming 1080p low
REPEATS = 3  # each file decoded this many times; the fastest counts (the least disturbed by the machine's load)


def encode(images: list[Any], path: Path, options: dict[str, str] | None) -> None:
    """The frames as H.264: the worker's default settings when ``options`` is None, else libx264 with them."""
    from facefusion_provider.media.encode import EncoderSettings, VideoEncoder
    from facefusion_provider.media.images import rgb_frame

    settings = encoder_settings_for("veryfast", *SIZE)
    if options is not None:
        settings = EncoderSettings("libx264", "yuv420p", {"preset": "veryfast", **options})
    with VideoEncoder(str(path), settings, width=SIZE[0], height=SIZE[1], frame_rate=RATE, time_base=1 / RATE) as out:
        for number, image in enumerate(images):
            out.encode(rgb_frame(image).reformat(format="yuv420p"), number)
        out.close()


def decode_ms_per_frame(path: Path) -> tuple[float, int]:
    """CPU ms per frame of the worker's decode over the whole file (opened once), fastest of REPEATS; frames."""
    from facefusion_provider.media.decode import decode_frames
    from facefusion_provider.media.probe import probe_video

    probe = probe_video(str(path), str(path))
    best, count = float("inf"), 0
    for _ in range(REPEATS):
        began = time.process_time()
        count = sum(1 for _ in decode_frames(str(path), probe, 0, probe.frame_count, str(path)))
        best = min(best, time.process_time() - began)
    return 1000 * best / count, count


def measure(frames: int) -> list[dict[str, Any]]:
    images = carphone_frames(frames, *SIZE)
    inputs: list[tuple[str, dict[str, str] | None]] = [("the worker's default output (quality 80, crf 10)", None)]
    inputs += [(f"{mbit} Mbit/s", bitrate_options(mbit)) for mbit in BITRATES_MBIT]
    rows = []
    with tempfile.TemporaryDirectory(prefix="decode-rates-") as folder:
        for number, (label, options) in enumerate(inputs):
            path = Path(folder) / f"input-{number}.mp4"
            encode(images, path, options)
            ms, count = decode_ms_per_frame(path)
            mbit_per_s = path.stat().st_size * 8 * float(RATE) / count / 1e6
            rows.append(
                {"input": label, "mbit_per_s": round(mbit_per_s, 1), "frames": count, "decode_ms": round(ms, 2)}
            )
            print(rows[-1], flush=True)
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Decode CPU per 1080p frame against the input's bitrate",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {report['machine']['cpu']}, pinned to one core (decode_frames' threads share it); "
        f"{report['frames']} frames of carphone's face as a 1080p close-up, libx264 veryfast; each file decoded "
        f"{REPEATS} times, the fastest counted (CPU time of the process).",
        "",
        "| input | measured Mbit/s | decode CPU ms/frame |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {row['input']} | {row['mbit_per_s']} | {row['decode_ms']} |" for row in report["rows"]]
    lines += [
        "",
        "bench_cpu_stages.py's decode row is the first line's kind of input (and includes opening the file for 20 "
        "frames); a pod fed ordinary inputs decodes at the cost of their bitrate.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=90)
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last allowed)")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "decode-rates"))
    args = parser.parse_args(argv)
    core = pin_to_one_core(args.core)
    report = {
        "command": shlex.join(["python", "bench/bench_decode_rates.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "core": core,
        "frames": args.frames,
        "rows": measure(args.frames),
    }
    write_results(Path(args.out), report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
